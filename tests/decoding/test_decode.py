"""The decoding front door: one Decoding, one decode() for every model."""

import copy

import pytest
import torch

from attnkit.decoding import (
    DEFAULT_LENGTH_PENALTY,
    MAX_OUTPUT_TOKENS,
    Decoding,
    beam_search,
    decode,
    decode_batches,
    greedy,
    length_penalty,
    sample,
)
from attnkit.models import Seq2Seq
from attnkit.tokens import EOS
from tests.float32_bounds import assert_within_normwise
from tests.models.toy import seq2seq_operations, toy_batch


def _model():
    torch.manual_seed(0)
    return Seq2Seq(11, 13, emb=8, hidden=12, kind="bahdanau").eval()


def _direct(model, src, src_len, fn, **kw):
    return fn(
        model.step, model.start(src, src_len), batch_size=3, bos=1, eos=2, pad=0, max_len=6, **kw
    )


@torch.no_grad()
def test_each_method_is_the_search_it_names():
    model = _model()
    src, src_len, _ = toy_batch()
    got = decode(model, src, src_len, max_len=6)
    assert torch.equal(got.tokens, _direct(model, src, src_len, greedy).tokens)
    options = Decoding(beam=3, length_penalty=0.6, no_repeat_ngram=2, n_best=2)
    got = decode(model, src, src_len, max_len=6, decoding=options)
    want = _direct(
        model, src, src_len, beam_search, beam_size=3, alpha=0.6, no_repeat_ngram=2, n_best=2
    )
    assert got.tokens.shape[:2] == (3, 2) and torch.equal(got.tokens, want.tokens)
    assert torch.equal(got.best().tokens, want.tokens[:, 0])
    drawn = Decoding(sample=True, temperature=1.5, top_k=5, seed=3)
    got = decode(
        model,
        src,
        src_len,
        max_len=6,
        decoding=drawn,
        generator=drawn.generator("cpu"),
        weights=True,
    )
    want = _direct(
        model,
        src,
        src_len,
        sample,
        temperature=1.5,
        top_k=5,
        generator=torch.Generator().manual_seed(3),
    )
    assert torch.equal(got.tokens, want.tokens)


def test_methods_and_generators():
    assert Decoding().method == "greedy" and Decoding(beam=2).method == "beam"
    assert Decoding(no_repeat_ngram=3).method == "beam"  # beam search of one hypothesis
    assert Decoding(no_repeat_ngram=3).length_penalty == 0.0


def test_a_beam_normalises_by_length_unless_told_otherwise():
    assert Decoding(beam=4).length_penalty == DEFAULT_LENGTH_PENALTY == 1.0
    assert Decoding(beam=4) == Decoding(beam=4, length_penalty=1.0)
    assert Decoding(beam=4, length_penalty=0.0).length_penalty == 0.0
    assert Decoding().length_penalty == 0.0 and Decoding().method == "greedy"
    assert Decoding(beam=4).describe() == "beam=4, length_penalty=1.0"
    assert Decoding(beam=4, length_penalty=0.0).describe() == "beam=4"
    assert Decoding(length_penalty=0.5).describe() == "length_penalty=0.5"
    assert Decoding(sample=True).method == "sample" and Decoding().generator("cpu") is None
    a, b = Decoding(seed=1).generator("cpu"), Decoding(seed=1).generator("cpu")
    assert torch.equal(torch.rand(3, generator=a), torch.rand(3, generator=b))


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(beam=0), r"beam: expected an int in \[1, 256\], got 0"),
        (dict(beam=2.0), r"beam: expected an int in \[1, 256\], got 2.0"),
        (dict(beam=257), r"beam: expected an int in \[1, 256\], got 257"),
        (dict(beam=2, n_best=3), r"n_best: expected an int in \[1, beam=2\], got 3"),
        (dict(no_repeat_ngram=-1), "no_repeat_ngram: expected a non-negative int, got -1"),
        (dict(length_penalty=-0.1), r"length_penalty: expected a number in \[0, 10\], got -0.1"),
        (dict(sample=True, beam=4), "sample: draws one token at a time, not with beam=4"),
        (dict(sample=True, coverage_penalty=0.2), "sample: .* not with beam=1 and beam options"),
    ],
)
def test_bad_options_name_the_argument(kw, match):
    with pytest.raises(ValueError, match=match):
        Decoding(**kw)


