"""Masks: which keys each query may attend to.

One convention across attnkit: a boolean mask is **True where a query may attend** (the polarity of
``F.scaled_dot_product_attention``; the opposite of ``nn.MultiheadAttention``'s ``key_padding_mask``).

Three kinds of restriction combine with a logical AND:

* key padding, from ``key_lengths`` ``(B,)`` or ``key_mask`` ``(B, Tk)``;
* ``causal``: query ``i`` sees keys ``j <= c_i``;
* ``window=(left, right)``: query ``i`` sees keys ``c_i - left <= j <= c_i + right`` (Luong local-m).

``c_i`` is the key position aligned with query ``i``: ``(i * Tk) // Tq`` by default (``i`` when
``Tq == Tk``), or the caller's ``positions`` (e.g. the index of a decoder step).
"""

from __future__ import annotations

import torch

from attnkit.checks import check_int_tensor, describe

__all__ = ["lengths_to_mask", "aligned_positions", "band_mask"]


def lengths_to_mask(
    lengths: torch.Tensor, max_len: int | None = None, *, name: str = "lengths"
) -> torch.Tensor:
    """Boolean mask of valid positions from sequence lengths.

    Args:
        lengths: integer tensor ``(B,)``; each ``0 <= lengths[b] <= max_len``.
        max_len: ``T``, the padded length; defaults to ``lengths.max()``.
        name: the argument name used in error messages.

    Returns:
        ``(B, T)`` bool tensor, **True = valid (may attend)**.

    Example:
        >>> lengths_to_mask(torch.tensor([1, 3]), 4)
        tensor([[ True, False, False, False],
                [ True,  True,  True, False]])
    """
    check_int_tensor(name, lengths, ndim=1)
    lo, hi = (int(lengths.min()), int(lengths.max())) if lengths.numel() else (0, 0)
    if max_len is None:
        if lo < 0:
            raise ValueError(f"{name}: expected non-negative values, got min {lo}")
        max_len = hi
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 0:
        raise ValueError(f"max_len: expected a non-negative int, got {max_len!r}")
    if lo < 0 or hi > max_len:
        raise ValueError(
            f"{name}: expected values in [0, {max_len}], got min {lo} and max {hi} "
            f"({describe(lengths)})"
        )
    return torch.arange(max_len, device=lengths.device) < lengths[:, None]


def aligned_positions(tq: int, tk: int, device: torch.device | None = None) -> torch.Tensor:
    """Key position aligned with each query: ``(i * Tk) // Tq`` for ``i < Tq``, shape ``(Tq,)``."""
    return torch.arange(tq, device=device) * tk // max(tq, 1)


def band_mask(
    q_pos: torch.Tensor,
    k_idx: torch.Tensor,
    *,
    causal: bool,
    window: tuple[int, int] | None,
) -> torch.Tensor | None:
    """Causal/window restriction for query centres ``q_pos`` and key indices ``k_idx``.

    Args:
        q_pos: ``(..., Tq)`` aligned key position of each query.
        k_idx: ``(Tk,)`` absolute key indices.
        causal: keep ``j <= c_i``.
        window: ``(left, right)``; keep ``c_i - left <= j <= c_i + right``.

    Returns:
        ``(..., Tq, Tk)`` bool mask (True = may attend), or ``None`` when nothing is restricted.
    """
    if not causal and window is None:
        return None
    c = q_pos[..., :, None]  # (..., Tq, 1)
    j = k_idx  # (Tk,)
    keep = torch.ones(c.shape[:-1] + j.shape, dtype=torch.bool, device=j.device)
    if window is not None:
        left, right = window
        keep &= j >= c - left
        keep &= j <= c + right
    if causal:
        keep &= j <= c
    return keep
