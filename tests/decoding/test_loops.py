"""Outputs that loop stop early; legitimate repeats, whose attention moves along the input, and
short repeats that read one input position do not."""

import logging

import pytest
import torch

from attnkit.decoding import Decoding, beam_search, decode, greedy, sample
from attnkit.decoding.loops import MIN_SPAN, REPEATS, loop_step, start_loops

PAD, BOS, EOS = 0, 1, 2
V = 6  # PAD, BOS, EOS and the tokens 3, 4, 5
CAP = 500


class Fake:
    """A decoder that emits ``tokens(t)`` at step ``t`` (ties broken towards it by 2 nats) and
    attends to the key ``where(t)`` of ``tk``; it counts its steps. Its state is the step of
    each hypothesis, so beam search can reorder it."""

    def __init__(self, tokens, where, tk, weights=True):
        self.tokens, self.where, self.tk, self.weights = tokens, where, tk, weights
        self.steps = 0

    def start(self, inputs, lengths):
        return torch.zeros(len(lengths), dtype=torch.long)

    def step(self, prev, t):
        self.steps += 1
        logits = torch.zeros(len(t), V)
        logits[:, [PAD, BOS]] = -1e9
        want = torch.tensor([self.tokens(int(s)) for s in t])
        logits[torch.arange(len(t)), want] = 2.0
        weights = torch.nn.functional.one_hot(
            torch.tensor([self.where(int(s)) for s in t]), self.tk
        ).float()  # (N, Tk)
        return logits.log_softmax(-1), t + 1, weights if self.weights else None


def looping():
    """Emits 3 4 5 3 4 5 ... for ever, its attention going round keys 0, 1, 2."""
    return Fake(lambda t: 3 + t % 3, lambda t: t % 3, tk=8)


def dashes(n):
    """Reads a line of ``n`` dashes: token 3 ``n`` times, one key further each time, then EOS."""
    return Fake(lambda t: 3 if t < n else EOS, lambda t: min(t, n), tk=n + 1)


def zeros(n):
    """ "1" then ``n`` zeros all read from one key (a number word such as "million"), then EOS:
    a repeat whose attention does not move, shorter than a loop."""
    return Fake(lambda t: 4 if t == 0 else 3 if t <= n else EOS, lambda t: 0 if t == 0 else 1, tk=3)


def _run(search, model, batch=2, **kw):
    return search(
        model.step,
        model.start(None, torch.zeros(batch)),
        batch_size=batch,
        bos=BOS,
        eos=EOS,
        pad=PAD,
        max_len=CAP,
        **kw,
    )


SEARCHES = {
    "greedy": (greedy, {}),
    "sample": (sample, {"temperature": 0.05, "generator": torch.Generator().manual_seed(0)}),
    "beam": (beam_search, {"beam_size": 3, "alpha": 1.0}),
}


@pytest.mark.parametrize("name", SEARCHES)
def test_a_decoder_that_loops_is_stopped_after_a_few_units(name):
    search, kw = SEARCHES[name]
    model = looping()
    hyp = _run(search, model, **kw)
    unit = 3
    stop = max((REPEATS - 1) * unit, MIN_SPAN) + unit  # the first step at which it can stop
    assert model.steps == stop < CAP
    assert hyp.looped.all() and (hyp.lengths == stop).all()
    assert torch.equal(hyp.tokens[0, :stop], 3 + torch.arange(stop) % 3)  # what it emitted


@pytest.mark.parametrize("name", SEARCHES)
def test_without_the_check_a_loop_runs_to_the_length_cap(name):
    search, kw = SEARCHES[name]
    model = looping()
    hyp = _run(search, model, loop_stop=False, **kw)
    assert model.steps == CAP and (hyp.lengths == CAP).all() and hyp.looped is None


@pytest.mark.parametrize("name", SEARCHES)
@pytest.mark.parametrize(
    "model, length", [(dashes(200), 201), (zeros(MIN_SPAN), MIN_SPAN + 2)], ids=["dashes", "zeros"]
)
def test_legitimate_repeats_are_not_stopped(name, model, length):
    search, kw = SEARCHES[name]
    model.steps = 0
    hyp = _run(search, model, **kw)
    assert not hyp.looped.any()
    assert (hyp.lengths == length).all() and (hyp.tokens[:, length - 1] == EOS).all()


def test_one_more_repeat_with_a_still_attention_is_a_loop():
    model = zeros(MIN_SPAN + 1)
    hyp = _run(greedy, model)
    assert hyp.looped.all() and model.steps == MIN_SPAN + 2  # "1", then MIN_SPAN + 1 zeros


def test_a_decoder_without_attention_weights_is_never_stopped():
    model = looping()
    model.weights = False
    hyp = _run(greedy, model)
    assert model.steps == CAP and not hyp.looped.any()


def _first_stop(moves=()):
    """The first step at which the check stops token 3 repeated with the attention on key 2,
    moving to key 3 at the steps ``moves``."""
    state = start_loops(1)
    for t in range(4 * MIN_SPAN):
        state, looped = loop_step(
            state,
            torch.tensor([3]),
            torch.nn.functional.one_hot(torch.tensor([3 if t in moves else 2]), 8).float(),
        )
        if looped:
            return t
    return None


def test_the_attention_must_stand_still_for_the_whole_span():
    assert _first_stop() == MIN_SPAN  # a run of MIN_SPAN repeats after the first token
    # A move (by more than the tolerance) restarts the count, and so does the step back.
    assert _first_stop(moves=(10,)) == 10 + 1 + MIN_SPAN


def test_beam_search_stops_an_example_whose_leading_hypothesis_loops():
    """The other hypotheses of the beam are variants of the loop: the example stops with its
    leader, all of them marked."""
    model = looping()
    hyp = _run(beam_search, model, batch=1, beam_size=3, alpha=1.0, n_best=3)
    assert model.steps < 2 * MIN_SPAN
    assert hyp.looped.all()


def test_decode_warns_when_outputs_loop(caplog):
    model = looping()
    with caplog.at_level(logging.WARNING, logger="attnkit.decoding"):
        hyp = decode(model, None, torch.zeros(2), max_len=CAP)
    assert hyp.looped.all()
    assert caplog.messages == [
        f"2 of 2 outputs stopped after {int(hyp.lengths[0])}, {int(hyp.lengths[1])} tokens: "
        "each repeated a unit of tokens while its attention stood still (a loop); "
        "loop_stop=False (--no-loop-stop) decodes them to the length limit"
    ]
    caplog.clear()
    model = looping()
    off = decode(model, None, torch.zeros(2), max_len=CAP, decoding=Decoding(loop_stop=False))
    assert model.steps == CAP and off.looped is None and not caplog.messages


def test_loop_stop_must_be_a_bool():
    with pytest.raises(ValueError, match=r"^loop_stop: expected a bool, got 'no'$"):
        Decoding(loop_stop="no")


def test_a_warning_of_many_loops_names_five_sizes_and_the_range(caplog):
    from attnkit.decoding.front import warn_loops

    warn_loops([17, 30, 17, 20, 18, 99, 16], 128)
    assert "7 of 128 outputs stopped after 17, 30, 17, 20, 18, ... (16 to 99) tokens: " in (
        caplog.text
    )
