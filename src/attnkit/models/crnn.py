"""Text-line recognition: a CRNN (Shi et al. 2015) with attention between RNN1 and RNN2.

    image (B, 1, 32, W) -> CNN -> (B, T, C) with T = W // 2 -> RNN1 (BiLSTM)
        -> [SelfAttention: every step attends over the line, or a window of it]
        -> RNN2 (BiLSTM) -> (B, T, 2H) -> head

Heads: ``"ctc"`` (per-step character scores, blank = id 0, Graves et al. 2006) or
``"attention"`` (an :class:`attnkit.models.AttentionDecoder` reading the line character by
character with additive attention over the ``T`` steps; greedy or beam decoding).

Padding never changes a line's output: images are inverted (paper 0, ink 1) so padding is
blank paper, and the CNN's features past each line's width are zeroed after every block, so a
valid column sees exactly what it would see without the padding. On CPU the CNN also does no
work on the padding: it runs on the lines side by side in one image, at least two blank
columns apart (``_cnn_packed``; the padded batch is the reference, and the path taken on CUDA
and while exporting). Batch norm's training statistics are then over the lines, not the padded
batch, so in training too the padded width changes nothing. The RNNs are
:class:`attnkit.models.rnn.BiRNN` (padding-proof without packed sequences, which are many
times slower on CPU, and on CPU skipping most of the padding's steps) and the attention masks
by lengths.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.attention import SelfAttention
from attnkit.checks import check_positive_int, check_probability, quoted
from attnkit.models.decoder import AttentionDecoder
from attnkit.models.registry import Model
from attnkit.models.rnn import BiRNN, longest_first
from attnkit.ops import Linear, exporting, skips_padding

__all__ = ["CRNN"]

HEADS = ("ctc", "attention")
ATTENTION = (None, "global", "window")


class _ChannelsLast(torch.autograd.Function):
    """``x.contiguous(memory_format=torch.channels_last)`` whose backward hands back a
    contiguous (NCHW) gradient: the layers before it stay in NCHW in the backward pass too,
    instead of converting their full-resolution gradients to and from channels-last."""

    @staticmethod
    def forward(ctx, x):
        return x.contiguous(memory_format=torch.channels_last)

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous()


def _block(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class CRNN(Model, name="crnn"):
    """Convolutions, two bidirectional LSTMs and, optionally, attention between them.

    Args:
        vocab: ``V`` output ids (:class:`attnkit.data.CharVocab`; id 0 is the CTC blank).
        channels: the five conv blocks' channels; heights 32 -> 16 -> 8 -> 4 -> 2 -> 1, width
            halved once (``T = W // 2`` steps: 12.5 px per character gives ~6 steps each).
        hidden: ``H`` per direction of both LSTMs.
        attention: None (plain CRNN), ``"global"`` or ``"window"`` (``window`` steps each side).
        score, heads: of the :class:`attnkit.SelfAttention` layer (default scaled dot
            product, served by the fused kernel: no ``(T, T)`` tensor kept for backward). Its
            weights ``(B, [H,] T, T)`` are computed only inside
            ``model.attention.recording_weights()``, from the pass that reads the lines.
        head: ``"ctc"`` or ``"attention"``; dec_hidden: the attention decoder's size.
        dec_score, dec_alignment, dec_alignment_options: the attention decoder's score and
            alignment (:class:`attnkit.models.AttentionDecoder`; default the additive score's
            softmax).
        dropout: before the head.
        ctc: with ``head="attention"``, also a CTC classifier on the same features, trained
            alongside (joint CTC-attention: helps the decoder's alignment form; decoding still
            uses the attention decoder).

    Shape:
        - ``encode(images (B, 1, 32, W), widths (B,))`` -> features ``(B, T, 2H)``, steps
          ``(B,)`` with ``T = W // 2``.
        - ``forward(images, widths)`` (CTC) -> log-probs ``(B, T, V)``, steps ``(B,)``;
          ``forward(images, widths, tgt_in (B, L))`` (attention) -> logits ``(B, L, V)``,
          weights ``(B, L, T)``.

    Example:
        >>> model = CRNN(10, channels=(4, 4, 8, 8, 8), hidden=8, attention="window",
        ...              window=5).eval()
        >>> log_probs, steps = model(torch.rand(2, 1, 32, 60), torch.tensor([60, 41]))
        >>> log_probs.shape, steps.tolist()
        (torch.Size([2, 30, 10]), [30, 20])
    """

    def __init__(
        self,
        vocab: int,
        *,
        channels: tuple[int, ...] = (32, 64, 128, 128, 128),
        hidden: int = 128,
        attention: str | None = None,
        score: str = "scaled_dot",
        heads: int = 1,
        window: int = 32,
        head: str = "ctc",
        dec_hidden: int = 128,
        dropout: float = 0.1,
        ctc: bool = False,
        dec_score: str = "additive",
        dec_alignment: str = "softmax",
        dec_alignment_options: dict | None = None,
    ):
        super().__init__()
        check_positive_int("vocab", vocab)
        check_positive_int("hidden", hidden)
        check_probability("dropout", dropout)
        channels = tuple(channels)
        if len(channels) != 5 or not all(isinstance(c, int) and c > 0 for c in channels):
            raise ValueError(f"channels: expected 5 positive ints, got {quoted(channels)}")
        if attention not in ATTENTION:
            raise ValueError(
                f"attention: expected None, 'global' or 'window', got {quoted(attention)}"
            )
        if head not in HEADS:
            raise ValueError(f"head: expected one of {', '.join(HEADS)}, got {quoted(head)}")
        self.head_kind = head
        ins = (1, *channels[:-1])
        self.blocks = nn.ModuleList(_block(a, b) for a, b in zip(ins, channels))
        self.pools = nn.ModuleList([nn.MaxPool2d((2, 2))] + [nn.MaxPool2d((2, 1))] * 4)
        self.rnn1 = BiRNN(channels[-1], hidden)
        self.attention = None
        if attention is not None:
            win = None if attention == "global" else (check_positive_int("window", window),) * 2
            self.attention = SelfAttention(
                2 * hidden, score=score, heads=heads, window=win, combine="residual"
            )
        self.rnn2 = BiRNN(2 * hidden, hidden)
        self.drop = nn.Dropout(dropout)
        if ctc and head == "ctc":
            raise ValueError(
                "ctc: an auxiliary CTC head is for head='attention' (the CTC head is already CTC)"
            )
        self.aux_ctc = bool(ctc)
        if head == "ctc" and (dec_score, dec_alignment, dec_alignment_options) != (
            "additive",
            "softmax",
            None,
        ):
            raise ValueError(
                "dec_score, dec_alignment, dec_alignment_options: only for "
                "head='attention' (the CTC head has no decoder)"
            )
        if head == "ctc" or ctc:
            self.classifier = Linear(2 * hidden, vocab)
        if head == "attention":
            self.decoder = AttentionDecoder(
                vocab,
                2 * hidden,
                hidden=dec_hidden,
                emb=64,
                score=dec_score,
                dropout=dropout,
                alignment=dec_alignment,
                alignment_options=dec_alignment_options,
            )

    @staticmethod
    def steps(widths: torch.Tensor) -> torch.Tensor:
        """Steps ``T`` ``(B,)`` of lines ``widths`` ``(B,)`` px wide: the CNN halves the width
        once."""
        return widths // 2

    def encode(self, images: torch.Tensor, widths: torch.Tensor):
        """Features ``(B, T, 2H)`` and steps ``(B,)`` of padded line images."""
        if images.dim() != 4 or images.shape[1] != 1 or images.shape[2] != 32:
            raise ValueError(f"images: expected (B, 1, 32, W), got {tuple(images.shape)}")
        if widths.shape != images.shape[:1]:
            raise ValueError(
                f"widths: expected shape ({images.shape[0]},), got {tuple(widths.shape)}"
            )
        if not exporting() and (int(widths.min()) < 2 or int(widths.max()) > images.shape[3]):
            raise ValueError(
                f"widths: expected values in [2, {images.shape[3]}] (the padded "
                f"width), got {widths.tolist()}"
            )
        w = widths.to(images.device)
        packed = skips_padding(images)
        # longest first, unless the layer's weights are being recorded: they are read in the
        # batch's row order
        recording = self.attention is not None and self.attention.recording
        order = None if recording else longest_first(images, w)
        if order is not None:
            images, w = images.index_select(0, order), w[order]
        x = 1.0 - images  # paper 0, ink 1: padding is blank paper
        h = self._cnn_packed(x, w) if packed else self._cnn_padded(x, w)  # (B, T, C)
        steps = self.steps(w)
        h = self.rnn1(h, steps)
        if self.attention is not None:
            h = self.attention(h, steps)  # every step sees the line (or its window)
        feats = self.drop(self.rnn2(h, steps))  # (B, T, 2H)
        if order is not None:
            back = order.argsort()
            feats, steps = feats.index_select(0, back), steps[back]
        return feats, steps

    def _cnn_padded(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """The CNN over the padded batch ``x`` ``(B, 1, 32, W)`` (paper 0, ink 1) of lines
        ``w`` ``(B,)`` px wide: features ``(B, T, C)``, zero past each line."""
        cols = torch.arange(x.shape[3], device=x.device)
        x = x * (cols < w[:, None])[:, None, None, :]  # padding is blank paper
        for i, (block, pool) in enumerate(zip(self.blocks, self.pools)):
            x = pool(block(x))
            if i == 0:
                w = self.steps(w)
                # Channels-last (NHWC) from here on: oneDNN's preferred layout on CPU, and
                # the final (B, C, 1, T) map is then already (B, T, C) in memory.
                x = x.contiguous(memory_format=torch.channels_last)
            cols = torch.arange(x.shape[3], device=x.device)
            x = x * (cols < w[:, None])[:, None, None, :]  # (B, C, H, T): zero past the line
        return x.squeeze(2).transpose(1, 2)  # (B, T, C)

    def _cnn_packed(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """:meth:`_cnn_padded` without the padding's work: the lines side by side in one image
        ``(1, 1, 32, L)``, each in a slot of its width rounded up to even plus two blank
        columns, so every convolution sees blank paper past a line, as in the padded batch, and
        the width-halving pool pairs the same columns. The slots' blank columns are zeroed
        after every block. Same features as the padded CNN in eval mode; in training, batch
        norm's statistics are over the lines and their blank columns, not the whole padded
        batch."""
        b, width = x.shape[0], x.shape[3]
        slots = 2 * ((w + 1) // 2) + 2  # (B,): even, so slots stay aligned through the pool
        starts = slots.cumsum(0) - slots  # (B,)
        owner = torch.repeat_interleave(torch.arange(b, device=x.device), slots)  # (L,)
        col = torch.arange(owner.shape[0], device=x.device) - starts[owner]  # within its line
        source = torch.where(col < w[owner], owner * width + col, b * width)  # b * W: blank
        flat = torch.cat([x.permute(1, 2, 0, 3).reshape(32, b * width), x.new_zeros(32, 1)], 1)
        x = flat.index_select(1, source)[None, None]  # (1, 1, 32, L)
        steps = self.steps(w)
        half = torch.div(starts, 2, rounding_mode="floor")
        inside = col[::2] // 2 < steps[owner[::2]]  # (L / 2,) bool (keeps autocast's dtype)
        for i, (block, pool) in enumerate(zip(self.blocks, self.pools)):
            x = pool(block(x))
            if i == 0:
                x = _ChannelsLast.apply(x)
            x = x.mul_(inside)  # (1, C, H, L / 2): blank between the lines (in place: the
            # pool keeps its indices for backward, not its output)
        t = x.shape[3]
        rows = x.permute(0, 2, 3, 1).reshape(t, -1)  # (L / 2, C): a view of the NHWC map
        rows = torch.cat([rows, rows.new_zeros(1, rows.shape[1])])
        step = torch.arange(width // 2, device=x.device)  # (T,)
        index = torch.where(step < steps[:, None], half[:, None] + step, t)  # (B, T)
        return rows.index_select(0, index.flatten()).view(b, width // 2, -1)  # (B, T, C)

    def forward(
        self,
        images: torch.Tensor,
        widths: torch.Tensor,
        tgt_in: torch.Tensor | None = None,
        *,
        teacher_forcing: float = 1.0,
        generator: torch.Generator | None = None,
        with_ctc: bool = False,
    ):
        """CTC: ``(log_probs (B, T, V), steps (B,))``; attention head: ``(logits, weights)``
        for the teacher-forced ``tgt_in`` (see the class docstring), and with ``with_ctc``
        (the model needs ``ctc=True``) a third item ``(log_probs (B, T, V), steps (B,))`` from
        the auxiliary CTC head on the same features."""
        feats, steps = self.encode(images, widths)
        if self.head_kind == "ctc":
            return F.log_softmax(self.classifier(feats), dim=-1), steps
        if tgt_in is None:
            raise ValueError("tgt_in: the attention head needs the target input (BOS + text)")
        if with_ctc and not self.aux_ctc:
            raise ValueError("with_ctc: this model was built without a CTC head (ctc=False)")
        logits, weights = self.decoder(
            feats, steps, tgt_in, teacher_forcing=teacher_forcing, generator=generator
        )
        if not with_ctc:
            return logits, weights
        return logits, weights, (F.log_softmax(self.classifier(feats), dim=-1), steps)

    # ------------------------------------------------------------------ decoding interface

    def start(self, images: torch.Tensor, widths: torch.Tensor) -> dict:
        """Attention head: encode and return the decoder's state."""
        feats, steps = self.encode(images, widths)
        return self.decoder.start(feats, steps)

    def step(self, tokens: torch.Tensor, state: dict):
        """Attention head: tokens ``(N,)`` -> log-probs ``(N, V)``, state, weights ``(N, T)``."""
        return self.decoder.step(tokens, state)

    @property
    def has_ctc(self) -> bool:
        """True for the attention head with an auxiliary CTC head (joint CTC/attention
        decoding can score with it)."""
        return self.head_kind == "attention" and self.aux_ctc

    def start_joint(self, images: torch.Tensor, widths: torch.Tensor):
        """Encode once: the decoder's state, the CTC head's log-probs ``(B, T, V)`` and steps
        ``(B,)`` (for :mod:`attnkit.decoding.ctc_prefix`)."""
        if not self.has_ctc:
            raise ValueError(
                "model: joint decoding needs the attention head with an auxiliary "
                f"CTC head (ctc=True), got head={quoted(self.head_kind)}, "
                f"ctc={self.aux_ctc}"
            )
        feats, steps = self.encode(images, widths)
        return self.decoder.start(feats, steps), F.log_softmax(self.classifier(feats), -1), steps
