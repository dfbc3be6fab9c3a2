"""Masks: which keys each query may attend to.

One convention across attnkit: a boolean mask is **True where a query may attend** (the
polarity of ``F.scaled_dot_product_attention``; the opposite of ``nn.MultiheadAttention``'s
``key_padding_mask``).

Three kinds of restriction combine with a logical AND:

* key padding, from ``key_lengths`` ``(B,)`` or ``key_mask`` ``(B, Tk)``;
* ``causal``: query ``i`` sees keys ``j <= c_i``;
* ``window=(left, right)``: query ``i`` sees keys ``c_i - left <= j <= c_i + right``
  (Luong local-m).

``c_i`` is the key position aligned with query ``i``: ``(i * Tk) // Tq`` by default (``i`` when
``Tq == Tk``), or the caller's ``positions`` (e.g. the index of a decoder step).

:class:`KeyLayout` holds these restrictions for one call without building a ``(B, Tq, Tk)`` mask:
it is the mask model of every path, each building from it what it needs (the whole mask, one
block's mask, or the band of keys a block of queries can see).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from attnkit.checks import check_int_tensor, describe
from attnkit.ops.tracing import exporting, values_readable

__all__ = [
    "KeyLayout",
    "lengths_to_mask",
    "aligned_positions",
    "band_mask",
    "non_finite_keys",
    "non_finite_rows",
    "zero_padding",
]


def lengths_to_mask(
    lengths: torch.Tensor, max_len: int | None = None, *, name: str = "lengths"
) -> torch.Tensor:
    """Boolean mask of valid positions from sequence lengths.

    Args:
        lengths: integer tensor ``(B,)``; each ``0 <= lengths[b] <= max_len``.
        max_len: ``T``, the padded length; defaults to ``lengths.max()`` (required while
            exporting or on the meta device, where no tensor value is read: see
            :func:`attnkit.ops.tracing.values_readable`).
        name: the argument name used in error messages.

    Returns:
        ``(B, T)`` bool tensor, **True = valid (may attend)**.

    Example:
        >>> lengths_to_mask(torch.tensor([1, 3]), 4)
        tensor([[ True, False, False, False],
                [ True,  True,  True, False]])
    """
    check_int_tensor(name, lengths, ndim=1)
    if not values_readable(lengths):  # the values are not checked
        if max_len is None:
            raise ValueError(
                f"max_len: required while exporting or on the meta device (the "
                f"default reads {name}.max()), got None"
            )
        return torch.arange(max_len, device=lengths.device) < lengths[:, None]
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


class _ZeroPadding(torch.autograd.Function):
    """``x`` with the bits of masked entries cleared (+0.0): an AND with all-ones or all-zeros
    integers of the same width, which runs at the speed of a multiplication, where CPU
    ``torch.where`` and ``masked_fill`` run a scalar loop (about 6x slower)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(keep)
        ints = _SAME_WIDTH_INT[x.dtype]
        return (x.view(ints) & -keep.to(ints)).view(x.dtype)  # -1: all bits set

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (keep,) = ctx.saved_tensors
        return grad * keep, None


_SAME_WIDTH_INT = {
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float32: torch.int32,
    torch.float64: torch.int64,
}


