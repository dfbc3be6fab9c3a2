"""A self-attention layer that drops in between two RNN layers, e.g. of a CRNN."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.attention.core import AttentionOutput
from attnkit.attention.masks import lengths_to_mask
from attnkit.attention.module import Attention
from attnkit.checks import (
    check_int_tensor,
    check_positive_int,
    check_tensor,
    describe,
)
from attnkit.ops.dense import Linear
from attnkit.ops.tracing import skips_padding

__all__ = ["ATTENTION_ARGS", "SelfAttention", "length_groups"]

COMBINES = ("concat", "residual")
# The keyword arguments SelfAttention passes on to its Attention.
ATTENTION_ARGS = ("attn_dim", "heads", "head_dim", "window", "causal", "dropout", "impl")


def length_groups(
    lengths: torch.Tensor, t: int, groups: int = 4
) -> tuple[torch.Tensor, list[tuple[int, int]]] | None:
    """Rows of a self-attention batch in groups of similar length, to attend within each
    group's longest length instead of the padded ``T``.

    The rows go by decreasing length (``order`` ``(B,)``) and split into up to ``groups`` runs
    of about ``B / groups`` rows; a run attends over its first row's length. Returns ``order``
    and the runs as ``(rows, length)`` pairs (runs of zero length are left out: their output is
    zero), or None when that saves less than a tenth of the padded ``B T^2`` work or every
    length is 0.

    Example:
        >>> order, runs = length_groups(torch.tensor([10, 3, 9, 4]), 10, groups=2)
        >>> order.tolist(), runs
        ([0, 2, 3, 1], [(2, 10), (2, 4)])
    """
    ordered, order = lengths.sort(descending=True, stable=True)
    sizes = ordered.tolist()
    b = len(sizes)
    starts = sorted({(b * j) // groups for j in range(groups)} | {b})
    runs = [(stop - start, sizes[start]) for start, stop in zip(starts, starts[1:])]
    if not sizes or sizes[0] == 0 or sum(n * length**2 for n, length in runs) > 0.9 * b * t**2:
        return None  # (all of length 0: the padded pass gives zeros with gradients)
    return order, [(n, length) for n, length in runs if length > 0]


class SelfAttention(nn.Module):
    """Every step of a sequence attends over the whole (or a window of the) same sequence.

    With ``combine="concat"`` (default) the output is the attentional hidden state of Luong et
    al. 2015 (eq. 5), ``out_t = tanh(W [x_t; c_t])``, computed for all steps at once; with
    ``combine="residual"`` it is ``LayerNorm(x_t + W c_t)``. Steps beyond a sequence's length
    are neither attended to nor output (their output is zero). On CPU, with ``lengths`` and
    without weights, the rows are attended in groups of similar length, each within its
    longest length (:func:`length_groups`): the same outputs without the padding's share of
    the ``T^2`` work.

    Args:
        dim: ``D``, input feature size (e.g. ``2 * hidden`` of a bidirectional RNN1).
        out_dim: ``D_out``, output feature size (default ``D``; must be ``D`` for "residual").
        score: as for :class:`attnkit.Attention`; default ``"general"``, Luong's bilinear
            ``x_i^T W x_j``.
        attn_dim, heads, head_dim, window, causal, dropout, impl: keyword arguments passed on to
            :class:`attnkit.Attention` (:data:`ATTENTION_ARGS`), with its defaults.
        combine: ``"concat"`` or ``"residual"``.
        batch_first: inputs are ``(B, T, D)`` if True (default), ``(T, B, D)`` (the ``nn.LSTM``
            default) if False; outputs follow the same layout.

    Shape:
        - x: ``(B, T, D)`` (or ``(T, B, D)``); lengths: ``(B,)`` ints in ``[0, T]``.
        - output: ``(B, T, D_out)`` (or ``(T, B, D_out)``).
        - weights (from :meth:`with_weights`): ``(B, T, T)``, ``(B, H, T, T)`` with heads.

    Example:
        >>> rnn1 = nn.LSTM(32, 64, batch_first=True, bidirectional=True)
        >>> attn = SelfAttention(128, window=(20, 20))
        >>> rnn2 = nn.LSTM(128, 64, batch_first=True, bidirectional=True)
        >>> x, lengths = torch.randn(4, 50, 32), torch.tensor([50, 41, 30, 7])
        >>> h, _ = rnn1(x)
        >>> y, _ = rnn2(attn(h, lengths))
        >>> y.shape
        torch.Size([4, 50, 128])
    """

    def __init__(
        self,
        dim: int,
        out_dim: int | None = None,
        *,
        score: str = "general",
        combine: str = "concat",
        batch_first: bool = True,
        **attention: Any,
    ) -> None:
        super().__init__()
        for name in attention:
            if name not in ATTENTION_ARGS:
                raise TypeError(
                    f"{name}: not an argument of SelfAttention (it passes on "
                    f"{', '.join(ATTENTION_ARGS)} to Attention)"
                )
        self.dim = check_positive_int("dim", dim)
        self.out_dim = dim if out_dim is None else check_positive_int("out_dim", out_dim)
        if combine not in COMBINES:
            raise ValueError(f"combine: expected one of {', '.join(COMBINES)}, got {combine!r}")
        if combine == "residual" and self.out_dim != dim:
            raise ValueError(
                f"out_dim: combine='residual' adds to the input and needs out_dim == dim = {dim}, "
                f"got {self.out_dim}"
            )
        self.combine = combine
        self.batch_first = batch_first
        self.attention = Attention(dim, score=score, **attention)
        if combine == "concat":
            self.proj = Linear(2 * dim, self.out_dim)
        else:
            self.proj = Linear(dim, dim)
            self.norm = nn.LayerNorm(dim)
        self.recording = 0  # open recording_weights() blocks: every call then takes one pass

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """``(B, T, D) -> (B, T, D_out)`` (time-major if ``batch_first=False``)."""
        return self.with_weights(x, lengths, need_weights=False).context

    @contextmanager
    def recording_weights(self) -> Iterator[list[torch.Tensor]]:
        """A context in which every call records its weights ``(B, [H,] T, T)`` in the list it
        yields (:meth:`attnkit.Attention.recording_weights`): a model's self-attention maps
        from the pass that computes its outputs, and none kept outside it."""
        self.recording += 1
        try:
            with self.attention.recording_weights() as found:
                yield found
        finally:
            self.recording -= 1

    def with_weights(
        self, x: torch.Tensor, lengths: torch.Tensor | None = None, *, need_weights: bool = True
    ) -> AttentionOutput:
        """Like :meth:`forward`, also returning the weights ``(B, [H,] T, T)`` for plotting."""
        check_tensor("x", x, ndim=3)
        if not self.batch_first:
            x = x.transpose(0, 1)  # (B, T, D)
        b, t, d = x.shape
        if d != self.dim:
            raise ValueError(f"x: expected feature size dim = {self.dim}, got {describe(x)}")
        if lengths is not None:
            check_int_tensor("lengths", lengths, ndim=1)
            if lengths.shape[0] != b:
                raise ValueError(
                    f"lengths: expected shape ({b},) (batch size), got {describe(lengths)}"
                )
            lengths_to_mask(lengths, t)  # validates the values, naming "lengths"
        groups = None
        if lengths is not None and not need_weights and not self.recording and skips_padding(x):
            groups = length_groups(lengths.to(x.device), t)
        if groups is None:
            out, weights = self._attend(x, lengths, need_weights)
        else:
            assert lengths is not None  # groups come from lengths
            out, weights = self._grouped(x, lengths.to(x.device), *groups), None
        if not self.batch_first:
            out = out.transpose(0, 1)  # (T, B, D_out)
        return AttentionOutput(out, weights)

    def _attend(
        self, x: torch.Tensor, lengths: torch.Tensor | None, need_weights: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention and the combination over the padded ``x`` ``(B, T, D)``."""
        context, weights = self.attention(x, x, key_lengths=lengths, need_weights=need_weights)
        if self.combine == "concat":
            out = torch.tanh(self.proj(torch.cat([x, context], dim=-1)))  # (B, T, D_out)
        else:
            out = self.norm(x + self.proj(context))  # (B, T, D)
        if lengths is not None:
            valid = lengths_to_mask(lengths.to(x.device), x.shape[1])  # (B, T)
            out = out * valid[..., None].to(out.dtype)
        return out, weights

    def _grouped(
        self,
        x: torch.Tensor,
        lengths: torch.Tensor,
        order: torch.Tensor,
        runs: list[tuple[int, int]],
    ) -> torch.Tensor:
        """:meth:`_attend` on the rows of each of :func:`length_groups`' runs, cropped to its
        length, padded back and put in the input's row order: ``(B, T, D_out)``."""
        b, t = x.shape[:2]
        split = [n for n, _ in runs] + [b - sum(n for n, _ in runs)]  # and the rows of length 0
        identity = bool(lengths[order].equal(lengths))  # already sorted: no row copies
        ordered = x if identity else x.index_select(0, order)
        parts = ordered.split(split)  # split, not sliced: no full-size gradients
        sizes = lengths[order].split(split)
        outs = []
        for part, size, (_, length) in zip(parts, sizes, runs):
            out = self._attend(part[:, :length], size, False)[0]
            outs.append(out if length == t else F.pad(out, (0, 0, 0, t - length)))
        out = torch.cat(outs, 0)
        if out.shape[0] < b:  # rows of length 0: zero
            out = F.pad(out, (0, 0, 0, 0, 0, b - out.shape[0]))
        return out if identity else out.index_select(0, order.argsort())
