"""Attention: masks, scores, paths (reference, SDPA) and the modules built on them, and the
alignment modules (monotonic, MoChA, local-p, GMM) called the same way."""

from attnkit.attention.alignment import (
    ALIGNMENTS,
    WEIGHT_SUMS,
    AlignedOutput,
    Alignment,
    make_alignment,
)
from attnkit.attention.core import AttentionOutput, Memory
from attnkit.attention.dense import Linear, linear
from attnkit.attention.dispatch import IMPLS, Plan
from attnkit.attention.local import GMMAttention, LocalPAttention
from attnkit.attention.masks import lengths_to_mask
from attnkit.attention.module import Attention, attention
from attnkit.attention.monotonic import MoChA, MonotonicAttention
from attnkit.attention.scores import SCORES
from attnkit.attention.self_attention import SelfAttention
from attnkit.attention.tracing import export_mode, exporting, skips_padding

__all__ = [
    "ALIGNMENTS",
    "IMPLS",
    "SCORES",
    "WEIGHT_SUMS",
    "AlignedOutput",
    "Alignment",
    "Attention",
    "AttentionOutput",
    "GMMAttention",
    "Linear",
    "LocalPAttention",
    "Memory",
    "MoChA",
    "MonotonicAttention",
    "Plan",
    "SelfAttention",
    "attention",
    "export_mode",
    "exporting",
    "lengths_to_mask",
    "linear",
    "make_alignment",
    "skips_padding",
]
