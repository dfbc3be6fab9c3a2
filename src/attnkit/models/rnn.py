"""A bidirectional RNN over padded batches that never looks at the padding, without packing.

``nn.LSTM`` on a ``PackedSequence`` is the usual way to keep padding out of the backward
direction, but on CPU it is 10-50x slower than the same LSTM on a padded tensor (measured with
torch 2.13: ``docs/ocr.md``). :class:`BiRNN` runs two one-directional RNNs on padded tensors
instead: the forward one as is (padding comes after every valid step, so it never reaches them),
the backward one on each sequence reversed within its own length, its output reversed back.

On CPU it also skips most of the padding's work, as packing would: the rows are sorted by
length and each direction runs in a few time segments, each on the rows still inside their
sequences at its start, the state carried from one segment to the next (:func:`segment_plan`).
A batch of lengths uniform between half and all of the padded length then costs about 3/4 of
the padded run's recurrent work. On CUDA (whose recurrent kernels are bound by the number of
steps, not rows), while exporting and under ``torch.compile`` the layer runs on the padded
tensor in one call per direction; the outputs are the same either way.

Every LSTM of the models is :class:`LSTM`, an ``nn.LSTM`` that also runs under CPU bfloat16
autocast on CPUs without native bfloat16 instructions (below). The decoders' one-step cells are
:class:`GRUCell` and :class:`LSTMCell` (:func:`gru_cell`, :func:`lstm_cell`): on CPU in float32
their two matrix products run on oneDNN (:func:`attnkit.ops.linear`), not on PyTorch's
BLAS, which ``nn.GRUCell`` and ``nn.LSTMCell`` call.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.checks import quoted
from attnkit.ops import linear, skips_padding
from attnkit.ops.dense import uses_onednn
from attnkit.ops.precision import autocast_enabled

__all__ = [
    "LSTM",
    "BiRNN",
    "GRUCell",
    "LSTMCell",
    "gru_cell",
    "longest_first",
    "lstm_cell",
    "reverse_within_lengths",
    "segment_plan",
]


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
        if (
            isinstance(input, torch.Tensor)
            and input.dtype == torch.float32
            and autocast_enabled(input.device)
        ):
            input = input.to(torch.get_autocast_dtype(input.device.type))
        return super().forward(input, hx)


RNNS = {"lstm": LSTM, "gru": nn.GRU}


def _one_step_on_onednn(x: torch.Tensor, states: tuple, cell: nn.RNNCellBase) -> bool:
    """Whether a cell step computes its products with :func:`linear` on oneDNN: ``x (B, I)``
    and every state ``(B, H)``, all float32 on the CPU (:func:`uses_onednn`). Other calls
    (unbatched inputs, wrong shapes, CUDA, autocast, export) take PyTorch's own cell, which
    also gives its errors."""
    return (
        x.dim() == 2
        and x.shape[1] == cell.input_size
        and uses_onednn(x, cell.weight_ih)
        and all(
            s.dtype == torch.float32 and s.shape == (x.shape[0], cell.hidden_size) for s in states
        )
    )


def gru_cell(
    x: torch.Tensor,
    h: torch.Tensor,
    w_ih: torch.Tensor,
    w_hh: torch.Tensor,
    b_ih: torch.Tensor | None = None,
    b_hh: torch.Tensor | None = None,
) -> torch.Tensor:
    """One GRU step as ``nn.GRUCell`` computes it (Cho et al. 2014; PyTorch's gate order r, z,
    n): ``x (B, I)``, ``h (B, H)``, ``w_ih (3H, I)``, ``w_hh (3H, H)``, biases ``(3H,)`` ->
    ``h' (B, H)``, with ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))`` and
    ``h' = (1 - z) * n + z * h``. The two products go through :func:`linear`."""
    i_r, i_z, i_n = linear(x, w_ih, b_ih).chunk(3, dim=1)
    h_r, h_z, h_n = linear(h, w_hh, b_hh).chunk(3, dim=1)
    r = torch.sigmoid(i_r + h_r)
    z = torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return n + z * (h - n)


