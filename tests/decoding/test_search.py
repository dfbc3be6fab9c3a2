"""Greedy, sampling and beam search on a small deterministic model."""

import itertools
import math
from typing import NamedTuple

import pytest
import torch
import torch.utils._pytree as pytree
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.decoding import (
    beam_search,
    beam_search_reference,
    greedy,
    length_penalty,
    sample,
    search,
)

PAD, BOS, EOS = 0, 1, 2


class ToyModel:
    """A fixed random recurrent 'language model' over V tokens with attention over Tk inputs.

    State: (hidden (N, H), source (N, Tk, H)). Its log-probs depend on the whole history, so
    greedy and beam search can disagree.
    """

    def __init__(self, vocab=5, hidden=8, seed=0, eos_bias=0.0):
        g = torch.Generator().manual_seed(seed)
        self.emb = torch.randn(vocab, hidden, generator=g)
        self.rec = torch.randn(hidden, hidden, generator=g) / hidden**0.5
        self.out = torch.randn(hidden, vocab, generator=g) * 1.5
        self.out[:, BOS] = -1e4 / hidden  # never emit BOS
        self.bias = torch.zeros(vocab)
        self.bias[EOS] = eos_bias
        self.bias[BOS] = -1e9
        self.bias[PAD] = -1e9

    def init(self, batch, tk=4, seed=1):
        g = torch.Generator().manual_seed(seed)
        return (
            torch.randn(batch, self.emb.shape[1], generator=g),
            torch.randn(batch, tk, self.emb.shape[1], generator=g),
        )

    def step(self, tokens, state):
        h, src = state
        h = torch.tanh(h @ self.rec + self.emb[tokens])
        w = torch.softmax((src @ h[:, :, None])[..., 0], dim=-1)  # (N, Tk)
        ctx = (w[:, None, :] @ src)[:, 0]
        logits = (h + ctx) @ self.out + self.bias
        return torch.log_softmax(logits, dim=-1), (h, src), w


def _score_sequence(model, state, seq):
    """Log-probability of one output sequence for one example (state for batch 1)."""
    total, tok = 0.0, torch.tensor([BOS])
    for t in seq:
        lp, state, _ = model.step(tok, state)
        total += float(lp[0, t])
        tok = torch.tensor([t])
    return total


def _exhaustive(model, state, max_len, alpha):
    vocab = model.emb.shape[0]
    best, best_seq = -math.inf, None
    tokens = [t for t in range(vocab) if t not in (PAD, BOS)]
    for n in range(1, max_len + 1):
        for body in itertools.product([t for t in tokens if t != EOS], repeat=n - 1):
            for last in tokens:
                if n < max_len and last != EOS:
                    continue  # only EOS-terminated, or cut at max_len
                seq = list(body) + [last]
                s = _score_sequence(model, state, seq) / float(
                    length_penalty(torch.tensor(len(seq)), alpha)
                )
                if s > best:
                    best, best_seq = s, seq
    return best, best_seq


def test_beam_of_one_equals_greedy():
    model = ToyModel()
    state = model.init(3)
    g = greedy(model.step, state, batch_size=3, bos=BOS, eos=EOS, max_len=7)
    b = beam_search(model.step, state, batch_size=3, beam_size=1, bos=BOS, eos=EOS, max_len=7)
    assert torch.equal(g.tokens, b.tokens)
    assert torch.equal(g.lengths, b.lengths)
    torch.testing.assert_close(g.scores, b.scores)
    torch.testing.assert_close(g.weights, b.weights)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_wide_beam_equals_exhaustive_search(alpha, seed):
    model = ToyModel(vocab=5, seed=seed)  # 2 real tokens + EOS
    max_len = 4
    state = model.init(2, seed=seed + 10)
    out = beam_search(
        model.step,
        state,
        batch_size=2,
        beam_size=64,
        bos=BOS,
        eos=EOS,
        max_len=max_len,
        alpha=alpha,
    )
    for i in range(2):
        one = (state[0][i : i + 1], state[1][i : i + 1])
        best, seq = _exhaustive(model, one, max_len, alpha)
        n = int(out.lengths[i])
        assert out.tokens[i, :n].tolist() == seq
        assert abs(float(out.scores[i]) - best) < 1e-4


