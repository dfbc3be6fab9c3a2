"""A self-attention layer that drops in between two RNN layers, e.g. of a CRNN."""

from __future__ import annotations

from contextlib import AbstractContextManager

import torch
from torch import nn

from attnkit.checks import (
    check_int_tensor,
    check_positive_int,
    check_tensor,
    describe,
)
from attnkit.attention.core import AttentionOutput
from attnkit.attention.masks import lengths_to_mask
from attnkit.attention.module import Attention

__all__ = ["ATTENTION_ARGS", "SelfAttention"]

COMBINES = ("concat", "residual")
# The keyword arguments SelfAttention passes on to its Attention.
ATTENTION_ARGS = ("attn_dim", "heads", "head_dim", "window", "causal", "dropout", "impl")


class SelfAttention(nn.Module):
    """Every step of a sequence attends over the whole (or a window of the) same sequence.

    With ``combine="concat"`` (default) the output is the attentional hidden state of Luong et
    al. 2015 (eq. 5), ``out_t = tanh(W [x_t; c_t])``, computed for all steps at once; with
    ``combine="residual"`` it is ``LayerNorm(x_t + W c_t)``. Steps beyond a sequence's length
    are neither attended to nor output (their output is zero).

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
        **attention,
    ):
        super().__init__()
        for name in attention:
            if name not in ATTENTION_ARGS:
                raise TypeError(f"{name}: not an argument of SelfAttention (it passes on "
                                f"{', '.join(ATTENTION_ARGS)} to Attention)")
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
            self.proj = nn.Linear(2 * dim, self.out_dim)
        else:
            self.proj = nn.Linear(dim, dim)
            self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """``(B, T, D) -> (B, T, D_out)`` (time-major if ``batch_first=False``)."""
        return self.with_weights(x, lengths, need_weights=False).context

    def recording_weights(self) -> AbstractContextManager[list[torch.Tensor]]:
        """A context in which every call records its weights ``(B, [H,] T, T)`` in the list it
        yields (:meth:`attnkit.Attention.recording_weights`): a model's self-attention maps
        from the pass that computes its outputs, and none kept outside it."""
        return self.attention.recording_weights()

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
                raise ValueError(f"lengths: expected shape ({b},) (batch size), got {describe(lengths)}")
            lengths_to_mask(lengths, t)  # validates the values, naming "lengths"
        context, weights = self.attention(x, x, key_lengths=lengths, need_weights=need_weights)
        if self.combine == "concat":
            out = torch.tanh(self.proj(torch.cat([x, context], dim=-1)))  # (B, T, D_out)
        else:
            out = self.norm(x + self.proj(context))  # (B, T, D)
        if lengths is not None:
            valid = lengths_to_mask(lengths.to(x.device), t)  # (B, T)
            out = out * valid[..., None].to(out.dtype)
        if not self.batch_first:
            out = out.transpose(0, 1)  # (T, B, D_out)
        return AttentionOutput(out, weights)
