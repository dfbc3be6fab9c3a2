"""AttentionDecoder: steps equal the unrolled pass, memory padding is ignored, decoding runs."""

import pytest
import torch

from attnkit.decoding import beam_search, greedy
from attnkit.models import AttentionDecoder, guided_attention_loss

CONFIGS = [
    dict(score="additive"),
    dict(score="location", cell="gru"),
    dict(score="dot", key_value_dim=10, layers=2),
    dict(score="general"),
    dict(score="scaled_dot"),
    dict(alignment="monotonic", alignment_options={"noise": 0.0, "inference": "soft"}),
    dict(alignment="mocha", alignment_options={"noise": 0.0, "chunk": 3, "inference": "soft"}),
    dict(alignment="local_p", score="general", alignment_options={"half_width": 3}),
    dict(alignment="gmm", cell="gru", alignment_options={"components": 2}),
]
ALIGNED = [c for c in CONFIGS if "alignment" in c]


def _setup(cfg, seed=0):
    torch.manual_seed(seed)
    dec = AttentionDecoder(9, 6, hidden=12, emb=5, **cfg).double().eval()
    memory = torch.randn(3, 11, 6, dtype=torch.float64)
    lengths = torch.tensor([11, 5, 1])
    tgt_in = torch.randint(3, 9, (3, 4))
    tgt_in[:, 0] = 1
    return dec, memory, lengths, tgt_in


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_steps_equal_forward_and_padding_is_ignored(cfg):
    dec, memory, lengths, tgt_in = _setup(cfg)
    logits, weights = dec(memory, lengths, tgt_in)
    assert logits.shape == (3, 4, 9) and weights.shape == (3, 4, 11)
    assert weights[1, :, 5:].abs().max() == 0 and weights[2, :, 1:].abs().max() == 0
    state = dec.start(memory, lengths)
    for t in range(4):
        lp, state, w = dec.step(tgt_in[:, t], state)
        torch.testing.assert_close(lp, logits[:, t].log_softmax(-1))
        torch.testing.assert_close(w, weights[:, t])
    garbage = memory.clone()
    garbage[1, 5:] = 1e3
    torch.testing.assert_close(dec(garbage, lengths, tgt_in)[0], logits)


def test_gradients_reach_the_memory_and_every_parameter():
    dec, memory, lengths, tgt_in = _setup(dict(score="location", key_value_dim=8))
    memory.requires_grad_(True)
    logits, _ = dec(
        memory, lengths, tgt_in, teacher_forcing=0.5, generator=torch.Generator().manual_seed(0)
    )
    logits.sum().backward()
    assert memory.grad[0].abs().sum() > 0 and memory.grad[1, 5:].abs().max() == 0
    assert all(p.grad is not None for n, p in dec.named_parameters() if "embed" not in n)


@pytest.mark.parametrize("cfg", ALIGNED, ids=lambda c: c["alignment"])
def test_alignments_decode_hard_and_keep_their_state(cfg):
    cfg = (
        {**cfg, "alignment_options": {**cfg["alignment_options"], "inference": "hard"}}
        if cfg["alignment"] in ("monotonic", "mocha")
        else cfg
    )
    dec, memory, lengths, _ = _setup(cfg)
    kw = dict(batch_size=3, bos=1, eos=2, pad=0, max_len=6)
    g = greedy(dec.step, dec.start(memory, lengths), **kw)
    b1 = beam_search(dec.step, dec.start(memory, lengths), beam_size=1, **kw)
    assert torch.equal(g.tokens, b1.tokens)
    b3 = beam_search(dec.step, dec.start(memory, lengths), beam_size=3, **kw)
    assert torch.isfinite(b3.scores).all() and b3.weights[1, :, 5:].eq(0).all()
    if cfg["alignment"] in ("monotonic", "mocha"):  # hard: each step's weights sum to 1 or 0
        sums = g.weights.sum(-1)
        assert torch.all((sums - 1).abs().lt(1e-9) | sums.eq(0))
        stops = [w.nonzero()[:, -1].tolist() for w in dec.start(memory, lengths)["align"]]
        assert stops == [[0], [0], [0]]


def test_greedy_and_beam_run_on_the_step():
    dec, memory, lengths, _ = _setup(dict(score="location"))
    kw = dict(batch_size=3, bos=1, eos=2, pad=0, max_len=6)
    g = greedy(dec.step, dec.start(memory, lengths), **kw)
    b1 = beam_search(dec.step, dec.start(memory, lengths), beam_size=1, **kw)
    assert torch.equal(g.tokens, b1.tokens)
    b3 = beam_search(dec.step, dec.start(memory, lengths), beam_size=3, **kw)
    assert b3.weights.shape[:2] == b3.tokens.shape and b3.weights.shape[2] == 11


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(cell="rnn"), "cell: expected one of lstm, gru, got 'rnn'"),
        (dict(layers=0), "layers: expected a positive int"),
        (dict(key_value_dim=0), "key_value_dim: expected a positive int"),
        (dict(score="bilinear"), "score"),
        (dict(alignment="ctc"), "alignment: expected one of softmax, "),
        (dict(alignment_options={"chunk": 2}), "alignment_options: only for an alignment other"),
        (
            dict(alignment="gmm", alignment_options={"chunk": 2}),
            "alignment_options: {'chunk': 2} do not fit alignment 'gmm'",
        ),
    ],
)
def test_bad_settings_name_the_argument(kw, match):
    with pytest.raises(ValueError, match=match):
        AttentionDecoder(9, 6, **kw)


