"""The reference path: plain, loop-free PyTorch math that every faster path is tested against.

It materialises the scores ``(B, H, Tq, Tk)`` (and, for additive/location scores, the pair tensor
``(B, H, Tq, Tk, A)``), so it is for correctness and small inputs, not for long sequences.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnkit.attention.precision import compute_dtype, upcast
from attnkit.attention.scores import Score

__all__ = ["reference_attention", "masked_softmax", "weigh"]


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
    qf, kf, extra = upcast(qf, kf, extra)  # scores and softmax in float32 for float16/bfloat16
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
