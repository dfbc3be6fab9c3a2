"""Models built on the attention core, one file each."""

from attnkit.models.crnn import CRNN, ctc_greedy
from attnkit.models.decoder import AttentionDecoder
from attnkit.models.las import LAS, Listener
from attnkit.models.seq2seq import KINDS, Encoder, Seq2Seq
from attnkit.models.transformer import Transformer, sinusoids

__all__ = ["CRNN", "KINDS", "LAS", "AttentionDecoder", "Encoder", "Listener", "Seq2Seq",
           "Transformer", "ctc_greedy", "sinusoids"]