@torch.no_grad()
def test_decode_batches_decodes_every_item_in_order_with_one_generator():
    model = _model()
    src, src_len, _ = toy_batch()
    items = list(range(3))
    seen = []

    def collate(chunk):
        seen.append(list(chunk))
        return src[chunk], src_len[chunk]

    drawn = Decoding(sample=True, seed=7)
    batches = list(
        decode_batches(model, items, collate, max_len=lambda n: n + 2, decoding=drawn, batch_size=2)
    )
    assert seen == [[0, 1], [2]] and [list(c) for c, _ in batches] == [[0, 1], [2]]
    assert not model.training
    g = drawn.generator("cpu")  # one generator across the batches: the same draws as in one go
    first = decode(
        model, src[:2], src_len[:2], max_len=src_len[:2] + 2, decoding=drawn, generator=g
    )
    second = decode(
        model, src[2:], src_len[2:], max_len=src_len[2:] + 2, decoding=drawn, generator=g
    )
    assert torch.equal(batches[0][1].tokens, first.tokens)
    assert torch.equal(batches[1][1].tokens, second.tokens)


def _assert_scores_within(model64, src, src_len, tokens, scores):
    """Each float32 score of ``tokens`` (pad after the end) within a bound of their
    log-probabilities under ``model64`` teacher-forced, summed in float64: each step's
    log-probabilities within a normwise bound of that step's float64 row (the chain of
    seq2seq_operations), then the float32 sum over the tokens, ``gamma(T) sum |lp|``; so
    within ``4 gamma(operations + T)`` of the sum of the rows' largest values."""
    tgt_in = torch.cat([torch.ones_like(tokens[:, :1]), tokens[:, :-1]], dim=1)
    rows = model64(src, src_len, tgt_in)[0].log_softmax(-1)  # (N, T, V)
    kept = tokens != 0
    want = (rows.gather(2, tokens[..., None])[..., 0] * kept).sum(1)  # (N,)
    scale = (rows.abs().amax(-1) * kept).sum(1)
    operations = seq2seq_operations(model64, src.shape[1], tokens.shape[1]) + tokens.shape[1]
    assert_within_normwise(
        list(want), operations, dict(enumerate(scale.tolist())), decoded=list(scores)
    )


@torch.no_grad()
def test_samples_are_the_draws_of_a_repeated_batch_ranked_by_model_score():
    model = _model()
    src, src_len, _ = toy_batch()
    drawn = Decoding(sample=True, samples=4, temperature=2.0, seed=11)
    got = decode(
        model,
        src,
        src_len,
        max_len=6,
        decoding=drawn,
        generator=drawn.generator("cpu"),
        weights=True,
    )
    assert got.tokens.shape[:2] == (3, 4) and got.scores.shape == (3, 4)
    repeated = torch.arange(3).repeat_interleave(4)
    plain = sample(
        model.step,
        model.start(src[repeated], src_len[repeated]),
        batch_size=12,
        bos=1,
        eos=2,
        pad=0,
        max_len=6,
        temperature=2.0,
        generator=torch.Generator().manual_seed(11),
    )
    # Each score (float32: the drawn tokens' log-probabilities added one step at a time)
    # within a bound of the drawn tokens rescored teacher-forced in float64
    model64 = copy.deepcopy(model).double()
    _assert_scores_within(model64, src[repeated], src_len[repeated], plain.tokens, plain.scores)
    _assert_scores_within(
        model64, src[repeated], src_len[repeated], got.tokens.flatten(0, 1), got.scores.flatten()
    )
    for b in range(3):  # the same draws, each example's best (highest log-probability) first
        mine = plain.scores[4 * b : 4 * b + 4]
        assert sorted(map(tuple, got.tokens[b].tolist())) == sorted(
            map(tuple, plain.tokens[4 * b : 4 * b + 4].tolist())
        )
        assert bool((got.scores[b, :-1] >= got.scores[b, 1:]).all())
        assert torch.equal(got.best().tokens[b], plain.tokens[4 * b + int(mine.argmax())])
        assert len({tuple(t.tolist()) for t in got.tokens[b]}) > 1  # not one draw four times
    assert got.weights.shape[:2] == (3, 4)


