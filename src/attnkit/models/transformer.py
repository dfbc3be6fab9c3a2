"""The Transformer encoder-decoder (Vaswani et al. 2017) on attnkit's attention.

Shapes: ``S`` source steps, ``T`` target steps, ``V`` target vocabulary, ``D`` model size,
``H`` heads.

Every attention is :class:`attnkit.Attention` with ``score="scaled_dot"`` and ``heads=H``
(exactly :class:`torch.nn.MultiheadAttention`, served by PyTorch's fused kernel when no weights
are asked for): encoder self-attention masked by source lengths, causal decoder
self-attention, and cross-attention over the encoder output. Layers are pre-norm
(``x + Sublayer(LayerNorm(x))``, with a final LayerNorm), which trains without the original's
careful warm-up; positions are the paper's sinusoids added to embeddings scaled by ``sqrt(D)``;
the target embedding is tied to the output projection.

Decoding runs one step at a time with a key/value cache per decoder layer
(:meth:`attnkit.Attention.extend`), so step ``t`` costs ``O(t)``, not ``O(t^2)``. The model has
the interface of :class:`attnkit.models.Seq2Seq`: ``start(src, src_len) -> state`` and
``step(tokens, state) -> (log_probs, state, weights)`` for :mod:`attnkit.decoding`, and
``forward(src, src_len, tgt_in)`` for teacher-forced training.
"""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.attention import Attention
from attnkit.checks import check_positive_int, check_probability
from attnkit.models.registry import Model
from attnkit.ops import Linear, linear

__all__ = ["Transformer", "sinusoids"]


def sinusoids(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal position encodings ``(*P, dim)`` of integer ``positions`` ``(*P)``.

    ``pe[p, 2i] = sin(p / 10000^(2i/dim))`` and ``pe[p, 2i+1] = cos(p / 10000^(2i/dim))``.

    Example:
        >>> sinusoids(torch.arange(3), 4)[1]
        tensor([0.8415, 0.5403, 0.0100, 0.9999])
    """
    if dim % 2:
        raise ValueError(f"dim: expected an even size, got {dim}")
    freq = torch.exp(
        torch.arange(0, dim, 2, device=positions.device, dtype=torch.float32)
        * (-math.log(10000.0) / dim)
    )  # (dim/2,)
    angle = positions.to(torch.float32)[..., None] * freq  # (*P, dim/2)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2)  # (*P, dim)


class _FeedForward(nn.Sequential):
    def __init__(self, d: int, ff: int, dropout: float):
        super().__init__(Linear(d, ff), nn.ReLU(), nn.Dropout(dropout), Linear(ff, d))


class _EncoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, ff: int, dropout: float):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads=heads, dropout=dropout)
        self.ff = _FeedForward(d, ff, dropout)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``x`` ``(B, S, D)``, ``lengths`` ``(B,)`` -> ``(B, S, D)``."""
        h = self.norm1(x)
        x = x + self.drop(self.attn(h, h, key_lengths=lengths).context)
        return x + self.drop(self.ff(self.norm2(x)))


class _DecoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, ff: int, dropout: float):
        super().__init__()
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attn = Attention(d, heads=heads, causal=True, dropout=dropout)
        self.cross_attn = Attention(d, heads=heads, dropout=dropout)
        self.ff = _FeedForward(d, ff, dropout)
        self.drop = nn.Dropout(dropout)

    def forward(self, y, memory, src_len, *, cache=None, positions=None, need_weights=False):
        """Teacher-forced: ``y`` ``(B, T, D)``; one step: ``y`` ``(N, D)`` with ``positions``
        ``(N,)`` and the self-attention ``cache`` (a Memory or None), which is extended.
        ``memory``: the encoder output ``(B, S, D)`` or its Memory prepared by ``cross_attn``.

        Returns ``(y, cache, weights)``; weights ``(B, H, T, S)`` or ``(N, H, S)`` if asked.
        """
        h = self.norm1(y)
        if positions is None:
            y = y + self.drop(self.self_attn(h, h).context)
        else:
            # keys 0..t; the cache keeps only the prepared keys and values where it can
            cache = self.self_attn.extend(cache, h[:, None], keep_inputs=False)
            y = y + self.drop(self.self_attn(h, cache, positions=positions).context)
        ctx, weights = self.cross_attn(
            self.norm2(y), memory, key_lengths=src_len, need_weights=need_weights
        )
        y = y + self.drop(ctx)
        return y + self.drop(self.ff(self.norm3(y))), cache, weights


