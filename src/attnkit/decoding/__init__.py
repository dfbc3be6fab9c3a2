"""Decoding shared by every model: :func:`decode` (greedy, batched beam search or sampling,
as a :class:`Decoding` says) over any model's step function, and best-path CTC decoding."""

from attnkit.decoding.ctc import CTCPaths, ctc_greedy
from attnkit.decoding.decode import Decoding, decode, decode_batches
from attnkit.decoding.search import (
    Hypotheses,
    beam_search,
    greedy,
    length_penalty,
    sample,
)

__all__ = ["CTCPaths", "Decoding", "Hypotheses", "beam_search", "ctc_greedy", "decode", "decode_batches", "greedy",
           "length_penalty", "sample"]