def test_beam_search_finds_better_sequences_than_greedy_somewhere():
    """Not vacuous: on this model beam search beats greedy on some examples."""
    model = ToyModel(vocab=6, seed=3)
    state = model.init(16, seed=4)
    g = greedy(model.step, state, batch_size=16, bos=BOS, eos=EOS, max_len=6)
    b = beam_search(model.step, state, batch_size=16, beam_size=8, bos=BOS, eos=EOS, max_len=6)
    assert (b.scores >= g.scores - 1e-5).all()
    assert (b.scores > g.scores + 1e-3).any()


def test_batched_beam_equals_one_example_at_a_time():
    model = ToyModel(vocab=6, seed=5)
    state = model.init(4, seed=6)
    lim = torch.tensor([3, 6, 5, 2])
    batch = beam_search(
        model.step,
        state,
        batch_size=4,
        beam_size=3,
        bos=BOS,
        eos=EOS,
        max_len=lim,
        alpha=0.6,
        n_best=2,
    )
    for i in range(4):
        one = beam_search(
            model.step,
            (state[0][i : i + 1], state[1][i : i + 1]),
            batch_size=1,
            beam_size=3,
            bos=BOS,
            eos=EOS,
            max_len=int(lim[i]),
            alpha=0.6,
            n_best=2,
        )
        t = one.tokens.shape[-1]
        assert torch.equal(batch.tokens[i, :, :t], one.tokens[0])
        assert (batch.tokens[i, :, t:] == PAD).all()
        torch.testing.assert_close(batch.scores[i], one.scores[0])
    assert (batch.lengths <= lim[:, None]).all()
    assert batch.weights.shape[:2] == (4, 2) and batch.weights.shape[-1] == 4


def test_eos_and_padding():
    model = ToyModel(vocab=5, eos_bias=3.0)  # EOS likely early
    state = model.init(5)
    for out in (
        greedy(model.step, state, batch_size=5, bos=BOS, eos=EOS, max_len=8),
        beam_search(model.step, state, batch_size=5, beam_size=3, bos=BOS, eos=EOS, max_len=8),
    ):
        for i in range(5):
            n = int(out.lengths[i])
            row = out.tokens[i].tolist()
            assert EOS not in row[: n - 1]
            assert row[n - 1] == EOS or n == 8
            assert all(t == PAD for t in row[n:])
            if out.weights is not None:
                assert out.weights[i, n:].abs().sum() == 0
                torch.testing.assert_close(out.weights[i, :n].sum(-1), torch.ones(n))


def test_no_repeat_ngram_blocks_repeats():
    model = ToyModel(vocab=5, seed=7, eos_bias=-5.0)  # long outputs, few tokens: repeats likely
    state = model.init(4)
    plain = beam_search(model.step, state, batch_size=4, beam_size=3, bos=BOS, eos=EOS, max_len=10)

    def has_repeat(seq, n):
        grams = [tuple(seq[i : i + n]) for i in range(len(seq) - n + 1)]
        return len(grams) != len(set(grams))

    assert any(has_repeat(plain.tokens[i, : int(plain.lengths[i])].tolist(), 2) for i in range(4))
    out = beam_search(
        model.step,
        state,
        batch_size=4,
        beam_size=3,
        bos=BOS,
        eos=EOS,
        max_len=10,
        no_repeat_ngram=2,
    )
    for i in range(4):
        assert not has_repeat(out.tokens[i, : int(out.lengths[i])].tolist(), 2)


def test_coverage_penalty_prefers_hypotheses_that_cover_the_source():
    model = ToyModel(vocab=6, seed=8)
    state = model.init(8, tk=6, seed=9)
    kw = dict(batch_size=8, beam_size=6, bos=BOS, eos=EOS, max_len=6, n_best=6)
    plain = beam_search(model.step, state, **kw)
    covered = beam_search(model.step, state, beta=5.0, **kw)

    def coverage(out):
        acc = out.weights[:, 0].sum(1)  # (B, Tk) accumulated attention of the best hypothesis
        return torch.log(acc.clamp(max=1.0).clamp(min=1e-9)).sum(-1)

    assert (coverage(covered) >= coverage(plain) - 1e-5).all()
    assert (coverage(covered) > coverage(plain) + 1e-4).any()


