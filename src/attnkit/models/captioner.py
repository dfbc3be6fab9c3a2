"""Show, Attend and Tell (Xu et al. 2015): a captioner that attends over a grid of image
features at every word.

    image (B, 3, S, S) -> GridEncoder -> a (B, L, D)          L annotation vectors a_i
    h_0 = tanh(f_h(mean_i a_i)),  c_0 = tanh(f_c(mean_i a_i))
    word t, after y_{t-1} and h_{t-1}:
        alpha_t = softmax_i(w . tanh(W h_{t-1} + U a_i))     attnkit.Attention, additive score
        z_t = sum_i alpha_ti a_i                 "soft"
              a_s with s ~ Multinomial(alpha_t)  "hard" (training; the argmax at inference)
              mean_i a_i                         "none": the mean-pooled grid, no attention
        beta_t = sigmoid(f_beta(h_{t-1}))                    the gating scalar (``gate``)
        h_t, c_t = LSTM([E y_{t-1}; beta_t z_t], (h_{t-1}, c_{t-1}))
        p(y_t) = softmax(L_o(E y_{t-1} + L_h h_t + L_z beta_t z_t))   the deep output layer

Training adds the doubly stochastic regularisation ``lambda * sum_i (1 - sum_t alpha_ti)^2``
(:func:`doubly_stochastic`: every cell attended to about once over the caption), and hard
attention learns where to look by REINFORCE (:meth:`Captioner.reinforce`): the reward of the
sampled locations is the caption's log-likelihood, less a moving-average baseline, with an
entropy bonus.

Shapes: ``L`` grid cells, ``D`` their features, ``T`` words, ``V`` vocabulary, ``N`` rows of a
decoding batch (``B``, or ``B * K`` in a beam of ``K``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.attention import Attention
from attnkit.checks import check_positive_int, check_probability, quoted
from attnkit.models.grid import GridEncoder
from attnkit.models.registry import Model
from attnkit.models.rnn import LSTMCell
from attnkit.models.unrolling import unroll
from attnkit.ops import Linear
from attnkit.tokens import PAD

__all__ = ["ATTENTION", "CaptionOutput", "Captioner", "doubly_stochastic"]

ATTENTION = ("soft", "hard", "none")
TINY = 1e-12  # log(alpha) of a location the softmax underflowed to 0


class CaptionOutput(NamedTuple):
    """The teacher-forced pass of a :class:`Captioner` over ``T`` words.

    Attributes:
        logits: ``(B, T, V)``.
        weights: ``(B, T, L)``: ``alpha_t``, None without attention.
        beta: ``(B, T)``: the gate, None without it.
        location_log_probs: ``(B, T)``: hard attention in training, ``log alpha_t`` of the
            sampled location; else None.
        entropy: ``(B, T)``: hard attention in training, the entropy of ``alpha_t``; else None.
    """

    logits: torch.Tensor
    weights: torch.Tensor | None
    beta: torch.Tensor | None
    location_log_probs: torch.Tensor | None
    entropy: torch.Tensor | None


def doubly_stochastic(weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Xu et al.'s penalty per caption: ``sum_i (1 - sum_t alpha_ti)^2`` over the grid's
    cells ``i``, the sum over ``t`` taken over the caption's words (``mask``).

    Shape:
        weights ``(B, T, L)``, mask ``(B, T)`` bool (True = a word of the caption) -> ``(B,)``.

    Example:
        >>> w = torch.tensor([[[0.5, 0.5], [1.0, 0.0]]])  # (1, 2, 2): 2 words, 2 cells
        >>> doubly_stochastic(w, torch.tensor([[True, True]]))  # (1 - 1.5)^2 + (1 - 0.5)^2
        tensor([0.5000])
    """
    total = (weights * mask[..., None].to(weights.dtype)).sum(1)  # (B, L): sum_t alpha_ti
    return ((1.0 - total) ** 2).sum(-1)


