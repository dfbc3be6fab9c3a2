"""Captioner (Show-Attend-Tell): each step is the paper's equations (attention, the gate beta,
the deep output), the doubly stochastic term is its sum, hard attention picks a cell and its
REINFORCE term has the paper's gradient, teacher forcing equals the steps, decoding runs."""

import copy

import pytest
import torch
import torch.nn.functional as F

from attnkit.decoding import Decoding, decode
from attnkit.models import Captioner, GridEncoder, doubly_stochastic
from tests.float32_bounds import assert_within_normwise, gamma, lstm_operations
from tests.models.toy import grid_operations

TINY = dict(image_size=16, channels=(4, 8), hidden=8, emb=6, attn_dim=5)


def _model(**kw):
    torch.manual_seed(0)
    return Captioner(11, **{**TINY, **kw}).eval()


def _images(b=3, size=16):
    return torch.rand(b, 3, size, size, generator=torch.Generator().manual_seed(1))


def _step_operations(model, cells, steps=1):
    """The longest chain of roundings through the grid and ``steps`` steps (each fed the last)
    over ``cells`` cells: the grid's, the initial state (the mean over cells, a projection and
    tanh), then at each step the attention (the query's and keys' projections, the score's
    sum, the softmax's and the context's over the cells; none without attention), the gate,
    the cell, the deep output and the log-softmax, with a spare 8."""
    d, hidden = model.init_h.in_features, model.hidden
    vocab, emb = model.out.out_features, model.out.in_features
    attend = (
        0
        if model.attention is None
        else (hidden + d + model.attention.score.v.shape[-1] + 2 * cells)
    )
    return (
        grid_operations(model.encoder)
        + cells
        + d
        + 2
        + steps
        * (attend + hidden + 2 + lstm_operations(1, emb + d, hidden) + hidden + d + emb + vocab + 8)
    )


def test_doubly_stochastic_is_the_papers_sum():
    torch.manual_seed(0)
    weights = torch.softmax(torch.randn(3, 5, 7, dtype=torch.float64), -1)  # (B, T, L)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    expected = torch.zeros(3, dtype=torch.float64)
    for b in range(3):
        for i in range(7):
            attended = sum(weights[b, t, i] for t in range(5) if mask[b, t])
            expected[b] += (1 - attended) ** 2
    torch.testing.assert_close(doubly_stochastic(weights, mask), expected)
    assert expected[0] != expected[1]  # the padded words are left out, not vacuous


def _papers_step(model, images, tokens):
    """One step of ``model`` written out as the paper's equations: ``(h_0, alpha, h_1, c_1,
    log-probabilities)`` and the gate ``beta``."""
    a = model.encoder(images)  # (B, L, D)
    h0 = torch.tanh(model.init_h(a.mean(1)))
    c0 = torch.tanh(model.init_c(a.mean(1)))
    score = model.attention.score
    e = torch.tanh((h0 @ score.w_query[0])[:, None] + a @ score.w_key[0]) @ score.v[0]
    alpha = torch.softmax(e, -1)  # (B, L)
    z = (alpha[..., None] * a).sum(1)  # (B, D)
    beta = torch.sigmoid(model.gate(h0))  # (B, 1): the gating scalar
    y = model.embed(tokens)
    h1, c1 = model.cell(torch.cat([y, beta * z], -1), (h0, c0))
    logits = model.out(y + model.out_h(h1) + model.out_z(beta * z))
    return [h0, alpha, h1, c1, F.log_softmax(logits, -1)], beta


def _step(model, images, tokens):
    state = model.start(images, None)
    log_probs, new, weights = model.step(tokens, state)
    return [state["h"], weights, new["h"], new["c"], log_probs]


def test_one_step_is_the_papers_equations():
    model = _model()
    model64 = copy.deepcopy(model).double()
    images, tokens = _images(), torch.tensor([1, 5, 7])
    with torch.no_grad():
        want, beta = _papers_step(model64, images.double(), tokens)
        # in float64 the step is the equations, to float64's rounding
        torch.testing.assert_close(_step(model64, images.double(), tokens), want)
        # in float32 the step and the equations within a normwise bound of the equations in
        # float64
        assert_within_normwise(
            want,
            _step_operations(model, want[1].shape[-1]),
            step=_step(model, images, tokens),
            equations=_papers_step(model, images, tokens)[0],
        )
    assert 0.0 < beta.min() and beta.max() < 1.0


def test_the_gate_scales_the_context():
    model = _model()
    images, tokens = _images(), torch.tensor([1, 1, 1])
    with torch.no_grad():
        model.gate.weight.zero_()
        model.gate.bias.fill_(-30.0)  # beta = 0: the image reaches the words through h_0 only
        closed, _, _ = model.step(tokens, model.start(images))
        model.init_h.weight.zero_()
        model.init_c.weight.zero_()
        blind, _, _ = model.step(tokens, model.start(images))
        model.gate.bias.fill_(30.0)  # beta = 1: the context itself
        seeing, _, _ = model.step(tokens, model.start(images))
    assert not torch.allclose(closed[0], closed[1])
    torch.testing.assert_close(blind[0], blind[1])  # no context, same initial state
    assert not torch.allclose(seeing[0], seeing[1])
    no_gate = _model(gate=False)
    out = no_gate(_images(), torch.ones(3, 4, dtype=torch.long))
    assert out.beta is None and out.weights.shape == (3, 4, 16)


