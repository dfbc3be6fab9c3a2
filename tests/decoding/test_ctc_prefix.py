"""Joint CTC/attention decoding: the prefix scores against their definition, CTC deciding the
end, exhaustive search with CTC alone, the models' CTC heads, and bad input."""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from attnkit.decoding import CTCPrefixScorer, Decoding, ctc_greedy, decode, decode_ctc
from attnkit.decoding.ctc_prefix import prefix_scores_loop
from attnkit.models import CRNN, LAS

PAD, BOS, EOS = 0, 1, 2  # the blank is the padding id


def plain_beam(k, **kw):
    """Beam search ranked by plain log P (no length penalty): scores are log-probabilities."""
    return Decoding(beam=k, length_penalty=0.0, **kw)


def _ctc_log_prob(log_probs, labels):
    """log p_ctc(labels | log_probs (T, V)), from PyTorch's CTC loss."""
    if not labels:
        return float(log_probs[:, PAD].sum())
    return -float(
        F.ctc_loss(
            log_probs[:, None],
            torch.tensor([labels]),
            torch.tensor([log_probs.shape[0]]),
            torch.tensor([len(labels)]),
            blank=PAD,
            reduction="sum",
        )
    )


@given(st.integers(1, 3), st.integers(1, 9), st.integers(4, 6), st.integers(0, 2**16))
def test_prefix_scores_equal_their_definition(b, t, v, seed):
    g = torch.Generator().manual_seed(seed)
    log_probs = (2 * torch.randn(b, t, v, generator=g)).log_softmax(-1)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    scorer = CTCPrefixScorer(log_probs, lengths, eos=EOS)
    state, prefixes = scorer.initial_state(), [[] for _ in range(b)]
    for _ in range(4):
        cand = torch.randint(3, v, (b, 3), generator=g)
        psi, r = scorer.extend(state, cand)
        end = scorer.end_scores(state)
        for n in range(b):
            x = log_probs[n, : lengths[n]]
            want_end = _ctc_log_prob(x.double(), prefixes[n])
            assert (
                math.isclose(float(end[n]), want_end, rel_tol=1e-4, abs_tol=1e-4)
                or want_end == float(end[n]) == -math.inf
            )
            for c in range(3):
                want = prefix_scores_loop(x, prefixes[n] + [int(cand[n, c])])
                got = float(psi[n, c])
                assert (got == want == -math.inf) or math.isclose(
                    got, want, rel_tol=1e-4, abs_tol=1e-4
                )
        pick = torch.randint(0, 3, (b,), generator=g)
        rows = torch.arange(b)
        state = scorer.advance(state, cand[rows, pick], psi[rows, pick], r[rows, pick])
        for n in range(b):
            prefixes[n].append(int(cand[n, pick[n]]))


def test_a_prefix_longer_than_the_input_scores_minus_infinity_not_nan():
    log_probs = torch.randn(1, 2, 5).log_softmax(-1)
    scorer = CTCPrefixScorer(log_probs, torch.tensor([2]), eos=EOS)
    state = scorer.initial_state()
    for token in (3, 3):  # "3 3" needs a blank between: 3 frames
        psi, r = scorer.extend(state, torch.tensor([[token]]))
        state = scorer.advance(state, torch.tensor([token]), psi[:, 0], r[:, 0])
    assert float(state["psi"][0]) == -math.inf
    assert not torch.isnan(scorer.extend(state, torch.tensor([[4]]))[0]).any()


class Fake:
    """A 'model' whose attention decoder always says ``attention`` and whose CTC head says
    ``ctc`` (B, T, V)."""

    has_ctc = True

    def __init__(self, attention, ctc):
        self.attention, self.ctc = attention.log_softmax(-1), ctc.log_softmax(-1)

    def start(self, inputs, lengths):
        return {"n": torch.zeros(len(lengths))}

    def start_joint(self, inputs, lengths):
        return self.start(inputs, lengths), self.ctc, lengths

    def step(self, tokens, state):
        return self.attention.expand(len(tokens), -1), state, None


def _peaked(labels, t, v):
    """CTC outputs that spell ``labels`` (with blanks around them) over ``t`` frames."""
    path = [PAD] * t
    for i, c in enumerate(labels):
        path[1 + 2 * i] = c
    return 6.0 * F.one_hot(torch.tensor(path), v).float()[None]


