"""Models built on the attention core, one file each, and the registry that builds any of
them from its saved config."""

from attnkit.models.captioner import Captioner, CaptionOutput, doubly_stochastic
from attnkit.models.char_lm import CharLM
from attnkit.models.crnn import CRNN
from attnkit.models.decoder import AttentionDecoder, guided_attention_loss
from attnkit.models.grid import GridEncoder
from attnkit.models.las import LAS, CausalListener, Listener
from attnkit.models.registry import (
    MODELS,
    build_model,
    check_config,
    complete_config,
    model_config,
    model_shapes,
)
from attnkit.models.seq2seq import KINDS, Encoder, Seq2Seq
from attnkit.models.transformer import Transformer, sinusoids
from attnkit.models.vqa import VQA, VQAOutput

__all__ = [
    "CRNN",
    "KINDS",
    "LAS",
    "MODELS",
    "VQA",
    "AttentionDecoder",
    "CaptionOutput",
    "Captioner",
    "CausalListener",
    "CharLM",
    "Encoder",
    "GridEncoder",
    "Listener",
    "Seq2Seq",
    "Transformer",
    "VQAOutput",
    "build_model",
    "check_config",
    "complete_config",
    "doubly_stochastic",
    "guided_attention_loss",
    "model_config",
    "model_shapes",
    "sinusoids",
]
