"""One-query attention (an RNN decoder step): additive or location-aware in one C++ kernel per
pass, the dot-product family in a few matrix products, key/value gradients summed once per
sequence.

A decoder attends with one query per step over the same prepared keys ``kf (B, H, Tk, A)`` and
values ``v (B, H, Tk, D)``. The general chunked path serves such a call too, but spends most of
its time on per-call work around small kernels: online-softmax bookkeeping, separate score,
softmax and weighting ops in forward, and in backward an outer product for the values' gradient
and autograd adding each step's ``(B, H, Tk, A)`` key gradient into the total. Here:

* forward is one C++ kernel (``csrc/step.cpp``, through :mod:`attnkit.ops.bindings`):
  scores ``v_a . tanh(q + k_j)``, mask, softmax, context; the weights ``p (B, H, 1, Tk)`` are
  kept for backward (they are no bigger than the scores) and returned, so asking for them costs
  nothing;
* backward is one kernel that recomputes ``tanh(q + k_j)`` (never stored: that is the
  ``O(Tk * A)`` per step that autograd would keep), skips keys whose weight is zero, and, for a
  :class:`GradSink` from a prepared ``Memory``, adds the key gradients **in place** into one
  buffer per backward pass instead of handing each step's gradients to autograd to sum.

The gradients that are outer products, ``d v = p^T d out`` (every score) and ``d kf = ds^T qf``
(the dot family, :func:`dot_step`), are not formed per step at all: each step leaves its two
factors in the sink, and the memory's node forms the sum over the ``T`` steps as one batched
product ``P^T G`` of ``(T, Tk)`` by ``(T, D)`` matrices, instead of ``T`` rank-one updates of a
``(Tk, D)`` buffer (memory-bound: at ``Tk = 400, D = 512`` that is 800 KB read and written per
row and step).

The sink is tied to the backward pass that filled it (``torch._C._current_graph_task_id``):
a pass that stops before reaching the memory (``torch.autograd.grad`` of the queries only)
leaves nothing behind that a later pass would pick up, and ``retain_graph`` passes each start
afresh. Without a sink (or when it cannot be used) the step returns its key and value gradients
to autograd as usual.

:func:`additive_step` runs the C++ kernel when ``native=True`` and plain PyTorch otherwise: the
reference the kernel is tested against (float64 ``gradcheck`` runs both).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, cast

import torch

from attnkit.attention.path import Inputs, Path, Plan, Unavailable
from attnkit.attention.sdpa import SDPA
from attnkit.ops import bindings, native

if TYPE_CHECKING:
    from attnkit.attention.scores import AdditiveScore, LocationScore

__all__ = [
    "STEP",
    "STEP_SCORES",
    "GradSink",
    "StepPath",
    "additive_step",
    "collect",
    "dot_step",
    "sink_supported",
]


# Scores with a one-query C++ step kernel; the dot family's one-query step is a few matrix
# products (:func:`dot_step`).
STEP_SCORES = ("additive", "location")


def sink_supported() -> bool:
    """Whether this torch can tell backward passes apart (needed to sum gradients in place)."""
    return hasattr(torch._C, "_current_graph_task_id")


class GradSink:
    """Key and value gradients of many steps over one prepared memory: dense per-step terms
    added in place, outer-product terms kept as factors and summed in one product."""

    __slots__ = ("task", "key", "factors", "_inputs")

    def __init__(self) -> None:
        self.task: int | None = None
        self.key: torch.Tensor | None = None
        self.factors: dict[str, tuple[list, list]] = {}
        self._inputs: tuple = ()

    def serves(self, kf: torch.Tensor, v: torch.Tensor) -> bool:
        """Whether ``kf`` and ``v`` are the tensors this sink collects for (not, say, a copy
        reordered by beam search, whose gradients must go through autograd)."""
        return len(self._inputs) == 2 and self._inputs[0]() is kf and self._inputs[1]() is v

    def _begin(self) -> None:
        """Forget what an earlier backward pass left (one that never reached the memory)."""
        task = torch._C._current_graph_task_id()
        if self.task != task:
            self.task, self.key, self.factors = task, None, {}

    def key_buffer(self, kf: torch.Tensor) -> torch.Tensor:
        """A zeroed contiguous buffer shaped like ``kf`` at the first step of a backward pass
        that asks for it, the same buffer for the pass's later steps."""
        self._begin()
        if self.key is None:
            self.key = torch.zeros(kf.shape, dtype=kf.dtype, device=kf.device)
        return self.key

    def add_outer(self, which: str, left: torch.Tensor, right: torch.Tensor) -> None:
        """Add ``left^T right`` to the ``which`` ("key" or "value") gradient, later: ``left``
        ``(B, H, 1, Tk)``, ``right`` ``(B, H, 1, X)`` with ``X`` the key features or the
        values' size."""
        self._begin()
        lefts, rights = self.factors.setdefault(which, ([], []))
        lefts.append(left)
        rights.append(right)

    def _outer_sum(self, which: str) -> torch.Tensor | None:
        if which not in self.factors:
            return None
        lefts, rights = self.factors[which]
        return torch.cat(lefts, 2).transpose(-1, -2) @ torch.cat(rights, 2)  # (B, H, Tk, X)

    def take(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """This pass's key and value gradients (``None`` where no step of this pass added to
        them); empties the sink."""
        key = value = None
        if self.task is not None and self.task == torch._C._current_graph_task_id():
            key = _add(self.key, self._outer_sum("key"))
            value = self._outer_sum("value")
        self.task, self.key, self.factors = None, None, {}
        return key, value


def _add(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    if a is None:
        return b
    return a if b is None else a + b


class _Collect(torch.autograd.Function):
    """Identity on ``(kf, v)`` whose backward adds the sink's sums to autograd's gradients."""

    @staticmethod
    def forward(ctx, sink, kf, v):
        ctx.sink = sink
        ctx.set_materialize_grads(False)
        return kf.view_as(kf), v.view_as(v)

    @staticmethod
    def backward(ctx, grad_kf, grad_v):
        key, value = ctx.sink.take()
        return None, _add(grad_kf, key), _add(grad_v, value)


def collect(kf: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, GradSink]:
    """``(kf, v)`` routed through a new :class:`GradSink`, for steps that sum into it."""
    sink = GradSink()
    kf, v = _Collect.apply(sink, kf, v)
    sink._inputs = (weakref.ref(kf), weakref.ref(v))
    return kf, v, sink


def _pre(q, kf, f, lw):
    """``q + k_j`` ``(B, H, Tk, A)``, plus the location term ``f_j L`` when ``f`` is given."""
    pre = q + kf
    return pre if f is None else pre + bindings.location_term(f, lw)


def _forward(q, kf, va, v, mask, f, lw):
    """``q (B, H, 1, A)``, ``kf (B, H, Tk, A)``, ``va (H, A)``, ``v (B, H, Tk, D)``,
    ``mask (B or 1, 1, 1, Tk)`` or None, location features ``f (B, H, Tk, F)`` and ``lw (H, F,
    A)`` or None -> ``context (B, H, 1, D)``, ``weights (B, H, 1, Tk)``."""
    s = (torch.tanh(_pre(q, kf, f, lw)) * va[:, None, :]).sum(-1).unsqueeze(2)  # (B, H, 1, Tk)
    p = _softmax(s, mask)
    return (p.transpose(-1, -2) * v).sum(-2, keepdim=True), p


def _softmax(s: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Weights ``(B, H, 1, Tk)`` of scores ``s``; a row with no allowed key gets zeros."""
    if s.shape[-1] == 0:
        return torch.zeros_like(s)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(m == float("-inf"), 0.0, m)
    e = torch.exp(s - m)
    total = e.sum(-1, keepdim=True)
    return e / torch.where(total > 0, total, 1.0)


def _score_grad(p, v, out, dout, dw):
    """Gradient of the scores ``(B, H, 1, Tk)`` from those of the context and the weights."""
    g = (v * dout).sum(-1).unsqueeze(2)  # (B, H, 1, Tk): dL/dp through the context
    if dw is None:
        return p * (g - (dout * out).sum(-1, keepdim=True))
    g = g + dw
    return p * (g - (p * g).sum(-1, keepdim=True))


def _location_grads(dk, f, lw):
    """``d f (B, H, Tk, F)`` and ``d lw (H, F, A)`` from ``d kf``, which is also the gradient
    of the location term ``f L``."""
    return dk @ lw.transpose(-1, -2), (f.transpose(-1, -2) @ dk).sum(0)


def _backward(q, kf, va, v, p, out, dout, dw, f, lw, values=True):
    """``d q (B, H, 1, A)``, ``d kf (B, H, Tk, A)``, ``d va`` per batch row ``(B, H, A)``,
    ``d v (B, H, Tk, D)`` (None unless ``values``), ``d f (B, H, Tk, F)`` and ``d lw (H, F, A)``
    (None without ``f``)."""
    ds = _score_grad(p, v, out, dout, dw).transpose(-1, -2)  # (B, H, Tk, 1)
    t = torch.tanh(_pre(q, kf, f, lw))  # (B, H, Tk, A), recomputed
    dk = (1 - t * t) * ds * va[:, None, :]
    df, dlw = (None, None) if f is None else _location_grads(dk, f, lw)
    dv = p.transpose(-1, -2) * dout if values else None
    return dk.sum(2, keepdim=True), dk, (t * ds).sum(2), dv, df, dlw


class _AdditiveStep(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, kf, v, va, mask, sink, native, f, lw):
        out, p = (bindings.step_forward if native else _forward)(q, kf, va, v, mask, f, lw)
        ctx.save_for_backward(q, kf, va, v, p, out, f, lw)
        ctx.sink, ctx.native, ctx.mask = sink, native, mask
        ctx.set_materialize_grads(False)
        return out, p

    @staticmethod
    def backward(ctx, dout, dw):
        q, kf, va, v, p, out, f, lw = ctx.saved_tensors
        if dout is None and dw is None:
            return (None,) * 9
        if dout is None:
            dout = torch.zeros_like(out)
        if torch.is_grad_enabled():  # create_graph: gradients that can be differentiated again
            out, p = _forward(q, kf, va, v, ctx.mask, f, lw)  # plain PyTorch, with a graph
            dq, dk, dva, dv, df, dlw = _backward(q, kf, va, v, p, out, dout, dw, f, lw)
            return dq, dk, dv, dva.sum(0), None, None, None, df, dlw
        sink = ctx.sink if ctx.needs_input_grad[1] or ctx.needs_input_grad[2] else None
        df = dlw = None
        if ctx.native and f is None and sink is not None:  # the kernel adds d kf in place
            dq, _, dva, _ = bindings.step_backward(
                q, kf, va, v, p, dout, dw, f, lw, key_sum=sink.key_buffer(kf)
            )
            dk = dv = None
        elif ctx.native:
            dq, dk, dva, dv = bindings.step_backward(
                q, kf, va, v, p, dout, dw, f, lw, values=sink is None
            )
            if f is not None:  # location: d kf is needed on its own, for d f and d lw
                df, dlw = _location_grads(dk, f, lw)
        else:
            dq, dk, dva, dv, df, dlw = _backward(
                q, kf, va, v, p, out, dout, dw, f, lw, values=sink is None
            )
        if sink is not None:
            if dk is not None:
                sink.key_buffer(kf).add_(dk)
                dk = None
            sink.add_outer("value", p, dout)
        return dq, dk, dv, dva.sum(0), None, None, None, df, dlw


def additive_step(
    q: torch.Tensor,
    kf: torch.Tensor,
    v: torch.Tensor,
    va: torch.Tensor,
    mask: torch.Tensor | None = None,
    sink: GradSink | None = None,
    location: tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    native: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Additive (or location-aware) attention of one query per row.

    Args:
        q: prepared query ``(B, H, 1, A)``; kf: prepared keys ``(B, H, Tk, A)``;
        v: values ``(B, H, Tk, D)``; va: the score's ``v`` ``(H, A)``;
        mask: ``(B or 1, 1, 1, Tk)`` bool, True = may attend, or None;
        sink: where to sum the key and value gradients (from :func:`collect`), or None.
        location: the location score's features ``f (B, H, Tk, F)`` and weight ``L (H, F,
            A)``: ``e_j = va . tanh(q + k_j + f_j L)`` (Chorowski et al. 2015), or None.
        native: run the C++ kernel (float32 or float64; :func:`attnkit.ops.native.available`
            must be true), else plain PyTorch.

    Returns:
        ``context (B, H, 1, D)`` and ``weights (B, H, 1, Tk)``; a row with no allowed key gets
        zeros in both, and zero gradients.
    """
    f, lw = (None, None) if location is None else location
    if not (
        torch.is_grad_enabled()
        and any(x is not None and x.requires_grad for x in (q, kf, v, va, f, lw))
    ):
        run = bindings.step_forward if native else _forward
        return run(q, kf, va, v, mask, f, lw)  # decoding: no autograd node
    return _AdditiveStep.apply(q, kf, v, va, mask, sink, native, f, lw)


def _dot_forward(qf, kf, v, scale, mask):
    """``qf (B, H, 1, F)``, ``kf (B, H, Tk, F)``, ``v (B, H, Tk, D)`` -> ``context (B, H, 1,
    D)``, ``weights (B, H, 1, Tk)`` of the scores ``scale * qf . kf_j``."""
    p = _softmax((qf @ kf.transpose(-1, -2)) * scale, mask)
    return p @ v, p


def _dot_backward(qf, kf, v, scale, p, dout, dw):
    """``scale * d s`` ``(B, H, 1, Tk)`` and ``d qf`` ``(B, H, 1, F)``; the key and value
    gradients are the outer products ``(scale * d s)^T qf`` and ``p^T dout``."""
    g = dout @ v.transpose(-1, -2)  # (B, H, 1, Tk): d loss / d p through the context
    if dw is not None:
        g = g + dw
    ds = p * (g - (p * g).sum(-1, keepdim=True)) * scale
    return ds, ds @ kf


class _DotStep(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qf, kf, v, scale, mask, sink):
        out, p = _dot_forward(qf, kf, v, scale, mask)
        ctx.save_for_backward(qf, kf, v, p)
        ctx.scale, ctx.mask, ctx.sink = scale, mask, sink
        ctx.set_materialize_grads(False)
        return out, p

    @staticmethod
    def backward(ctx, dout, dw):
        qf, kf, v, p = ctx.saved_tensors
        if dout is None and dw is None:
            return (None,) * 6
        if torch.is_grad_enabled():  # create_graph: recompute with a graph to differentiate
            out, p = _dot_forward(qf, kf, v, ctx.scale, ctx.mask)
        if dout is None:
            dout = torch.zeros(p.shape[:-1] + v.shape[-1:], dtype=p.dtype, device=p.device)
        ds, dq = _dot_backward(qf, kf, v, ctx.scale, p, dout, dw)
        sink = ctx.sink
        if (
            sink is None
            or torch.is_grad_enabled()
            or not (ctx.needs_input_grad[1] or ctx.needs_input_grad[2])
        ):
            return (dq, ds.transpose(-1, -2) @ qf, p.transpose(-1, -2) @ dout, None, None, None)
        sink.add_outer("key", ds, qf)
        sink.add_outer("value", p, dout)
        return dq, None, None, None, None, None


def dot_step(
    qf: torch.Tensor,
    kf: torch.Tensor,
    v: torch.Tensor,
    scale: float = 1.0,
    mask: torch.Tensor | None = None,
    sink: GradSink | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dot-product attention of one query per row (the dot, scaled dot, general and cosine
    scores, on features their :class:`~attnkit.attention.scores.Score` prepared).

    Args:
        qf: prepared query ``(B, H, 1, F)``; kf: prepared keys ``(B, H, Tk, F)``;
        v: values ``(B, H, Tk, D)``; scale: the scores are ``scale * qf . kf_j``;
        mask: ``(B or 1, 1, 1, Tk)`` bool, True = may attend, or None;
        sink: where the steps' key and value gradients are summed (from :func:`collect`), or
            None (autograd sums them).

    Returns:
        ``context (B, H, 1, D)`` and ``weights (B, H, 1, Tk)``; a row with no allowed key gets
        zeros in both, and zero gradients.
    """
    if not (torch.is_grad_enabled() and any(x.requires_grad for x in (qf, kf, v))):
        return _dot_forward(qf, kf, v, scale, mask)  # decoding: no autograd node
    return _DotStep.apply(qf, kf, v, scale, mask, sink)


class StepPath(Path):
    """The step path as dispatch sees it: one query per row (a decoder step) of an additive,
    location or dot-family score, on CPU, key padding only, no dropout. First in ``auto``'s
    order: a decoder makes this call at every step."""

    name = "step"

    def not_supported_reasons(self, inp: Inputs) -> list[str]:
        score, tq = inp.score, inp.shape[2]
        reasons = []
        if score.name not in STEP_SCORES and not score.dot_family:
            reasons.append(f"score {score.name!r} has no one-query step")
        if tq != 1:
            reasons.append(f"{tq} queries per row; the step takes one (a decoder step)")
        if not inp.plain_keys:
            reasons.append("a causal mask or window; the step takes key padding only")
        if inp.dropout_p > 0:
            reasons.append("dropout on the weights; the step has none")
        if not inp.on_cpu:
            reasons.append("not on CPU; the step runs on CPU")
        dtypes = (torch.float32,) if score.name in STEP_SCORES else (torch.float32, torch.float64)
        if inp.dtype not in dtypes:
            reasons.append(f"dtype {inp.dtype}; the step takes {' or '.join(map(str, dtypes))}")
        if not reasons and score.name in STEP_SCORES and not native.available():
            status = f"({native.status()})"  # the chunked path's plan may say it already
            reasons.append(Unavailable(f"no C++ step kernel {status}", status))
        return reasons

    def auto_reasons(self, inp: Inputs) -> list[str]:
        # Decoding (no gradients) with a dot-product score and no weights asked for: the step
        # path's strengths (weights kept for backward, gradients summed per sequence) serve
        # no one, and SDPA's one fused kernel runs the same products faster (a Transformer
        # decoder's cross-attention in beam search, docs/attention.md).
        if inp.score.dot_family and not inp.need_weights and not inp.grad:
            if not (SDPA.not_supported_reasons(inp) or SDPA.auto_reasons(inp)):
                return [
                    f"score {inp.score.name!r}, one query per row without weights or "
                    "gradients (decoding): fused SDPA kernel"
                ]
        return []

    def plan(self, inp: Inputs, because: str | None) -> Plan:
        name = inp.score.name
        if because is not None:
            reason = because
        elif name in STEP_SCORES:
            reason = (
                f"score {name!r}, one query per row (a decoder step): C++ step kernel, "
                "weights kept for backward, key/value gradients summed over a prepared "
                "Memory's steps"
            )
        else:
            reason = (
                f"score {name!r}, one query per row (a decoder step): weights kept for "
                "backward, key/value gradients summed once per sequence over a prepared "
                "Memory's steps"
            )
        return Plan("step", reason, "native" if name in STEP_SCORES else "eager")

    def run(self, inp: Inputs, plan: Plan) -> tuple[torch.Tensor, torch.Tensor | None]:
        qf, kf, v, call = inp.tensors()
        score, mask = inp.score, call.mask()
        if score.dot_family:
            context, weights = dot_step(qf, kf, v, score.scale, mask, inp.sink)
        else:
            additive = cast("AdditiveScore", score)  # the only scores outside the dot family
            extra = inp.extra  # location features f (B, H, Tk, F)
            location = (
                None if extra is None else (extra[:, :, 0], cast("LocationScore", score).w_loc)
            )
            context, weights = additive_step(qf, kf, v, additive.v, mask, inp.sink, location)
        return context, (weights if inp.need_weights else None)


STEP = StepPath()
