"""Fused kernels for one block of the additive score ``s_ij = sum_a v_a tanh(q_ia + k_ja)``.

The pair tensor ``(B, H, bq, bk, A)`` is the whole cost of additive attention, and its speed is
bound by ``tanh``. Three implementations of each block operation, named by ``kernel``:

* ``"eager"``: plain PyTorch (``torch.tanh``); materialises the block's pair tensor once;
* ``"native"`` (CPU): the C++ kernels of ``csrc/blocks.cpp`` (called through
  :mod:`attnkit.ops.bindings`): no pair tensor, a rational tanh (``csrc/tanh.h``), and a
  backward that computes all three gradients in one pass over the pairs;
  :func:`additive_attention_backward` goes further, from the context's gradient to the score
  inputs in one pass, so backward computes each ``tanh`` once instead of twice;
* ``"compiled"``: the same math through ``torch.compile`` (Inductor's C++/OpenMP code on CPU,
  Triton on GPU) with ``tanh(x) = 1 - 2 / (exp(2x) + 1)``, which vectorises far better than
  ``tanh`` and is exact to float32 rounding in absolute terms (``|error| < 2.4e-7``, tested). Each
  backward reduction is its own kernel: Inductor's code for all of them fused into one runs
  about 5x slower on CPU. Used on GPU, and on CPU when the C++ kernels cannot be built.

Compiling takes seconds once per process (and again for new dtypes, or for size-1 dims such as
one-query blocks), so a call uses the compiled kernels when it is big enough to pay for that, or
when they are already compiled (:func:`want_compiled`); :func:`warm_up` compiles them ahead.
(RNN decoder steps have a C++ kernel of their own: :mod:`attnkit.attention.step`.) If compiling
fails (no C++ compiler, unsupported platform) the eager code runs and :func:`compile_status` says
why. ``ATTNKIT_COMPILE=0`` turns compiling off.

Shapes: ``q (B, H, bq, A)``, ``k (B, H, bk, A)``, ``v (H, A)``, ``grad (B, H, bq, bk)``.
Low-precision blocks are computed in float32.
"""

from __future__ import annotations

import logging
import os

import torch

from attnkit.ops import bindings
from attnkit.ops.precision import upcast

__all__ = [
    "COMPILE_MIN_WORK",
    "KERNELS",
    "additive_attention_backward",
    "additive_backward",
    "additive_scores",
    "compile_status",
    "exp_tanh",
    "run_compiled",
    "want_compiled",
    "warm_up",
]

log = logging.getLogger("attnkit")

# Pair elements (B * H * Tq * Tk * A) from which compiling pays for itself (~5-15 s once).
COMPILE_MIN_WORK = 1 << 27
# Once compiled, the kernels beat eager code from about this size on.
WARM_MIN_WORK = 1 << 15
# Largest pair tensor (elements) the eager fallback builds at once.
_EAGER_PAIR_BUDGET = 1 << 23

KERNELS = ("eager", "native", "compiled")


def exp_tanh(x: torch.Tensor) -> torch.Tensor:
    """``tanh(x)`` as ``1 - 2 / (exp(2x) + 1)``: saturates cleanly to +-1, never NaN."""
    return 1 - 2 / (torch.exp(2 * x) + 1)


def _pair(q, k, tanh):
    return tanh(q.unsqueeze(-2) + k.unsqueeze(-3))  # (B, H, bq, bk, A)


def _scores(q, k, v, tanh=exp_tanh):
    return (_pair(q, k, tanh) * v[:, None, None, :]).sum(-1)  # (B, H, bq, bk)


def _row_grad(q, k, v, grad, tanh=exp_tanh):
    """``v * sum_j (1 - t_ij^2) grad_ij`` -> ``(B, H, bq, A)``: the gradient of q."""
    t = _pair(q, k, tanh)
    return ((1 - t * t) * grad.unsqueeze(-1)).sum(-2) * v[:, None, :]