@pytest.mark.parametrize("attention", ["soft", "hard", "none"])
def test_teacher_forcing_equals_the_steps(attention):
    model = _model(attention=attention)
    images = _images()
    tgt_in = torch.tensor([[1, 5, 6, 7], [1, 8, 0, 0], [1, 4, 4, 9]])
    with torch.no_grad():
        out = model(images, tgt_in)
        out64 = copy.deepcopy(model).double()(images.double(), tgt_in)
        state, rows, weights = model.start(images), [], []
        for t in range(4):
            log_probs, state, w = model.step(tgt_in[:, t], state)
            rows.append(log_probs)
            weights.append(w)
    if attention == "none":
        assert out.weights is None and weights[0] is None
    else:
        torch.testing.assert_close(out64.weights.sum(-1), torch.ones(3, 4, dtype=torch.float64))
    if attention == "hard":  # the same cells as in float64, so the bound below applies
        assert torch.equal(out.weights.argmax(-1), out64.weights.argmax(-1))
    # teacher forcing and the steps, in float32, within a normwise bound of teacher forcing in
    # float64 (four steps, each fed the last)
    operations = _step_operations(model, model.cells, steps=4)
    none = attention == "none"
    assert_within_normwise(
        [F.log_softmax(out64.logits, -1), None if none else out64.weights],
        operations,
        teacher_forced=[F.log_softmax(out.logits, -1), out.weights],
        steps=[torch.stack(rows, 1), None if none else torch.stack(weights, 1)],
    )


def _score_bound(model, images, hyps):
    """A bound on the float32 error of each score of ``hyps`` (best of each example), a sum of
    its tokens' log-probabilities divided by the length penalty: each token's log-probability
    within the normwise bound of its row (rescored teacher-forced in float64, over the steps'
    chain, :func:`_step_operations`), added up in float32 (``gamma(T)``), so within ``4
    gamma(operations + T)`` of the sum of the rows' largest values; the penalty
    ``((5 + |Y|) / 6) ** alpha >= 1`` (two roundings and its power's) and the division add
    ``gamma(4)`` of the score."""
    tokens = hyps.tokens if hyps.tokens.dim() == 2 else hyps.tokens[:, 0]
    lengths = hyps.lengths if hyps.lengths.dim() == 1 else hyps.lengths[:, 0]
    scores = hyps.scores if hyps.scores.dim() == 1 else hyps.scores[:, 0]
    n = tokens.shape[1]
    tgt_in = torch.cat([torch.ones_like(tokens[:, :1]), tokens[:, :-1]], 1)
    with torch.no_grad():
        rows = F.log_softmax(copy.deepcopy(model).double()(images.double(), tgt_in).logits, -1)
    kept = torch.arange(n) < lengths[:, None]
    scale = (rows.abs().amax(-1) * kept).sum(1)
    operations = _step_operations(model, model.cells, steps=n) + n
    return 4 * gamma(operations) * scale + gamma(4) * scores.detach().double().abs()


@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_decoding_greedy_beam_and_sampling(attention):
    model = _model(attention=attention)
    images, lengths = _images(), torch.full((3,), model.cells)
    greedy = decode(model, images, lengths, max_len=6, weights=True)
    beam1 = decode(
        model,
        images,
        lengths,
        max_len=6,
        decoding=Decoding(beam=1, n_best=1, length_penalty=0.0, no_repeat_ngram=0),
    )
    beam = decode(model, images, lengths, max_len=6, decoding=Decoding(beam=3))
    drawn = decode(
        model, images, lengths, max_len=6, decoding=Decoding(sample=True, seed=0), weights=True
    )
    assert torch.equal(greedy.tokens, beam1.tokens)
    assert greedy.weights.shape == (3, greedy.tokens.shape[1], model.cells)
    assert beam.tokens.shape[0] == 3 and drawn.weights is not None
    # beam search finds no worse, up to the float32 error of the two scores
    slack = _score_bound(model, images, beam) + _score_bound(model, images, greedy)
    assert bool((beam.scores >= greedy.scores - slack).all())