@torch.no_grad()
def test_max_len_replaces_the_callers_limit():
    model = _model()
    src, src_len, _ = toy_batch()
    for decoding in (
        Decoding(max_len=2),
        Decoding(beam=2, max_len=2),
        Decoding(sample=True, samples=2, seed=0, max_len=2),
    ):
        got = decode(model, src, src_len, max_len=6, decoding=decoding)
        assert got.tokens.shape[-1] <= 2 and int(got.lengths.max()) <= 2
    longer = decode(model, src, src_len, max_len=1, decoding=Decoding(max_len=6))
    assert longer.tokens.shape[-1] > 1


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(samples=3), "samples: expected 1 without sample=True, else a positive int, got 3"),
        (dict(sample=True, samples=0), "samples: expected .*, got 0"),
        (dict(max_len=0), r"max_len: expected None or an int in \[1, 10000\], got 0"),
    ],
)
def test_bad_sampling_and_length_options_name_the_argument(kw, match):
    with pytest.raises(ValueError, match=match):
        Decoding(**kw)


@torch.no_grad()
def test_attention_weights_are_kept_only_when_asked_for():
    model = _model()
    src, src_len, _ = toy_batch()
    for decoding in (Decoding(), Decoding(beam=3)):
        lean = decode(model, src, src_len, max_len=6, decoding=decoding)
        kept = decode(model, src, src_len, max_len=6, decoding=decoding, weights=True)
        assert lean.weights is None and kept.weights.shape[:2] == kept.tokens.shape
        assert torch.equal(lean.tokens, kept.tokens)


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("temperature", float("inf"), r"a number in \[0.001, 1000\]"),
        ("temperature", float("nan"), r"a number in \[0.001, 1000\]"),
        ("temperature", 0.0, r"a number in \[0.001, 1000\]"),
        ("top_p", float("nan"), r"a probability in \(0, 1\]"),
        ("top_p", 0.0, r"a probability in \(0, 1\]"),
        ("top_k", 0, "a positive int"),
        ("length_penalty", float("inf"), r"a number in \[0, 10\]"),
        ("coverage_penalty", float("nan"), r"a number in \[0, 100\]"),
        ("lm_weight", float("inf"), r"a number in \[0, 100\]"),
        # finite, but past float32 once applied: "2001-03-33" for "2001-03-03", exit 0
        ("length_penalty", 100, r"a number in \[0, 10\]"),
        ("coverage_penalty", 1e38, r"a number in \[0, 100\]"),
        ("lm_weight", 1e38, r"a number in \[0, 100\]"),
        # finite, but the logits over it overflowed (a traceback from torch.multinomial)
        ("temperature", 1e-300, r"a number in \[0.001, 1000\]"),
        ("temperature", 1e300, r"a number in \[0.001, 1000\]"),
        ("seed", 2**64, r"None or an int in \[0, 2\*\*63 - 1\]"),
        ("seed", -1, r"None or an int in \[0, 2\*\*63 - 1\]"),
    ],
)
def test_decoding_refuses_non_finite_and_out_of_range_settings_by_name(field, value, expected):
    sampling = field in ("temperature", "top_p", "top_k", "seed")
    with pytest.raises(ValueError, match=rf"^{field}: expected {expected}, got "):
        Decoding(**({"sample": True} if sampling else {"beam": 2}), **{field: value})


