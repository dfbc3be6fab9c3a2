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

Every model exposes ``start(src, src_len) -> state`` and
``step(tokens, state) -> (log_probs, state, weights)`` for :mod:`attnkit.decoding`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnkit.attention import Attention
from attnkit.models.unroll import unroll

__all__ = ["Encoder", "Seq2Seq", "KINDS"]

KINDS = ("bahdanau", "luong", "none")


class Encoder(nn.Module):
    """Embedding + bidirectional GRU over packed sequences.

    Shape:
        src ``(B, S)`` ints, lengths ``(B,)`` -> outputs ``(B, S, 2 * hidden)`` (zero past each
        length) and final ``(B, 2 * hidden)`` (last forward and first backward states).
    """

    def __init__(self, vocab: int, emb: int, hidden: int, layers: int = 1, dropout: float = 0.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb, padding_idx=0)
        self.rnn = nn.GRU(emb, hidden, num_layers=layers, batch_first=True, bidirectional=True,
                          dropout=dropout if layers > 1 else 0.0)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src: torch.Tensor, lengths: torch.Tensor):
        x = self.dropout(self.embed(src))  # (B, S, emb)
        packed = pack_padded_sequence(x, lengths.cpu().clamp(min=1), batch_first=True,
                                      enforce_sorted=False)
        out, h = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        final = torch.cat([h[-2], h[-1]], dim=-1)  # (B, 2H): last layer, both directions
        return out, final


class Seq2Seq(nn.Module):
    """Encoder-decoder with ``kind`` in :data:`KINDS`.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes (id 0 is padding).
        emb, hidden: embedding and (encoder and decoder) hidden sizes.
        score: Luong's attention score ("dot", "general" or "additive"); Bahdanau uses
            "additive" (ignored by "none").
        input_feeding: Luong only: feed ``h~_{i-1}`` to the next step.
        attn_dim: additive attention size (default ``hidden``).
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, *, kind: str = "bahdanau", emb: int = 64,
                 hidden: int = 128, score: str = "general", input_feeding: bool = False,
                 attn_dim: int | None = None, dropout: float = 0.0):
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
        if kind == "luong" and score not in ("dot", "general", "additive"):
            raise ValueError(f"score: Luong attention takes dot, general or additive, "
                             f"got {score!r}")
        self.kind, self.input_feeding = kind, input_feeding and kind == "luong"
        self.encoder = Encoder(src_vocab, emb, hidden, dropout=dropout)
        enc = 2 * hidden
        self.embed = nn.Embedding(tgt_vocab, emb, padding_idx=0)
        self.init = nn.Linear(enc, hidden)
        self.dropout = nn.Dropout(dropout)
        if kind == "bahdanau":
            self.attention = Attention(hidden, enc, score="additive", attn_dim=attn_dim or hidden)
            self.cell = nn.GRUCell(emb + enc, hidden)
            self.out = nn.Linear(hidden + enc + emb, tgt_vocab)
        elif kind == "luong":
            score_kw = {"attn_dim": attn_dim or hidden} if score == "additive" else {}
            if score == "dot":
                self.key_proj = nn.Linear(enc, hidden, bias=False)  # dot needs Dq == Dk
            self.attention = Attention(hidden, hidden if score == "dot" else enc, enc,
                                       score=score, **score_kw)
            self.rnn = nn.GRU(emb + (hidden if self.input_feeding else 0), hidden,
                              batch_first=True)
            self.combine = nn.Linear(enc + hidden, hidden)
            self.out = nn.Linear(hidden, tgt_vocab)
        else:
            self.cell = nn.GRUCell(emb + enc, hidden)
            self.out = nn.Linear(hidden + emb, tgt_vocab)

    # ------------------------------------------------------------------ decoding interface

    def start(self, src: torch.Tensor, src_len: torch.Tensor) -> dict:
        """Encode; returns the decoder state (tensors with batch first)."""
        enc, final = self.encoder(src, src_len)
        state = {"h": torch.tanh(self.init(final)), "src_len": src_len.to(src.device)}
        if self.kind == "none":
            state["final"] = final
            return state
        keys = self.key_proj(enc) if getattr(self, "key_proj", None) is not None else enc
        state["memory"] = self.attention.prepare(keys, enc)
        if self.input_feeding:
            state["feed"] = torch.zeros_like(state["h"])
        return state

    def step(self, tokens: torch.Tensor, state: dict):
        """One output step: tokens ``(N,)`` -> log-probs ``(N, V)``, new state, weights
        ``(N, S)`` (None for the no-attention model)."""
        logits, state, weights = self._step(tokens, state)
        return F.log_softmax(logits, dim=-1), state, weights

    def _step(self, tokens, state):
        y = self.dropout(self.embed(tokens))  # (N, emb)
        h = state["h"]
        if self.kind == "bahdanau":
            ctx, w = self.attention(h, state["memory"], key_lengths=state["src_len"],
                                    need_weights=True)
            h = self.cell(torch.cat([y, ctx], dim=-1), h)
            logits = self.out(self.dropout(torch.cat([h, ctx, y], dim=-1)))
            return logits, {**state, "h": h}, w
        if self.kind == "none":
            h = self.cell(torch.cat([y, state["final"]], dim=-1), h)
            return self.out(self.dropout(torch.cat([h, y], dim=-1))), {**state, "h": h}, None
        x = torch.cat([y, state["feed"]], dim=-1) if self.input_feeding else y
        out, h1 = self.rnn(x[:, None], h[None])
        h = h1[0]
        ctx, w = self.attention(h, state["memory"], key_lengths=state["src_len"],
                                need_weights=True)
        attn_h = torch.tanh(self.combine(torch.cat([ctx, h], dim=-1)))
        new = {**state, "h": h}
        if self.input_feeding:
            new["feed"] = attn_h
        return self.out(self.dropout(attn_h)), new, w

    # ------------------------------------------------------------------ training

    def forward(self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor, *,
                teacher_forcing: float = 1.0, generator: torch.Generator | None = None):
        """Logits ``(B, T, V)`` and attention weights ``(B, T, S)`` (None for "none").

        ``tgt_in`` ``(B, T)`` starts with BOS. With ``teacher_forcing < 1`` each example feeds
        back its own greedy prediction at a step with probability ``1 - teacher_forcing``.
        """
        state = self.start(src, src_len)
        if self.kind == "luong" and not self.input_feeding and teacher_forcing >= 1.0:
            return self._luong_all_at_once(tgt_in, state)
        return unroll(self._step, state, tgt_in, teacher_forcing=teacher_forcing,
                      generator=generator)

    def _luong_all_at_once(self, tgt_in, state):
        y = self.dropout(self.embed(tgt_in))  # (B, T, emb)
        out, _ = self.rnn(y, state["h"][None])  # (B, T, H): no Python loop over time
        ctx, w = self.attention(out, state["memory"], key_lengths=state["src_len"],
                                need_weights=True)  # (B, T, E), (B, T, S)
        attn_h = torch.tanh(self.combine(torch.cat([ctx, out], dim=-1)))
        return self.out(self.dropout(attn_h)), w
