"""The plain PyTorch models a user writes from the papers and tutorials, for the benchmarks.

Nothing here uses attnkit: these are the baselines attnkit's models are measured against
(``models_vs_plain.py``, ``ocr_speed.py``, ``las_memory.py``), written the usual way, with
the sizes of attnkit's models so that both sides compute a model of the same size.

* :class:`TutorialBahdanau`: the Bahdanau seq2seq of Ben Trevett's tutorial 3, as users copy it:
  bi-GRU encoder, additive attention computed per step on ``[s; h_j]`` concatenated, GRU
  decoder; time-major inside, as the tutorial. Transcribed with its copies' typos fixed (the unused
  ``weighted.permute``, ``weighted.cat``, ``predictions``, the decoder's 2-D GRU state, the
  doubled first input); teacher forcing 1.0. Like the tutorial it neither packs the source nor
  masks padding out of the attention.
* :class:`PlainLuong`: Luong et al. 2015's global attention with the general score and input
  feeding, a per-step loop as in OpenNMT: packed bi-GRU encoder, ``GRUCell`` over
  ``[y_{t-1}; h~_{t-1}]``, ``score(h_t, h_s) = h_t^T W_a h_s`` masked by the source lengths,
  ``h~_t = tanh(W_c [c_t; h_t])``, ``logits = W_s h~_t``.
* :class:`PlainLAS`: Chan et al. 2016: a pyramidal BLSTM listener on packed sequences (a BLSTM,
  then three layers halving time by concatenating neighbouring frames) and an ``LSTMCell``
  speller with location-aware attention (Chorowski et al. 2015, :class:`UsualLocationAttention`)
  computed per step.
* :class:`PlainCRNN`: a CRNN text recogniser (convolutions -> BLSTM -> attention -> BLSTM -> CTC)
  over ~800 steps with the full-matrix attention layer users write (:class:`MatrixAttention`)
  between the BLSTMs; and :class:`LoopAttention`, the same layer as a per-step Python loop.
* :class:`PlainTransformer`: ``nn.Transformer`` (pre-norm, batch-first) between embeddings
  scaled by ``sqrt(D)`` plus the paper's sinusoids and an output layer tied to the target
  embedding, padding masked by the lengths: the model a user builds from PyTorch's own module.
"""

from __future__ import annotations

import math
import warnings
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

# --------------------------------------------------------------------------- tutorial Bahdanau


class TutorialEncoder(nn.Module):
    def __init__(self, vocab_size, embed_dim, encoder_hidden_size, decoder_hidden_size, dropout):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.gru = nn.GRU(embed_dim, encoder_hidden_size, bidirectional=True)
        self.fc = nn.Linear(encoder_hidden_size * 2, decoder_hidden_size)

    def forward(self, x):
        embedding = self.dropout(self.embed(x))  # (S, B, E)
        outputs, hidden = self.gru(embedding)  # (S, B, 2He), (2, B, He)
        concat_hidden = torch.cat((hidden[-1], hidden[-2]), dim=1)  # (B, 2He)
        hidden = torch.tanh(self.fc(concat_hidden))  # (B, Hd)
        return outputs, hidden


class TutorialAttention(nn.Module):
    def __init__(self, encoder_hidden_size, decoder_hidden_size):
        super().__init__()
        self.fc1 = nn.Linear(encoder_hidden_size * 2 + decoder_hidden_size, decoder_hidden_size)
        self.fc2 = nn.Linear(decoder_hidden_size, 1)

    def forward(self, hidden, encoder_outputs):
        seq_len = encoder_outputs.size(0)
        encoder_outputs = encoder_outputs.permute(1, 0, 2)  # (B, S, 2He)
        hidden = hidden.unsqueeze(1).repeat(1, seq_len, 1)  # (B, S, Hd)
        concat = torch.cat((hidden, encoder_outputs), dim=2)  # (B, S, 2He + Hd)
        energy = torch.tanh(self.fc1(concat))  # (B, S, Hd)
        attention = F.softmax(self.fc2(energy).squeeze(2), dim=1)  # (B, S)
        weighted = torch.bmm(attention.unsqueeze(1), encoder_outputs)  # (B, 1, 2He)
        return weighted.permute(1, 0, 2)  # (1, B, 2He)