def _row_grad_v(q, k, grad, tanh=exp_tanh):
    """``sum_j t_ij grad_ij`` -> ``(B, H, bq, A)`` (summed over B and bq gives d v)."""
    return (_pair(q, k, tanh) * grad.unsqueeze(-1)).sum(-2)


def _one_query_grads(q, k, v, grad, tanh=exp_tanh):
    """All three gradients for a one-query block (a decoder step), in one pass: there the
    gradient of k needs no reduction, so fusing does not hurt as it does for bigger blocks."""
    t = _pair(q, k, tanh)  # (B, H, 1, bk, A)
    g = grad.unsqueeze(-1)
    u = (1 - t * t) * g * v[:, None, None, :]
    return u.sum(-2), u[:, :, 0], (t * g).sum(-2)


class _Compiler:
    """Lazily compiled versions of the block functions, with a fallback that remembers why."""

    def __init__(self) -> None:
        self.fns: dict[str, object] = {}
        self.failure: str | None = None
        self.ready = False  # a compiled call has succeeded
        if os.environ.get("ATTNKIT_COMPILE", "1") == "0":
            self.failure = "disabled by ATTNKIT_COMPILE=0"
        elif not hasattr(torch, "compile"):
            self.failure = "this torch has no torch.compile"

    def run(self, name, fn, *args):
        if self.failure is None:
            if name not in self.fns:
                # dynamic_threads: the C++ code always has an OpenMP loop and leaves the thread
                # count to the runtime. Otherwise the count is fixed at compile time, and
                # Inductor's on-disk cache hands code compiled under OMP_NUM_THREADS=1 to later
                # processes with more threads, which then run it on one core.
                self.fns[name] = torch.compile(
                    fn, dynamic=True, options={"cpp.dynamic_threads": True}
                )
            try:
                out = self.fns[name](*args)
                self.ready = True
                return out
            except torch.OutOfMemoryError:
                raise
            except Exception as exc:
                if self.ready:  # compiling worked before: a real error, not a toolchain problem
                    raise
                self.failure = f"torch.compile failed: {type(exc).__name__}: {exc}"[:500]
                log.warning(
                    "attnkit: fused additive kernels unavailable, using eager (%s)", self.failure
                )
        return _in_pieces(fn, *args)


_COMPILER = _Compiler()


def run_compiled(name: str, fn, *args):
    """``fn(*args)`` compiled (once per ``name``), or its eager version if compiling fails.
    ``fn(q, k, *rest, tanh=...)`` takes ``q (B, H, bq, A)`` and ``k (B, H, bk, A)`` first."""
    return _COMPILER.run(name, fn, *args)


