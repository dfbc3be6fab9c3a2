"""Toys shared by the model tests: a batch of three sources of lengths 7, 4 and 1, a
random-weight LAS that streams with moving monotonic stops, the check that a model's
padding-skipping CPU paths equal its padded reference, and the operation counts of the grid
encoder and of Seq2Seq for the float32 bounds."""

import math

import torch
from torch import nn

from attnkit.ops import export_mode
from tests.float32_bounds import lstm_operations


def assert_skipping_padding_changes_nothing(run, params):
    """``run()`` -> ``(output, lengths)`` on the padding-skipping CPU paths equals it in export
    mode (the padded reference everywhere): outputs, lengths and the gradients of ``params``."""
    got, got_lengths = run()
    with export_mode():
        want, want_lengths = run()
    assert torch.equal(got_lengths, want_lengths)
    torch.testing.assert_close(got, want)
    grad = torch.randn_like(want)
    got_grads = torch.autograd.grad(got, params, grad, allow_unused=True)
    want_grads = torch.autograd.grad(want, params, grad, allow_unused=True)
    for g, w in zip(got_grads, want_grads):
        assert (g is None) == (w is None)
        if g is not None:
            torch.testing.assert_close(g, w)


def grid_operations(encoder) -> int:
    """The longest chain of dependent roundings through a :class:`attnkit.models.GridEncoder`
    (for :func:`tests.float32_bounds.normwise_bound`): each convolution's sum over its input
    channels x kernel, then the batch norm's scale and shift (ReLU and max pooling round
    nothing), with a spare."""
    return sum(
        conv.weight[0].numel() + 3
        for conv in encoder.modules()
        if isinstance(conv, torch.nn.Conv2d)
    )


def seq2seq_operations(model, source, steps):
    """The longest chain of dependent roundings through ``steps`` decoder steps of a
    :class:`attnkit.models.Seq2Seq` over ``source`` source steps (for
    :func:`tests.float32_bounds.normwise_bound`), counted generously from the widest layer
    ``W``: the encoder's recurrent layers (``W`` wide, each fed the last), then at each step
    (each fed the last) the decoder's cells (fed up to ``2 W``), the attention (the
    projections and the score's sums, ``3 W``; the softmax's and the context's over the
    source), the output layers (``2 W``) and the log-softmax over the vocabulary, with a
    spare 8."""
    widths = [m.in_features for m in model.modules() if isinstance(m, nn.Linear)]
    widths += [w.shape[1] for n, w in model.named_parameters() if "weight_" in n]
    width, layers = max(widths), sum(1 for n, _ in model.named_parameters() if "weight_hh" in n)
    vocab = max(m.out_features for m in model.modules() if isinstance(m, nn.Linear))
    step = layers * lstm_operations(1, 2 * width, width) + 5 * width + 2 * source + vocab + 8
    return layers * lstm_operations(source, width, width) + steps * step


def toy_batch(seed=0, b=3, s=7, t=5, vocab=11):
    """``src (B, S)`` padded with 0, ``src_len (B,)``, ``tgt_in (B, T)`` starting with BOS=1."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (b, s), generator=g)
    src_len = torch.tensor([7, 4, 1])[:b]
    src = src.masked_fill(torch.arange(s) >= src_len[:, None], 0)
    tgt_in = torch.randint(4, vocab, (b, t), generator=g)
    tgt_in[:, 0] = 1
    return src, src_len, tgt_in


def streaming_las(alignment="monotonic", *, features=80, vocab=9, seed=0):
    """A random-weight :class:`attnkit.models.LAS` that streams (causal listener, hard
    ``alignment``), built so that its monotonic stops move forward: one listener unit counts
    listener steps (``h_j = tanh(0.02 (j + 1))``: its LSTM gates saturated open, its cell adding
    a constant), one speller unit counts output steps (``tanh(0.05 (i + 1))``), and the energy
    is ``5 tanh(50 (key count - query count)) - 1``, so step ``i`` stops at the first listener
    step whose count exceeds its own, about ``2.5 (i + 1)``, and at none once the output count
    passes the input's. The rest of the weights are random; EOS and UNK are never the best
    token, so it writes until its length limit."""
    from attnkit.models import LAS
    from attnkit.tokens import EOS, UNK

    torch.manual_seed(seed)
    options = {"chunk": 3} if alignment == "mocha" else None
    model = LAS(
        vocab,
        features=features,
        listener_hidden=12,
        hidden=16,
        emb=6,
        key_value_dim=8,
        listener="uni",
        alignment=alignment,
        alignment_options=options,
    ).eval()
    with torch.no_grad():
        _count(model.listener.pyramid[-1], 12, 0.02)
        _count(model.speller.cells[0], 16, 0.05)
        model.speller.key_proj.weight[0] = 0.0
        model.speller.key_proj.weight[0, 0] = 1.0  # key feature 0: the listener's count
        model.speller.key_proj.bias[0] = 0.0
        energy = model.speller.attention.energy
        energy.w_key.zero_()
        energy.w_key[0, 0] = 50.0
        energy.w_query.zero_()
        energy.w_query[0, 0] = -50.0  # query feature 0: the speller's count
        energy.bias.zero_()
        energy.v.zero_()
        energy.v[0] = 1.0
        energy.gain.fill_(5.0)
        energy.offset.fill_(-1.0)
        model.speller.out[3].bias[[EOS, UNK]] = -100.0
    return model


def _count(rnn, hidden, step):
    """Make unit 0 of an ``nn.LSTM`` (one layer) or ``nn.LSTMCell`` count its steps: its
    input, forget and output gates open whatever the input, its cell adding ``step``."""
    suffix = "_l0" if isinstance(rnn, torch.nn.LSTM) else ""
    getattr(rnn, f"weight_ih{suffix}")[0::hidden] = 0.0  # the gate rows of unit 0: i, f, g, o
    getattr(rnn, f"weight_hh{suffix}")[0::hidden] = 0.0
    getattr(rnn, f"bias_hh{suffix}")[0::hidden] = 0.0
    getattr(rnn, f"bias_ih{suffix}")[0::hidden] = torch.tensor([30.0, 30.0, math.atanh(step), 30.0])
