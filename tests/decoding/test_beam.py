"""The shrinking beam search (attnkit.decoding.beam) against its slow reference
(attnkit.decoding.search.beam_search_reference) on every decoder family and the built-in
models, and its bad options."""

from pathlib import Path

import pytest
import torch

from attnkit.decoding import Decoding, beam_search, beam_search_reference, decode
from attnkit.models import LAS, Captioner, Seq2Seq, Transformer
from attnkit.tokens import BOS, EOS, PAD
from tests.models.toy import toy_batch

pytestmark = pytest.mark.usefixtures("one_thread")

# Per example its output limit: examples end at different steps, so the batch shrinks.
LIMITS = torch.tensor([9, 2, 5, 12, 1, 7])


def _seq2seq():
    return Seq2Seq(11, 13, emb=8, hidden=12, kind="bahdanau"), toy_batch(b=3)[:2]


def _transformer():
    model = Transformer(11, 13, d_model=16, heads=2, layers=2, dropout=0.0)
    return model, toy_batch(b=3)[:2]


def _las():
    model = LAS(9, features=6, listener_hidden=8, hidden=12, emb=6, key_value_dim=8, ctc=True)
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor([12, 8, 16])
    return model, (torch.randn(3, 16, 6, generator=g), lengths)


def _captioner():
    model = Captioner(11, image_size=16, channels=(4, 8), hidden=8, emb=6, attn_dim=5)
    g = torch.Generator().manual_seed(2)
    images = torch.rand(3, 3, 16, 16, generator=g)
    return model, (images, torch.full((3,), model.cells))


FAMILIES = {"seq2seq": _seq2seq, "transformer": _transformer, "las": _las, "captioner": _captioner}


def _fewer_ends(step, by: float = 2.0):
    """``step`` with EOS ``exp(by)`` times less likely (random weights end at once too often
    for outputs of many lengths)."""

    def fewer(tokens, state):
        log_probs, state, weights = step(tokens, state)
        log_probs = log_probs.clone()
        log_probs[:, EOS] -= by
        return log_probs.log_softmax(-1), state, weights

    return fewer


def _counting(step, sizes):
    def counted(tokens, state):
        sizes.append(int(tokens.shape[0]))
        return step(tokens, state)

    return counted


