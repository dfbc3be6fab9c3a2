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
    "relational": hops that each read their own part of the question and see where the
            previous hop looked. Hop k:
              q_k = sum_t a_kt h_t, a_k = attention_k over the question's word states h
                    (B, T, 2H), queried by u_0 (additive score): which words name this
                    hop's object;
              key_i = v_i for k = 1, and for k > 1
                    [v_i; r_i - X_{k-1}; |r_i - X_{k-1}|^2; g_{k-1,i}], where
                    r_i = x_i + tanh(W_r a_i) / (side - 1) is the cell's centre x_i moved
                    within its cell by what the cell sees (a position finer than the grid),
                    X_k = sum_i p_ki r_i is where hop k looked and g
                    are its gates: so that hop k can pick what is closest to, farthest from,
                    left of or above hop k - 1's object, and not that object itself;
              c_k, p_k = attention over the cells queried by [q_k; u_0], keyed by key_i,
                    valued by v_i (additive score);
              g_ki = sigmoid(w_k . tanh(W_k [q_k; u_0] + U_k key_i) + b_k), a presence
                    gate per cell (unnormalised: it can count, which a softmax cannot);
            and an MLP answers from [u_0; c_k; X_k; G_k; sum_i g_ki; max_i g_ki for each
            k], G_k = sum_i g_ki r_i / (sum_i g_ki + 1e-3) being where the open gates are.
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
from attnkit.checks import check_int_tensor, check_positive_int, check_probability, quoted
from attnkit.models.grid import GridEncoder
from attnkit.models.registry import Model
from attnkit.models.rnn import BiRNN
from attnkit.ops import Linear
from attnkit.tokens import PAD

__all__ = ["KINDS", "VQA", "VQAOutput"]

