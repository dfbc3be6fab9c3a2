"""Visual question answering: a stacked attention network (Yang et al. 2016), and a baseline
without attention, over the same image grid and question encoder.

    image (B, 3, S, S) -> GridEncoder -> a (B, L, D) -> v_i = tanh(W_I a_i + b_I)   (B, L, 2H)
    question (B, T) -> embeddings -> BiRNN -> u_0 = [forward state at the last word;
                                                     backward state at the first]     (B, 2H)
    "san":  for each hop k = 1..K:
                c_k, p_k = attention_k(u_{k-1}, v)     attnkit.Attention, additive score:
                                                       p_k = softmax_i(w_k . tanh(W_k u + U_k v_i))
                u_k = u_{k-1} + c_k                    the refined query
            answer scores = W_u u_K
    "none": the grid flattened (each cell reduced to a few features, so that where things are
            is kept, as in the CNN+MLP baseline of Santoro et al. 2017) and concatenated with
            u_0 -> MLP -> answer scores

Answers are classes (one id per answer seen in training). Shapes: ``L`` grid cells, ``T``
question words, ``A`` answers, ``K`` hops.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from attnkit.attention import Attention
from attnkit.checks import check_int_tensor, check_positive_int, check_probability
from attnkit.models.grid import GridEncoder
from attnkit.models.registry import Model
from attnkit.models.rnn import BiRNN
from attnkit.tokens import PAD

__all__ = ["KINDS", "VQA", "VQAOutput"]

KINDS = ("san", "none")


class VQAOutput(NamedTuple):
    """Answer scores ``logits (B, A)`` and each hop's attention ``weights (B, K, L)`` (None
    for the baseline)."""

    logits: torch.Tensor
    weights: torch.Tensor | None


class VQA(Model, name="vqa"):
    """A stacked attention network, or the baseline without attention (see the module
    docstring).

    Args:
        words: question vocabulary size (:class:`attnkit.data.WordVocab`; id 0 is padding).
        answers: ``A``, the answer classes.
        image_size, channels: the grid encoder's (:class:`attnkit.models.grid.GridEncoder`).
        kind: ``"san"`` or ``"none"``; hops: ``K`` attention hops of ``"san"`` (2 in the paper).
        emb: word embeddings; hidden: ``H`` per direction of the question's BiLSTM (the
            query, the image regions and the answer layer have ``2H`` features);
            attn_dim: the additive score's hidden size.
        cell_features: ``"none"``: features kept per grid cell before flattening.
        dropout: before the answer layer.

    Shape:
        ``forward(images (B, 3, S, S), questions (B, T), lengths (B,))`` -> :class:`VQAOutput`.

    Example:
        >>> model = VQA(10, 5, image_size=16, channels=(4, 8), emb=8, hidden=8, attn_dim=8)
        >>> out = model(torch.rand(2, 3, 16, 16), torch.ones(2, 4, dtype=torch.long),
        ...             torch.tensor([4, 2]))
        >>> out.logits.shape, out.weights.shape
        (torch.Size([2, 5]), torch.Size([2, 2, 16]))
    """

    def __init__(self, words: int, answers: int, *, image_size: int = 64,
                 channels: tuple[int, ...] = (32, 64, 128), kind: str = "san", hops: int = 2,
                 emb: int = 64, hidden: int = 128, attn_dim: int = 128, cell_features: int = 16,
                 dropout: float = 0.0):
        super().__init__()
        for name, value in (("words", words), ("answers", answers), ("emb", emb),
                            ("hidden", hidden), ("attn_dim", attn_dim),
                            ("cell_features", cell_features)):
            check_positive_int(name, value)
        check_probability("dropout", dropout)
        if kind not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
        if kind == "san":
            check_positive_int("hops", hops)
        self.kind, self.hops = kind, hops if kind == "san" else 0
        self.encoder = GridEncoder(image_size, tuple(channels))
        d = 2 * hidden
        self.embed = nn.Embedding(words, emb, padding_idx=PAD)
        self.rnn = BiRNN(emb, hidden)
        self.hidden = hidden
        if kind == "san":
            self.regions = nn.Sequential(nn.Linear(self.encoder.dim, d), nn.Tanh())
            self.attention = nn.ModuleList(Attention(d, d, d, score="additive", attn_dim=attn_dim)
                                           for _ in range(hops))
            self.answer = nn.Sequential(nn.Dropout(dropout), nn.Linear(d, answers))
        else:
            self.cells = nn.Linear(self.encoder.dim, cell_features)
            flat = self.encoder.side ** 2 * cell_features
            self.answer = nn.Sequential(nn.Linear(flat + d, d), nn.ReLU(), nn.Dropout(dropout),
                                        nn.Linear(d, answers))

    def question(self, questions: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``u_0`` ``(B, 2H)`` of questions ``(B, T)`` with ``lengths`` ``(B,)``."""
        check_int_tensor("questions", questions, ndim=2)
        check_int_tensor("lengths", lengths, ndim=1)
        if lengths.shape[0] != questions.shape[0] or int(lengths.min()) < 1 \
                or int(lengths.max()) > questions.shape[1]:
            raise ValueError(f"lengths: expected {questions.shape[0]} lengths in [1, "
                             f"{questions.shape[1]}], got {lengths.tolist()}")
        states = self.rnn(self.embed(questions), lengths)  # (B, T, 2H)
        last = states[torch.arange(len(lengths)), lengths.to(states.device) - 1, :self.hidden]
        return torch.cat([last, states[:, 0, self.hidden:]], dim=-1)  # (B, 2H)

    def forward(self, images: torch.Tensor, questions: torch.Tensor,
                lengths: torch.Tensor) -> VQAOutput:
        grid = self.encoder(images)  # (B, L, D)
        u = self.question(questions, lengths)  # (B, 2H)
        if self.kind == "none":
            flat = self.cells(grid).flatten(1)  # (B, L * cell_features)
            return VQAOutput(self.answer(torch.cat([flat, u], dim=-1)), None)
        regions = self.regions(grid)  # (B, L, 2H)
        weights = []
        for attention in self.attention:
            context, p = attention(u, regions, need_weights=True)  # (B, 2H), (B, L)
            u = u + context
            weights.append(p)
        return VQAOutput(self.answer(u), torch.stack(weights, dim=1))  # (B, A), (B, K, L)