def assert_same_hypotheses(got, want, atol=1e-5):
    """Tokens, lengths and loop flags equal; scores, token scores and weights within ``atol``
    (the two searches step the model on batches of different sizes)."""
    assert torch.equal(got.tokens, want.tokens)
    assert torch.equal(got.lengths, want.lengths)
    assert (got.looped is None) == (want.looped is None)
    if got.looped is not None:
        assert torch.equal(got.looped, want.looped)
    torch.testing.assert_close(got.scores, want.scores, atol=atol, rtol=0)
    torch.testing.assert_close(got.token_scores, want.token_scores, atol=atol, rtol=0)
    assert (got.weights is None) == (want.weights is None)
    if got.weights is not None:
        torch.testing.assert_close(got.weights, want.weights, atol=atol, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(
    "options",
    [
        dict(beam_size=4),
        dict(beam_size=3, alpha=0.6, beta=0.2, n_best=3),
        dict(beam_size=5, alpha=1.0, no_repeat_ngram=2, n_best=2, loop_stop=False),
        dict(beam_size=1),
        dict(beam_size=4, alpha=1.0, stop="best"),
        dict(beam_size=5, alpha=0.6, n_best=3, no_repeat_ngram=2, stop="best"),
    ],
)
@torch.no_grad()
def test_the_shrinking_search_equals_the_reference_on_every_family(family, options):
    torch.manual_seed(0)
    model, (inputs, lengths) = FAMILIES[family]()
    model = model.double().eval()
    step = _fewer_ends(model.step)
    if inputs.is_floating_point():
        inputs = inputs.double()
    # the same three examples twice, each time with other limits
    inputs, lengths = torch.cat([inputs, inputs]), torch.cat([lengths, lengths])
    sizes: list[int] = []
    kw = dict(batch_size=6, bos=BOS, eos=EOS, pad=PAD, max_len=LIMITS, weights=True, **options)
    want = beam_search_reference(step, model.start(inputs, lengths), **kw)
    got = beam_search(_counting(step, sizes), model.start(inputs, lengths), **kw)
    assert_same_hypotheses(got, want)
    k = options["beam_size"]
    assert sizes[0] == 6 * k and sizes[-1] < 6 * k  # the batch shrank
    assert len(sizes) == want.tokens.shape[-1]  # as many steps as the reference's outputs


@torch.no_grad()
def test_an_example_leaves_when_it_can_no_longer_improve():
    """A step whose example 0 ends at once (EOS far ahead) while example 1 runs to its limit:
    example 0's rows leave the batch after the first step."""
    vocab = 6

    def step(tokens, state):
        n = tokens.shape[0]
        log_probs = torch.full((n, vocab), -5.0)
        first = state["example"] == 0
        log_probs[:, EOS] = torch.where(first, -0.01, -9.0)
        log_probs[:, 4] = torch.where(first, -8.0, -0.1)
        return log_probs.log_softmax(-1), state, None

    state = {"example": torch.tensor([0, 1])}
    sizes: list[int] = []
    kw = dict(batch_size=2, beam_size=3, bos=BOS, eos=EOS, pad=PAD, max_len=8, alpha=0.0)
    want = beam_search_reference(step, state, **kw)
    got = beam_search(_counting(step, sizes), state, **kw)
    assert_same_hypotheses(got, want)
    assert got.tokens[0, 0] == EOS and got.lengths.tolist() == [1, 8]
    assert sizes == [6] + [3] * 7


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(beam_size=0), r"^beam_size: expected an int in \[1, 256\], got 0$"),
        (dict(beam_size=-3), r"^beam_size: expected an int in \[1, 256\], got -3$"),
        (dict(beam_size=10**9), r"^beam_size: expected an int in \[1, 256\], got 1000000000$"),
        (dict(beam_size=True), r"^beam_size: expected an int"),
        (dict(beam_size=2, batch_size=0), r"^batch_size: expected a positive int, got 0$"),
        (dict(beam_size=2, batch_size=-1), r"^batch_size: expected a non-negative int"),
        (dict(beam_size=2, n_best=3), r"^n_best: expected an int in \[1, beam_size=2\]"),
        (dict(beam_size=2, stop="first"), r"^stop: expected one of bound, best, got 'first'$"),
    ],
)
def test_bad_beam_options_name_the_option(kw, match):
    kw = dict(batch_size=1, bos=BOS, eos=EOS, max_len=3) | kw
    with pytest.raises(ValueError, match=match):
        beam_search(lambda t, s: (torch.zeros(1, 5), s, None), None, **kw)


@pytest.mark.parametrize("beam", [0, -1, 10**6])
def test_a_decoding_refuses_a_bad_beam_by_name(beam):
    with pytest.raises(ValueError, match=r"^beam: expected an int in \[1, 256\], got"):
        Decoding(beam=beam)


def _builtin(name):
    from attnkit.tasks import loading

    ev = loading.load_evaluator(Path(f"builtin:{name}"))
    ev.model.eval()
    return ev


def _both(monkeypatch, run):
    """``run()`` with the shrinking search, then with the reference in its place."""
    import attnkit.decoding.ctc_prefix as ctc_prefix
    import attnkit.decoding.front as front

    got = run()
    monkeypatch.setattr(front, "beam_search", beam_search_reference)
    monkeypatch.setattr(ctc_prefix, "beam_search", beam_search_reference)
    return got, run()


