"""Choosing an attention path, saying why, and running it.

Each path is one :class:`~attnkit.attention.path.Path` object in its own module, which says
what it cannot compute (``not_supported_reasons``) and runs (the pattern of xformers'
``fmha`` dispatch). :func:`choose` walks :data:`PATHS` in priority order: ``impl="auto"``
takes the first path with no reason against it, and its plan's reason comes from the reasons
of the paths passed by; every other value forces one path and fails with a ``ValueError``
joining that path's reasons if it cannot serve the call.
The choice is logged at DEBUG level on the ``attnkit`` logger and returned by
:meth:`attnkit.Attention.plan`.

=============  ==============================================================================
impl           what runs
=============  ==============================================================================
reference      full score matrix (and the ``(Tq, Tk, A)`` pair tensor for additive scores)
sdpa           ``F.scaled_dot_product_attention`` on prepared features (dot family only)
chunked        blocks with online softmax, scores recomputed in backward; with a window or
               causal mask only the band's key blocks run (banded local attention). When
               weights are needed, the ``(Tq, Tk)`` scores are built block by block instead.
               Additive scores on CPU run C++ block kernels (:mod:`attnkit.ops.kernels`)
               when the machine's C++ compiler could build them (:mod:`attnkit.ops.native`).
step           one additive or location query per row (a decoder step), float32 on CPU, key
               padding only: one C++ kernel per pass (:mod:`attnkit.attention.step`)
=============  ==============================================================================

While a call is exported (:func:`attnkit.ops.tracing.exporting`), every ``impl`` takes
the reference path: plain PyTorch operations that exporters record, where the other paths read
tensor values in Python (chunked: which key blocks a band needs) or call C++ kernels through
ctypes (step, chunked). So does a call on meta tensors, which have shapes and no values: it
gives the output's shapes.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import torch

from attnkit.attention.chunked import CHUNKED
from attnkit.attention.path import Inputs, Path, Plan, Unavailable
from attnkit.attention.reference import REFERENCE
from attnkit.attention.scores import Score
from attnkit.attention.sdpa import SDPA
from attnkit.attention.step import STEP, GradSink
from attnkit.ops.precision import autocast_enabled, no_autocast, upcast
from attnkit.ops.tracing import exporting

__all__ = ["IMPLS", "PATHS", "Plan", "call_inputs", "choose", "run"]

IMPLS = ("auto", "reference", "sdpa", "chunked", "step")

# ``impl="auto"``'s order: the step first (a decoder makes that call at every step), then
# the fused kernel, the blocks, and the reference, which serves every call.
PATHS: tuple[Path, ...] = (STEP, SDPA, CHUNKED, REFERENCE)
_BY_NAME = {path.name: path for path in PATHS}

log = logging.getLogger("attnkit")


def choose(impl: str, inp: Inputs) -> Plan:
    """The path ``impl`` (checked: :func:`attnkit.attention.validation.check_impl`) takes for
    the call ``inp`` (its sizes are enough), and why.

    Raises:
        ValueError: a forced path cannot compute this call, with all its reasons.
    """
    if exporting():
        return _chosen(
            Plan(
                "reference",
                f"export mode (impl={impl!r}): the reference path "
                "records as plain PyTorch operations",
            )
        )
    if inp.device_type == "meta":
        return _chosen(
            Plan(
                "reference",
                f"meta tensors (impl={impl!r}): shapes only, through "
                "the reference path's plain PyTorch operations",
            )
        )
    if impl != "auto":
        path = _BY_NAME[impl]
        reasons = path.not_supported_reasons(inp)
        if reasons:
            raise ValueError(f"impl={impl!r} cannot serve this call: {'; '.join(reasons)}")
        return _chosen(path.plan(inp, f"impl={impl!r} was requested"))
    because: str | None = None
    notes: list[Unavailable] = []
    for path in PATHS:
        unsupported = path.not_supported_reasons(inp)
        declined = [] if unsupported else path.auto_reasons(inp)
        if not unsupported and not declined:
            plan = path.plan(inp, because)
            break
        if declined:  # worded as the reason of the path taken instead
            because = declined[0]
        if all(isinstance(r, Unavailable) for r in unsupported):
            # it would serve the call on a machine with its kernel
            notes += [r for r in unsupported if isinstance(r, Unavailable)]
    else:  # the reference path serves every call
        raise AssertionError("no attention path serves this call")
    # a path passed by for want of a kernel is named, unless the plan says so already
    notes = [r for r in notes if r.cause not in plan.reason]
    if notes:
        plan = replace(plan, reason="; ".join([plan.reason, *notes]))
    return _chosen(plan)


def call_inputs(call, score: Score, *, heads: int, need_weights: bool, dropout_p: float) -> Inputs:
    """The :class:`Inputs` (sizes only) of a validated ``call``
    (:class:`~attnkit.attention.core.Call`), to :func:`choose` a path for it."""
    b, tq, _ = call.query.shape
    lay = call.layout
    return Inputs(
        score=score,
        shape=(b, heads, tq, lay.tk),
        need_weights=need_weights,
        dropout_p=dropout_p,
        window=lay.window,
        device_type=call.query.device.type,
        dtype=call.query.dtype,
        sdpa_mask_elements=0 if lay.pure_causal else lay.mask_elements(b, tq),
        plain_keys=lay.q_pos is None,
        grad=torch.is_grad_enabled(),
    )


def run(
    plan: Plan,
    q: torch.Tensor,
    k: torch.Tensor | None,
    v: torch.Tensor,
    score: Score,
    call,
    *,
    prev: torch.Tensor | None,
    dropout_p: float,
    need_weights: bool,
    kf: torch.Tensor | None = None,
    sink: GradSink | None = None,
    sdpa_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run ``plan``'s path on per-head tensors: the score prepares its features, the path
    scores, masks, takes the softmax and weights the values.

    Args:
        q: ``(B, H, Tq, Dq)``; k: ``(B, H, Tk, Dk)``, or None when ``kf`` is given;
        v: ``(B, H, Tk, Dv)``; kf: keys already prepared by the score, ``(B, H, Tk, F)``.
        call: the validated :class:`~attnkit.attention.core.Call` (which keys each query
            may see).
        prev: previous weights ``(B, H, Tq, Tk)`` for the location score, else ``None``.
        sink: the prepared memory's gradient sink (used by the one-query step), or None.
        sdpa_dtype: the dtype the fused SDPA kernel is fed when the plan is ``sdpa`` (its
            context comes back in ``q``'s dtype); None: ``q``'s.

    Returns:
        ``context (B, H, Tq, Dv)`` and ``weights (B, H, Tq, Tk)`` or ``None``.

    Under ``torch.autocast`` everything here runs with autocast off, on float32 tensors
    (:mod:`attnkit.ops.precision`), except that on CUDA the fused SDPA kernel is fed
    autocast's dtype, as ``F.scaled_dot_product_attention`` is under autocast: its flash and
    memory-efficient kernels take only float16/bfloat16 or run slower in float32, and keep
    their softmax and accumulators in float32 themselves. On CPU the float32 kernel stays (on
    an AVX2 CPU, bfloat16 SDPA trained 3.7x slower than float32).
    """
    if autocast_enabled(q.device):
        low = torch.get_autocast_dtype("cuda") if q.device.type == "cuda" else None
        with no_autocast(q.device):
            q, v = upcast(q, v)
            k, kf, prev = upcast(k, kf, prev)
            return run(
                plan,
                q,
                k,
                v,
                score,
                call,
                prev=prev,
                dropout_p=dropout_p,
                need_weights=need_weights,
                kf=kf,
                sink=sink,
                sdpa_dtype=low,
            )
    qf = score.prepare_query(q)  # (B, H, Tq, F)
    if kf is None:
        if k is None:
            raise ValueError("run needs the keys k or their features kf")
        kf = score.prepare_key(k)  # (B, H, Tk, F)
    extra = score.prepare_extra(call.previous(prev)) if prev is not None else None
    inp = replace(
        call_inputs(call, score, heads=q.shape[1], need_weights=need_weights, dropout_p=dropout_p),
        qf=qf,
        kf=kf,
        v=v,
        extra=extra,
        call=call,
        sink=sink,
        sdpa_dtype=sdpa_dtype,
    )
    return _BY_NAME[plan.impl].run(inp, plan)


def _chosen(plan: Plan) -> Plan:
    log.debug("attention path %s: %s", plan.impl, plan.reason)
    return plan
