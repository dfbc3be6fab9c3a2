"""Decoding shared by every model: greedy, sampling and batched beam search over a step function."""

from attnkit.decoding.search import (
    Hypotheses,
    beam_search,
    greedy,
    length_penalty,
    sample,
)

__all__ = ["Hypotheses", "beam_search", "greedy", "length_penalty", "sample"]