def zero_padding(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``x`` with zeros where ``keep`` is False, whatever it held there (NaN, inf): masked
    weights are exactly 0, but ``0 * NaN`` is NaN in a weighted sum. Gradients at the zeroed
    positions are 0.

    Args:
        x: keys or values, ``(B, Tk, D)`` or ``(B, H, Tk, D)``.
        keep: bool, broadcastable to ``x`` (``(B, Tk, 1)`` or ``(B, 1, Tk, 1)``), True = valid.
    """
    if exporting():  # exporters record torch.where, not a custom autograd function
        return torch.where(keep, x, 0)
    return _ZeroPadding.apply(x, keep)


def non_finite_keys(
    key: torch.Tensor, value: torch.Tensor, valid: torch.Tensor | None = None
) -> torch.Tensor | None:
    """``(B, Tk)`` bool: the keys whose key or value holds NaN or inf (among the ``valid`` ones,
    ``(B, Tk)``, when given), or None when there is none, or when values cannot be read
    (:func:`~attnkit.ops.tracing.values_readable`). When all are finite this costs one
    sum over each of ``key (B, Tk, Dk)`` and ``value (B, Tk, Dv)``: NaN or inf makes the sum
    NaN or inf (an overflowing sum of finite values only leads to the exact check).
    """
    if not values_readable(key):
        return None
    with torch.no_grad():
        # float32 sums at least: a float16 sum overflows long before its terms do
        total = key.sum(dtype=torch.promote_types(key.dtype, torch.float32))
        if value is not key:
            total = total + value.sum(dtype=total.dtype)
        if bool(torch.isfinite(total)):  # one read back
            return None
        bad = non_finite_rows(key, value)
        if valid is not None:
            bad = bad & valid
    return bad if bool(bad.any()) else None


def non_finite_rows(key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """``(B, Tk)`` bool: the keys whose key ``(B, Tk, Dk)`` or value ``(B, Tk, Dv)`` holds NaN
    or inf, computed without reading a value (what an exported graph checks)."""
    with torch.no_grad():
        bad = ~torch.isfinite(key).all(-1)
        return bad if value is key else bad | ~torch.isfinite(value).all(-1)


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
    rules = []  # each (..., Tq, Tk); combined out of place, which exporters record
    if window is not None:
        left, right = window
        rules += [j >= c - left, j <= c + right]
    if causal:
        rules.append(j <= c)
    keep = rules[0]
    for rule in rules[1:]:
        keep = keep & rule
    return keep


@dataclass(frozen=True)
class KeyLayout:
    """Which keys each query may attend to, without materialising ``(B, Tq, Tk)``.

    Attributes:
        key_valid: ``(B, Tk)`` bool (True = may attend) or None.
        q_pos: ``(B or 1, Tq)`` aligned key position of each query, or None (no band).
        causal, window: the band restrictions (see the module docstring).
        tk: number of keys.
    """

    key_valid: torch.Tensor | None
    q_pos: torch.Tensor | None
    causal: bool
    window: tuple[int, int] | None
    tk: int

    def key_range(self, q0: int, q1: int) -> tuple[int, int]:
        """Keys ``[k0, k1)`` that queries ``q0..q1-1`` can see (the band's hull)."""
        if self.q_pos is None or (not self.causal and self.window is None):
            return 0, self.tk
        block = self.q_pos[:, q0:q1]
        lo, hi = 0, self.tk
        if self.window is not None:
            lo = max(lo, int(block.min()) - self.window[0])
            hi = min(hi, int(block.max()) + self.window[1] + 1)
        if self.causal:
            hi = min(hi, int(block.max()) + 1)
        return lo, max(lo, hi)

    @property
    def pure_causal(self) -> bool:
        """Only the default causal band (``j <= i`` with ``Tq == Tk``): SDPA's ``is_causal``.
        Never while exporting or on the meta device, which take the reference path and read no
        tensor value."""
        return (
            self.causal
            and self.window is None
            and self.key_valid is None
            and self.q_pos is not None
            and values_readable(self.q_pos)
            and self.q_pos.shape == (1, self.tk)
            and bool((self.q_pos[0] == torch.arange(self.tk, device=self.q_pos.device)).all())
        )

    def mask_elements(self, b: int, tq: int) -> int:
        """Elements of the smallest broadcastable mask, ``(B|1, 1, Tq|1, Tk)``."""
        rows = (
            b
            if (self.key_valid is not None or (self.q_pos is not None and self.q_pos.shape[0] > 1))
            else 1
        )
        return rows * (tq if self.q_pos is not None else 1) * self.tk

    def block_mask(self, q0: int, q1: int, k0: int, k1: int) -> torch.Tensor | None:
        """``(B or 1, 1, bq, bk)`` bool, True = may attend, or None when all may."""
        mask = None
        if self.key_valid is not None:
            mask = self.key_valid[:, None, None, k0:k1]  # (B, 1, 1, bk)
        if self.q_pos is not None:
            idx = torch.arange(k0, k1, device=self.q_pos.device)
            band = band_mask(self.q_pos[:, q0:q1], idx, causal=self.causal, window=self.window)
            if band is not None:
                band = band[:, None]  # (B or 1, 1, bq, bk)
                mask = band if mask is None else mask & band
        return mask