def test_sampling_is_seeded_and_respects_top_k_and_top_p():
    model = ToyModel(vocab=7, seed=10)
    state = model.init(32)
    kw = dict(batch_size=32, bos=BOS, eos=EOS, max_len=6)
    a = sample(model.step, state, generator=torch.Generator().manual_seed(0), **kw)
    b = sample(model.step, state, generator=torch.Generator().manual_seed(0), **kw)
    assert torch.equal(a.tokens, b.tokens)
    g = greedy(model.step, state, **kw)
    for extra in (dict(top_k=1), dict(top_p=1e-6), dict(temperature=1e-4)):
        s = sample(model.step, state, generator=torch.Generator().manual_seed(1), **kw, **extra)
        assert torch.equal(s.tokens, g.tokens), extra
    wide = sample(model.step, state, generator=torch.Generator().manual_seed(2), **kw)
    assert not torch.equal(wide.tokens, g.tokens)  # plain sampling does differ
    # top_k=2: every token is one of the two most probable at its step.
    s = sample(model.step, state, generator=torch.Generator().manual_seed(3), top_k=2, **kw)
    tok, st = torch.full((32,), BOS), state
    for t in range(s.tokens.shape[1]):
        lp, st, _ = model.step(tok, st)
        top2 = lp.topk(2, dim=-1).indices
        live = t < s.lengths
        assert ((s.tokens[:, t : t + 1] == top2).any(-1) | ~live).all()
        tok = s.tokens[:, t].clamp(min=0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(beam_size=0), r"^beam_size: expected an int in \[1, 256\], got 0"),
        (dict(beam_size=2, n_best=3), r"^n_best: expected an int in \[1, beam_size=2\], got 3"),
        (dict(max_len=0), r"^max_len: expected values >= 1, got min 0"),
        (dict(max_len=torch.tensor([3])), r"^max_len: expected an int or a \(2,\) tensor"),
        (dict(no_repeat_ngram=-1), r"^no_repeat_ngram: expected a non-negative int"),
    ],
)
def test_beam_search_rejects_bad_arguments(kwargs, match):
    model = ToyModel()
    args = dict(batch_size=2, beam_size=2, bos=BOS, eos=EOS, max_len=4) | kwargs
    with pytest.raises(ValueError, match=match):
        beam_search(model.step, model.init(2), **args)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(temperature=0), r"^temperature: expected a positive number"),
        (dict(top_k=0), r"^top_k: expected a positive int"),
        (dict(top_p=1.5), r"^top_p: expected a probability in \(0, 1\]"),
        (dict(num_samples=0), r"^num_samples: expected a positive int, got 0"),
    ],
)
def test_sample_rejects_bad_arguments(kwargs, match):
    model = ToyModel()
    with pytest.raises(ValueError, match=match):
        sample(model.step, model.init(2), batch_size=2, bos=BOS, eos=EOS, max_len=3, **kwargs)


@pytest.mark.parametrize("eos_bias", [0.0, 2.0])
def test_every_returned_hypothesis_scores_what_the_model_says(eos_bias):
    """Rescoring each of the n-best sequences from scratch gives its reported score: the state,
    finished flags and histories all followed their beams through every reordering."""
    model = ToyModel(vocab=6, seed=11, eos_bias=eos_bias)
    state = model.init(3, seed=12)
    out = beam_search(
        model.step, state, batch_size=3, beam_size=4, bos=BOS, eos=EOS, max_len=7, n_best=4
    )
    for i in range(3):
        one = (state[0][i : i + 1], state[1][i : i + 1])
        for j in range(4):
            n = int(out.lengths[i, j])
            seq = out.tokens[i, j, :n].tolist()
            assert EOS not in seq[:-1] and all(t == PAD for t in out.tokens[i, j, n:].tolist())
            assert abs(_score_sequence(model, one, seq) - float(out.scores[i, j])) < 1e-4


def test_several_samples_per_example_are_ranked_by_what_the_model_says():
    model = ToyModel(vocab=6, seed=11)
    state = model.init(3, seed=12)
    out = sample(
        model.step,
        state,
        batch_size=3,
        bos=BOS,
        eos=EOS,
        max_len=7,
        num_samples=5,
        temperature=2.0,
        generator=torch.Generator().manual_seed(4),
    )
    assert out.tokens.shape[:2] == (3, 5) and out.weights.shape[:2] == (3, 5)
    for i in range(3):
        one = (state[0][i : i + 1], state[1][i : i + 1])
        scores = [
            _score_sequence(model, one, out.tokens[i, j, : int(out.lengths[i, j])].tolist())
            for j in range(5)
        ]
        assert scores == pytest.approx(out.scores[i].tolist(), abs=1e-4)
        assert scores == sorted(scores, reverse=True) and len(set(scores)) > 1
    assert torch.equal(out.best().tokens, out.tokens[:, 0])


