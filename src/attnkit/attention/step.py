"""One-query additive attention (an RNN decoder step) as one fused kernel per pass.

A decoder attends with one query per step over the same prepared keys ``kf (B, H, Tk, A)`` and
values ``v (B, H, Tk, D)``. The general chunked path serves such a call too, but spends most of
its time on per-call work around small kernels: online-softmax bookkeeping, separate score,
softmax and weighting ops in forward, and in backward an outer product for the values' gradient
and autograd adding each step's ``(B, H, Tk, A)`` key gradient into the total. Here:

* forward is one compiled graph: scores ``v_a . tanh(q + k_j)``, mask, softmax, context; the
  weights ``p (B, H, 1, Tk)`` are kept for backward (they are no bigger than the scores) and
  returned, so asking for them costs nothing;
* backward is one compiled graph that recomputes ``tanh(q + k_j)`` (never stored: that is the
  ``O(Tk * A)`` per step that autograd would keep) and, for a :class:`GradSink` from a prepared
  ``Memory``, adds the key and value gradients **in place** into one buffer per backward pass
  instead of handing each step's gradients to autograd to sum.

The sink is tied to the backward pass that filled it (``torch._C._current_graph_task_id``):
a pass that stops before reaching the memory (``torch.autograd.grad`` of the queries only)
leaves nothing behind that a later pass would pick up, and ``retain_graph`` passes each start
afresh. Without a sink (or when it cannot be used) the step returns its key and value gradients
to autograd as usual.

:func:`additive_step` runs the compiled kernels when ``compiled=True`` (the eager fallback of
:mod:`attnkit.attention.kernels` if compiling fails) and plain PyTorch otherwise (used by tests,
float64 ``gradcheck`` included).
"""

from __future__ import annotations

import weakref

import torch

from attnkit.attention import kernels

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
        """Zeroed buffers shaped like ``kf`` and ``v`` at the first step of a backward pass,
        the same buffers for the pass's later steps."""
        task = torch._C._current_graph_task_id()
        if self.task != task:
            self.task, self.key, self.value = task, torch.zeros_like(kf), torch.zeros_like(v)
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


def _forward(q, kf, va, v, mask, tanh=kernels.exp_tanh):
    """``q (B, H, 1, A)``, ``kf (B, H, Tk, A)``, ``va (H, A)``, ``v (B, H, Tk, D)``,
    ``mask (B or 1, 1, 1, Tk)`` or None -> ``context (B, H, 1, D)``, ``weights (B, H, 1, Tk)``."""
    s = (tanh(q + kf) * va[:, None, :]).sum(-1).unsqueeze(2)  # (B, H, 1, Tk)
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


def _backward(q, kf, va, v, p, out, dout, dw, tanh=kernels.exp_tanh):
    """``(d q (B, H, 1, A), d kf (B, H, Tk, A), d va per batch row (B, H, A), d v (B, H, Tk, D))``."""
    ds = _score_grad(p, v, out, dout, dw).transpose(-1, -2)  # (B, H, Tk, 1)
    t = tanh(q + kf)  # (B, H, Tk, A), recomputed
    gt = (1 - t * t) * ds
    dk = gt * va[:, None, :]
    return dk.sum(2, keepdim=True), dk, (t * ds).sum(2), p.transpose(-1, -2) * dout


def _backward_into(q, kf, va, v, p, out, dout, dw, key_sum, value_sum, tanh=kernels.exp_tanh):
    """As :func:`_backward`, adding ``d kf`` and ``d v`` into ``key_sum`` and ``value_sum``."""
    ds = _score_grad(p, v, out, dout, dw).transpose(-1, -2)  # (B, H, Tk, 1)
    t = tanh(q + kf)
    gt = (1 - t * t) * ds
    dk = gt * va[:, None, :]
    key_sum.add_(dk)
    value_sum.add_(p.transpose(-1, -2) * dout)
    return dk.sum(2, keepdim=True), (t * ds).sum(2)


def _run(name, fn, compiled, *args):
    if compiled:
        return kernels.run_compiled(name, fn, *args)
    return fn(*args, tanh=torch.tanh)


class _AdditiveStep(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, kf, v, va, mask, sink, compiled):
        out, p = _run("step_forward", _forward, compiled, q, kf, va, v, mask)
        ctx.save_for_backward(q, kf, va, v, p, out)
        ctx.sink, ctx.compiled = sink, compiled
        ctx.set_materialize_grads(False)
        return out, p

    @staticmethod
    def backward(ctx, dout, dw):
        q, kf, va, v, p, out = ctx.saved_tensors
        if dout is None and dw is None:
            return (None,) * 7
        if dout is None:
            dout = torch.zeros_like(out)
        args = (q, kf, va, v, p, out, dout, dw)
        if ctx.sink is not None and (ctx.needs_input_grad[1] or ctx.needs_input_grad[2]):
            key_sum, value_sum = ctx.sink.buffers(kf, v)
            dq, dva = _run("step_backward_into", _backward_into, ctx.compiled, *args,
                           key_sum, value_sum)
            dk = dv = None
        else:
            dq, dk, dva, dv = _run("step_backward", _backward, ctx.compiled, *args)
        return dq, dk, dv, dva.sum(0), None, None, None


def additive_step(
    q: torch.Tensor,
    kf: torch.Tensor,
    v: torch.Tensor,
    va: torch.Tensor,
    mask: torch.Tensor | None = None,
    sink: GradSink | None = None,
    *,
    compiled: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Additive attention of one query per row.

    Args:
        q: prepared query ``(B, H, 1, A)``; kf: prepared keys ``(B, H, Tk, A)``;
        v: values ``(B, H, Tk, D)``; va: the score's ``v`` ``(H, A)``;
        mask: ``(B or 1, 1, 1, Tk)`` bool, True = may attend, or None;
        sink: where to sum the key and value gradients (from :func:`collect`), or None.
        compiled: use the compiled kernels (else plain PyTorch with ``torch.tanh``).

    Returns:
        ``context (B, H, 1, D)`` and ``weights (B, H, 1, Tk)``; a row with no allowed key gets
        zeros in both, and zero gradients.
    """
    return _AdditiveStep.apply(q, kf, v, va, mask, sink, compiled)
