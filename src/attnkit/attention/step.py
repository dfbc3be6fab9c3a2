"""One-query additive or location-aware attention (an RNN decoder step), one kernel per pass.

A decoder attends with one query per step over the same prepared keys ``kf (B, H, Tk, A)`` and
values ``v (B, H, Tk, D)``. The general chunked path serves such a call too, but spends most of
its time on per-call work around small kernels: online-softmax bookkeeping, separate score,
softmax and weighting ops in forward, and in backward an outer product for the values' gradient
and autograd adding each step's ``(B, H, Tk, A)`` key gradient into the total. Here:

* forward is one C++ kernel (``csrc/step.cpp``, through :mod:`attnkit.attention.bindings`):
  scores ``v_a . tanh(q + k_j)``, mask, softmax, context; the weights ``p (B, H, 1, Tk)`` are
  kept for backward (they are no bigger than the scores) and returned, so asking for them costs
  nothing;
* backward is one kernel that recomputes ``tanh(q + k_j)`` (never stored: that is the
  ``O(Tk * A)`` per step that autograd would keep), skips keys whose weight is zero, and, for a
  :class:`GradSink` from a prepared ``Memory``, adds the key and value gradients **in place**
  into one buffer per backward pass instead of handing each step's gradients to autograd to sum.

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

import torch

from attnkit.attention import bindings

__all__ = ["GradSink", "additive_step", "collect", "sink_supported"]


def sink_supported() -> bool:
    """Whether this torch can tell backward passes apart (needed to sum gradients in place)."""
    return hasattr(torch._C, "_current_graph_task_id")


class GradSink:
    """Key and value gradients of many steps over one prepared memory, summed in place."""

    __slots__ = ("task", "key", "value", "_inputs")

    def __init__(self):
        self.task: int | None = None
        self.key: torch.Tensor | None = None
        self.value: torch.Tensor | None = None
        self._inputs: tuple = ()

    def serves(self, kf: torch.Tensor, v: torch.Tensor) -> bool:
        """Whether ``kf`` and ``v`` are the tensors this sink collects for (not, say, a copy
        reordered by beam search, whose gradients must go through autograd)."""
        return len(self._inputs) == 2 and self._inputs[0]() is kf and self._inputs[1]() is v

    def buffers(self, kf: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Zeroed contiguous buffers shaped like ``kf`` and ``v`` at the first step of a
        backward pass, the same buffers for the pass's later steps."""
        task = torch._C._current_graph_task_id()
        if self.task != task:
            self.task = task
            self.key = torch.zeros(kf.shape, dtype=kf.dtype, device=kf.device)
            self.value = torch.zeros(v.shape, dtype=v.dtype, device=v.device)
        return self.key, self.value

    def take(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """This pass's sums (``None`` if no step of this pass added to them); empties the sink."""
        current = self.task is not None and self.task == torch._C._current_graph_task_id()
        key, value = (self.key, self.value) if current else (None, None)
        self.task = self.key = self.value = None
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
    return pre if f is None else pre + f @ lw


def _forward(q, kf, va, v, mask, f, lw):
    """``q (B, H, 1, A)``, ``kf (B, H, Tk, A)``, ``va (H, A)``, ``v (B, H, Tk, D)``,
    ``mask (B or 1, 1, 1, Tk)`` or None, location features ``f (B, H, Tk, F)`` and ``lw (H, F,
    A)`` or None -> ``context (B, H, 1, D)``, ``weights (B, H, 1, Tk)``."""
    s = (torch.tanh(_pre(q, kf, f, lw)) * va[:, None, :]).sum(-1).unsqueeze(2)  # (B, H, 1, Tk)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(m == float("-inf"), 0.0, m)  # a row with no key: weights 0, context 0
    e = torch.exp(s - m)
    total = e.sum(-1, keepdim=True)
    p = e / torch.where(total > 0, total, 1.0)
    return (p.transpose(-1, -2) * v).sum(-2, keepdim=True), p


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


def _backward(q, kf, va, v, p, out, dout, dw, f, lw):
    """``d q (B, H, 1, A)``, ``d kf (B, H, Tk, A)``, ``d va`` per batch row ``(B, H, A)``,
    ``d v (B, H, Tk, D)``, ``d f (B, H, Tk, F)`` and ``d lw (H, F, A)`` (None without ``f``)."""
    ds = _score_grad(p, v, out, dout, dw).transpose(-1, -2)  # (B, H, Tk, 1)
    t = torch.tanh(_pre(q, kf, f, lw))  # (B, H, Tk, A), recomputed
    dk = (1 - t * t) * ds * va[:, None, :]
    df, dlw = (None, None) if f is None else _location_grads(dk, f, lw)
    return dk.sum(2, keepdim=True), dk, (t * ds).sum(2), p.transpose(-1, -2) * dout, df, dlw


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
        sums = None
        if ctx.sink is not None and (ctx.needs_input_grad[1] or ctx.needs_input_grad[2]):
            sums = ctx.sink.buffers(kf, v)
        df = dlw = None
        if ctx.native and f is None:  # the kernel adds into the sums itself
            dq, dk, dva, dv = bindings.step_backward(q, kf, va, v, p, dout, dw, f, lw, sums)
        elif ctx.native:  # location: d kf is needed on its own, for d f and d lw
            dq, dk, dva, dv = bindings.step_backward(q, kf, va, v, p, dout, dw, f, lw)
            df, dlw = _location_grads(dk, f, lw)
        else:
            dq, dk, dva, dv, df, dlw = _backward(q, kf, va, v, p, out, dout, dw, f, lw)
        if sums is not None and dk is not None:
            sums[0].add_(dk)
            sums[1].add_(dv)
            dk = dv = None
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
        native: run the C++ kernel (float32 or float64; :func:`attnkit.attention.native.available`
            must be true), else plain PyTorch.

    Returns:
        ``context (B, H, 1, D)`` and ``weights (B, H, 1, Tk)``; a row with no allowed key gets
        zeros in both, and zero gradients.
    """
    f, lw = (None, None) if location is None else location
    if not (torch.is_grad_enabled() and any(
            x is not None and x.requires_grad for x in (q, kf, v, va, f, lw))):
        run = bindings.step_forward if native else _forward
        return run(q, kf, va, v, mask, f, lw)  # decoding: no autograd node
    return _AdditiveStep.apply(q, kf, v, va, mask, sink, native, f, lw)
