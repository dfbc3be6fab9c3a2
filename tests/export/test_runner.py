"""attnkit_runner.py (attnkit/export/runner.py) on its own: it imports numpy only, its
vocabularies encode and decode as attnkit's do, and over the fake decoders of
tests/decoding/test_loops.py it stops the outputs that loop where attnkit does. Its decoding
is tested through exported models in test_models.py."""

import ast
import dataclasses
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnkit.data import CharVocab, SubwordVocab
from attnkit.decoding import Decoding, decode
from attnkit.decoding.loops import MIN_SPAN, REPEATS
from attnkit.export import decoding_json, runner
from attnkit.tokens import content_ids
from tests.decoding.test_loops import EOS, Fake, dashes, looping, zeros

RUNNER = Path(runner.__file__)
TEXTS = ["<fr> vingt-trois", "<fr> vingt-quatre", "<en> twenty-three", "<en> 12"] * 20


def test_the_runner_imports_nothing_of_attnkit_or_torch():
    imported = set()
    for node in ast.walk(ast.parse(RUNNER.read_text())):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module)
    assert imported == {"__future__", "base64", "logging", "numpy", "sentencepiece"}


@pytest.mark.parametrize(
    "build",
    [
        lambda: CharVocab.build(TEXTS, tags=["<fr>", "<en>"]),
        lambda: SubwordVocab.build(TEXTS, size=40, tags=["<fr>", "<en>"]),
    ],
)
def test_its_vocabularies_encode_and_decode_as_attnkit_s(build):
    vocab = build()
    mine = runner.Vocab(vocab.to_json())
    for text in ["<fr> vingt-trois", "<en> 12", "<de> zwölf", "vingt"]:
        assert mine.encode(text) == vocab.encode(text)
        ids = [1, *vocab.encode(text), 0, 2, 7]  # bos, the text, pad, eos, after eos
        assert mine.decode(ids) == vocab.decode(ids)
    assert mine.decode([3, 999]) == vocab.decode([3, 999])  # unk, and an id out of range
    with pytest.raises(
        ValueError, match="vocab: expected type 'char' or 'sentencepiece', got 'word'"
    ):
        runner.Vocab({"type": "word", "symbols": []})


class Session:
    """The step graph's session of a fake decoder of tests/decoding/test_loops.py: its state
    is ``state.t``, each row's step; ``weights`` among its outputs when the decoder has them."""

    def __init__(self, fake: Fake):
        self.fake = fake

    def run(self, _, feed: dict) -> list:
        log_probs, t, weights = self.fake.step(
            torch.from_numpy(feed["tokens"]), torch.from_numpy(feed["state.t"])
        )
        return [log_probs.numpy(), *([] if weights is None else [weights.numpy()]), t.numpy()]


def both_decode(make, decoding: Decoding, caplog, start=(0, 0)) -> tuple:
    """attnkit's and the runner's outputs (per example, best first), decoder steps and
    warnings, for the fake decoder ``make()`` and ``LIMIT`` tokens at most, each example from
    its step in ``start``."""
    results = []
    batch = len(start)
    for decode_with in ("attnkit", "runner"):
        fake = make()
        fake.start = lambda inputs, lengths: torch.tensor(start)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            if decode_with == "attnkit":
                hyp = decode(fake, None, torch.zeros(batch), max_len=LIMIT, decoding=decoding)
                tokens = hyp.tokens if hyp.tokens.dim() == 3 else hyp.tokens[:, None]
                outputs = [[content_ids(row) for row in example] for example in tokens.tolist()]
            else:
                names = ["log_probs", *(["weights"] if fake.weights else []), "next.t"]
                meta = {
                    "decoder_step": {
                        "inputs": [{"name": "tokens"}, {"name": "state.t"}],
                        "outputs": [{"name": n} for n in names],
                    },
                    "state": [{"name": "state.t", "next": "next.t"}],
                    "decoding": decoding_json(decoding, RULE, ctc=False),
                }
                outputs = runner.decode(
                    Session(fake),
                    {"state.t": np.array(start)},
                    meta,
                    {"lengths": np.full(batch, LIMIT)},
                )
        results.append((outputs, fake.steps, list(caplog.messages)))
    return tuple(results)


