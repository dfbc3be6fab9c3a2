"""Models built on the attention core, one file each, and the registry that builds any of
them from its saved config."""

from attnkit.models.crnn import CRNN
from attnkit.models.decoder import AttentionDecoder
from attnkit.models.las import LAS, Listener
from attnkit.models.registry import MODELS, build_model, check_config, model_config, model_shapes
from attnkit.models.seq2seq import KINDS, Encoder, Seq2Seq
from attnkit.models.transformer import Transformer, sinusoids

__all__ = ["CRNN", "KINDS", "LAS", "MODELS", "AttentionDecoder", "Encoder", "Listener", "Seq2Seq",
           "Transformer", "build_model", "check_config", "model_config", "model_shapes",
           "sinusoids"]