def test_unfinished_outputs_never_emit_pad_or_bos():
    """Even when the model prefers them (label smoothing gives them mass), they are skipped."""
    vocab = 5

    def step(tokens, state):
        lp = torch.log_softmax(torch.tensor([[5.0, 4.0, -1.0, 1.0, 0.5]]), -1)
        return lp.expand(tokens.shape[0], vocab), state, None

    state = torch.zeros(2, 1)
    for out in (
        greedy(step, state, batch_size=2, bos=BOS, eos=EOS, max_len=4),
        beam_search(step, state, batch_size=2, beam_size=3, bos=BOS, eos=EOS, max_len=4),
        sample(
            step,
            state,
            batch_size=2,
            bos=BOS,
            eos=EOS,
            max_len=4,
            generator=torch.Generator().manual_seed(0),
        ),
    ):
        for row, n in zip(out.tokens, out.lengths):
            assert (row[:n] >= 2).all() and (row[n:] == PAD).all(), out.tokens
    g = greedy(step, state, batch_size=2, bos=BOS, eos=EOS, max_len=4)
    assert (g.tokens == 3).all()  # the best token that is neither pad nor bos


def _trimmed(hyp):
    """Tokens and weights without the trailing all-pad steps (a search that stops earlier
    returns fewer of them)."""
    t = int(hyp.lengths.max())
    return hyp.tokens[..., :t], None if hyp.weights is None else hyp.weights[..., :t, :]


@pytest.mark.parametrize(
    "alpha, beta, n_best, eos_bias, sooner",
    [
        (0.0, 0.0, 1, 1.0, True),
        (0.6, 0.0, 2, 0.5, True),
        (0.0, 0.5, 1, 2.0, True),
        (1.0, 0.3, 3, 0.0, False),  # a weak bound: lp(40) lets live hypotheses hope to the end
    ],
)
def test_beam_search_stops_when_finished_hypotheses_cannot_be_beaten_with_the_same_result(
    monkeypatch, alpha, beta, n_best, eos_bias, sooner
):
    from attnkit.decoding import search

    model = ToyModel(vocab=6, seed=3, eos_bias=eos_bias)
    kw = dict(
        batch_size=5,
        beam_size=4,
        bos=BOS,
        eos=EOS,
        max_len=torch.tensor([40, 3, 25, 40, 12]),
        alpha=alpha,
        beta=beta,
        n_best=n_best,
        loop_stop=False,
    )  # the toy model loops: without the check, the bound alone stops it
    calls = []

    def counted(tokens, state):
        calls.append(1)
        return model.step(tokens, state)

    early = beam_search(counted, model.init(5), **kw)
    steps_early = len(calls)
    monkeypatch.setattr(
        search, "_settled", lambda rank, scores, *a: torch.zeros(scores.shape[0], dtype=torch.bool)
    )
    full = beam_search(counted, model.init(5), **kw)
    assert (steps_early < len(calls) - steps_early) == sooner
    for a, b in zip(_trimmed(early), _trimmed(full)):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(early.lengths, full.lengths)
    torch.testing.assert_close(early.scores, full.scores)


def test_weights_are_kept_only_when_asked_for():
    model = ToyModel(seed=2)
    kw = dict(batch_size=3, bos=BOS, eos=EOS, max_len=6)
    for search_fn, extra in ((greedy, {}), (beam_search, {"beam_size": 3, "beta": 0.4})):
        kept = search_fn(model.step, model.init(3), **kw, **extra)
        lean = search_fn(model.step, model.init(3), **kw, **extra, weights=False)
        assert kept.weights is not None and lean.weights is None
        assert torch.equal(kept.tokens, lean.tokens)  # the coverage penalty still counts


def test_beam_search_does_not_copy_what_a_step_hands_back_untouched():
    model = ToyModel(seed=3)
    seen = []

    def step(tokens, state):
        seen.append(state[1])
        return model.step(tokens, state)

    hyp = beam_search(
        step,
        model.init(3),
        batch_size=3,
        beam_size=4,
        bos=BOS,
        eos=EOS,
        pad=PAD,
        max_len=6,
        loop_stop=False,
    )
    # the repeated source, kept while the batch does not shrink
    assert len(seen) > 2 and seen[1] is seen[0]
    assert all(b is a for a, b in zip(seen, seen[1:]) if len(a) == len(b))
    ref = beam_search_reference(
        model.step,
        model.init(3),
        batch_size=3,
        beam_size=4,
        bos=BOS,
        eos=EOS,
        pad=PAD,
        max_len=6,
        loop_stop=False,
    )
    assert torch.equal(hyp.tokens, ref.tokens) and torch.equal(hyp.scores, ref.scores)