def test_the_largest_penalties_allowed_stay_finite_in_float32():
    from attnkit.decoding.front import MAX_COVERAGE_PENALTY, MAX_LENGTH_PENALTY

    longest = torch.tensor([MAX_OUTPUT_TOKENS])
    assert torch.isfinite(length_penalty(longest, MAX_LENGTH_PENALTY)).all()
    # the coverage penalty's worst term: the least positive float32 weight, on 1e6 keys
    tiny = torch.full((1, 10**6), torch.finfo(torch.float32).smallest_normal / 2**23)
    assert torch.isfinite(MAX_COVERAGE_PENALTY * torch.log(tiny).sum(-1)).all()


def test_every_output_stops_at_the_one_cap_whatever_the_limit_asked(monkeypatch):
    from attnkit.decoding import front

    with pytest.raises(
        ValueError,
        match=r"^max_len: expected None or an int in \[1, 10000\], "
        r"got 10000001$",
    ):
        Decoding(max_len=10_000_001)
    monkeypatch.setattr(front, "MAX_OUTPUT_TOKENS", 5)
    model = _model()
    with torch.no_grad():  # never emits EOS: every output runs to its limit
        model.decoder.out.bias[EOS] = -1e4
    src, src_len, _ = toy_batch()
    for limit in (10**9, torch.full((src.shape[0],), 10**9)):
        for decoding in (
            Decoding(loop_stop=False),
            Decoding(beam=2, loop_stop=False),
            Decoding(sample=True, seed=0, loop_stop=False),
        ):
            hyp = decode(model, src, src_len, max_len=limit, decoding=decoding)
            assert hyp.tokens.shape[-1] == 5, decoding


@pytest.mark.parametrize("decoding", [Decoding(), Decoding(beam=3, n_best=2)])
@torch.no_grad()
def test_decode_batches_sorts_by_length_and_yields_in_input_order(decoding):
    """Batches are made of the longest inputs first; what comes out is in input order, each
    item's output that of the item decoded alone (tokens, lengths, scores; weights padded)."""
    model = _model()
    g = torch.Generator().manual_seed(5)
    sizes = [2, 7, 1, 5, 6, 3, 4]
    items = [torch.randint(4, 11, (n,), generator=g) for n in sizes]
    seen = []

    def collate(chunk):
        seen.append([len(x) for x in chunk])
        lengths = torch.tensor([len(x) for x in chunk])
        src = torch.zeros(len(chunk), int(lengths.max()), dtype=torch.long)
        for i, x in enumerate(chunk):
            src[i, : len(x)] = x
        return src, lengths

    batches = list(
        decode_batches(
            model,
            items,
            collate,
            max_len=lambda n: n + 3,
            decoding=decoding,
            batch_size=3,
            weights=True,
        )
    )
    assert seen == [[7, 6, 5], [4, 3, 2], [1]]
    assert [[len(x) for x in chunk] for chunk, _ in batches] == [[2, 7, 1], [5, 6, 3], [4]]
    for chunk, hyp in batches:
        for i, item in enumerate(chunk):
            alone = decode(
                model,
                item[None],
                torch.tensor([len(item)]),
                max_len=len(item) + 3,
                decoding=decoding,
                weights=True,
            )
            t, n = alone.tokens.shape[-1], len(item)
            assert torch.equal(hyp.tokens[i][..., :t], alone.tokens[0])
            assert (hyp.tokens[i][..., t:] == 0).all()
            assert torch.equal(hyp.lengths[i], alone.lengths[0])
            torch.testing.assert_close(hyp.scores[i], alone.scores[0])
            torch.testing.assert_close(hyp.weights[i][..., :t, :n], alone.weights[0])
            assert (hyp.weights[i][..., n:] == 0).all()


@pytest.mark.parametrize("size", [0, -2, 10**7, 2.5, True])
def test_decode_batches_refuses_a_bad_batch_size_by_name(size):
    with pytest.raises(ValueError, match=r"^batch_size: expected an int in \[1, 65536\], got"):
        next(decode_batches(_model(), [1], lambda c: c, max_len=len, batch_size=size))
