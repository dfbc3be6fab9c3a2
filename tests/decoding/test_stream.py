"""Greedy decoding while the input arrives equals greedy decoding of the whole input."""

import pytest
import torch

from attnkit.decoding import greedy, stream_feed, stream_start
from attnkit.tokens import BOS, EOS

V = 9


class Reader:
    """A streaming model whose step ``i`` reads input frame ``stride * i + 2`` (a token id) and
    emits it, or EOS past the input's end: it waits for that frame while the input arrives.
    With ``stride=0`` it reads one frame for ever: an output that loops."""

    def __init__(self, stride=3):
        self.stride = stride

    def start(self, inputs):
        return {"seen": inputs[0, :, 0], "i": torch.zeros(1, dtype=torch.long)}

    def stream_start(self):
        return self.start(torch.zeros(1, 0, 1))

    def stream_listen(self, inputs, state):
        return {**state, "seen": torch.cat([state["seen"], inputs[0, :, 0]])}

    def stream_step(self, tokens, state, *, final):
        at = self.stride * int(state["i"]) + 2
        seen = state["seen"]
        if at >= len(seen) and not final:
            return None
        token = int(seen[at]) if at < len(seen) else EOS
        weights = torch.zeros(1, len(seen))
        weights[0, at : at + 1] = 1.0
        log_probs = torch.full((1, V), -10.0)
        log_probs[0, token] = 0.0
        return log_probs, {**state, "i": state["i"] + 1}, weights

    def step(self, tokens, state):
        return self.stream_step(tokens, state, final=True)


def _frames(n, seed=0):
    return torch.randint(3, V, (1, n, 1), generator=torch.Generator().manual_seed(seed)).float()


@pytest.mark.parametrize("chunk", [1, 2, 5, 16, 100])
@pytest.mark.parametrize(
    "n, cap, stride, loop_stop",
    [
        (31, None, 3, True),
        (31, 6, 3, True),
        (40, 20, 3, True),
        (40, 30, 0, True),
        (40, 30, 0, False),
    ],
)  # an output that loops: stopped, or not
def test_streaming_emits_greedys_tokens_as_soon_as_they_are_read(chunk, n, cap, stride, loop_stop):
    model, x = Reader(stride), _frames(n)
    max_len = (lambda frames: frames // 3 + 2) if cap is None else (lambda frames: cap)
    hyp = greedy(
        model.step,
        model.start(x),
        batch_size=1,
        bos=BOS,
        eos=EOS,
        max_len=max_len(n),
        loop_stop=loop_stop,
    )
    offline = hyp.tokens[0, : int(hyp.lengths[0])].tolist()
    if stride == 0:  # 17 copies of one token from a still attention make a loop
        assert len(offline) == (17 if loop_stop else 30)
    state, tokens = stream_start(model, loop_stop=loop_stop), []
    for start in range(0, n, chunk):
        end = min(n, start + chunk)
        state, emitted = stream_feed(model, state, x[:, start:end], final=False, max_len=max_len)
        for e in emitted:  # each token as soon as its frame and the limit let it, not later
            assert e.reach == stride * len(tokens) + 3 and e.reach <= end
            assert e.reach > start or len(tokens) + 1 > max_len(start)
            tokens.append(e.token)
    state, emitted = stream_feed(model, state, x[:, :0], final=True, max_len=max_len)
    tokens += [e.token for e in emitted]
    assert state.done and tokens + [EOS] * (offline[-1] == EOS) == offline
    assert stream_feed(model, state, x[:, :1], final=True, max_len=max_len) == (state, [])


def test_a_step_past_the_limit_of_the_frames_so_far_waits_for_more():
    """The limit grows with the input: a step it does not allow yet is taken later."""
    model, x = Reader(), _frames(30)
    state, first = stream_feed(
        Reader(), stream_start(model), x[:, :30], final=False, max_len=lambda frames: frames // 10
    )
    assert len(first) == 3 and not state.done
    state, rest = stream_feed(model, state, x[:, :0], final=True, max_len=lambda f: 5)
    assert len(rest) == 2 and state.done and state.steps == 5


def test_inputs_of_another_batch_size_are_refused():
    with pytest.raises(ValueError, match=r"inputs: expected shape \(1, t, ...\), got \(2, 3, 1\)"):
        stream_feed(
            Reader(), stream_start(Reader()), torch.zeros(2, 3, 1), final=True, max_len=lambda f: 3
        )


def test_a_loop_stopped_while_streaming_is_logged_as_decode_logs_it(caplog):
    model, x = Reader(stride=0), _frames(10)
    state, emitted = stream_feed(
        model, stream_start(model), x, final=False, max_len=lambda frames: 30
    )
    assert state.done and len(emitted) == 17
    assert "1 of 1 outputs stopped after 17 tokens: each repeated a unit" in caplog.text
