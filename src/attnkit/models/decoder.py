"""An RNN decoder that attends over an encoder's output at every step.

The attention decoder of Listen-Attend-Spell (Chan et al. 2016) and of attention-based text
recognisers: at output step ``i``, with embedding ``y_{i-1}`` and the previous context
``c_{i-1}``,

    s_i = RNNCells([y_{i-1}; c_{i-1}], s_{i-1})
    c_i, a_i = attention(s_i, keys, values)           # a_i: (S,) weights over the memory
    logits_i = W_2 tanh(W_1 [s_i; c_i])

Shapes: ``S`` memory steps, ``E`` memory features, ``T`` output steps, ``V`` vocabulary,
``H`` hidden size. The memory's key (and value) projections are made once per sequence
(:meth:`attnkit.Attention.prepare`); the location-aware score gets the previous step's
weights. With an ``alignment`` (monotonic, MoChA, local-p, GMM:
:mod:`attnkit.attention.alignment`) the attention is that module instead of a softmax, and its
state (``state["align"]``) goes from step to step the same way. The decoder exposes
``start(memory, lengths) -> state`` and ``step(tokens, state) -> (log_probs, state, weights)``
for :mod:`attnkit.decoding`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.attention import ALIGNMENTS, Alignment, Attention, lengths_to_mask, make_alignment
from attnkit.checks import check_positive_int, check_probability, quoted
from attnkit.models.rnn import GRUCell, LSTMCell
from attnkit.models.unrolling import unroll
from attnkit.ops import Linear

__all__ = ["ALIGNMENT_CHOICES", "AttentionDecoder", "guided_attention_loss"]

CELLS = {"lstm": LSTMCell, "gru": GRUCell}
SAME_SIZE_SCORES = ("dot", "scaled_dot", "cosine")
ALIGNMENT_CHOICES = ("softmax", *ALIGNMENTS)
SCORED = ("softmax", "local_p")  # the attentions that read `score`


class AttentionDecoder(nn.Module):
    """Token decoder of LSTM/GRU cells with attention over a memory at every step.

    Args:
        vocab: ``V`` output tokens (id 0 is padding).
        memory_dim: ``E``, features of the memory (the encoder output).
        hidden: ``H`` of every cell; emb: token embedding size.
        score: any :class:`attnkit.Attention` score; ``"location"`` is Chorowski et al.'s
            location-aware score (previous weights convolved).
        cell: ``"lstm"`` or ``"gru"``; layers: stacked cells.
        key_value_dim: project the memory to keys and values of this size (LAS's
            ``phi``/``psi``); default: keys = values = memory.
        attn_dim: additive/location (and monotonic/MoChA energy) hidden size (default ``H``).
        alignment: ``"softmax"`` (the score's softmax, :class:`attnkit.Attention`) or one of
            :data:`attnkit.attention.ALIGNMENTS`. ``score`` is the softmax's and local-p's
            content score; monotonic, MoChA and GMM compute their own energies and do not
            read it.
        alignment_options: keyword arguments of the alignment module (e.g. ``{"chunk": 4}``
            for MoChA, ``{"half_width": 8}`` for local-p, ``{"components": 5}`` for GMM).
        dropout: on embeddings and before the output layer.

    Shape:
        - ``forward(memory (B, S, E), lengths (B,), tgt_in (B, T))`` -> logits ``(B, T, V)``,
          weights ``(B, T, S)``.
        - ``step(tokens (N,), state)`` -> log-probs ``(N, V)``, state, weights ``(N, S)``.
        - ``language_model(tgt_in (B, T))`` -> logits ``(B, T, V)`` without a memory.

    Example:
        >>> dec = AttentionDecoder(12, 20, hidden=16, emb=8, score="location")
        >>> memory, lengths = torch.randn(2, 30, 20), torch.tensor([30, 17])
        >>> logits, weights = dec(memory, lengths, torch.ones(2, 5, dtype=torch.long))
        >>> logits.shape, weights.shape
        (torch.Size([2, 5, 12]), torch.Size([2, 5, 30]))
    """

    def __init__(
        self,
        vocab: int,
        memory_dim: int,
        *,
        hidden: int = 256,
        emb: int = 64,
        score: str = "additive",
        cell: str = "lstm",
        layers: int = 1,
        key_value_dim: int | None = None,
        attn_dim: int | None = None,
        dropout: float = 0.0,
        alignment: str = "softmax",
        alignment_options: dict | None = None,
    ):
        super().__init__()
        check_positive_int("vocab", vocab)
        check_positive_int("memory_dim", memory_dim)
        check_positive_int("hidden", hidden)
        check_positive_int("emb", emb)
        check_positive_int("layers", layers)
        check_probability("dropout", dropout)
        if cell not in CELLS:
            raise ValueError(f"cell: expected one of {', '.join(CELLS)}, got {quoted(cell)}")
        self.cell_kind, self.hidden = cell, hidden
        kv = memory_dim
        if key_value_dim is not None:
            kv = check_positive_int("key_value_dim", key_value_dim)
            self.key_proj, self.value_proj = Linear(memory_dim, kv), Linear(memory_dim, kv)
        self.key_value_dim = key_value_dim
        if alignment not in ALIGNMENT_CHOICES:
            raise ValueError(
                f"alignment: expected one of {', '.join(ALIGNMENT_CHOICES)}, "
                f"got {quoted(alignment)}"
            )
        same_size = score in SAME_SIZE_SCORES and alignment in SCORED
        if same_size and hidden != kv:
            self.query_proj = Linear(hidden, kv, bias=False)  # dot scores need Dq == Dk
        query_dim = kv if same_size else hidden
        self.attention = _attention(
            alignment, alignment_options, query_dim, kv, score, attn_dim or hidden
        )
        self.aligned = alignment != "softmax"
        self.alignment_name = alignment
        self.embed = nn.Embedding(vocab, emb, padding_idx=0)
        self.cells = nn.ModuleList(
            CELLS[cell](emb + kv if i == 0 else hidden, hidden) for i in range(layers)
        )
        self.out = nn.Sequential(
            Linear(hidden + kv, hidden), nn.Tanh(), nn.Dropout(dropout), Linear(hidden, vocab)
        )
        self.drop = nn.Dropout(dropout)
        self.context_dim = kv

    # ------------------------------------------------------------------ decoding interface

    def _keys_values(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The keys and values (None: the keys) the attention reads from ``memory``."""
        if self.key_value_dim is not None:
            return self.key_proj(memory), self.value_proj(memory)
        return memory, None

    def start(self, memory: torch.Tensor, lengths: torch.Tensor) -> dict:
        """The state before the first step: memory ``(B, S, E)`` prepared once, zero cells."""
        prepared = self.attention.prepare(*self._keys_values(memory))
        state = {
            **self._zero_state(memory),
            "memory": prepared,
            "lengths": lengths.to(memory.device),
        }
        if isinstance(self.attention, Alignment):  # aligned
            align = self.attention.initial_state(prepared)
            if align is not None:
                state["align"] = align
        elif self.attention.score.needs_prev:  # "previous" weights of the first step: uniform
            valid = lengths_to_mask(state["lengths"], memory.shape[1]).to(memory.dtype)  # (B, S)
            state["weights"] = valid / valid.sum(-1, keepdim=True).clamp(min=1)
        return state

    @property
    def streams(self) -> bool:
        """True when the memory may still be growing while decoding (:meth:`extend`): the
        alignment reads no key past its hard stop (monotonic or MoChA, hard inference)."""
        return isinstance(self.attention, Alignment) and self.attention.streaming  # aligned

    def extend(self, state: dict | None, memory: torch.Tensor) -> dict:
        """``state`` (of :meth:`start` or of a step) over its memory grown by ``memory``
        ``(B, Sn, E)``, the same ``Sn`` steps for every row (``state=None``: :meth:`start`
        over them). The new steps are prepared and appended; the alignment has no mass on
        them. A step over the grown memory equals a step over the whole memory when its stop
        is among the steps so far; a step that finds none attends to nothing (its weights are
        zero), and the caller may wait for more steps and run it again.

        Raises:
            ValueError: an alignment that is not :attr:`streams`.
        """
        if not self.streams:
            raise ValueError(
                f"alignment: a growing memory needs a hard monotonic alignment "
                f"('monotonic' or 'mocha'), got {quoted(self.alignment_name)}"
            )
        if state is None:
            lengths = torch.full(
                (memory.shape[0],), memory.shape[1], dtype=torch.long, device=memory.device
            )
            return self.start(memory, lengths)
        prepared = self.attention.extend(state["memory"], *self._keys_values(memory))
        grown = {**state, "memory": prepared, "lengths": state["lengths"] + memory.shape[1]}
        if "align" in state:
            assert isinstance(self.attention, Alignment)  # only an alignment keeps "align"
            grown["align"] = self.attention.extend_state(state["align"], prepared.key.shape[1])
        return grown

    def _zero_state(self, like: torch.Tensor) -> dict:
        """Zero cells and context for a batch of ``like.shape[0]``, on ``like``'s device."""
        b = like.shape[0]
        zeros = torch.zeros(b, self.hidden, dtype=self.embed.weight.dtype, device=like.device)
        state = {
            "memory": None,
            "h": [zeros] * len(self.cells),
            "ctx": zeros.new_zeros(b, self.context_dim),
        }
        if self.cell_kind == "lstm":
            state["c"] = [zeros] * len(self.cells)
        return state

    def step(self, tokens: torch.Tensor, state: dict):
        """One output step: tokens ``(N,)`` -> log-probs ``(N, V)``, state, weights ``(N, S)``."""
        logits, state, weights = self._step(tokens, state)
        return F.log_softmax(logits, dim=-1), state, weights

    def _step(self, tokens, state):
        x = torch.cat([self.drop(self.embed(tokens)), state["ctx"]], dim=-1)
        hs, cs = [], []
        for i, cell in enumerate(self.cells):
            if self.cell_kind == "lstm":
                h, c = cell(x, (state["h"][i], state["c"][i]))
                cs.append(c)
            else:
                h = cell(x, state["h"][i])
            hs.append(h)
            x = h
        new = {**state, "h": hs}
        if cs:
            new["c"] = cs
        if state["memory"] is None:  # language-model mode: the context stays zero
            return self.out(self.drop(torch.cat([h, state["ctx"]], dim=-1))), new, None
        query = self.query_proj(h) if hasattr(self, "query_proj") else h
        if self.aligned:
            ctx, weights, align = self.attention(
                query, state["memory"], key_lengths=state["lengths"], prev_state=state.get("align")
            )
            if align is not None:
                new["align"] = align
        else:
            extra = {"prev_weights": state["weights"]} if "weights" in state else {}
            ctx, weights = self.attention(
                query, state["memory"], key_lengths=state["lengths"], need_weights=True, **extra
            )
        new["ctx"] = ctx
        if "weights" in state:
            new["weights"] = weights
        return self.out(self.drop(torch.cat([h, ctx], dim=-1))), new, weights

    # ------------------------------------------------------------------ training

    def forward(
        self,
        memory: torch.Tensor,
        lengths: torch.Tensor,
        tgt_in: torch.Tensor,
        *,
        teacher_forcing: float = 1.0,
        generator: torch.Generator | None = None,
    ):
        """Logits ``(B, T, V)`` and weights ``(B, T, S)``; ``tgt_in`` ``(B, T)`` starts with BOS.

        With ``teacher_forcing < 1`` each example feeds back its own greedy prediction at a step
        with probability ``1 - teacher_forcing`` (scheduled sampling).
        """
        return unroll(
            self._step,
            self.start(memory, lengths),
            tgt_in,
            teacher_forcing=teacher_forcing,
            generator=generator,
        )

    def language_model(self, tgt_in: torch.Tensor) -> torch.Tensor:
        """The decoder on text alone, a character language model: logits ``(B, T, V)`` of
        ``tgt_in (B, T)``.

        The context fed with each embedding is zero and nothing is attended: only the embedding,
        the cells and the output layer are used (LAS's speller pre-training). Teacher-forced.
        """
        logits, _ = unroll(self._step, self._zero_state(tgt_in), tgt_in)
        return logits


def guided_attention_loss(
    weights: torch.Tensor,
    output_lengths: torch.Tensor,
    input_lengths: torch.Tensor,
    sigma: float = 0.2,
) -> torch.Tensor:
    """Guided attention (Tachibana et al. 2017): weight far from the diagonal costs.

    Output ``n`` of ``N`` and input step ``t`` of ``S`` are at the relative positions
    ``(n + 1/2) / N`` and ``(t + 1/2) / S``; a weight there costs
    ``1 - exp(-(n/N - t/S)^2 / (2 sigma^2))``. For a left-to-right reading (a text line, an
    utterance) the alignment lies near that diagonal, and the penalty leads a decoder to it in
    the first hundreds of steps, where softmax attention over long inputs otherwise stays
    diffuse and the decoder loops.

    Args:
        weights: ``(B, T, S)`` attention weights of the teacher-forced outputs.
        output_lengths: ``(B,)`` outputs per row (EOS included); input_lengths: ``(B,)``.
        sigma: the width of the cost-free band, as a share of the lengths.

    Returns:
        The cost per output (each row of weights sums to at most 1, so it is in ``[0, 1]``),
        averaged over the valid outputs.
    """
    if weights.dim() != 3:
        raise ValueError(f"weights: expected (B, T, S), got {tuple(weights.shape)}")
    if not sigma > 0:
        raise ValueError(f"sigma: expected a positive number, got {quoted(sigma)}")
    b, t, s = weights.shape
    # positions in float32 at least: bfloat16 holds integers exactly only up to 256
    dtype = torch.promote_types(weights.dtype, torch.float32)
    weights = weights.to(dtype)
    n_out = output_lengths.to(weights.device, dtype).clamp(min=1)[:, None, None]
    n_in = input_lengths.to(weights.device, dtype).clamp(min=1)[:, None, None]
    rows = torch.arange(t, device=weights.device, dtype=dtype)[None, :, None]
    cols = torch.arange(s, device=weights.device, dtype=dtype)[None, None, :]
    gap = (rows + 0.5) / n_out - (cols + 0.5) / n_in  # (B, T, S)
    cost = 1 - torch.exp(-gap.square() / (2 * sigma**2))
    valid = (rows < n_out) & (cols < n_in)
    total = (weights * cost).masked_fill(~valid, 0.0).sum()
    return total / (rows < n_out).sum().clamp(min=1)


def _attention(
    alignment: str, options: dict | None, query_dim: int, kv: int, score: str, attn_dim: int
) -> Attention | Alignment:
    """The decoder's attention: :class:`attnkit.Attention` with ``score`` for ``"softmax"``,
    else the alignment module with ``options``."""
    options = dict(options or {})
    if alignment == "softmax":
        if options:
            raise ValueError(
                f"alignment_options: only for an alignment other than 'softmax', "
                f"got {quoted(options)}"
            )
        scored = score in ("additive", "location")  # None: Attention's default
        return Attention(query_dim, kv, kv, score=score, attn_dim=attn_dim if scored else None)
    if alignment in ("monotonic", "mocha"):
        options.setdefault("attn_dim", attn_dim)
    if alignment == "local_p":
        options.setdefault("score", score)
        if score == "additive":
            options.setdefault("attn_dim", attn_dim)
    try:
        return make_alignment(alignment, query_dim, kv, kv, **options)
    except TypeError as e:
        raise ValueError(
            f"alignment_options: {quoted(options)} do not fit alignment {quoted(alignment)} ({e})"
        ) from None