def test_ctc_decides_the_end_where_attention_alone_loops():
    """An attention decoder that prefers token 3 forever loops to max_len; with CTC (which reads
    '3 4') the joint search reads '3 4' and stops."""
    v, t = 6, 8
    attention = torch.tensor([-9.0, -9.0, 0.0, 2.0, 1.0, -1.0])  # EOS third: loops on 3
    model = Fake(attention, _peaked([3, 4], t, v))
    lengths = torch.tensor([t])
    alone = decode(model, None, lengths, max_len=10, decoding=plain_beam(3))
    assert alone.tokens[0].tolist() == [3] * 10
    joint = decode(model, None, lengths, max_len=10, decoding=plain_beam(3, ctc_weight=0.5))
    assert joint.tokens[0, : int(joint.lengths[0])].tolist() == [3, 4, EOS]


def test_ctc_alone_with_a_wide_beam_is_exhaustive_search():
    g = torch.Generator().manual_seed(0)
    v, t = 5, 4
    ctc = torch.randn(1, t, v, generator=g)
    model = Fake(torch.zeros(v), ctc)
    labels = [3, 4]
    candidates = [list(s) for n in range(0, 4) for s in itertools.product(labels, repeat=n)]
    best = max(candidates, key=lambda s: _ctc_log_prob(model.ctc[0].double(), s))
    got = decode(model, None, torch.tensor([t]), max_len=6, decoding=plain_beam(16, ctc_weight=1.0))
    assert got.tokens[0, : int(got.lengths[0]) - 1].tolist() == best
    assert math.isclose(
        float(got.scores[0]), _ctc_log_prob(model.ctc[0].double(), best), rel_tol=1e-4
    )


def test_ctc_weight_zero_is_plain_beam_search():
    model = Fake(torch.tensor([-9.0, -9.0, -0.5, 0.0, -1.0]), torch.randn(1, 5, 5))
    plain = decode(model, None, torch.tensor([5]), max_len=4, decoding=plain_beam(2))
    assert plain_beam(2, ctc_weight=0.0).method == "beam"
    assert torch.equal(
        plain.tokens,
        decode(
            model, None, torch.tensor([5]), max_len=4, decoding=plain_beam(2, ctc_weight=0.0)
        ).tokens,
    )


class Unigram:
    """A language model that always says ``log_probs``."""

    def __init__(self, log_probs):
        self.log_probs = log_probs

    def start(self, batch_size, device):
        return {"n": torch.zeros(batch_size)}

    def step(self, tokens, state):
        return self.log_probs.expand(len(tokens), -1), state, None


def test_shallow_fusion_adds_the_language_model():
    model = Fake(torch.tensor([-9.0, -9.0, -5.0, 0.0, -0.2]), torch.randn(1, 5, 5))
    lm = Unigram(torch.tensor([-9.0, -9.0, -5.0, -5.0, 0.0]))
    alone = decode(model, None, torch.tensor([5]), max_len=3, decoding=plain_beam(2))
    got = decode(
        model, None, torch.tensor([5]), max_len=3, lm=lm, decoding=plain_beam(2, lm_weight=1.0)
    )
    assert alone.tokens[0].tolist() == [3, 3, 3] and got.tokens[0].tolist() == [4, 4, 4]
    with pytest.raises(ValueError, match="lm: lm_weight=1.0 needs a language model, got None"):
        decode(model, None, torch.tensor([5]), max_len=3, decoding=Decoding(lm_weight=1.0))


@pytest.mark.parametrize(
    "make, inputs, lengths",
    [
        (
            lambda: CRNN(
                12, channels=(4, 4, 8, 8, 8), hidden=8, head="attention", ctc=True, dec_hidden=16
            ),
            torch.rand(2, 1, 32, 40),
            torch.tensor([40, 24]),
        ),
        (
            lambda: LAS(
                12, features=8, listener_hidden=8, hidden=16, emb=8, key_value_dim=8, ctc=True
            ),
            torch.randn(2, 40, 8),
            torch.tensor([40, 24]),
        ),
    ],
    ids=["crnn", "las"],
)
@torch.no_grad()
def test_joint_decoding_runs_on_the_models_ctc_heads(make, inputs, lengths, one_thread):
    torch.manual_seed(0)
    model = make().eval()
    state, log_probs, frames = model.start_joint(inputs, lengths)
    got = decode(
        model, inputs, lengths, max_len=30, decoding=plain_beam(3, ctc_weight=0.4, n_best=2)
    )
    assert got.tokens.shape[:2] == (2, 2) and torch.isfinite(got.scores[:, 0]).all()
    assert (got.lengths[:, 0] <= frames + 1).all()  # CTC bounds the output length
    one = decode(model, inputs, lengths, max_len=30, decoding=Decoding(ctc_weight=0.4))
    assert one.tokens.shape[0] == 2


