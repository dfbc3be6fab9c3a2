"""The reference path: plain, loop-free PyTorch math that every faster path is tested against.

It materialises the scores ``(B, H, Tq, Tk)`` (and, for additive/location scores, the pair tensor
``(B, H, Tq, Tk, A)``), so it is for correctness and small inputs, not for long sequences.
:func:`fits_in_memory` refuses a call whose tensors cannot fit, saying how much it needs and
which path would do.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from attnkit.attention.path import Inputs, Path, Plan
from attnkit.attention.scores import Score
from attnkit.ops.precision import compute_dtype, upcast
from attnkit.ops.tracing import values_readable

__all__ = [
    "REFERENCE",
    "ReferencePath",
    "available_memory",
    "check_single_backward",
    "fits_in_memory",
    "reference_attention",
    "masked_softmax",
    "weigh",
]


def check_single_backward(impl: str) -> None:
    """Refuse, in a fast path's backward, to build a graph of that backward.

    ``torch.autograd.grad(..., create_graph=True)`` (a gradient penalty, a Hessian-vector
    product) runs a backward with grad mode on, to differentiate it again. The chunked path's
    hand-written backward and PyTorch's fused SDPA kernels have no derivative of their own:
    their second-order gradients would be missing or wrong, so they raise instead. The
    reference path is plain PyTorch operations, whose gradients of gradients are exact.

    Raises:
        RuntimeError: naming ``impl`` and ``impl="reference"``, when grad mode is on.
    """
    if torch.is_grad_enabled():
        raise RuntimeError(
            f"impl={impl!r}: its backward cannot be differentiated again (create_graph=True, "
            "as a gradient penalty asks); build the module with impl='reference' for "
            "gradients of gradients"
        )


# Calls needing less than this (bytes) are not checked against the free memory.
_CHECK_FROM = 1 << 26


def available_memory(device: torch.device) -> int | None:
    """Bytes that can still be allocated on ``device``, or None where unknown: a CUDA device's
    free memory plus what PyTorch's allocator holds unused; for the CPU, what Linux reports as
    available (``MemAvailable``)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


@contextmanager
def fits_in_memory(score: Score, qf: torch.Tensor, tk: int, need_weights: bool) -> Iterator[None]:
    """Around a reference call on prepared queries ``qf (B, H, Tq, F)`` and ``Tk`` keys: a
    ``MemoryError`` before anything is allocated when its two largest tensors (scores and
    weights, or the pair tensor and its ``tanh``) need more than the device has free, and in
    place of an allocation failure. Both say what the call needs and which path would fit.
    Nothing is checked while exporting (the sizes may be symbolic) or on the meta device."""
    if not values_readable(qf):
        yield
        return
    b, h, tq, f = qf.shape
    itemsize = torch.finfo(compute_dtype(qf.dtype)).bits // 8
    need = 2 * b * h * tq * tk * (1 if score.dot_family else f) * itemsize
    free = available_memory(qf.device) if need >= _CHECK_FROM else None
    if free is not None and need > free:
        tensors, advice = _too_big(score, qf, tk, need_weights)
        raise MemoryError(
            f"impl='reference': this call needs at least {tensors}, more than the "
            f"{_size(free)} available on {qf.device}; {advice}"
        )
    try:
        yield
    except RuntimeError as exc:  # torch.OutOfMemoryError is one
        if not (isinstance(exc, torch.OutOfMemoryError) or "can't allocate memory" in str(exc)):
            raise
        tensors, advice = _too_big(score, qf, tk, need_weights)
        reason = str(exc).strip().splitlines()[0][:300]
        raise MemoryError(
            f"impl='reference': allocating at least {tensors} failed ({reason}); {advice}"
        ) from exc


