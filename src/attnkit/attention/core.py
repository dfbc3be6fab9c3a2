"""What every attention entry point shares: input checks, mask building, and running a path.

The public entry points (:class:`attnkit.Attention`, :func:`attnkit.attention`,
:class:`attnkit.SelfAttention`) validate their inputs here, build one boolean mask
(**True = may attend**) and hand prepared per-head tensors ``(B, H, T, D)`` to the chosen path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from attnkit.attention._checks import (
    check_int_tensor,
    check_size,
    check_tensor,
    describe,
)
from attnkit.attention.dispatch import Plan, choose_impl
from attnkit.attention.masks import aligned_positions, band_mask, lengths_to_mask
from attnkit.attention.reference import reference_attention
from attnkit.attention.scores import Score
from attnkit.attention.sdpa import sdpa_attention


class AttentionOutput(NamedTuple):
    """Result of an attention call.

    Attributes:
        context: ``(B, Tq, Dv)``, or ``(B, Dv)`` for a one-step query.
        weights: ``(B, Tq, Tk)`` (``(B, H, Tq, Tk)`` with heads; ``(B, Tk)`` / ``(B, H, Tk)`` for a
            one-step query) when requested, else ``None``. Rows sum to 1 over allowed keys and are
            0 on masked keys; a row with no allowed key is all zeros.
    """

    context: torch.Tensor
    weights: torch.Tensor | None


@dataclass
class Call:
    """A validated attention call: 3-D query, key and value, and the mask ``(B, 1, Tq, Tk)``."""

    query: torch.Tensor  # (B, Tq, Dq)
    key: torch.Tensor  # (B, Tk, Dk)
    value: torch.Tensor  # (B, Tk, Dv)
    one_step: bool
    key_valid: torch.Tensor | None  # (B, Tk) bool
    mask: torch.Tensor | None  # (B, 1, Tq, Tk) bool, True = may attend


def check_call(
    query,
    key,
    value,
    *,
    query_dim: int | None,
    key_dim: int | None,
    value_dim: int | None,
    key_lengths,
    key_mask,
    positions,
    causal: bool,
    window: tuple[int, int] | None,
) -> Call:
    """Validate one call's inputs and build its mask. Dims given as ``None`` are not checked."""
    check_tensor("query", query, ndim=(2, 3))
    check_tensor("key", key, ndim=3)
    value_name = "value"
    if value is None:
        value, value_name = key, "value (defaults to key)"
    check_tensor(value_name, value, ndim=3)
    one_step = query.dim() == 2
    q = query.unsqueeze(1) if one_step else query  # (B, Tq, Dq)
    b, tq, _ = q.shape
    tk = key.shape[1]
    for name, t in (("key", key), (value_name, value)):
        check_size(name, t, 0, b, "batch size B (from query)")
        if t.dtype != query.dtype:
            raise TypeError(
                f"{name}: expected dtype {query.dtype} (the query's), got {describe(t)}"
            )
    check_size(value_name, value, 1, tk, "Tk (from key)")
    dims = (("query", query, query_dim), ("key", key, key_dim), (value_name, value, value_dim))
    for name, t, d in dims:
        if d is not None:
            check_size(name, t, t.dim() - 1, d, f"feature size {name.split()[0]}_dim")

    key_valid = None
    if key_lengths is not None:
        check_int_tensor("key_lengths", key_lengths, ndim=1)
        check_size("key_lengths", key_lengths, 0, b, "batch size B (from query)")
        key_valid = lengths_to_mask(key_lengths.to(key.device), tk, name="key_lengths")
    if key_mask is not None:
        if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool:
            got = describe(key_mask) if isinstance(key_mask, torch.Tensor) else type(key_mask).__name__
            raise TypeError(f"key_mask: expected a bool tensor (True = may attend), got {got}")
        if tuple(key_mask.shape) != (b, tk):
            raise ValueError(f"key_mask: expected shape (B, Tk) = ({b}, {tk}), got {describe(key_mask)}")
        key_mask = key_mask.to(key.device)
        key_valid = key_mask if key_valid is None else key_valid & key_mask

    band = None
    if positions is not None:
        if not causal and window is None:
            raise ValueError("positions: only used with causal=True or a window; got neither")
        check_int_tensor("positions", positions, ndim=1 if one_step else 2)
        want = (b,) if one_step else (b, tq)
        if tuple(positions.shape) != want:
            raise ValueError(f"positions: expected shape {want}, got {describe(positions)}")
        pos = positions.to(key.device).reshape(b, tq)  # (B, Tq)
        band = band_mask(pos, torch.arange(tk, device=key.device), causal=causal, window=window)
    elif causal or window is not None:
        if one_step:
            raise ValueError(
                "positions: a one-step query with causal=True or a window needs the aligned key "
                "position of each query, shape (B,), e.g. the decoder step index"
            )
        pos = aligned_positions(tq, tk, key.device)  # (Tq,)
        band = band_mask(pos, torch.arange(tk, device=key.device), causal=causal, window=window)

    mask = None
    if key_valid is not None:
        mask = key_valid[:, None, None, :]  # (B, 1, 1, Tk)
    if band is not None:
        band = band.reshape(-1, 1, tq, tk)  # (B or 1, 1, Tq, Tk)
        mask = band if mask is None else mask & band
    if mask is not None:
        mask = mask.expand(b, 1, tq, tk)
    return Call(q, key, value, one_step, key_valid, mask)


def initial_weights(call: Call, heads: int) -> torch.Tensor:
    """Uniform weights over each row's allowed keys, ``(B, H, Tq, Tk)``: the location score's
    "previous weights" before the first step."""
    b, tq, _ = call.query.shape
    tk = call.key.shape[1]
    if call.mask is None:
        allowed = torch.ones(b, 1, tq, tk, device=call.key.device)
    else:
        allowed = call.mask.to(call.key.dtype)
    w = allowed / allowed.sum(-1, keepdim=True).clamp(min=1)
    return w.to(call.key.dtype).expand(b, heads, tq, tk)


def run(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    score: Score,
    mask: torch.Tensor | None,
    *,
    prev: torch.Tensor | None,
    impl: str,
    dropout_p: float,
    need_weights: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, Plan]:
    """Score, mask, softmax and weight the values on per-head tensors.

    Args:
        q: ``(B, H, Tq, Dq)``; k: ``(B, H, Tk, Dk)``; v: ``(B, H, Tk, Dv)``.
        mask: ``(B, 1, Tq, Tk)`` bool, True = may attend, or ``None``.
        prev: previous weights ``(B, H, Tq, Tk)`` for the location score, else ``None``.

    Returns:
        ``context (B, H, Tq, Dv)``, ``weights (B, H, Tq, Tk)`` or ``None``, and the plan taken.
    """
    plan = choose_impl(impl, score=score, need_weights=need_weights)
    qf = score.prepare_query(q)  # (B, H, Tq, F)
    kf = score.prepare_key(k)  # (B, H, Tk, F)
    extra = score.prepare_extra(prev) if prev is not None else None
    if plan.impl == "sdpa":
        return sdpa_attention(qf, kf, v, mask, dropout_p=dropout_p), None, plan
    context, weights = reference_attention(qf, kf, v, score, mask, extra=extra, dropout_p=dropout_p)
    return context, (weights if need_weights else None), plan
