"""Decoding shared by every model: :func:`decode` (greedy, batched beam search or sampling,
as a :class:`Decoding` says) over any model's step function, joint CTC/attention beam search
with shallow fusion of a language model, and best-path CTC decoding."""

from attnkit.decoding.ctc import CTCPaths, ctc_greedy
from attnkit.decoding.ctc_prefix import CTCPrefixScorer, joint_decode
from attnkit.decoding.decode import Decoding, decode, decode_batches
from attnkit.decoding.search import (
    Hypotheses,
    beam_search,
    greedy,
    length_penalty,
    sample,
)

__all__ = ["CTCPaths", "CTCPrefixScorer", "Decoding", "Hypotheses", "beam_search", "ctc_greedy",
           "decode", "decode_batches", "greedy", "joint_decode", "length_penalty", "sample"]
