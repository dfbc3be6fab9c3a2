"""Visual question answering: a stacked attention network (Yang et al. 2016), the same with a
relational reader, and a baseline without attention, over the same image grid and question
encoder.

    image (B, 3, S, S) -> GridEncoder -> a (B, L, D) -> v_i = tanh(W_I a_i + b_I)   (B, L, 2H)
    question (B, T) -> embeddings -> BiRNN -> u_0 = [forward state at the last word;
                                                     backward state at the first]     (B, 2H)
    "san":  for each hop k = 1..K:
                c_k, p_k = attention_k(u_{k-1}, v)     attnkit.Attention, additive score:
                                                       p_k = softmax_i(w_k . tanh(W_k u + U_k v_i))
                u_k = u_{k-1} + c_k                    the refined query
            answer scores = W_u u_K
    "relational": the hops of "san", where hop k > 1 scores each cell with its offset from
            where hop k - 1 looked appended to its key, [v_i; x_i - X_{k-1}; |x_i - X_{k-1}|^2]
            (X_k = sum_i p_ki x_i, x_i the cell's centre), so that a hop can look at what is
            closest to, farthest from, left of or above the object of the previous hop; a
            presence gate g_i = sigmoid(w_g . tanh(W_g u_0 + U_g v_i)) per cell (unnormalised:
            it can count, which a softmax cannot); and an MLP answers from
            [u_0; c_1; X_1; ...; c_K; X_K; sum_i g_i; max_i g_i]
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

KINDS = ("san", "relational", "none")


class VQAOutput(NamedTuple):
    """Answer scores ``logits (B, A)`` and each hop's attention ``weights (B, K, L)`` (None
    for the baseline)."""

    logits: torch.Tensor
    weights: torch.Tensor | None


class VQA(Model, name="vqa"):
    """A stacked attention network, the same with a relational reader, or the baseline
    without attention (see the module docstring).

    Args:
        words: question vocabulary size (:class:`attnkit.data.WordVocab`; id 0 is padding).
        answers: ``A``, the answer classes.
        image_size, channels: the grid encoder's (:class:`attnkit.models.grid.GridEncoder`).
        kind: ``"san"``, ``"relational"`` or ``"none"``; hops: ``K`` attention hops of
            ``"san"`` and ``"relational"`` (2 in the paper).
        emb: word embeddings; hidden: ``H`` per direction of the question's BiLSTM (the
            query, the image regions and the answer layer have ``2H`` features);
            attn_dim: the additive scores' (and the presence gate's) hidden size.
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
        if kind != "none":
            check_positive_int("hops", hops)
        self.kind, self.hops = kind, hops if kind != "none" else 0
        self.encoder = GridEncoder(image_size, tuple(channels))
        d = 2 * hidden
        self.embed = nn.Embedding(words, emb, padding_idx=PAD)
        self.rnn = BiRNN(emb, hidden)
        self.hidden = hidden
        if kind != "none":
            self.regions = nn.Sequential(nn.Linear(self.encoder.dim, d), nn.Tanh())
            extra = 3 if kind == "relational" else 0  # hop k > 1: the offset and its square
            self.attention = nn.ModuleList(
                Attention(d, d + (extra if k else 0), d, score="additive", attn_dim=attn_dim)
                for k in range(hops))
        if kind == "san":
            self.answer = nn.Sequential(nn.Dropout(dropout), nn.Linear(d, answers))
        elif kind == "relational":
            self.gate_query = nn.Linear(d, attn_dim)
            self.gate_key = nn.Linear(d, attn_dim, bias=False)
            self.gate = nn.Linear(attn_dim, 1)
            read = d + hops * (d + 2) + 2
            self.answer = nn.Sequential(nn.Linear(read, d), nn.ReLU(), nn.Dropout(dropout),
                                        nn.Linear(d, answers))
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
        if self.kind == "relational":
            return self._relational(u, regions)
        weights = []
        for attention in self.attention:
            context, p = attention(u, regions, need_weights=True)  # (B, 2H), (B, L)
            u = u + context
            weights.append(p)
        return VQAOutput(self.answer(u), torch.stack(weights, dim=1))  # (B, A), (B, K, L)

    def _relational(self, u: torch.Tensor, regions: torch.Tensor) -> VQAOutput:
        """The relational reader of query ``u_0 (B, 2H)`` over ``regions (B, L, 2H)``."""
        centres = self.encoder.coords.to(regions.dtype)  # (L, 2)
        gates = torch.sigmoid(self.gate(torch.tanh(
            self.gate_query(u)[:, None] + self.gate_key(regions)))).squeeze(-1)  # (B, L)
        read, weights, key = [u], [], regions
        for attention in self.attention:
            context, p = attention(u, key, regions, need_weights=True)  # (B, 2H), (B, L)
            where = p @ centres  # (B, 2): X_k, where the hop looked
            offset = centres - where[:, None]  # (B, L, 2)
            key = torch.cat([regions, offset, offset.square().sum(-1, keepdim=True)], dim=-1)
            u = u + context
            read += [context, where]
            weights.append(p)
        read += [gates.sum(1, keepdim=True), gates.amax(1, keepdim=True)]
        return VQAOutput(self.answer(torch.cat(read, dim=-1)),  # (B, A)
                         torch.stack(weights, dim=1))  # (B, K, L)