@pytest.mark.parametrize("cfg", ALIGNED, ids=lambda c: c["alignment"])
def test_outputs_longer_than_the_input_give_finite_losses(cfg):
    """Ten output steps over two memory steps (one of them masked): the monotonic mass runs off
    the end and later steps read nothing; loss and gradients stay finite."""
    torch.manual_seed(0)
    dec = AttentionDecoder(9, 6, hidden=12, emb=5, **cfg).double().train()
    memory = torch.randn(2, 2, 6, dtype=torch.float64, requires_grad=True)
    tgt_in = torch.randint(3, 9, (2, 10))
    logits, weights = dec(memory, torch.tensor([2, 1]), tgt_in)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt_in.flatten())
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(weights).all()
    assert torch.isfinite(memory.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in dec.parameters() if p.grad is not None)


def test_guided_attention_loss_is_zero_on_the_diagonal_and_ignores_padding():
    """Weights on the diagonal cost ~0, off it up to 1 per output; padded outputs and inputs
    cost nothing, whatever they hold; the gradient is finite."""
    n, s = 4, 8
    diagonal = torch.zeros(2, 6, 10)
    for i in range(n):  # output i of 4 at input steps 2i, 2i + 1 of 8
        diagonal[:, i, 2 * i : 2 * i + 2] = 0.5
    lengths_out, lengths_in = torch.tensor([n, n]), torch.tensor([s, s])
    near = guided_attention_loss(diagonal, lengths_out, lengths_in)
    assert near < 0.05  # each half-weight 1/16 of the line off the diagonal: 0.048
    corner = torch.zeros(2, 6, 10)
    corner[:, :n, s - 1] = 1.0  # every output on the last input step
    far = guided_attention_loss(corner, lengths_out, lengths_in)
    assert 0.5 < far < 1.0
    noisy = diagonal.clone()
    noisy[:, n:] = 7.0  # padded outputs
    noisy[:, :, s:] = 7.0  # padded inputs
    torch.testing.assert_close(guided_attention_loss(noisy, lengths_out, lengths_in), near)
    weights = torch.softmax(torch.randn(2, 6, 10), -1).requires_grad_()
    guided_attention_loss(weights, torch.tensor([6, 3]), torch.tensor([10, 5])).backward()
    assert torch.isfinite(weights.grad).all() and weights.grad[1, 3:].eq(0).all()
    with pytest.raises(ValueError, match=r"^weights: expected \(B, T, S\), got \(6, 10\)"):
        guided_attention_loss(weights[0], lengths_out, lengths_in)


def test_guided_attention_loss_of_bfloat16_weights_is_computed_in_float32():
    """Positions past 256 are not integers in bfloat16: the cost is computed in float32."""
    weights = torch.softmax(torch.randn(2, 5, 600), -1)
    lengths_out, lengths_in = torch.tensor([5, 4]), torch.tensor([600, 517])
    half = guided_attention_loss(weights.bfloat16(), lengths_out, lengths_in)
    want = guided_attention_loss(weights.bfloat16().float(), lengths_out, lengths_in)
    assert half.dtype == torch.float32
    torch.testing.assert_close(half, want)


def test_a_growing_memory_only_with_a_hard_monotonic_alignment():
    dec, memory, _, tgt_in = _setup(dict(alignment="mocha", alignment_options={"chunk": 2}))
    assert dec.streams
    grown = dec.extend(dec.extend(None, memory[:1, :4]), memory[:1, 4:])
    whole = dec.start(memory[:1], torch.tensor([11]))
    assert grown["lengths"].tolist() == [11]
    torch.testing.assert_close(grown["memory"].key_features, whole["memory"].key_features)
    torch.testing.assert_close(grown["memory"].values, whole["memory"].values)
    torch.testing.assert_close(dec.step(tgt_in[:1, 0], grown)[0], dec.step(tgt_in[:1, 0], whole)[0])
    for cfg in (dict(score="location"), ALIGNED[2]):
        other, *_ = _setup(cfg)
        assert not other.streams
        with pytest.raises(
            ValueError,
            match="alignment: a growing memory needs a hard "
            r"monotonic alignment \('monotonic' or 'mocha'\)",
        ):
            other.extend(None, memory)
