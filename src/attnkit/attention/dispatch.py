"""Choosing an attention path, and saying why.

``impl="auto"`` picks the fastest path that computes what was asked for; every other value forces
one path and fails with a ``ValueError`` naming the reason if that path cannot serve the call.
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
from dataclasses import dataclass, replace

import torch

from attnkit.ops import kernels, native
from attnkit.attention.scores import Score
from attnkit.ops.tracing import exporting

__all__ = ["IMPLS", "Plan", "choose_impl"]

IMPLS = ("auto", "reference", "sdpa", "chunked", "step")

log = logging.getLogger("attnkit")

# Scores with a one-query C++ step kernel (:mod:`attnkit.attention.step`); the dot family's
# one-query step is a few matrix products (:func:`attnkit.attention.step.dot_step`).
STEP_SCORES = ("additive", "location")

# Largest boolean mask (elements) handed to SDPA; beyond it a masked call goes to "chunked",
# which builds its mask one block at a time.
SDPA_MASK_LIMIT = 1 << 26


@dataclass(frozen=True)
class Plan:
    """The path an attention call takes: ``impl`` in :data:`IMPLS` (never "auto"), and why.

    ``kernel`` (:data:`attnkit.ops.kernels.KERNELS`) names what computes the additive
    score: on the chunked path its block kernels, on the step path always ``"native"`` (the
    C++ step kernel, :func:`attnkit.attention.step.additive_step`); ``"eager"`` elsewhere.

    ``estimates`` holds, when asked for (:meth:`attnkit.Attention.plan` with
    ``estimate=True``), one :class:`attnkit.attention.planner.PathEstimate` per path: the
    predicted peak memory of each; :attr:`predicted` is that of the path taken.
    """

    impl: str
    reason: str
    kernel: str = "eager"
    estimates: tuple = ()

    @property
    def predicted(self):
        """The :class:`~attnkit.attention.planner.PathEstimate` of ``impl`` (None without
        estimates)."""
        return next((e for e in self.estimates if e.impl == self.impl), None)


def _sdpa_blocker(score: Score, need_weights: bool) -> str | None:
    if not score.dot_family:
        return f"score {score.name!r} is not a dot product of prepared features"
    if need_weights:
        return "need_weights=True: SDPA does not return the attention weights"
    return None


def _not_a_step(score: Score, shape, plain_keys: bool, dropout_p: float, dtype,
                on_cpu: bool) -> str | None:
    """Why a call is not one the one-query step computes, or None."""
    if score.name not in STEP_SCORES and not score.dot_family:
        return f"score {score.name!r} has no one-query step"
    if shape[2] != 1:
        return f"{shape[2]} queries per row; the step takes one (a decoder step)"
    if not plain_keys:
        return "a causal mask or window; the step takes key padding only"
    if dropout_p > 0:
        return "dropout on the weights; the step has none"
    if not on_cpu:
        return "not on CPU; the step runs on CPU"
    dtypes = (torch.float32,) if score.name in STEP_SCORES else (torch.float32, torch.float64)
    if dtype not in dtypes:
        return f"dtype {dtype}; the step takes {' or '.join(map(str, dtypes))}"
    return None


def _no_step_kernel(score: Score) -> str | None:
    """Why the step of ``score`` cannot run now (its C++ kernel is missing), or None."""
    if score.name in STEP_SCORES and not native.available():
        return f"no C++ step kernel ({native.status()})"
    return None


def _step_plan(score: Score, requested: bool) -> Plan:
    if requested:
        reason = "impl='step' was requested"
    elif score.name in STEP_SCORES:
        reason = (f"score {score.name!r}, one query per row (a decoder step): C++ step kernel, "
                  "weights kept for backward, key/value gradients summed over a prepared "
                  "Memory's steps")
    else:
        reason = (f"score {score.name!r}, one query per row (a decoder step): weights kept for "
                  "backward, key/value gradients summed once per sequence over a prepared "
                  "Memory's steps")
    return Plan("step", reason, "native" if score.name in STEP_SCORES else "eager")


def _narrow_band(window, tk: int) -> bool:
    return window is not None and 2 * (window[0] + window[1] + 1) <= tk


def _chunked(score: Score, shape, dtype, window, on_cpu: bool, reason: str) -> Plan:
    b, h, tq, tk = shape
    if score.name != "additive":
        return Plan("chunked", reason)
    dtype = dtype or torch.float32
    if on_cpu and dtype != torch.float64 and native.available():
        return Plan("chunked", f"{reason}; C++ additive block kernels (backward in one pass)",
                    "native")
    keys = tk if window is None else min(tk, window[0] + window[1] + 1)  # keys per query
    work = b * h * tq * keys * score.v.shape[-1]
    compiled = kernels.want_compiled(work, dtype)
    no_native = ("" if not on_cpu or dtype == torch.float64
                 else f"; no C++ kernels ({native.status()})")
    if compiled and work < kernels.COMPILE_MIN_WORK:
        kernel = "compiled additive kernels (already compiled in this process)"
    elif compiled:
        kernel = "compiled additive kernels"
    elif dtype == torch.float64:
        kernel = "eager additive kernels (float64 is not compiled)"
    elif work >= kernels.COMPILE_MIN_WORK:
        kernel = f"eager additive kernels ({kernels.compile_status()})"
    else:
        kernel = "eager additive kernels (too small to pay for compiling)"
    return Plan("chunked", f"{reason}; {kernel}{no_native}", "compiled" if compiled else "eager")


def choose_impl(
    impl: str,
    *,
    score: Score,
    need_weights: bool,
    shape: tuple[int, int, int, int],
    window: tuple[int, int] | None = None,
    dropout_p: float = 0.0,
    device: torch.device | None = None,
    dtype: torch.dtype | None = None,
    sdpa_mask_elements: int = 0,
    plain_keys: bool = False,
) -> Plan:
    """Resolve ``impl`` for one call of shape ``(B, H, Tq, Tk)``.

    ``sdpa_mask_elements`` is the size of the boolean mask SDPA would need (0: none, or SDPA's
    own causal mask); ``plain_keys``: each query may see every valid key (no causal mask, no
    window).

    Raises:
        ValueError: the forced path cannot compute this call (``impl`` itself was checked
            by :func:`attnkit.attention.validation.check_impl`).
    """
    if exporting():
        return _chosen(Plan("reference", f"export mode (impl={impl!r}): the reference path "
                            "records as plain PyTorch operations"))
    device_type = "cpu" if device is None else torch.device(device).type
    if device_type == "meta":
        return _chosen(Plan("reference", f"meta tensors (impl={impl!r}): shapes only, through "
                            "the reference path's plain PyTorch operations"))
    on_cpu = device_type == "cpu"
    no_step = None  # why a decoder step does not take the step kernel (said by "auto")
    if impl in ("auto", "step"):  # decided first: a decoder makes this call at every step
        not_a_step = _not_a_step(score, shape, plain_keys, dropout_p, dtype, on_cpu)
        why = not_a_step or _no_step_kernel(score)
        if impl == "step" and why:
            raise ValueError(f"impl='step' cannot serve this call: {why}")
        if why is None:
            return _chosen(_step_plan(score, impl == "step"))
        no_step = None if not_a_step else why
    blocker = _sdpa_blocker(score, need_weights)
    tk = shape[3]
    if impl == "reference":
        plan = Plan("reference", "impl='reference' was requested")
    elif impl == "sdpa":
        if blocker is not None:
            raise ValueError(f"impl='sdpa' cannot serve this call: {blocker}")
        plan = Plan("sdpa", "impl='sdpa' was requested")
    elif impl == "chunked":
        plan = _chunked(score, shape, dtype, window, on_cpu, "impl='chunked' was requested")
    elif need_weights and score.dot_family:
        plan = Plan("reference", "weights requested: they are the (Tq, Tk) score matrix anyway")
    elif need_weights:
        plan = _chunked(score, shape, dtype, window, on_cpu,
                        "weights requested: (Tq, Tk) scores built block by block, the "
                        "(Tq, Tk, A) pair tensor recomputed in backward")
    elif _narrow_band(window, tk):
        plan = _chunked(score, shape, dtype, window, on_cpu,
                        f"window {window} over {tk} keys: banded blocks, "
                        "O(Tq * window) work and memory")
    elif blocker is None and dropout_p > 0 and on_cpu:
        plan = Plan("chunked", "dropout on CPU: SDPA would fall back to its full-matrix math path")
    elif blocker is None and sdpa_mask_elements > SDPA_MASK_LIMIT:
        plan = Plan("chunked", f"SDPA would need a {sdpa_mask_elements:,}-element mask; "
                    "chunked builds it block by block")
    elif blocker is None:
        plan = Plan("sdpa", f"score {score.name!r} without weights: fused SDPA kernel")
    else:
        plan = _chunked(score, shape, dtype, window, on_cpu,
                        f"score {score.name!r}: online softmax over key blocks; backward "
                        "recomputes the scores (keeps them when Tq <= key features)")
    # (an additive plan names missing C++ kernels already: the block kernels share a library)
    if no_step and (score.name != "additive" or native.available()):
        plan = replace(plan, reason=f"{plan.reason}; {no_step}")
    return _chosen(plan)


def _chosen(plan: Plan) -> Plan:
    log.debug("attention path %s: %s", plan.impl, plan.reason)
    return plan
