"""A character language model for shallow fusion in decoding (Gulcehre et al. 2015).

An embedding, stacked LSTM layers and a linear output over the characters of a recogniser's
vocabulary (the same ids: :mod:`attnkit.decoding.ctc_prefix` adds its log-probabilities to the
recogniser's). Shapes: ``B`` batch, ``U`` characters, ``V`` vocabulary, ``L`` layers, ``H``
hidden size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.checks import check_positive_int, check_probability
from attnkit.models.registry import Model
from attnkit.models.rnn import LSTM
from attnkit.ops import Linear

__all__ = ["CharLM"]


class CharLM(Model, name="char_lm"):
    """A character LSTM language model with the decoding interface.

    Args:
        vocab: ``V`` (id 0 is padding); emb: embedding size; hidden: ``H``; layers: ``L``;
        dropout: on the embeddings and between layers.

    Shape:
        - ``forward(tgt_in (B, U))`` -> logits ``(B, U, V)`` of the next character.
        - ``start(batch_size, device)`` -> state; ``step(tokens (N,), state)`` -> log-probs
          ``(N, V)``, state, ``None`` (no attention).

    Example:
        >>> lm = CharLM(10, emb=8, hidden=16)
        >>> lm(torch.ones(2, 5, dtype=torch.long)).shape
        torch.Size([2, 5, 10])
    """

    def __init__(
        self, vocab: int, *, emb: int = 64, hidden: int = 256, layers: int = 1, dropout: float = 0.0
    ):
        super().__init__()
        check_positive_int("vocab", vocab)
        check_positive_int("emb", emb)
        self.hidden = check_positive_int("hidden", hidden)
        self.layers = check_positive_int("layers", layers)
        check_probability("dropout", dropout)
        self.embed = nn.Embedding(vocab, emb, padding_idx=0)
        self.rnn = LSTM(
            emb, hidden, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0
        )
        self.drop = nn.Dropout(dropout)
        self.out = Linear(hidden, vocab)

    def forward(self, tgt_in: torch.Tensor) -> torch.Tensor:
        """Next-character logits ``(B, U, V)`` of ``tgt_in`` ``(B, U)`` (which starts with
        BOS)."""
        h, _ = self.rnn(self.drop(self.embed(tgt_in)))  # (B, U, H)
        return self.out(self.drop(h))

    def start(self, batch_size: int, device) -> dict:
        """Zero LSTM states, batch first: ``h``, ``c`` ``(B, L, H)``."""
        zeros = torch.zeros(
            batch_size, self.layers, self.hidden, device=device, dtype=self.out.weight.dtype
        )
        return {"h": zeros, "c": zeros}

    def step(self, tokens: torch.Tensor, state: dict):
        """One character: tokens ``(N,)`` -> log-probs ``(N, V)``, state, None."""
        hc = (state["h"].transpose(0, 1).contiguous(), state["c"].transpose(0, 1).contiguous())
        h, (h_n, c_n) = self.rnn(self.embed(tokens)[:, None], hc)  # (N, 1, H), (L, N, H)
        log_probs = F.log_softmax(self.out(h[:, 0]), dim=-1)
        return log_probs, {"h": h_n.transpose(0, 1), "c": c_n.transpose(0, 1)}, None