class Transformer(Model, name="transformer"):
    """Transformer encoder-decoder for token sequences.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes (id 0 is padding).
        d_model: ``D``; heads: ``H`` (must divide ``D``).
        layers: encoder layers; dec_layers: decoder layers (default ``layers``).
        ff: feed-forward hidden size (default ``4 * D``).
        dropout: on embeddings, sub-layer outputs, attention weights and the feed-forward.
        shared_embeddings: one embedding for source and target tokens (a joint vocabulary:
            ``src_vocab == tgt_vocab``), which is the output projection too: the three-way
            tying of Press & Wolf (2017), as Vaswani et al. (2017) do for joint BPE.

    Shape:
        - ``forward(src (B, S), src_len (B,), tgt_in (B, T))`` -> logits ``(B, T, V)`` and,
          with ``need_weights``, the last layer's cross-attention averaged over heads
          ``(B, T, S)`` (else None).
        - ``step(tokens (N,), state)`` -> log-probs ``(N, V)``, state, weights ``(N, S)``.

    Example:
        >>> model = Transformer(10, 12, d_model=16, heads=2, layers=1).eval()
        >>> src, src_len = torch.randint(4, 10, (2, 5)), torch.tensor([5, 3])
        >>> logits, _ = model(src, src_len, torch.ones(2, 4, dtype=torch.long))
        >>> logits.shape
        torch.Size([2, 4, 12])
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        *,
        d_model: int = 128,
        heads: int = 4,
        layers: int = 2,
        dec_layers: int | None = None,
        ff: int | None = None,
        dropout: float = 0.1,
        shared_embeddings: bool = False,
    ):
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("heads", heads)
        check_positive_int("layers", layers)
        check_probability("dropout", dropout)
        if d_model % heads:
            raise ValueError(f"d_model: expected a multiple of heads ({heads}), got {d_model}")
        if d_model % 2:
            raise ValueError(f"d_model: expected an even size (sinusoids), got {d_model}")
        dec_layers = layers if dec_layers is None else check_positive_int("dec_layers", dec_layers)
        ff = 4 * d_model if ff is None else check_positive_int("ff", ff)
        if shared_embeddings and src_vocab != tgt_vocab:
            raise ValueError(
                "shared_embeddings: expected one vocabulary (src_vocab == tgt_vocab), got "
                f"src_vocab={src_vocab}, tgt_vocab={tgt_vocab}"
            )
        self.d_model = d_model
        self.shared_embeddings = shared_embeddings
        # Shared: no source embedding of its own (the state dict holds each tensor once);
        # the encoder reads the target's (:meth:`source_embedding`).
        if not shared_embeddings:
            self.src_embed = nn.Embedding(src_vocab, d_model, padding_idx=0)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model, padding_idx=0)
        self.encoder = nn.ModuleList(
            _EncoderLayer(d_model, heads, ff, dropout) for _ in range(layers)
        )
        self.decoder = nn.ModuleList(
            _DecoderLayer(d_model, heads, ff, dropout) for _ in range(dec_layers)
        )
        self.enc_norm, self.dec_norm = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        self.out_bias = nn.Parameter(torch.zeros(tgt_vocab))
        embeddings = [self.tgt_embed] if shared_embeddings else [self.src_embed, self.tgt_embed]
        for emb in embeddings:
            nn.init.normal_(emb.weight, std=d_model**-0.5)
            with torch.no_grad():
                emb.weight[0].zero_()

    def _embed(
        self, embedding: nn.Embedding, tokens: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        x = embedding(tokens) * math.sqrt(self.d_model)
        return self.drop(x + sinusoids(positions, self.d_model).to(x.dtype))

    def source_embedding(self) -> nn.Embedding:
        """The embedding of source tokens: the target's when ``shared_embeddings``."""
        return self.tgt_embed if self.shared_embeddings else self.src_embed

    def _logits(self, y: torch.Tensor) -> torch.Tensor:
        return linear(self.dec_norm(y), self.tgt_embed.weight, self.out_bias)  # tied

    def encode(self, src: torch.Tensor, src_len: torch.Tensor) -> torch.Tensor:
        """Encoder output ``(B, S, D)`` (rows past ``src_len`` are not meaningful)."""
        x = self._embed(self.source_embedding(), src, torch.arange(src.shape[1], device=src.device))
        for layer in self.encoder:
            x = layer(x, src_len)
        return self.enc_norm(x)

    # ------------------------------------------------------------------ decoding interface

    def start(self, src: torch.Tensor, src_len: torch.Tensor) -> dict:
        """Encode; returns the decoder state (tensors with batch first): per decoder layer
        the prepared encoder output and an empty self-attention cache (no keys yet), so every
        step takes and returns the same tensors."""
        enc = self.encode(src, src_len)
        layers = cast("list[_DecoderLayer]", list(self.decoder))  # a ModuleList types Modules
        return {
            "memory": [layer.cross_attn.prepare(enc) for layer in layers],
            "cache": [layer.self_attn.prepare(enc[:, :0]) for layer in layers],
            "src_len": src_len.to(src.device),
            "t": torch.zeros(src.shape[0], dtype=torch.long, device=src.device),
        }

    def step(self, tokens: torch.Tensor, state: dict):
        """One output step: tokens ``(N,)`` -> log-probs ``(N, V)``, new state, weights
        ``(N, S)`` (last layer's cross-attention, mean over heads)."""
        t = state["t"]
        y = self._embed(self.tgt_embed, tokens, t)  # (N, D)
        caches, weights = [], None
        last = len(self.decoder) - 1
        for i, layer in enumerate(self.decoder):
            y, cache, w = layer(
                y,
                state["memory"][i],
                state["src_len"],
                cache=state["cache"][i],
                positions=t,
                need_weights=i == last,
            )
            caches.append(cache)
            weights = w if w is not None else weights
        new = {**state, "cache": caches, "t": t + 1}
        assert weights is not None  # the last layer's, which needs them
        return F.log_softmax(self._logits(y), dim=-1), new, weights.mean(dim=1)

    # ------------------------------------------------------------------ training

    def forward(
        self,
        src: torch.Tensor,
        src_len: torch.Tensor,
        tgt_in: torch.Tensor,
        *,
        teacher_forcing: float = 1.0,
        generator: torch.Generator | None = None,
        need_weights: bool = False,
    ):
        """Logits ``(B, T, V)`` and weights ``(B, T, S)`` or None (see the class docstring).

        ``tgt_in`` ``(B, T)`` starts with BOS. With ``teacher_forcing < 1`` (scheduled
        sampling for Transformers, Mihaylova & Liu 2019): a first teacher-forced pass without
        gradients predicts every position, and each input token after BOS is replaced by the
        prediction for it with probability ``1 - teacher_forcing`` before the real pass.
        """
        enc = self.encode(src, src_len)
        if teacher_forcing < 1.0:
            with torch.no_grad():
                predicted = self._decode(enc, src_len, tgt_in, False)[0].argmax(-1)  # (B, T)
            own = torch.rand(tgt_in.shape, generator=generator, device=tgt_in.device)
            use_own = (own >= teacher_forcing) & (tgt_in != 0)
            use_own[:, 0] = False  # BOS stays
            shifted = torch.cat([tgt_in[:, :1], predicted[:, :-1]], dim=1)  # prediction for t
            tgt_in = torch.where(use_own, shifted, tgt_in)
        return self._decode(enc, src_len, tgt_in, need_weights)

    def _decode(self, enc, src_len, tgt_in, need_weights):
        y = self._embed(self.tgt_embed, tgt_in, torch.arange(tgt_in.shape[1], device=tgt_in.device))
        weights = None
        last = len(self.decoder) - 1
        for i, layer in enumerate(self.decoder):
            y, _, w = layer(y, enc, src_len, need_weights=need_weights and i == last)
            weights = w if w is not None else weights
        return self._logits(y), None if weights is None else weights.mean(dim=1)