def test_models_without_a_ctc_head_are_refused():
    model = CRNN(12, channels=(4, 4, 8, 8, 8), hidden=8, head="attention").eval()
    with pytest.raises(ValueError, match="ctc_weight: CRNN has no CTC head to score with"):
        decode(
            model,
            torch.rand(1, 1, 32, 20),
            torch.tensor([20]),
            max_len=5,
            decoding=Decoding(ctc_weight=0.3),
        )
    with pytest.raises(ValueError, match="model: joint decoding needs the attention head"):
        model.start_joint(torch.rand(1, 1, 32, 20), torch.tensor([20]))


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(ctc_weight=1.5), r"ctc_weight: expected a number in \[0, 1\], got 1.5"),
        (dict(lm_weight=-1), r"lm_weight: expected a number in \[0, 100\], got -1"),
        (dict(sample=True, ctc_weight=0.3), "sample: draws one token at a time"),
    ],
)
def test_bad_options(kw, match):
    with pytest.raises(ValueError, match=match):
        Decoding(**kw)


def _labellings_by_enumeration(log_probs, labels):
    """log p(Y | X) of every labelling Y of ``log_probs`` (T, V), by enumerating every path of
    blanks and ``labels`` over the T frames, collapsing it (repeats merged, blanks removed) and
    summing the paths' probabilities per labelling: the definition, slowly."""
    p = log_probs.double().exp()
    total: dict[tuple, float] = {}
    for path in itertools.product([PAD, *labels], repeat=p.shape[0]):
        merged = [c for i, c in enumerate(path) if c != PAD and (i == 0 or c != path[i - 1])]
        prob = math.prod(float(p[t, c]) for t, c in enumerate(path))
        total[tuple(merged)] = total.get(tuple(merged), 0.0) + prob
    return {y: math.log(q) for y, q in total.items() if q > 0}


@given(st.integers(1, 4), st.integers(2, 3), st.integers(0, 2**16))
def test_ctc_prefix_beam_equals_enumerating_every_path(t, n_labels, seed):
    """With a beam as wide as the labellings, CTC prefix beam search (CTC alone) returns every
    labelling with its probability summed over all its paths, best first."""
    g = torch.Generator().manual_seed(seed)
    v = 3 + n_labels
    logits = 2 * torch.randn(1, t, v, generator=g)
    logits[..., [BOS, EOS]] = -math.inf  # the specials are never output
    log_probs = logits.log_softmax(-1)
    want = _labellings_by_enumeration(log_probs[0], list(range(3, v)))
    k = min(len(want), 40)
    got = decode_ctc(
        log_probs,
        torch.tensor([t]),
        decoding=Decoding(beam=40, length_penalty=0.0, n_best=k),
    )
    found = {
        tuple(got.tokens[0, i, : int(got.lengths[0, i]) - 1].tolist()): float(got.scores[0, i])
        for i in range(k)
    }
    ranked = sorted(want.values(), reverse=True)[:k]
    assert sorted(found.values(), reverse=True) == pytest.approx(ranked, abs=1e-4)
    for labelling, score in found.items():
        assert score == pytest.approx(want[labelling], abs=1e-4)
    assert ranked[0] == pytest.approx(float(got.scores[0, 0]), abs=1e-4)


def test_decode_ctc_beam_1_is_the_best_path():
    g = torch.Generator().manual_seed(1)
    log_probs = (3 * torch.randn(3, 12, 7, generator=g)).log_softmax(-1)
    lengths = torch.tensor([12, 7, 1])
    paths = ctc_greedy(log_probs, lengths)
    got = decode_ctc(log_probs, lengths, decoding=Decoding(beam=1))
    assert [row[: int(n) - 1].tolist() for row, n in zip(got.tokens, got.lengths)] == paths.ids


def test_decode_ctc_fuses_a_language_model():
    """Two labellings CTC finds as likely: the LM, which prefers token 4, decides."""
    log_probs = torch.log(torch.tensor([[[0.1, 0, 0, 0.46, 0.44]] * 1]))
    lm = Unigram(torch.tensor([-9.0, -9.0, -1.0, -5.0, -0.5]))
    plain = decode_ctc(log_probs, torch.tensor([1]), decoding=plain_beam(2))
    fused = decode_ctc(log_probs, torch.tensor([1]), decoding=plain_beam(2, lm_weight=1.0), lm=lm)
    assert plain.tokens[0, 0] == 3 and fused.tokens[0, 0] == 4


@pytest.mark.parametrize(
    "kw", [dict(sample=True), dict(ctc_weight=0.5), dict(coverage_penalty=1.0), dict(max_len=3)]
)
def test_decode_ctc_refuses_what_a_ctc_head_cannot_follow(kw):
    name = next(iter(kw))
    with pytest.raises(ValueError, match=rf"^{name}: a CTC head reads the best path or a prefix"):
        decode_ctc(torch.zeros(1, 2, 5), torch.tensor([2]), decoding=Decoding(**kw))
