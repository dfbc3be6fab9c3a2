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
stops where greedy would: at EOS or at ``max_len`` tokens. Its tokens, concatenated, are the
greedy output of the whole input, EOS excluded (tested in ``tests/decoding/test_stream.py``).
One example at a time (batch 1). Each token comes with how far into the input its attention
read (:class:`Emitted`), for measuring how long after that input it was emitted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

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
        done: EOS was taken or ``max_len`` reached: nothing more will be emitted.
    """

    model: Any
    token: torch.Tensor
    steps: int
    frames: int
    done: bool


def stream_start(model, *, device=None, bos: int = BOS) -> StreamState:
    """The state of a streaming decode of ``model`` before any input."""
    token = torch.full((1,), bos, dtype=torch.long, device=device)
    return StreamState(model.stream_start(), token, 0, 0, False)


def stream_feed(model, state: StreamState, inputs: torch.Tensor, *, final: bool,
                max_len: Callable[[int], int], bos: int = BOS, eos: int = EOS,
                pad: int = PAD) -> tuple[StreamState, list[Emitted]]:
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
    emitted, done = [], False
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
    return StreamState(model_state, token, steps, frames, done), emitted
