"""Decoding shared by every model: :func:`decode` (greedy, batched beam search or sampling,
as a :class:`Decoding` says) over any model's step function, joint CTC/attention beam search
with shallow fusion of a language model, best-path CTC decoding and CTC prefix beam search
(:func:`decode_ctc`), and greedy decoding while
the input arrives (:func:`stream_feed`)."""

from attnkit.decoding.beam import beam_search
from attnkit.decoding.ctc import CTCPaths, ctc_greedy
from attnkit.decoding.ctc_prefix import CTCPrefixScorer, ctc_beam_decode, joint_decode
from attnkit.decoding.front import (
    DEFAULT_LENGTH_PENALTY,
    MAX_OUTPUT_TOKENS,
    Decoding,
    check_ctc_decoding,
    decode,
    decode_batches,
    decode_ctc,
)
from attnkit.decoding.search import (
    BEAM_STOPS,
    MAX_BEAM,
    Hypotheses,
    beam_search_reference,
    greedy,
    length_penalty,
    sample,
)
from attnkit.decoding.stream import Emitted, StreamState, stream_feed, stream_start

__all__ = [
    "BEAM_STOPS",
    "DEFAULT_LENGTH_PENALTY",
    "MAX_BEAM",
    "MAX_OUTPUT_TOKENS",
    "CTCPaths",
    "CTCPrefixScorer",
    "Decoding",
    "Emitted",
    "Hypotheses",
    "StreamState",
    "beam_search",
    "beam_search_reference",
    "check_ctc_decoding",
    "ctc_beam_decode",
    "ctc_greedy",
    "decode",
    "decode_batches",
    "decode_ctc",
    "greedy",
    "joint_decode",
    "length_penalty",
    "sample",
    "stream_feed",
    "stream_start",
]