class Captioner(Model, name="captioner"):
    """Show-Attend-Tell: a CNN grid encoder and an LSTM decoder with attention over the grid.

    Args:
        vocab: ``V`` words (:class:`attnkit.data.WordVocab`; id 0 is padding).
        image_size: ``S``; channels: the encoder's conv blocks (see
            :class:`attnkit.models.grid.GridEncoder`: 64 px and three blocks give an 8 x 8
            grid, ``L = 64``).
        hidden: the LSTM's size; emb: word embeddings (and the deep output layer's input);
            attn_dim: the additive score's hidden size.
        attention: ``"soft"``, ``"hard"`` or ``"none"`` (see the module docstring).
        gate: multiply the context by ``beta_t``.
        dropout: before the output layer.

    Shape:
        - ``forward(images (B, 3, S, S), tgt_in (B, T))`` -> :class:`CaptionOutput`.
        - ``start(images, lengths (B,))`` -> state; ``step(tokens (N,), state)`` ->
          log-probs ``(N, V)``, state, weights ``(N, L)`` (None without attention): the
          interface of :func:`attnkit.decoding.front`.

    Example:
        >>> model = Captioner(12, image_size=16, channels=(4, 8), hidden=8, emb=8, attn_dim=8)
        >>> out = model(torch.rand(2, 3, 16, 16), torch.ones(2, 5, dtype=torch.long))
        >>> out.logits.shape, out.weights.shape, out.beta.shape
        (torch.Size([2, 5, 12]), torch.Size([2, 5, 16]), torch.Size([2, 5]))
    """

    # buffers (register_buffer), typed for mypy
    baseline: torch.Tensor
    baseline_set: torch.Tensor

    def __init__(
        self,
        vocab: int,
        *,
        image_size: int = 64,
        channels: tuple[int, ...] = (32, 64, 128),
        hidden: int = 256,
        emb: int = 128,
        attn_dim: int = 128,
        attention: str = "soft",
        gate: bool = True,
        dropout: float = 0.0,
    ):
        super().__init__()
        check_positive_int("vocab", vocab)
        for name, value in (("hidden", hidden), ("emb", emb), ("attn_dim", attn_dim)):
            check_positive_int(name, value)
        check_probability("dropout", dropout)
        if attention not in ATTENTION:
            raise ValueError(
                f"attention: expected one of {', '.join(ATTENTION)}, got {quoted(attention)}"
            )
        self.encoder = GridEncoder(image_size, tuple(channels))
        d = self.encoder.dim
        self.kind, self.hidden = attention, hidden
        self.attention = (
            None
            if attention == "none"
            else Attention(hidden, d, d, score="additive", attn_dim=attn_dim)
        )
        self.gate = Linear(hidden, 1) if gate else None
        self.init_h, self.init_c = Linear(d, hidden), Linear(d, hidden)
        self.embed = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.cell = LSTMCell(emb + d, hidden)
        self.out_h, self.out_z = Linear(hidden, emb), Linear(d, emb, bias=False)
        self.out = Linear(emb, vocab)
        self.drop = nn.Dropout(dropout)
        # hard attention's REINFORCE baseline: a moving average of the reward (saved, so a
        # resumed run goes on with it)
        self.register_buffer("baseline", torch.zeros(()))
        self.register_buffer("baseline_set", torch.zeros((), dtype=torch.bool))

    @property
    def cells(self) -> int:
        """``L``, the cells of the grid attended over."""
        return self.encoder.side**2

    # ------------------------------------------------------------------ decoding interface

    def start(self, images: torch.Tensor, lengths: torch.Tensor | None = None) -> dict:
        """The state before the first word: the grid (prepared once for the attention) and
        the LSTM's initial state. ``lengths`` ``(B,)``: not used (every image of a batch has
        the same grid); :func:`attnkit.decoding.front` passes it for the batch's size."""
        grid = self.encoder(images)  # (B, L, D)
        mean = grid.mean(1)  # (B, D)
        state: dict[str, Any] = {
            "h": torch.tanh(self.init_h(mean)),
            "c": torch.tanh(self.init_c(mean)),
        }
        if self.attention is None:
            state["mean"] = mean
        else:
            state["memory"] = self.attention.prepare(grid)
        return state

    def step(self, tokens: torch.Tensor, state: dict):
        """One word: tokens ``(N,)`` -> log-probs ``(N, V)``, state, weights ``(N, L)``."""
        logits, state, extras = self._step(tokens, state)
        return F.log_softmax(logits, dim=-1), state, extras.get("weights")

    def _context(self, h: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
        """``z_t`` ``(N, D)`` from ``h_{t-1}``, and the step's weights (and for hard attention
        in training, the sampled location's log-probability and the weights' entropy)."""
        if self.attention is None:
            return state["mean"], {}
        memory = state["memory"]
        context, alpha = self.attention(h, memory, need_weights=True)  # (N, D), (N, L)
        if self.kind == "soft":
            return context, {"weights": alpha}
        if not self.training:
            where = alpha.argmax(-1)  # (N,)
            return memory.value[torch.arange(len(where)), where], {"weights": alpha}
        where = torch.multinomial(alpha.detach().float(), 1)  # (N, 1)
        log_alpha = torch.log(alpha.clamp_min(TINY))  # (N, L)
        return (
            memory.value[torch.arange(len(where)), where[:, 0]],
            {
                "weights": alpha,
                "location_log_probs": log_alpha.gather(1, where)[:, 0],
                "entropy": -(alpha * log_alpha).sum(-1),
            },
        )

    def _step(self, tokens: torch.Tensor, state: dict):
        h, c = state["h"], state["c"]
        z, extras = self._context(h, state)
        if self.gate is not None:
            beta = torch.sigmoid(self.gate(h))  # (N, 1)
            z = beta * z
            extras["beta"] = beta[:, 0]
        y = self.embed(tokens)  # (N, E)
        h, c = self.cell(torch.cat([y, z], dim=-1), (h, c))
        logits = self.out(self.drop(y + self.out_h(h) + self.out_z(z)))  # (N, V)
        return logits, {**state, "h": h, "c": c}, extras

    # ------------------------------------------------------------------ training

    def forward(
        self,
        images: torch.Tensor,
        tgt_in: torch.Tensor,
        *,
        teacher_forcing: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> CaptionOutput:
        """The teacher-forced pass over ``tgt_in`` ``(B, T)`` (BOS first); with
        ``teacher_forcing < 1``, scheduled sampling (see
        :func:`attnkit.models.unrolling.unroll`)."""
        logits, extras = unroll(
            self._step,
            self.start(images),
            tgt_in,
            teacher_forcing=teacher_forcing,
            generator=generator,
        )
        return CaptionOutput(
            logits,
            extras.get("weights"),
            extras.get("beta"),
            extras.get("location_log_probs"),
            extras.get("entropy"),
        )

    def reinforce(
        self,
        log_likelihood: torch.Tensor,
        out: CaptionOutput,
        mask: torch.Tensor,
        *,
        entropy_weight: float = 0.01,
        decay: float = 0.9,
    ) -> torch.Tensor:
        """Hard attention's REINFORCE term per caption, to add to the loss (Xu et al. 2015,
        eq. 12): ``-((R - b) * sum_t log p(s_t) + entropy_weight * sum_t H[alpha_t])`` with
        reward ``R``, the caption's log-likelihood given the sampled locations (no gradient
        through it), and ``b`` the moving average of the earlier batches' mean rewards (at the
        first batch, its own mean), updated here in training mode:
        ``b <- decay * b + (1 - decay) * mean(R)``.

        Shape:
            log_likelihood ``(B,)``, mask ``(B, T)`` bool (the caption's words) -> ``(B,)``.
        """
        if out.location_log_probs is None or out.entropy is None:  # both or neither
            raise ValueError(
                "out: REINFORCE needs hard attention's sampled locations "
                "(attention='hard' in training mode; this model: "
                f"{quoted(self.kind)}, training={self.training})"
            )
        reward = log_likelihood.detach()
        baseline = torch.where(self.baseline_set, self.baseline, reward.mean())
        if self.training:
            with torch.no_grad():
                self.baseline.copy_(decay * baseline + (1 - decay) * reward.mean())
                self.baseline_set.fill_(True)
        m = mask.to(out.location_log_probs.dtype)
        log_p = (out.location_log_probs * m).sum(1)  # (B,)
        entropy = (out.entropy * m).sum(1)  # (B,)
        return -((reward - baseline) * log_p + entropy_weight * entropy)
