"""A bidirectional RNN over padded batches that never looks at the padding, without packing.

``nn.LSTM`` on a ``PackedSequence`` is the usual way to keep padding out of the backward
direction, but on CPU it is 10-50x slower than the same LSTM on a padded tensor (measured with
torch 2.13: ``docs/ocr.md``). :class:`BiRNN` runs two one-directional RNNs on padded tensors
instead: the forward one as is (padding comes after every valid step, so it never reaches them),
the backward one on each sequence reversed within its own length, its output reversed back.

Every LSTM of the models is :class:`LSTM`, an ``nn.LSTM`` that also runs under CPU bfloat16
autocast on CPUs without native bfloat16 instructions (below).
"""

from __future__ import annotations

import torch
from torch import nn

from attnkit.attention.precision import autocast_enabled

__all__ = ["LSTM", "BiRNN", "reverse_within_lengths"]


class LSTM(nn.LSTM):
    """``nn.LSTM`` (same arguments, weights and outputs) that takes a float32 input under
    ``torch.autocast`` on any CPU.

    Under CPU bfloat16 autocast, torch 2.13's oneDNN LSTM fails ("could not create a primitive
    descriptor for the LSTM forward propagation primitive") when its input is float32 on a CPU
    without AVX-512 BF16 (an AVX2 AMD EPYC, measured), and runs when the input is already
    bfloat16. A float32 input (features, an embedding's output) is therefore cast to autocast's
    dtype first, as autocast itself would cast it; the LSTM's outputs are those of autocast.

    Shape: as ``nn.LSTM``.
    """

    def forward(self, input, hx=None):
        if isinstance(input, torch.Tensor) and input.dtype == torch.float32 \
                and autocast_enabled(input.device):
            input = input.to(torch.get_autocast_dtype(input.device.type))
        return super().forward(input, hx)


RNNS = {"lstm": LSTM, "gru": nn.GRU}


def reverse_within_lengths(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse the first ``lengths[b]`` steps of each ``x[b]`` ``(B, T, D)``; the rest stays.

    The steps are picked as whole rows of ``x`` viewed as ``(B * T, D)`` (``index_select``,
    whose backward adds rows): 3-4x faster forward and backward on CPU than ``gather`` with
    an index of ``x``'s full size."""
    b, t = x.shape[:2]
    steps = torch.arange(t, device=x.device)  # (T,)
    n = lengths.to(x.device)[:, None]  # (B, 1)
    index = torch.where(steps < n, n - 1 - steps, steps)  # (B, T)
    rows = index + t * torch.arange(b, device=x.device)[:, None]  # into (B * T, D)
    return x.reshape(b * t, *x.shape[2:]).index_select(0, rows.flatten()).view_as(x)


class BiRNN(nn.Module):
    """Bidirectional LSTM/GRU layer over ``(B, T, D)`` with lengths; outputs past a sequence's
    length are zero, and nothing past it changes the outputs before it.

    Args:
        input_size: ``D``; hidden: ``H`` per direction; kind: ``"lstm"`` or ``"gru"``.

    Shape:
        ``forward(x (B, T, D), lengths (B,))`` -> ``(B, T, 2H)`` (forward then backward).

    Example:
        >>> rnn = BiRNN(4, 3)
        >>> x, lengths = torch.randn(2, 6, 4), torch.tensor([6, 2])
        >>> out = rnn(x, lengths)
        >>> out.shape, bool(out[1, 2:].eq(0).all())
        (torch.Size([2, 6, 6]), True)
        >>> torch.allclose(out[1, :2], rnn(x[1:, :2], lengths[1:])[0], atol=1e-6)
        True
    """

    def __init__(self, input_size: int, hidden: int, *, kind: str = "lstm"):
        super().__init__()
        if kind not in RNNS:
            raise ValueError(f"kind: expected one of {', '.join(RNNS)}, got {kind!r}")
        self.fwd = RNNS[kind](input_size, hidden, batch_first=True)
        self.bwd = RNNS[kind](input_size, hidden, batch_first=True)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        valid = (torch.arange(x.shape[1], device=x.device) < lengths.to(x.device)[:, None])
        valid = valid[..., None].to(x.dtype)  # (B, T, 1)
        forward, _ = self.fwd(x)  # (B, T, H): step t sees steps <= t only
        backward, _ = self.bwd(reverse_within_lengths(x, lengths))
        backward = reverse_within_lengths(backward, lengths)  # (B, T, H)
        return torch.cat([forward, backward], dim=-1) * valid
