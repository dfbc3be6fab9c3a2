"""Stopping a hypothesis that loops: the same tokens again and again, the attention standing
still.

A decoder that loops (on noise, or a degenerate model) emits one unit of
tokens after another while its attention goes round the same input positions: its state has
entered a cycle, and nothing but the length cap ends it. A legitimate repeat moves along the
input as it emits each copy ("----------" read from a line of dashes, "0000" heard or read
digit by digit), and so does a repeat that reads one input word for several outputs ("000"
from "thousand": the attention shifts between them). The repeated tokens alone cannot tell
these apart; the attention can.

The check follows one attention summary per step, its centre ``c_t = sum_j j * a_tj`` (in key
positions; the flat cell index for a 2-D grid). A hypothesis loops when, for some period
``p <= MAX_PERIOD``, each of its last ``span(p) = max((REPEATS - 1) * p, MIN_SPAN)`` steps
emitted the token of ``p`` steps before with the attention centred within ``TOLERANCE`` key
positions of where it was then: the last ``span(p) + p`` tokens are copies of one unit of
``p`` tokens (at least ``REPEATS`` of them), emitted from a still attention.

Steps that return no weights are never counted as still. What the check does on the built-in
models (loops on noise stopped, legitimate outputs unchanged): docs/reliability.md, "Outputs
that loop".
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch

__all__ = [
    "LoopState",
    "MAX_PERIOD",
    "MIN_SPAN",
    "REPEATS",
    "TOLERANCE",
    "loop_step",
    "spans",
    "start_loops",
]

MAX_PERIOD = 64  # the longest unit looked for, in tokens
REPEATS = 3  # copies of the unit at least
MIN_SPAN = 16  # steps that repeat, at least (a unit of 1 token: 17 copies)
TOLERANCE = 0.5  # key positions the attention's centre may move in one unit and stand still


class LoopState(NamedTuple):
    """What the check keeps of ``N`` hypotheses (reorder it along dim 0 with them).

    Attributes:
        tokens: ``(N, P)`` the last ``P = MAX_PERIOD`` tokens, the latest first (-1: none yet).
        centres: ``(N, P)`` the attention's centre at those steps (NaN: no weights).
        runs: ``(N, P)`` for each period ``p = 1..P``, the steps in a row up to the last one
            that repeated the token and the centre of ``p`` steps before.
    """

    tokens: torch.Tensor
    centres: torch.Tensor
    runs: torch.Tensor


def start_loops(n: int, device=None) -> LoopState:
    """The state of ``n`` hypotheses that have emitted nothing yet."""
    return LoopState(
        torch.full((n, MAX_PERIOD), -1, dtype=torch.long, device=device),
        torch.full((n, MAX_PERIOD), float("nan"), device=device),
        torch.zeros(n, MAX_PERIOD, dtype=torch.long, device=device),
    )


@functools.lru_cache(maxsize=8)
def spans(device=None) -> torch.Tensor:
    """``(P,)`` the still repeats in a row that make a loop of each period ``p = 1..P``."""
    periods = torch.arange(1, MAX_PERIOD + 1, device=device)
    return ((REPEATS - 1) * periods).clamp(min=MIN_SPAN)


def loop_step(
    state: LoopState, tokens: torch.Tensor, weights: torch.Tensor | None
) -> tuple[LoopState, torch.Tensor]:
    """Add one step: ``tokens (N,)`` emitted with the attention ``weights (N, Tk)`` (or None).

    Returns:
        The new state, and ``(N,)`` bool: the hypotheses that loop (see the module docstring).
    """
    if weights is None:
        centre = torch.full(tokens.shape, float("nan"), device=tokens.device)
    else:
        positions = torch.arange(weights.shape[-1], device=weights.device, dtype=torch.float32)
        centre = weights.float() @ positions  # (N,)
    still = (state.tokens == tokens[:, None]) & (
        (state.centres - centre[:, None]).abs() <= TOLERANCE
    )  # (N, P); NaN: False
    runs = torch.where(still, state.runs + 1, 0)
    looped = (runs >= spans(runs.device)).any(-1)  # (N,)
    new = LoopState(
        torch.cat([tokens[:, None], state.tokens[:, :-1]], dim=1),
        torch.cat([centre[:, None], state.centres[:, :-1]], dim=1),
        runs,
    )
    return new, looped