LIMIT = 60  # output tokens at most
RULE = {"input": "lengths", "ratio": 1.0, "extra": 0, "rounding": "ceil", "at_most": None}
FAKES = {
    "looping": looping,
    "dashes": lambda: dashes(40),
    "zeros": lambda: zeros(MIN_SPAN),
    "more-zeros": lambda: zeros(MIN_SPAN + 1),
}
SEARCHES = {
    "greedy": Decoding(),
    "beam": Decoding(beam=3, length_penalty=1.0),
    "sample": Decoding(sample=True, top_k=1, samples=2),
}


@pytest.mark.parametrize("how", list(SEARCHES))
@pytest.mark.parametrize("name", list(FAKES))
def test_the_runner_stops_the_outputs_that_loop_as_attnkit_does(name, how, caplog):
    (want, want_steps, want_log), (got, steps, log) = both_decode(
        FAKES[name], SEARCHES[how], caplog
    )
    assert got == want
    lengths = {len(output) for outputs in got for output in outputs}
    if name in ("looping", "more-zeros"):  # stopped without EOS: a unit of 3, or one token
        stop = 3 + max((REPEATS - 1) * 3, MIN_SPAN) if name == "looping" else MIN_SPAN + 2
        assert steps == want_steps == stop < LIMIT and lengths == {stop}
        # the runner's warning is attnkit's, but for how to turn the check off
        assert len(log) == len(want_log) == 1
        assert log[0].split("(a loop)")[0] == want_log[0].split("(a loop)")[0]
        assert "loop_stop false in attnkit.json's decoding" in log[0]
    else:  # legitimate repeats end at EOS: "3" forty times, "4" then MIN_SPAN zeros
        assert lengths == {40 if name == "dashes" else MIN_SPAN + 1} and log == want_log == []
        # (beam search may settle a step apart: the fake's other tokens tie, and torch's
        # topk and the runner's stable sort can keep different ones among them)
        assert steps == want_steps or how == "beam"


@pytest.mark.parametrize("how", list(SEARCHES))
def test_without_loop_stop_or_weights_the_runner_decodes_a_loop_to_its_cap(how, caplog):
    def blind():
        fake = looping()
        fake.weights = False
        return fake

    off = dataclasses.replace(SEARCHES[how], loop_stop=False)
    for make, decoding in ((looping, off), (blind, SEARCHES[how])):
        (want, want_steps, _), (got, steps, log) = both_decode(make, decoding, caplog)
        assert got == want and steps == want_steps == LIMIT and not log
        assert {len(output) for outputs in got for output in outputs} == {LIMIT}


@pytest.mark.parametrize("how", list(SEARCHES))
def test_an_output_that_has_ended_is_not_counted_as_a_loop(how, caplog):
    """Example 0 loops on a unit of 12 tokens (3333 4444 5555) with its attention going round
    12 keys; example 1 (from step 99) emits 3 and EOS, then pad from a still attention until
    example 0 stops: it is not one of the outputs stopped as loops."""

    def make():
        return Fake(
            lambda t: EOS if t >= 100 else 3 + t // 4 % 3,
            lambda t: 0 if t >= 100 else t % 12,
            tk=12,
        )

    (want, _, want_log), (got, steps, log) = both_decode(make, SEARCHES[how], caplog, start=(0, 99))
    stop = 12 + max((REPEATS - 1) * 12, MIN_SPAN)
    assert got == want and steps == stop and {tuple(o) for o in got[1]} == {(3,)}
    assert log[0].split("(a loop)")[0] == want_log[0].split("(a loop)")[0]
    outputs = len(got[0])
    assert log[0].startswith(f"{outputs} of {2 * outputs} outputs stopped after {stop}")