def _in_pieces(fn, q, k, *rest):
    """The eager version of a block function, split over query rows so that its pair tensor
    stays within the eager budget (blocks sized for fused kernels can be much larger)."""
    b, h, bq, a = q.shape
    rows = max(1, _EAGER_PAIR_BUDGET // max(1, b * h * k.shape[2] * a))
    if rows >= bq:
        return fn(q, k, *rest, tanh=torch.tanh)
    outs = []
    for i in range(0, bq, rows):
        piece = [x[:, :, i : i + rows] if x.dim() == 4 and x.shape[2] == bq else x for x in rest]
        outs.append(fn(q[:, :, i : i + rows], k, *piece, tanh=torch.tanh))
    return torch.cat(outs, dim=2)


def compile_status() -> str:
    """``"available"`` or the reason the compiled kernels are not used."""
    return "available" if _COMPILER.failure is None else _COMPILER.failure


def want_compiled(work: int, dtype: torch.dtype) -> bool:
    """Whether a call with ``work`` pair elements should use the compiled kernels: when it is
    big enough to pay for compiling, or when they are compiled already (not for float64)."""
    if _COMPILER.failure is not None or dtype == torch.float64:
        return False
    return work >= COMPILE_MIN_WORK or (_COMPILER.ready and work >= WARM_MIN_WORK)


def warm_up(dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> str:
    """Compile the additive kernels now (for ``dtype`` on ``device``), including the variants
    for one-query blocks. Returns :func:`compile_status`."""
    for b, h, bq, bk in ((2, 2, 3, 5), (2, 1, 1, 5), (2, 2, 1, 5), (1, 1, 3, 5)):
        g = torch.Generator().manual_seed(0)
        q, k = (torch.randn(b, h, n, 8, generator=g).to(device, dtype) for n in (bq, bk))
        v = torch.randn(h, 8, generator=g).to(device, dtype)
        grad = torch.randn(b, h, bq, bk, generator=g).to(device, dtype)
        additive_scores(q, k, v, kernel="compiled")
        additive_backward(q, k, v, grad, kernel="compiled")
    return compile_status()


def additive_scores(q, k, v, *, kernel: str = "eager") -> torch.Tensor:
    """``s (B, H, bq, bk)``, in float32 for low-precision inputs."""
    q, k, v = upcast(q, k, v)
    if kernel == "native":
        return bindings.block_scores(q, k, v)
    if kernel == "compiled":
        return _COMPILER.run("scores", _scores, q, k, v)
    return torch.einsum("bhqka,ha->bhqk", torch.tanh(q.unsqueeze(-2) + k.unsqueeze(-3)), v)


def additive_backward(q, k, v, grad, *, kernel: str = "eager"):
    """Gradients ``(d q (B, H, bq, A), d k (B, H, bk, A), d v (H, A))`` of ``sum(grad * s)``."""
    q, k, v, grad = upcast(q, k, v, grad)
    if kernel == "native":
        return bindings.block_backward(q, k, v, grad)
    if kernel == "compiled" and q.shape[2] == 1:
        dq, dk, dv = _COMPILER.run("one_query", _one_query_grads, q, k, v, grad)
        return dq, dk, dv.sum((0, 2))
    if kernel == "compiled":
        gt = grad.transpose(-1, -2).contiguous()  # (B, H, bk, bq)
        dq = _COMPILER.run("row_grad", _row_grad, q, k, v, grad)
        dk = _COMPILER.run("row_grad", _row_grad, k, q, v, gt)
        dv = _COMPILER.run("row_grad_v", _row_grad_v, q, k, grad).sum((0, 2))
        return dq, dk, dv
    vh = v[:, None, :]  # (H, 1, A)
    t = torch.tanh(q.unsqueeze(-2) + k.unsqueeze(-3))  # (B, H, bq, bk, A)
    dv = torch.einsum("bhqka,bhqk->ha", t, grad)
    u = t.mul_(t).neg_().add_(1)  # 1 - t^2, in place: one block-sized buffer
    dq = torch.einsum("bhqka,bhqk->bhqa", u, grad) * vh
    dk = torch.einsum("bhqka,bhqk->bhka", u, grad) * vh
    return dq, dk, dv


def additive_attention_backward(q, k, v, lse, dpd, mask=None):
    """A block's backward from the context's gradient, in one pass (C++ kernel, CPU only).

    With ``s = additive_scores(q, k, v)`` and ``p = exp(s - lse)`` (0 where ``mask`` is False):
    ``ds = p * dpd``, and the gradients of ``sum(ds * s)``, each ``tanh`` computed once.

    Args:
        q ``(B, H, bq, A)``, k ``(B, H, bk, A)``, v ``(H, A)``: the score's inputs.
        lse: ``(B, H, bq)`` the rows' log-sum-exp (``+inf`` for a row with no key).
        dpd: ``(B, H, bq, bk)`` ``d loss / d p`` minus the row's ``sum_j p_j d loss / d p_j``.
        mask: bool, broadcastable to ``(B, 1, bq, bk)`` (True = may attend), or None.

    Returns:
        ``p (B, H, bq, bk)`` (for the values' gradient ``p^T @ dout``), ``d q``, ``d k``,
        ``d v (H, A)``; float32 for low-precision inputs.
    """
    return bindings.block_attention_backward(*upcast(q, k, v, lse, dpd), mask)