@torch.no_grad()
def test_builtin_translate_dates_decodes_as_the_reference(monkeypatch):
    from attnkit.data.worlds.text_tasks import generate_pairs
    from attnkit.tasks.translate import translate_texts

    ev = _builtin("translate-dates")
    texts = [s for s, _ in generate_pairs(12, split="valid", tasks=("numbers", "dates"))]
    decoding = Decoding(beam=5, n_best=2)

    def run():
        return translate_texts(
            ev.model, ev.src_vocab, ev.tgt_vocab, texts, decoding=decoding, batch_size=6
        )

    (got_texts, got), (want_texts, want) = _both(monkeypatch, run)
    assert got_texts == want_texts
    for g, w in zip(got, want, strict=True):
        assert_same_hypotheses(g, w, atol=1e-4)


@pytest.mark.parametrize("decoding", [Decoding(beam=5), Decoding(beam=4, ctc_weight=0.3)])
@torch.no_grad()
def test_builtin_asr_digits_decodes_as_the_reference(monkeypatch, decoding):
    ev = _builtin("asr-digits")
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([60, 35, 80])
    features = torch.randn(3, 80, 80, generator=g)  # noise: outputs of every length, loops

    def run():
        return decode(ev.model, features, lengths, max_len=30, decoding=decoding, weights=True)

    got, want = _both(monkeypatch, run)
    assert_same_hypotheses(got, want, atol=1e-4)


def test_a_tensor_twice_in_the_state_is_reordered_once_and_stays_one():
    from attnkit.decoding.search import _reorder

    x = torch.arange(6.0).reshape(3, 2)
    kept = torch.zeros(3)
    out = _reorder({"k": x, "v": x, "memory": kept}, torch.tensor([2, 0, 0]), keep=(kept,))
    assert out["k"] is out["v"] and torch.equal(out["k"], x[[2, 0, 0]])
    assert out["memory"] is kept


def test_take_rows_is_index_select_and_keeps_one_element_tensors_one():
    from attnkit.decoding.search import take_rows

    rows = torch.tensor([2, 0, 0, 1])
    x = torch.arange(24.0).reshape(3, 4, 2)
    assert torch.equal(take_rows(x, rows), x.index_select(0, rows))
    assert torch.equal(take_rows(x[:, ::2], rows), x[:, ::2].index_select(0, rows))
    one = torch.full((), 7.0).expand(3, 4, 2)  # a cache's placeholder: every stride 0
    out = take_rows(one, rows)
    assert out.shape == (4, 4, 2) and not any(out.stride()) and (out == 7).all()
    assert out.untyped_storage().data_ptr() == one.untyped_storage().data_ptr()
    assert take_rows(one, rows[:0]).shape == (0, 4, 2)
    assert torch.equal(take_rows(one[:0], rows[:0]), one[:0].index_select(0, rows[:0]))


@torch.no_grad()
def test_the_best_stop_ends_when_the_most_probable_has_finished():
    """From BOS, EOS (log P -0.5) is more probable than token 4 (-1.0), after which 4 costs
    -0.01 a step. "bound" searches on (the long output outranks the empty one with the
    length penalty) and returns 20 fours; "best" (OpenNMT-py's rule) ends at the first step,
    when the most probable hypothesis has finished, and returns that one, never the
    unfinished one."""
    vocab = 6

    def step(tokens, state):
        first = (tokens == BOS)[:, None]
        start = torch.tensor([-30.0, -30.0, -0.5, -30.0, -1.0, -30.0])
        after = torch.tensor([-30.0, -30.0, -4.0, -30.0, -0.01, -30.0])
        return torch.where(first, start, after).expand(len(tokens), vocab), state, None

    kw = dict(batch_size=1, beam_size=2, bos=BOS, eos=EOS, pad=PAD, max_len=20, alpha=1.0)
    sizes: list[int] = []
    bound = beam_search(step, None, **kw)
    best = beam_search(_counting(step, sizes), None, stop="best", **kw)
    assert bound.tokens[0].tolist() == [4] * 20
    assert best.tokens[0].tolist() == [EOS] and best.lengths.tolist() == [1]
    assert sizes == [2]  # one step
    assert best.scores.tolist() == [-0.5]  # log P -0.5 / lp(1) = ((5 + 1) / 6) ** 1
    assert_same_hypotheses(best, beam_search_reference(step, None, stop="best", **kw))