def test_hard_attention_reads_one_cell():
    model = _model(attention="hard")
    images, tokens = _images(), torch.tensor([1, 2, 3])
    model64 = copy.deepcopy(model).double()

    def read_one_cell(model, images):  # the step, and its equations at the cell it picked
        state = model.start(images)
        _, new, alpha = model.step(tokens, state)  # eval: the most likely cell
        a = model.encoder(images)
        z = a[torch.arange(3), alpha.argmax(-1)] * torch.sigmoid(model.gate(state["h"]))
        y = model.embed(tokens)
        return new["h"], model.cell(torch.cat([y, z], -1), (state["h"], state["c"]))[0], alpha

    with torch.no_grad():
        got, h1, alpha = read_one_cell(model, images)
        want, h1_64, alpha64 = read_one_cell(model64, images.double())
    assert torch.equal(alpha64.argmax(-1), alpha.argmax(-1))
    torch.testing.assert_close(want, h1_64)  # the equations, to float64's rounding
    # in float32, the step and the equations within a normwise bound of them in float64
    assert_within_normwise(
        [want], _step_operations(model, alpha.shape[-1]), step=[got], equations=[h1]
    )
    model.train()
    torch.manual_seed(3)
    out = model(images, torch.ones(3, 5, dtype=torch.long))
    picked = out.location_log_probs.exp()  # alpha of the sampled cells
    assert bool(((out.weights - picked[..., None]).abs().min(-1).values < 1e-6).all())
    entropy = -(out.weights * out.weights.log()).sum(-1)
    torch.testing.assert_close(out.entropy, entropy)


def test_reinforce_has_the_papers_gradient_and_a_moving_baseline():
    model = _model(attention="hard").train()
    images, mask = _images(), torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    out = model(images, torch.ones(3, 3, dtype=torch.long))
    log_p = out.location_log_probs.detach().requires_grad_()
    entropy = out.entropy.detach().requires_grad_()
    sampled = out._replace(location_log_probs=log_p, entropy=entropy)
    reward = torch.tensor([-3.0, -5.0, -1.0], requires_grad=True)
    term = model.reinforce(reward, sampled, mask, entropy_weight=0.1, decay=0.9)
    assert float(model.baseline) == pytest.approx(-3.0) and bool(model.baseline_set)
    term.sum().backward()
    advantage = reward.detach() - (-3.0)  # the first batch's own mean is its baseline
    torch.testing.assert_close(log_p.grad, -advantage[:, None] * mask)
    torch.testing.assert_close(entropy.grad, -0.1 * mask.float())
    assert reward.grad is None  # the reward is a constant of the estimator
    model.reinforce(torch.tensor([-1.0, -1.0, -1.0]), sampled, mask, decay=0.9)
    assert float(model.baseline) == pytest.approx(0.9 * -3.0 + 0.1 * -1.0)
    model.eval()
    model.reinforce(torch.tensor([-9.0, -9.0, -9.0]), sampled, mask, decay=0.9)
    assert float(model.baseline) == pytest.approx(-2.8)  # evaluation leaves it alone
    with pytest.raises(
        ValueError,
        match="out: REINFORCE needs hard attention's sampled "
        "locations .*'hard' in training mode; this model: "
        "'soft'",
    ):
        soft = _model()
        soft.reinforce(reward, soft(images, torch.ones(3, 3, dtype=torch.long)), mask)


def test_gradcheck_of_a_step_in_float64():
    model = Captioner(5, image_size=8, channels=(2,), hidden=3, emb=3, attn_dim=3).double()
    model.eval()
    images = torch.rand(2, 3, 8, 8, dtype=torch.float64, requires_grad=True)
    tokens = torch.tensor([1, 4])

    def first_word(x):
        return model.step(tokens, model.start(x))[0]

    assert torch.autograd.gradcheck(first_word, (images,), eps=1e-6, atol=1e-5)


def test_grid_encoder_appends_cell_centres():
    enc = GridEncoder(16, (4, 4))
    grid = enc(torch.rand(1, 3, 16, 16))
    assert grid.shape == (1, 16, 6)
    torch.testing.assert_close(grid[0, 0, -2:], torch.tensor([-1.0, -1.0]))  # top left
    torch.testing.assert_close(grid[0, 3, -2:], torch.tensor([1.0, -1.0]))  # top right
    torch.testing.assert_close(grid[0, 15, -2:], torch.tensor([1.0, 1.0]))  # bottom right


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(attention="global"), "attention: expected one of soft, hard, none, got 'global'"),
        (
            dict(image_size=18),
            r"image_size: expected a multiple of 2 \*\* len\(channels\) = 4, "
            "got 18",
        ),
        (dict(channels=()), r"channels: expected positive ints, got \(\)"),
        (dict(hidden=0), "hidden: expected a positive int, got 0"),
        (dict(dropout=1.0), r"dropout: expected a probability in \[0, 1\), got 1.0"),
    ],
)
def test_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        Captioner(11, **{**TINY, **kw})


def test_images_of_another_size_are_refused():
    with pytest.raises(
        ValueError,
        match=r"images: expected shape \(B, 3, 16, 16\) \(RGB at the "
        r"model's image_size\), got \(2, 3, 32, 32\)",
    ):
        _model()(torch.rand(2, 3, 32, 32), torch.ones(2, 3, dtype=torch.long))
