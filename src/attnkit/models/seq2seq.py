"""RNN encoder-decoders: Bahdanau (2015), Luong (2015) and a no-attention baseline.

Shapes: ``S`` source steps, ``T`` target steps, ``V`` target vocabulary, ``H`` decoder hidden
size, ``E = 2 * encoder hidden`` (bidirectional encoder).

* **Bahdanau**: ``c_i = attention(s_{i-1}, h)`` with the additive score, then
  ``s_i = GRU([y_{i-1}; c_i], s_{i-1})`` and ``logits_i = W [s_i; c_i; y_{i-1}]``.
* **Luong**: ``s_i = GRU(y_{i-1} [; h~_{i-1}], s_{i-1})``, ``c_i = attention(s_i, h)`` (dot,
  general or additive/"concat"), ``h~_i = tanh(W_c [c_i; s_i])``, ``logits_i = W_s h~_i``.
  Without input feeding, teacher-forced training runs the GRU over the whole target at once and
  attends for all steps in one call.
* **none**: ``s_i = GRU([y_{i-1}; h_final], s_{i-1})`` (Cho et al. 2014): the decoder sees the
  source only through the encoder's final state.

One :class:`Encoder` (embedding + bidirectional GRU) serves every kind; each kind is one
decoder class (:class:`BahdanauDecoder`, :class:`LuongDecoder`, :class:`PlainDecoder`) with
``start(outputs, final, src_len) -> state`` and ``step(tokens, state) -> (logits, state,
weights)``. :class:`Seq2Seq` joins the two and exposes ``start(src, src_len) -> state`` and
``step(tokens, state) -> (log_probs, state, weights)`` for :mod:`attnkit.decoding`.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.attention import Attention
from attnkit.checks import check_positive_int, quoted
from attnkit.models.registry import Model
from attnkit.models.rnn import BiRNN, GRUCell, gru_cell
from attnkit.models.unrolling import unroll
from attnkit.ops import Linear
from attnkit.ops.dense import uses_onednn

__all__ = ["KINDS", "BahdanauDecoder", "Encoder", "LuongDecoder", "PlainDecoder", "Seq2Seq"]


class Encoder(nn.Module):
    """Embedding + bidirectional GRU layers over padded sequences (:class:`BiRNN`: equal to
    packing, without its cost on CPU).

    Shape:
        src ``(B, S)`` ints, lengths ``(B,)`` -> outputs ``(B, S, 2 * hidden)`` (zero past each
        length) and final ``(B, 2 * hidden)`` (the last layer's forward state at the last
        valid step and backward state at the first).
    """

    def __init__(self, vocab: int, emb: int, hidden: int, layers: int = 1, dropout: float = 0.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb, padding_idx=0)
        self.rnns = nn.ModuleList(
            BiRNN(emb if i == 0 else 2 * hidden, hidden, kind="gru") for i in range(layers)
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, src: torch.Tensor, lengths: torch.Tensor):
        lengths = lengths.to(src.device).clamp(min=1)
        x = self.dropout(self.embed(src))  # (B, S, emb)
        for i, rnn in enumerate(self.rnns):
            x = rnn(self.dropout(x) if i else x, lengths)  # (B, S, 2H)
        hidden = x.shape[-1] // 2
        last = (lengths - 1)[:, None, None].expand(-1, 1, hidden)  # (B, 1, H)
        final = torch.cat([x[..., :hidden].gather(1, last)[:, 0], x[:, 0, hidden:]], dim=-1)
        return x, final  # (B, S, 2H), (B, 2H)


class _Decoder(nn.Module):
    """What every decoder kind shares: the target embedding, the initial state
    ``s_0 = tanh(W final)`` and dropout; teacher-forced training unrolls :meth:`step`."""

    def __init__(self, tgt_vocab: int, emb: int, hidden: int, enc: int, dropout: float):
        super().__init__()
        self.embed = nn.Embedding(tgt_vocab, emb, padding_idx=0)
        self.init = Linear(enc, hidden)
        self.dropout = nn.Dropout(dropout)

    def start(self, outputs: torch.Tensor, final: torch.Tensor, src_len: torch.Tensor) -> dict:
        return {"h": torch.tanh(self.init(final)), "src_len": src_len.to(outputs.device)}

    def forward(
        self,
        state: dict,
        tgt_in: torch.Tensor,
        *,
        teacher_forcing: float = 1.0,
        generator: torch.Generator | None = None,
    ):
        """Logits ``(B, T, V)`` and weights ``(B, T, S)`` (or None) for ``tgt_in (B, T)``."""
        return unroll(
            self.step, state, tgt_in, teacher_forcing=teacher_forcing, generator=generator
        )


class BahdanauDecoder(_Decoder):
    """``c_i = attention(s_{i-1}, h)`` (additive), ``s_i = GRU([y_{i-1}; c_i], s_{i-1})``,
    ``logits_i = W [s_i; c_i; y_{i-1}]`` (Bahdanau et al. 2015)."""

    def __init__(
        self,
        tgt_vocab: int,
        emb: int,
        hidden: int,
        enc: int,
        *,
        attn_dim: int | None = None,
        dropout: float = 0.0,
    ):
        super().__init__(tgt_vocab, emb, hidden, enc, dropout)
        self.attention = Attention(hidden, enc, score="additive", attn_dim=attn_dim or hidden)
        self.cell = GRUCell(emb + enc, hidden)
        self.out = Linear(hidden + enc + emb, tgt_vocab)

    def start(self, outputs, final, src_len):
        return {**super().start(outputs, final, src_len), "memory": self.attention.prepare(outputs)}

    def step(self, tokens: torch.Tensor, state: dict):
        """Tokens ``(N,)`` -> logits ``(N, V)``, state, weights ``(N, S)``."""
        y = self.dropout(self.embed(tokens))  # (N, emb)
        ctx, w = self.attention(
            state["h"], state["memory"], key_lengths=state["src_len"], need_weights=True
        )
        h = self.cell(torch.cat([y, ctx], dim=-1), state["h"])
        logits = self.out(self.dropout(torch.cat([h, ctx, y], dim=-1)))
        return logits, {**state, "h": h}, w


class LuongDecoder(_Decoder):
    """``s_i = GRU(y_{i-1} [; h~_{i-1}], s_{i-1})``, ``c_i = attention(s_i, h)``,
    ``h~_i = tanh(W_c [c_i; s_i])``, ``logits_i = W_s h~_i`` (Luong et al. 2015).

    ``score``: "dot" (the encoder outputs are projected to ``hidden`` first), "general" or
    "additive" ("concat"). Without input feeding, teacher-forced training runs the GRU over
    the whole target at once and attends for all steps in one call.
    """

    def __init__(
        self,
        tgt_vocab: int,
        emb: int,
        hidden: int,
        enc: int,
        *,
        score: str = "general",
        input_feeding: bool = False,
        attn_dim: int | None = None,
        dropout: float = 0.0,
    ):
        super().__init__(tgt_vocab, emb, hidden, enc, dropout)
        if score not in ("dot", "general", "additive"):
            raise ValueError(
                f"score: Luong attention takes dot, general or additive, got {quoted(score)}"
            )
        self.input_feeding = input_feeding
        self.key_proj = Linear(enc, hidden, bias=False) if score == "dot" else None
        self.attention = Attention(
            hidden,
            hidden if score == "dot" else enc,
            enc,
            score=score,
            attn_dim=(attn_dim or hidden) if score == "additive" else None,  # None: the default
        )
        self.rnn = nn.GRU(emb + (hidden if input_feeding else 0), hidden, batch_first=True)
        self.combine = Linear(enc + hidden, hidden)
        self.out = Linear(hidden, tgt_vocab)

    def start(self, outputs, final, src_len):
        state = super().start(outputs, final, src_len)
        keys = outputs if self.key_proj is None else self.key_proj(outputs)
        state["memory"] = self.attention.prepare(keys, outputs)
        if self.input_feeding:
            state["feed"] = torch.zeros_like(state["h"])
        return state

    def _attend(self, s: torch.Tensor, state: dict):
        """``s`` ``(B, [T,] H)`` -> logits, ``h~`` and weights over the source."""
        ctx, w = self.attention(s, state["memory"], key_lengths=state["src_len"], need_weights=True)
        attn_h = torch.tanh(self.combine(torch.cat([ctx, s], dim=-1)))
        return self.out(self.dropout(attn_h)), attn_h, w

    def step(self, tokens: torch.Tensor, state: dict):
        """Tokens ``(N,)`` -> logits ``(N, V)``, state, weights ``(N, S)``."""
        y = self.dropout(self.embed(tokens))  # (N, emb)
        x = torch.cat([y, state["feed"]], dim=-1) if self.input_feeding else y
        # nn.GRU's per-layer weights are attributes torch's stubs do not declare
        w_ih, w_hh, b_ih, b_hh = (
            cast(torch.Tensor, getattr(self.rnn, name))
            for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
        )
        if uses_onednn(x, w_ih):  # one step of the GRU, its products on oneDNN
            h = gru_cell(x, state["h"], w_ih, w_hh, b_ih, b_hh)
        else:
            h = self.rnn(x[:, None], state["h"][None])[1][0]
        logits, attn_h, w = self._attend(h, state)
        new = {**state, "h": h}
        if self.input_feeding:
            new["feed"] = attn_h
        return logits, new, w

    def forward(self, state, tgt_in, *, teacher_forcing=1.0, generator=None):
        if self.input_feeding or teacher_forcing < 1.0:
            return super().forward(
                state, tgt_in, teacher_forcing=teacher_forcing, generator=generator
            )
        y = self.dropout(self.embed(tgt_in))  # (B, T, emb)
        s, _ = self.rnn(y, state["h"][None])  # (B, T, H): no Python loop over time
        logits, _, w = self._attend(s, state)  # (B, T, V), _, (B, T, S)
        return logits, w


class PlainDecoder(_Decoder):
    """No attention (Cho et al. 2014): ``s_i = GRU([y_{i-1}; h_final], s_{i-1})``, the source
    seen only through the encoder's final state; ``logits_i = W [s_i; y_{i-1}]``."""

    def __init__(self, tgt_vocab: int, emb: int, hidden: int, enc: int, *, dropout: float = 0.0):
        super().__init__(tgt_vocab, emb, hidden, enc, dropout)
        self.cell = GRUCell(emb + enc, hidden)
        self.out = Linear(hidden + emb, tgt_vocab)

    def start(self, outputs, final, src_len):
        return {**super().start(outputs, final, src_len), "final": final}

    def step(self, tokens: torch.Tensor, state: dict):
        """Tokens ``(N,)`` -> logits ``(N, V)``, state, None."""
        y = self.dropout(self.embed(tokens))  # (N, emb)
        h = self.cell(torch.cat([y, state["final"]], dim=-1), state["h"])
        return self.out(self.dropout(torch.cat([h, y], dim=-1))), {**state, "h": h}, None