def _too_big(score: Score, qf: torch.Tensor, tk: int, need_weights: bool) -> tuple[str, str]:
    """For :func:`fits_in_memory`'s messages: the tensors the call needs, and the path that
    would fit."""
    b, h, tq, f = qf.shape
    dtype = compute_dtype(qf.dtype)
    itemsize = torch.finfo(dtype).bits // 8
    dims = "(B, H, Tq, Tk)"
    shape: tuple[int, ...] = (b, h, tq, tk)
    if not score.dot_family:
        dims, shape = "(B, H, Tq, Tk, A)", (b, h, tq, tk, f)
    tensors = (
        f"{_size(2 * math.prod(shape) * itemsize)} for two {dims} = {shape} "
        f"{str(dtype).removeprefix('torch.')} tensors"
    )
    scores = b * h * tq * tk * itemsize
    if not need_weights:
        advice = (
            "impl='sdpa' or 'chunked' never build them"
            if score.dot_family
            else "impl='chunked' works in blocks of a few MiB"
        )
    elif score.dot_family:
        advice = (
            f"the weights alone take {_size(scores)}: pass need_weights=False "
            "(then SDPA or chunked never build them)"
        )
    else:
        advice = f"impl='chunked' keeps only the (B, H, Tq, Tk) scores, about {_size(2 * scores)}"
    return tensors, advice


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last dim, in at least float32, with masked entries exactly zero.

    Args:
        scores: ``(..., Tq, Tk)``.
        mask: broadcastable to ``scores``, bool, **True = may attend**; ``None`` for no mask.

    Returns:
        Weights in float32 (float64 for float64 scores). A row with no allowed key is all zeros,
        and its gradient is zero, never NaN.
    """
    scores = scores.to(compute_dtype(scores.dtype))
    if mask is None:
        return torch.softmax(scores, dim=-1)
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1).masked_fill(~mask, 0.0)


def reference_attention(
    qf: torch.Tensor,
    kf: torch.Tensor,
    value: torch.Tensor,
    score: Score,
    mask: torch.Tensor | None,
    *,
    extra: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax(score(q, k)) @ v`` computed in full.

    Args:
        qf: prepared queries ``(B, H, Tq, F)`` (see :mod:`attnkit.attention.scores`).
        kf: prepared keys ``(B, H, Tk, F)``.
        value: ``(B, H, Tk, Dv)``.
        score: the score module that prepared ``qf``/``kf``.
        mask: bool, broadcastable to ``(B, H, Tq, Tk)``, **True = may attend**, or ``None``.
        extra: per-pair features for the score (location features) or ``None``.
        dropout_p: dropout on the weights (applied to the context only).

    Returns:
        ``context (B, H, Tq, Dv)`` and ``weights (B, H, Tq, Tk)`` (before dropout), both in the
        dtype of ``value``. For float16/bfloat16 inputs the scores and the softmax are computed
        in float32.
    """
    qf, kf = upcast(qf, kf)  # scores and softmax in float32 for float16/bfloat16
    (extra,) = upcast(extra)
    scores = score.pairwise(qf, kf, extra)  # (B, H, Tq, Tk)
    return weigh(scores, value, mask, dropout_p)


def weigh(
    scores: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, dropout_p: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked softmax of ``scores (B, H, Tq, Tk)``, dropout, and the weighted sum of
    ``value (B, H, Tk, Dv)``: ``context (B, H, Tq, Dv)`` and the weights before dropout."""
    weights = masked_softmax(scores, mask).to(value.dtype)  # (B, H, Tq, Tk)
    dropped = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
    return dropped @ value, weights  # (B, H, Tq, Dv), (B, H, Tq, Tk)


class ReferencePath(Path):
    """The reference path as dispatch sees it: it serves every call (last in ``auto``'s
    order); :func:`fits_in_memory` refuses, when it runs, a call too big for the device."""

    name = "reference"

    def plan(self, inp: Inputs, because: str | None) -> Plan:
        return Plan("reference", because or "no faster path serves this call")

    def run(self, inp: Inputs, plan: Plan) -> tuple[torch.Tensor, torch.Tensor | None]:
        qf, kf, v, call = inp.tensors()
        with fits_in_memory(inp.score, qf, kf.shape[2], inp.need_weights):
            context, weights = reference_attention(
                qf,
                kf,
                v,
                inp.score,
                call.mask(),
                extra=inp.extra,
                dropout_p=inp.dropout_p,
            )
        return context, (weights if inp.need_weights else None)


REFERENCE = ReferencePath()