class TutorialDecoder(nn.Module):
    def __init__(self, vocab_size, embed_dim, decoder_hidden_size, encoder_hidden_size, dropout):
        super().__init__()
        self.vocab_size = vocab_size
        self.dropout = nn.Dropout(dropout)
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.gru = nn.GRU(encoder_hidden_size * 2 + embed_dim, decoder_hidden_size)
        self.attention = TutorialAttention(encoder_hidden_size, decoder_hidden_size)
        self.fc = nn.Linear(encoder_hidden_size * 2 + decoder_hidden_size + embed_dim, vocab_size)

    def forward(self, x, hidden, encoder_outputs):
        embedding = self.dropout(self.embedding(x.unsqueeze(0)))  # (1, B, E)
        weighted = self.attention(hidden, encoder_outputs)  # (1, B, 2He)
        weighted_concat = torch.cat((embedding, weighted), dim=2)  # (1, B, 2He + E)
        output, hidden = self.gru(weighted_concat, hidden.unsqueeze(0))  # (1, B, Hd) each
        fc_in = torch.cat((output.squeeze(0), weighted.squeeze(0), embedding.squeeze(0)), dim=1)
        return self.fc(fc_in), hidden.squeeze(0)  # (B, V), (B, Hd)


class TutorialBahdanau(nn.Module):
    """The tutorial's model: ``forward(src (B, S), tgt_in (B, T))`` -> logits ``(B, T, V)``."""

    def __init__(self, src_vocab, tgt_vocab, *, emb, hidden, dropout=0.0):
        super().__init__()
        self.encoder = TutorialEncoder(src_vocab, emb, hidden, hidden, dropout)
        self.decoder = TutorialDecoder(tgt_vocab, emb, hidden, hidden, dropout)

    def forward(self, src, tgt_in):
        source, target = src.t(), tgt_in.t()  # time-major, as the tutorial: (S, B), (T, B)
        encoder_outputs, hidden = self.encoder(source)
        outputs = []
        for t in range(target.size(0)):  # teacher forcing 1.0: x_t = target[t]
            output, hidden = self.decoder(target[t], hidden, encoder_outputs)
            outputs.append(output)
        return torch.stack(outputs, dim=1)  # (B, T, V)


# --------------------------------------------------------------------------- Luong, general score