DECODERS = {"bahdanau": BahdanauDecoder, "luong": LuongDecoder, "none": PlainDecoder}
KINDS = tuple(DECODERS)


class Seq2Seq(Model, name="seq2seq"):
    """Encoder-decoder with the decoder of ``kind`` in :data:`KINDS`.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes (id 0 is padding).
        kind: "bahdanau", "luong" or "none" (no attention).
        emb, hidden: embedding and decoder hidden sizes; the encoder's too, per direction,
            unless ``enc_hidden``.
        enc_hidden: the encoder's units per direction (default ``hidden``): ``E = 2 *
            enc_hidden``. OpenNMT-py's bidirectional encoders give each direction half the
            decoder's size (``enc_hidden = hidden / 2``); the decoder's initial state and
            the attention map ``E`` to ``hidden`` either way.
        score: Luong's attention score ("dot", "general" or "additive"); Bahdanau uses
            "additive" (ignored by "none").
        input_feeding: Luong only: feed ``h~_{i-1}`` to the next step.
        attn_dim: additive attention size (default ``hidden``).

    Shape:
        - ``forward(src (B, S), src_len (B,), tgt_in (B, T))`` -> logits ``(B, T, V)``,
          weights ``(B, T, S)`` (None for "none").
        - ``step(tokens (N,), state)`` -> log-probs ``(N, V)``, state, weights ``(N, S)``.
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        *,
        kind: str = "bahdanau",
        emb: int = 64,
        hidden: int = 128,
        score: str = "general",
        input_feeding: bool = False,
        attn_dim: int | None = None,
        dropout: float = 0.0,
        enc_hidden: int | None = None,
    ):
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {quoted(kind)}")
        enc_hidden = hidden if enc_hidden is None else check_positive_int("enc_hidden", enc_hidden)
        self.kind = kind
        self.encoder = Encoder(src_vocab, emb, enc_hidden, dropout=dropout)
        options: dict[str, Any] = {"dropout": dropout}
        if kind != "none":
            options["attn_dim"] = attn_dim
        if kind == "luong":
            options.update(score=score, input_feeding=input_feeding)
        self.decoder = DECODERS[kind](tgt_vocab, emb, hidden, 2 * enc_hidden, **options)

    # ------------------------------------------------------------------ decoding interface

    def start(self, src: torch.Tensor, src_len: torch.Tensor) -> dict:
        """Encode; returns the decoder state (tensors with batch first)."""
        outputs, final = self.encoder(src, src_len)
        return self.decoder.start(outputs, final, src_len)

    def step(self, tokens: torch.Tensor, state: dict):
        """One output step: tokens ``(N,)`` -> log-probs ``(N, V)``, new state, weights
        ``(N, S)`` (None for the no-attention model)."""
        logits, state, weights = self.decoder.step(tokens, state)
        return F.log_softmax(logits, dim=-1), state, weights

    # ------------------------------------------------------------------ training

    def forward(
        self,
        src: torch.Tensor,
        src_len: torch.Tensor,
        tgt_in: torch.Tensor,
        *,
        teacher_forcing: float = 1.0,
        generator: torch.Generator | None = None,
    ):
        """Logits ``(B, T, V)`` and attention weights ``(B, T, S)`` (None for "none").

        ``tgt_in`` ``(B, T)`` starts with BOS. With ``teacher_forcing < 1`` each example feeds
        back its own greedy prediction at a step with probability ``1 - teacher_forcing``.
        """
        return self.decoder(
            self.start(src, src_len), tgt_in, teacher_forcing=teacher_forcing, generator=generator
        )