def test_beam_search_reorders_a_state_tensor_changed_in_place():
    """A step that accumulates into a state tensor in place gets the same search as one that
    makes a new tensor: the in-place change marks the tensor as no longer the same in every
    beam, so it is reordered (seed, vocabulary and EOS bias chosen so that beams do get
    reordered: reusing the tensor unreordered changes the scores by 0.34)."""
    model = ToyModel(vocab=12, seed=3, eos_bias=-4.0)

    def stepper(in_place):
        def step(tokens, state):
            h, src, acc = state
            log_probs, (h, src), w = model.step(tokens, (h + 0.3 * acc, src))
            acc = acc.add_(h) if in_place else acc + h
            return log_probs, (h, src, acc), w

        return step

    def search(in_place):
        h, src = model.init(2)
        return beam_search(
            stepper(in_place),
            (h, src, torch.zeros_like(h)),
            batch_size=2,
            beam_size=3,
            bos=BOS,
            eos=EOS,
            pad=PAD,
            max_len=7,
            loop_stop=False,
        )

    a, b = search(True), search(False)
    assert torch.equal(a.tokens, b.tokens)
    torch.testing.assert_close(a.scores, b.scores)


def _token_log_probs(model, state, seq):
    """Each token's log-probability, fed the sequence before it (one example)."""
    out, tok = [], torch.tensor([BOS])
    for t in seq:
        lp, state, _ = model.step(tok, state)
        out.append(float(lp[0, t]))
        tok = torch.tensor([t])
    return out


@pytest.mark.parametrize("search", ["greedy", "beam", "sample"])
def test_each_tokens_score_is_what_the_model_says_fed_the_tokens_before_it(search):
    model = ToyModel(vocab=6, seed=11, eos_bias=1.0)
    state = model.init(3, seed=12)
    kw = dict(batch_size=3, bos=BOS, eos=EOS, max_len=7)
    out = {
        "greedy": lambda: greedy(model.step, state, **kw),
        "beam": lambda: beam_search(model.step, state, beam_size=4, n_best=3, **kw),
        "sample": lambda: sample(
            model.step, state, num_samples=3, **kw, generator=torch.Generator().manual_seed(4)
        ),
    }[search]()
    tokens, scores, lengths = out.tokens, out.token_scores, out.lengths
    if lengths.dim() == 1:
        tokens, scores, lengths = tokens[:, None], scores[:, None], lengths[:, None]
    for i in range(3):
        one = (state[0][i : i + 1], state[1][i : i + 1])
        for j in range(lengths.shape[1]):
            n = int(lengths[i, j])
            expected = _token_log_probs(model, one, tokens[i, j, :n].tolist())
            assert scores[i, j, :n].tolist() == pytest.approx(expected, abs=1e-5)
            assert scores[i, j, n:].abs().sum() == 0  # nothing past the end
            summed = out.scores[i, j] if out.scores.dim() == 2 else out.scores[i]
            assert float(summed) == pytest.approx(sum(expected), abs=1e-4)  # alpha = 0


class _Pair(NamedTuple):
    first: torch.Tensor
    rest: list


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_map_tensors_walks_a_state_as_torch_pytree_does(data):
    # The reference: torch's own pytree, which beam search's state walk stands in for.
    tensors = st.integers(1, 4).map(lambda n: torch.randn(n, 2))
    others = st.sampled_from([None, 3, "text", torch.nn.Identity(), True])
    leaves = st.one_of(tensors, others)
    states = st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.lists(inner, max_size=3).map(tuple),
            st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
            st.tuples(tensors, st.lists(inner, max_size=2)).map(lambda p: _Pair(*p)),
        ),
        max_leaves=12,
    )
    state = data.draw(states)
    double = lambda x: x * 2  # noqa: E731
    ours = search.map_tensors(double, state)
    theirs = pytree.tree_map(lambda x: double(x) if isinstance(x, torch.Tensor) else x, state)
    assert pytree.tree_structure(ours) == pytree.tree_structure(theirs)
    for a, b in zip(pytree.tree_leaves(ours), pytree.tree_leaves(theirs)):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b)
        else:
            assert a is b
    expected = [x for x in pytree.tree_leaves(state) if isinstance(x, torch.Tensor)]
    found = search.tensors_in(state)
    assert len(found) == len(expected) and all(a is b for a, b in zip(found, expected))