class PackedBiGRU(nn.Module):
    """Embedding + bidirectional GRU over packed sequences: ``(B, S)`` ids, lengths ->
    outputs ``(B, S, 2H)`` (zero past each length), final ``(B, 2H)``."""

    def __init__(self, vocab, emb, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb, padding_idx=0)
        self.rnn = nn.GRU(emb, hidden, batch_first=True, bidirectional=True)

    def forward(self, src, lengths):
        packed = pack_padded_sequence(
            self.embed(src), lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        out, h = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        return out, torch.cat([h[-2], h[-1]], dim=-1)


class PlainLuong(nn.Module):
    """``forward(src (B, S), src_len (B,), tgt_in (B, T))`` -> logits ``(B, T, V)``."""

    def __init__(self, src_vocab, tgt_vocab, *, emb, hidden):
        super().__init__()
        self.encoder = PackedBiGRU(src_vocab, emb, hidden)
        self.init = nn.Linear(2 * hidden, hidden)
        self.embed = nn.Embedding(tgt_vocab, emb, padding_idx=0)
        self.cell = nn.GRUCell(emb + hidden, hidden)  # input feeding: [y_{t-1}; h~_{t-1}]
        self.w_a = nn.Linear(hidden, 2 * hidden, bias=False)  # general score h_t^T W_a h_s
        self.w_c = nn.Linear(2 * hidden + hidden, hidden)
        self.w_s = nn.Linear(hidden, tgt_vocab)

    def forward(self, src, src_len, tgt_in):
        enc, final = self.encoder(src, src_len)  # (B, S, 2H), (B, 2H)
        h = torch.tanh(self.init(final))  # (B, H)
        pad = torch.arange(src.shape[1], device=src.device) >= src_len[:, None]  # (B, S)
        feed = h.new_zeros(h.shape)
        embedded = self.embed(tgt_in)  # (B, T, E)
        logits = []
        for t in range(tgt_in.shape[1]):
            h = self.cell(torch.cat([embedded[:, t], feed], dim=-1), h)
            scores = torch.bmm(enc, self.w_a(h)[:, :, None]).squeeze(2)  # (B, S)
            weights = F.softmax(scores.masked_fill(pad, float("-inf")), dim=-1)
            context = torch.bmm(weights[:, None], enc).squeeze(1)  # (B, 2H)
            feed = torch.tanh(self.w_c(torch.cat([context, h], dim=-1)))  # h~_t
            logits.append(self.w_s(feed))
        return torch.stack(logits, dim=1)  # (B, T, V)


# --------------------------------------------------------------------------- LAS


class UsualLocationAttention(nn.Module):
    """Location-aware attention written the usual way: one step, plain autograd.

    ``prepare(keys (B, S, Dk), values (B, S, Dv))`` once, then per step
    ``(query (B, Dq), memory, key_lengths (B,), prev_weights (B, S) | None)`` ->
    ``(context (B, Dv), weights (B, S))``. It also plugs into attnkit's ``AttentionDecoder``
    in place of its attention (``las_memory.py``).
    """

    score = SimpleNamespace(needs_prev=True)  # what AttentionDecoder.start asks

    def __init__(self, query_dim, key_dim, attn_dim, filters=10, kernel=31):
        super().__init__()
        self.w_query = nn.Linear(query_dim, attn_dim)
        self.w_key = nn.Linear(key_dim, attn_dim, bias=False)
        self.conv = nn.Conv1d(1, filters, kernel, padding=kernel // 2, bias=False)
        self.w_loc = nn.Linear(filters, attn_dim, bias=False)
        self.v = nn.Linear(attn_dim, 1, bias=False)

    def prepare(self, keys, values):
        return self.w_key(keys), values  # (B, S, A), (B, S, Dv)

    def forward(self, query, memory, *, key_lengths, need_weights=True, prev_weights=None):
        keys, values = memory
        b, s, _ = keys.shape
        if prev_weights is None:
            prev_weights = keys.new_zeros(b, s)
        f = self.conv(prev_weights[:, None]).transpose(1, 2)  # (B, S, filters)
        pre = self.w_query(query)[:, None] + keys + self.w_loc(f)  # (B, S, A): kept per step
        energy = self.v(torch.tanh(pre)).squeeze(-1)  # (B, S)
        valid = torch.arange(s, device=keys.device)[None] < key_lengths[:, None]
        weights = torch.softmax(energy.masked_fill(~valid, torch.finfo(energy.dtype).min), -1)
        return torch.bmm(weights[:, None], values).squeeze(1), weights  # (B, Dv), (B, S)


class PyramidListener(nn.Module):
    """A BLSTM then three pyramid BLSTMs on packed sequences: ``(B, T, F)``, lengths ->
    ``(B, T // 8, 2L)``, lengths ``// 8``."""

    def __init__(self, features, hidden):
        super().__init__()
        self.first = nn.LSTM(features, hidden, batch_first=True, bidirectional=True)
        self.pyramid = nn.ModuleList(
            nn.LSTM(4 * hidden, hidden, batch_first=True, bidirectional=True) for _ in range(3)
        )

    @staticmethod
    def _run(lstm, x, lengths):
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = lstm(packed)
        return pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0]

    def forward(self, x, lengths):
        x = self._run(self.first, x, lengths)  # (B, T, 2L)
        for lstm in self.pyramid:
            b, t, d = x.shape
            x = x[:, : t - t % 2].reshape(b, t // 2, 2 * d)  # (B, T/2, 4L): frames 2j, 2j+1
            lengths = lengths // 2
            x = self._run(lstm, x, lengths)  # (B, T/2, 2L)
        return x, lengths


class PlainLAS(nn.Module):
    """``forward(features (B, T, F), lengths (B,), tgt_in (B, U))`` -> logits ``(B, U, V)``."""

    def __init__(self, vocab, *, features, listener_hidden, hidden, emb, key_value_dim):
        super().__init__()
        self.listener = PyramidListener(features, listener_hidden)
        self.key = nn.Linear(2 * listener_hidden, key_value_dim)  # phi
        self.value = nn.Linear(2 * listener_hidden, key_value_dim)  # psi
        self.attention = UsualLocationAttention(hidden, key_value_dim, hidden)
        self.embed = nn.Embedding(vocab, emb, padding_idx=0)
        self.cell = nn.LSTMCell(emb + key_value_dim, hidden)
        self.out = nn.Sequential(
            nn.Linear(hidden + key_value_dim, hidden), nn.Tanh(), nn.Linear(hidden, vocab)
        )

    def forward(self, features, lengths, tgt_in):
        listened, steps = self.listener(features, lengths)  # (B, S, 2L), (B,)
        memory = self.attention.prepare(self.key(listened), self.value(listened))
        b = features.shape[0]
        h = c = listened.new_zeros(b, self.cell.hidden_size)
        context = listened.new_zeros(b, self.key.out_features)
        weights, logits = None, []
        embedded = self.embed(tgt_in)  # (B, U, E)
        for u in range(tgt_in.shape[1]):
            h, c = self.cell(torch.cat([embedded[:, u], context], dim=-1), (h, c))
            context, weights = self.attention(h, memory, key_lengths=steps, prev_weights=weights)
            logits.append(self.out(torch.cat([h, context], dim=-1)))
        return torch.stack(logits, dim=1)  # (B, U, V)


# --------------------------------------------------------------------------- a plain CRNN


class LoopAttention(nn.Module):
    """One query at a time, the per-step loop (about 12x slower than one batched call); general
    score ``x_t W x_s^T``, output ``tanh(W_c [x_t; c_t])``, padded keys masked."""

    def __init__(self, d: int):
        super().__init__()
        self.w = nn.Linear(d, d, bias=False)
        self.combine = nn.Linear(2 * d, d)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        keys = self.w(x)  # (B, T, D): general score x_t W x_s^T
        pad = torch.arange(x.shape[1], device=x.device) >= lengths[:, None]  # (B, T)
        out = []
        for t in range(x.shape[1]):
            scores = keys.bmm(x[:, t, :, None]).squeeze(2).masked_fill(pad, float("-inf"))
            ctx = scores.softmax(-1)[:, None].bmm(x).squeeze(1)  # (B, D)
            out.append(torch.tanh(self.combine(torch.cat([x[:, t], ctx], -1))))
        return torch.stack(out, 1)


class MatrixAttention(LoopAttention):
    """The whole (B, T, T) score matrix through autograd (its softmax taken
    over the keys, as the loop does)."""

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        pad = torch.arange(x.shape[1], device=x.device) >= lengths[:, None]
        scores = x.bmm(self.w(x).transpose(1, 2)).masked_fill(pad[:, None], float("-inf"))
        ctx = scores.softmax(-1).bmm(x)  # (B, T, D)
        return torch.tanh(self.combine(torch.cat([x, ctx], -1)))


class PlainCRNN(nn.Module):
    """A CRNN with the full-matrix attention between its BLSTMs:
    ``forward(images (B, 1, 32, W), widths (B,))`` -> log-probs ``(B, W // 2, V)``, steps.

    The convolutions are those of attnkit's CRNN (five conv-BN-ReLU blocks, height 32 -> 1,
    width halved once); the BLSTMs run on the padded tensor, as users write them.
    """

    def __init__(self, vocab, *, channels=(32, 64, 128, 128, 128), hidden=256):
        super().__init__()
        layers, c_in = [], 1
        for i, c in enumerate(channels):
            layers += [
                nn.Conv2d(c_in, c, 3, padding=1, bias=False),
                nn.BatchNorm2d(c),
                nn.ReLU(inplace=True),
                nn.MaxPool2d((2, 2) if i == 0 else (2, 1)),
            ]
            c_in = c
        self.cnn = nn.Sequential(*layers)
        self.rnn1 = nn.LSTM(c_in, hidden, batch_first=True, bidirectional=True)
        self.attention = MatrixAttention(2 * hidden)
        self.rnn2 = nn.LSTM(2 * hidden, hidden, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, vocab)

    def forward(self, images, widths):
        feats = self.cnn(1.0 - images).squeeze(2).transpose(1, 2)  # (B, T, C)
        steps = widths // 2
        rnn1, _ = self.rnn1(feats)  # (B, T, 2H)
        rnn2, _ = self.rnn2(self.attention(rnn1, steps))
        return F.log_softmax(self.fc(rnn2), dim=-1), steps


class PlainTransformer(nn.Module):
    """``forward(src (B, S), src_len (B,), tgt_in (B, T))`` -> logits ``(B, T, V)`` through
    ``nn.Transformer(norm_first=True, batch_first=True)``: the sizes and parameters of
    attnkit's ``Transformer`` (its attention's q/k/v projections are ``in_proj`` here)."""

    def __init__(
        self, src_vocab, tgt_vocab, *, d_model=256, heads=4, layers=3, ff=None, dropout=0.0
    ):
        super().__init__()
        self.d_model = d_model
        self.src_embed = nn.Embedding(src_vocab, d_model, padding_idx=0)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model, padding_idx=0)
        with warnings.catch_warnings():  # pre-norm layers take no nested-tensor fast path
            warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
            self.transformer = nn.Transformer(
                d_model,
                heads,
                layers,
                layers,
                ff or 4 * d_model,
                dropout,
                batch_first=True,
                norm_first=True,
            )
        self.out_bias = nn.Parameter(torch.zeros(tgt_vocab))
        for emb in (self.src_embed, self.tgt_embed):  # tied output: unit-scale logits
            nn.init.normal_(emb.weight, std=d_model**-0.5)

    def embed(self, embedding, tokens):
        t = tokens.shape[1]
        freq = torch.exp(torch.arange(0, self.d_model, 2) * (-math.log(10000.0) / self.d_model))
        angle = torch.arange(t)[:, None] * freq  # (T, D/2)
        pe = torch.stack([angle.sin(), angle.cos()], -1).flatten(-2).to(tokens.device)
        return embedding(tokens) * math.sqrt(self.d_model) + pe

    def forward(self, src, src_len, tgt_in):
        pad = torch.arange(src.shape[1], device=src.device) >= src_len[:, None]  # (B, S)
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1], device=src.device)
        y = self.transformer(
            self.embed(self.src_embed, src),
            self.embed(self.tgt_embed, tgt_in),
            tgt_mask=causal,
            src_key_padding_mask=pad,
            memory_key_padding_mask=pad,
            tgt_is_causal=True,
        )
        return F.linear(y, self.tgt_embed.weight, self.out_bias)