def lstm_cell(
    x: torch.Tensor,
    state: tuple[torch.Tensor, torch.Tensor],
    w_ih: torch.Tensor,
    w_hh: torch.Tensor,
    b_ih: torch.Tensor | None = None,
    b_hh: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One LSTM step as ``nn.LSTMCell`` computes it (Hochreiter and Schmidhuber 1997; gate
    order i, f, g, o): ``x (B, I)``, ``state = (h, c)`` each ``(B, H)``, ``w_ih (4H, I)``,
    ``w_hh (4H, H)``, biases ``(4H,)`` -> ``(h', c')``. The two products go through
    :func:`linear`."""
    h, c = state
    i, f, g, o = (linear(x, w_ih, b_ih) + linear(h, w_hh, b_hh)).chunk(4, dim=1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


class GRUCell(nn.GRUCell):
    """``nn.GRUCell`` (same arguments, parameters and state dict) computing :func:`gru_cell`
    on CPU in float32, 1.3-2x faster there; elsewhere ``nn.GRUCell`` itself.

    Shape: ``input (B, I)``, ``hx (B, H)`` or None (zeros) -> ``(B, H)``.
    """

    def forward(self, input, hx=None):
        if hx is None and input.dim() == 2:
            hx = input.new_zeros(input.shape[0], self.hidden_size)
        if hx is None or not _one_step_on_onednn(input, (hx,), self):
            return super().forward(input, hx)
        return gru_cell(input, hx, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)


class LSTMCell(nn.LSTMCell):
    """``nn.LSTMCell`` (same arguments, parameters and state dict) computing :func:`lstm_cell`
    on CPU in float32, 1.3-2x faster there; elsewhere ``nn.LSTMCell`` itself.

    Shape: ``input (B, I)``, ``hx = (h, c)`` each ``(B, H)`` or None (zeros) -> ``(h', c')``.
    """

    def forward(self, input, hx=None):
        if hx is None and input.dim() == 2:
            zeros = input.new_zeros(input.shape[0], self.hidden_size)
            hx = (zeros, zeros)
        if hx is None or not _one_step_on_onednn(input, tuple(hx), self):
            return super().forward(input, hx)
        return lstm_cell(
            input, tuple(hx), self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh
        )


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


def segment_plan(lengths: torch.Tensor, segments: int = 4):
    """How to run a recurrent layer over a batch of ``lengths`` ``(B,)`` in a few time segments.

    Rows go by decreasing length (``order`` ``(B,)``). The segments end at the shortest length
    and at the lengths of the sorted rows ``0, B / segments, 2 B / segments, ...``; a segment
    runs the sorted rows still inside their sequences at its start (a prefix: ``rows[k]`` of
    them), so each segment's padding work is at most that of the ``B / segments`` rows ending
    inside it. When that saves less than a tenth of the padded ``B x max(lengths)`` steps, the
    plan is one segment of all rows.

    Returns ``order``, ``ends`` (increasing end steps, the last ``max(lengths)``) and ``rows``
    (one count per segment, non-increasing).

    Example:
        >>> order, ends, rows = segment_plan(torch.tensor([3, 8, 5, 8]), segments=2)
        >>> order.tolist(), ends, rows
        ([1, 3, 2, 0], [3, 5, 8], [4, 3, 2])
    """
    ordered, order = lengths.sort(descending=True, stable=True)
    sizes = ordered.tolist()
    b = len(sizes)
    if b == 0:
        return order, [], []
    ends = sorted({sizes[-1], *(sizes[(b * j) // segments] for j in range(segments))} - {0})
    rows, start = [], 0
    for end in ends:
        rows.append(sum(n > start for n in sizes))
        start = end
    longest = ends[-1] if ends else 0
    work = sum(n * (end - start) for n, start, end in zip(rows, [0, *ends], ends))
    if len(ends) > 1 and work > 0.9 * b * longest:
        ends, rows = [longest], [b]
    return order, ends, rows


def longest_first(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor | None:
    """The row order ``(B,)`` by decreasing length (stable) for a model to sort its batch by
    once, so that each :class:`BiRNN` and self-attention layer after it copies no rows; None
    when the rows are already in that order or the layers run padded
    (:func:`skips_padding`)."""
    if not skips_padding(x):
        return None
    order = lengths.argsort(descending=True, stable=True)
    return None if bool(lengths[order].equal(lengths)) else order


def _run_segments(
    rnn: nn.Module, x: torch.Tensor, ends: list[int], rows: list[int]
) -> torch.Tensor:
    """``rnn`` (one direction, batch first) over ``x`` ``(B, T, D)`` whose rows are sorted by
    decreasing length, in the segments of :func:`segment_plan`: ``(B, ends[-1], H)``, zero for
    the rows a segment does not run."""
    # split, not slices of x: a slice's backward fills a gradient of x's full size
    chunks = x[:, : ends[-1]].split([end - start for start, end in zip([0, *ends], ends)], dim=1)
    outs, state = [], None
    for chunk, n in zip(chunks, rows):
        if state is not None:  # the rows still running are the first n
            state = tuple(s[:, :n] for s in state) if isinstance(state, tuple) else state[:, :n]
        y, state = rnn(chunk[:n], state)
        outs.append(y if n == x.shape[0] else F.pad(y, (0, 0, 0, 0, 0, x.shape[0] - n)))
    return outs[0] if len(outs) == 1 else torch.cat(outs, 1)


class BiRNN(nn.Module):
    """Bidirectional LSTM/GRU layer over ``(B, T, D)`` with lengths; outputs past a sequence's
    length are zero, and nothing past it changes the outputs before it.

    Args:
        input_size: ``D``; hidden: ``H`` per direction; kind: ``"lstm"`` or ``"gru"``.
        segments: on CPU, run each direction in up to ``segments + 1`` time segments that skip
            most of the padding's work (:func:`segment_plan`); 1 runs the padded tensor.

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

    def __init__(self, input_size: int, hidden: int, *, kind: str = "lstm", segments: int = 4):
        super().__init__()
        if kind not in RNNS:
            raise ValueError(f"kind: expected one of {', '.join(RNNS)}, got {quoted(kind)}")
        if not isinstance(segments, int) or isinstance(segments, bool) or segments < 1:
            raise ValueError(f"segments: expected a positive int, got {quoted(segments)}")
        self.segments = segments
        self.fwd = RNNS[kind](input_size, hidden, batch_first=True)
        self.bwd = RNNS[kind](input_size, hidden, batch_first=True)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        if self.segments > 1 and skips_padding(x):
            order, ends, rows = segment_plan(lengths.to(x.device), self.segments)
            if ends:  # else every length is 0: the padded run gives zeros with gradients
                return self._segmented(x, lengths.to(x.device), order, ends, rows)
        valid = torch.arange(x.shape[1], device=x.device) < lengths.to(x.device)[:, None]
        valid = valid[..., None].to(x.dtype)  # (B, T, 1)
        forward, _ = self.fwd(x)  # (B, T, H): step t sees steps <= t only
        backward, _ = self.bwd(reverse_within_lengths(x, lengths))
        backward = reverse_within_lengths(backward, lengths)  # (B, T, H)
        return torch.cat([forward, backward], dim=-1) * valid

    def _segmented(
        self,
        x: torch.Tensor,
        lengths: torch.Tensor,
        order: torch.Tensor,
        ends: list[int],
        rows: list[int],
    ) -> torch.Tensor:
        t, longest = x.shape[1], ends[-1]
        ordered = lengths[order]  # (B,), decreasing
        identity = bool(ordered.equal(lengths))  # already sorted: no row copies
        xs = (x if identity else x.index_select(0, order))[:, :longest]  # (B, T', D)
        forward = _run_segments(self.fwd, xs, ends, rows)
        backward = _run_segments(self.bwd, reverse_within_lengths(xs, ordered), ends, rows)
        backward = reverse_within_lengths(backward, ordered)
        valid = torch.arange(longest, device=x.device) < ordered[:, None]  # (B, T')
        out = torch.cat([forward, backward], dim=-1)  # a new tensor: zeroed in place
        out = out.masked_fill_(~valid[..., None], 0.0)
        if not identity:
            out = out.index_select(0, order.argsort())  # back to the input's row order
        return out if longest == t else F.pad(out, (0, 0, 0, t - longest))  # F.pad always copies