KINDS = ("san", "relational", "none")
RELATION = 4  # a relational key's extra features: offset (2), squared distance, gate


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
        ``forward(images (B, 3, S, S), questions (B, T), lengths (B,))`` -> :class:`VQAOutput`;
        or ``forward(images (N, 3, S, S), questions, lengths, image_index (B,))``: question
        ``b`` is about image ``image_index[b]``, and each of the ``N`` images is encoded once
        however many questions ask about it.

    Example:
        >>> model = VQA(10, 5, image_size=16, channels=(4, 8), emb=8, hidden=8, attn_dim=8)
        >>> out = model(torch.rand(2, 3, 16, 16), torch.ones(2, 4, dtype=torch.long),
        ...             torch.tensor([4, 2]))
        >>> out.logits.shape, out.weights.shape
        (torch.Size([2, 5]), torch.Size([2, 2, 16]))
    """

    def __init__(
        self,
        words: int,
        answers: int,
        *,
        image_size: int = 64,
        channels: tuple[int, ...] = (32, 64, 128),
        kind: str = "san",
        hops: int = 2,
        emb: int = 64,
        hidden: int = 128,
        attn_dim: int = 128,
        cell_features: int = 16,
        dropout: float = 0.0,
    ):
        super().__init__()
        for name, value in (
            ("words", words),
            ("answers", answers),
            ("emb", emb),
            ("hidden", hidden),
            ("attn_dim", attn_dim),
            ("cell_features", cell_features),
        ):
            check_positive_int(name, value)
        check_probability("dropout", dropout)
        if kind not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {quoted(kind)}")
        if kind != "none":
            check_positive_int("hops", hops)
        self.kind, self.hops = kind, hops if kind != "none" else 0
        self.encoder = GridEncoder(image_size, tuple(channels))
        d = 2 * hidden
        self.embed = nn.Embedding(words, emb, padding_idx=PAD)
        self.rnn = BiRNN(emb, hidden)
        self.hidden = hidden
        if kind != "none":
            self.regions = nn.Sequential(Linear(self.encoder.dim, d), nn.Tanh())
        if kind == "san":
            self.attention = nn.ModuleList(
                Attention(d, d, d, score="additive", attn_dim=attn_dim) for _ in range(hops)
            )
            self.answer = nn.Sequential(nn.Dropout(dropout), Linear(d, answers))
        elif kind == "relational":
            extra = (0,) + (RELATION,) * (hops - 1)  # hop k > 1 keys: see _relational
            self.control = nn.ModuleList(
                Attention(d, d, d, score="additive", attn_dim=attn_dim) for _ in range(hops)
            )
            self.attention = nn.ModuleList(
                Attention(2 * d, d + e, d, score="additive", attn_dim=attn_dim) for e in extra
            )
            self.gate_query = nn.ModuleList(Linear(2 * d, attn_dim) for _ in range(hops))
            self.gate_key = nn.ModuleList(Linear(d + e, attn_dim, bias=False) for e in extra)
            self.gate = nn.ModuleList(Linear(attn_dim, 1) for _ in range(hops))
            self.offset = Linear(self.encoder.dim, 2)
            read = d + hops * (d + 6)  # u_0, then c_k, X_k, G_k, sum g, max g of each hop
            self.answer = nn.Sequential(
                Linear(read, d), nn.ReLU(), nn.Dropout(dropout), Linear(d, answers)
            )
        else:
            self.cells = Linear(self.encoder.dim, cell_features)
            flat = self.encoder.side**2 * cell_features
            self.answer = nn.Sequential(
                Linear(flat + d, d), nn.ReLU(), nn.Dropout(dropout), Linear(d, answers)
            )

    def question(self, questions: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``u_0`` ``(B, 2H)`` of questions ``(B, T)`` with ``lengths`` ``(B,)``."""
        return self._read_question(questions, lengths)[1]

    def _read_question(
        self,
        questions: torch.Tensor,
        lengths: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The word states ``h (B, T, 2H)`` and ``u_0 (B, 2H)``."""
        check_int_tensor("questions", questions, ndim=2)
        check_int_tensor("lengths", lengths, ndim=1)
        if (
            lengths.shape[0] != questions.shape[0]
            or int(lengths.min()) < 1
            or int(lengths.max()) > questions.shape[1]
        ):
            raise ValueError(
                f"lengths: expected {questions.shape[0]} lengths in [1, "
                f"{questions.shape[1]}], got {lengths.tolist()}"
            )
        states = self.rnn(self.embed(questions), lengths)  # (B, T, 2H)
        last = states[torch.arange(len(lengths)), lengths.to(states.device) - 1, : self.hidden]
        return states, torch.cat([last, states[:, 0, self.hidden :]], dim=-1)

    def forward(
        self,
        images: torch.Tensor,
        questions: torch.Tensor,
        lengths: torch.Tensor,
        image_index: torch.Tensor | None = None,
    ) -> VQAOutput:
        states, u = self._read_question(questions, lengths)  # (B, T, 2H), (B, 2H)
        grid = self.encoder(images)  # (N, L, D)
        b, n = questions.shape[0], images.shape[0]
        if image_index is None:
            if n != b:
                raise ValueError(
                    f"images: expected one per question ({b}), got {n}; or pass image_index"
                )
        else:
            check_int_tensor("image_index", image_index, ndim=1)
            if image_index.shape[0] != b or (
                b and (int(image_index.min()) < 0 or int(image_index.max()) >= n)
            ):
                raise ValueError(
                    f"image_index: expected {b} indices in [0, {n}), got {image_index.tolist()}"
                )
            grid = grid[image_index]  # (B, L, D): each image encoded once
        if self.kind == "none":
            flat = self.cells(grid).flatten(1)  # (B, L * cell_features)
            return VQAOutput(self.answer(torch.cat([flat, u], dim=-1)), None)
        regions = self.regions(grid)  # (B, L, 2H)
        if self.kind == "relational":
            return self._relational(grid, regions, states, u, lengths)
        weights = []
        for attention in self.attention:
            context, p = attention(u, regions, need_weights=True)  # (B, 2H), (B, L)
            u = u + context
            weights.append(p)
        return VQAOutput(self.answer(u), torch.stack(weights, dim=1))  # (B, A), (B, K, L)

    def _relational(
        self,
        grid: torch.Tensor,
        regions: torch.Tensor,
        states: torch.Tensor,
        u: torch.Tensor,
        lengths: torch.Tensor,
    ) -> VQAOutput:
        """The relational reader over the ``grid (B, L, D)``, its ``regions (B, L, 2H)``,
        the question's word ``states (B, T, 2H)`` with ``lengths (B,)`` and ``u_0 (B, 2H)``."""
        cell = 1.0 / (self.encoder.side - 1) if self.encoder.side > 1 else 1.0
        positions = self.encoder.coords.to(grid.dtype) + cell * torch.tanh(
            self.offset(grid)
        )  # (B, L, 2): r_i
        read, weights, key = [u], [], regions
        for k, attention in enumerate(self.attention):
            q, _ = self.control[k](u, states, key_lengths=lengths)  # (B, 2H)
            query = torch.cat([q, u], dim=-1)  # (B, 4H)
            context, p = attention(query, key, regions, need_weights=True)  # (B, 2H), (B, L)
            gates = torch.sigmoid(
                self.gate[k](torch.tanh(self.gate_query[k](query)[:, None] + self.gate_key[k](key)))
            ).squeeze(-1)
            where = (p[:, :, None] * positions).sum(1)  # (B, 2): X_k
            opened = gates.sum(1, keepdim=True)  # (B, 1)
            gated = (gates[:, :, None] * positions).sum(1) / (opened + 1e-3)  # (B, 2): G_k
            read += [context, where, gated, opened, gates.amax(1, keepdim=True)]
            weights.append(p)
            offset = positions - where[:, None]  # (B, L, 2)
            key = torch.cat(
                [regions, offset, offset.square().sum(-1, keepdim=True), gates[:, :, None]], dim=-1
            )  # (B, L, 2H + RELATION)
        return VQAOutput(
            self.answer(torch.cat(read, dim=-1)),  # (B, A)
            torch.stack(weights, dim=1),
        )  # (B, K, L)
