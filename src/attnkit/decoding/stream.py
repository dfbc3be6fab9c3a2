"""Greedy decoding while the input arrives: each token is emitted as soon as it is decided.

A streaming model (:class:`attnkit.models.LAS` with a causal listener and a hard monotonic
or MoChA speller) has, besides ``step``::

    stream_start() -> state
    stream_listen(inputs, state) -> state        # the next input frames (B, t, ...)
    stream_step(tokens, state, *, final) -> (log_probs, state, weights) | None

where ``stream_step`` is the decoder step over the input listened to so far, or None while
it depends on input that has not arrived (with ``final=True``, after the last frames, it is
never None). :func:`stream_feed` takes every step it can after each piece of input, in the
order greedy decoding (:func:`attnkit.decoding.greedy`) takes them over the whole input, and
stops where greedy would: at EOS, at ``max_len`` tokens, or (``loop_stop``, as greedy's) at
the token with which the output loops (:mod:`attnkit.decoding.loops`). Its tokens,
concatenated, are the greedy output of the whole input, EOS excluded (tested in
``tests/decoding/test_stream.py``).
One example at a time (batch 1). Each token comes with how far into the input its attention
read (:class:`Emitted`), for measuring how long after that input it was emitted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from attnkit.decoding.front import warn_loops
from attnkit.decoding.loops import LoopState, loop_step, start_loops
from attnkit.decoding.search import _never
from attnkit.tokens import BOS, EOS, PAD

__all__ = ["Emitted", "StreamState", "stream_feed", "stream_start"]


class Emitted(NamedTuple):
    """A token emitted while streaming, and ``reach``: the input steps its attention read up
    to (1 + the last step with a non-zero weight; 0 when it read none)."""

    token: int
    reach: int


class StreamState(NamedTuple):
    """Where a streaming decode stands.

    Attributes:
        model: the model's streaming state.
        token: ``(1,)`` the last token taken (BOS at first), the next step's input.
        steps: decoder steps taken (tokens emitted, and EOS once ``done``).
        frames: input frames listened to.
        done: EOS was taken, ``max_len`` reached or the output looped: nothing more will be
            emitted.
        loops: the loop check's state (None: outputs are not checked for loops).
    """

    model: Any
    token: torch.Tensor
    steps: int
    frames: int
    done: bool
    loops: LoopState | None


def stream_start(model, *, device=None, bos: int = BOS, loop_stop: bool = True) -> StreamState:
    """The state of a streaming decode of ``model`` before any input; ``loop_stop``: stop an
    output that loops, as greedy decoding does by default."""
    token = torch.full((1,), bos, dtype=torch.long, device=device)
    loops = start_loops(1, device) if loop_stop else None
    return StreamState(model.stream_start(), token, 0, 0, False, loops)


def stream_feed(
    model,
    state: StreamState,
    inputs: torch.Tensor,
    *,
    final: bool,
    max_len: Callable[[int], int],
    bos: int = BOS,
    eos: int = EOS,
    pad: int = PAD,
) -> tuple[StreamState, list[Emitted]]:
    """Listen to ``inputs`` ``(1, t, ...)`` (``t`` may be 0) and take every step that can be
    decided; returns the new state and the tokens emitted (EOS excluded), in order.

    Args:
        final: no input will follow ``inputs``: the decode runs to EOS or ``max_len``.
        max_len: the output limit (EOS included) of an input of ``n`` frames, non-decreasing
            in ``n`` (greedy's ``max_len`` of the whole input, evaluated on the frames so
            far: a step beyond the limit of the frames so far waits for more input).

    Raises:
        ValueError: ``inputs`` of a batch other than 1, or a state that is ``done`` with more
            input than nothing.
    """
    if inputs.dim() < 2 or inputs.shape[0] != 1:
        raise ValueError(f"inputs: expected shape (1, t, ...), got {tuple(inputs.shape)}")
    if state.done:
        return state, []
    model_state = model.stream_listen(inputs, state.model)
    token, steps, frames = state.token, state.steps, state.frames + inputs.shape[1]
    loops, emitted, done = state.loops, [], False
    while True:
        if steps >= max_len(frames):
            done = final
            break
        out = model.stream_step(token, model_state, final=final)
        if out is None:
            break
        log_probs, model_state, weights = out
        token = _never(log_probs, pad, bos).argmax(-1)  # (1,)
        steps += 1
        if int(token) == eos:
            done = True
            break
        read = weights[0].nonzero()  # (n, 1): the input steps read
        emitted.append(Emitted(int(token), int(read[-1]) + 1 if len(read) else 0))
        if loops is not None:
            loops, looped = loop_step(loops, token, weights)
            if bool(looped[0]):  # greedy ends the output with this token
                warn_loops([steps], 1)
                done = True
                break
    return StreamState(model_state, token, steps, frames, done, loops), emitted