def ngram_ban_loop(hyps: np.ndarray, n: int, vocab: int) -> np.ndarray:
    """The tokens that would repeat an n-gram of each hypothesis, one by one (the reference
    of the runner's vectorised ``_ngram_ban``)."""
    banned = np.zeros((len(hyps), vocab), dtype=bool)
    t = hyps.shape[1]
    for row, hyp in zip(banned, hyps):
        prefix = tuple(hyp[t - n + 1 :]) if n > 1 else ()
        for s in range(t - n + 1):
            if tuple(hyp[s : s + n - 1]) == prefix:
                row[hyp[s + n - 1]] = True
    return banned


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("t", [0, 1, 3, 9])
def test_the_runner_bans_repeated_ngrams_as_the_loop_does(n, t):
    hyps = np.random.default_rng(n * 10 + t).integers(0, 4, (6, t))  # few ids: many repeats
    want = ngram_ban_loop(hyps, n, 5)
    assert np.array_equal(runner._ngram_ban(hyps, n, 5), want)
    assert want.any() or t < n  # not vacuous


def ends_at_once(tokens: np.ndarray, example: np.ndarray) -> np.ndarray:
    """``(N, 6)`` log-probs: example 0 ends at once (EOS), example 1 writes token 4 until its
    limit."""
    first = (example == 0)[:, None]
    log_probs = np.full((len(tokens), 6), -5.0, dtype=np.float32)
    log_probs[:, EOS] = np.where(first[:, 0], -0.01, -9.0)
    log_probs[:, 4] = np.where(first[:, 0], -8.0, -0.1)
    return log_probs - np.logaddexp.reduce(log_probs, axis=-1, keepdims=True)


BEAM = Decoding(beam=3, length_penalty=0.0)


def test_the_runner_s_beam_drops_the_examples_that_ended():
    """Example 0's rows leave the batch after its first step; the outputs are attnkit's."""
    sizes = []

    class Ends:
        def run(self, _, feed):
            sizes.append(len(feed["tokens"]))
            return [ends_at_once(feed["tokens"], feed["state.ex"])]

    meta = {
        "decoder_step": {
            "inputs": [{"name": "tokens"}, {"name": "state.ex"}],
            "outputs": [{"name": "log_probs"}],
        },
        "state": [{"name": "state.ex", "next": None}],
        "decoding": decoding_json(BEAM, RULE, ctc=False),
    }
    got = runner.decode(Ends(), {"state.ex": np.array([0, 1])}, meta, {"lengths": np.full(2, 8)})
    assert sizes == [6] + [3] * 7

    def step(tokens, state):
        log_probs = ends_at_once(tokens.numpy(), state.numpy())
        return torch.from_numpy(log_probs), state, None

    class Model:
        def start(self, inputs, lengths):
            return torch.tensor([0, 1])

        def step(self, tokens, state):
            return step(tokens, state)

    hyp = decode(Model(), None, torch.zeros(2), max_len=8, decoding=BEAM)
    assert got == [[content_ids(row)] for row in hyp.tokens.tolist()] == [[[]], [[4] * 8]]


@given(
    rows=st.integers(1, 4),
    width=st.integers(1, 30),
    data=st.data(),
)
def test_top_k_by_partition_equals_a_stable_sort_ties_included(rows, width, data):
    """The runner's top-k (partition, ties at the k-th value lowest index first) against the
    obvious reference: a stable sort of each whole row, its first k."""
    k = data.draw(st.integers(1, width))
    values = st.sampled_from([-np.inf, -2.0, -1.0, -0.5, 0.0, 1.5])  # ties everywhere
    x = np.array(data.draw(st.lists(values, min_size=rows * width, max_size=rows * width)))
    x = x.reshape(rows, width).astype(np.float32)
    want_idx = np.argsort(-x, axis=-1, kind="stable")[:, :k]
    got, idx = runner._top(x, k)
    assert np.array_equal(idx, want_idx)
    assert np.array_equal(got, np.take_along_axis(x, want_idx, -1))
