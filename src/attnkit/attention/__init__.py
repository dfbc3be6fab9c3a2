"""Attention: masks, scores, paths (reference, SDPA, chunked, step), the dispatch that picks one
and says why, the modules built on them, and the alignment modules (monotonic, MoChA, local-p,
GMM) called the same way. The CPU machinery beneath them (dense layers, C++ kernels, precision,
export mode) is :mod:`attnkit.ops`."""

from attnkit.attention.alignment import (
    ALIGNMENTS,
    WEIGHT_SUMS,
    AlignedOutput,
    Alignment,
    make_alignment,
)
from attnkit.attention.core import AttentionOutput, Memory
from attnkit.attention.dispatch import IMPLS, Plan
from attnkit.attention.local import GMMAttention, LocalPAttention
from attnkit.attention.masks import lengths_to_mask
from attnkit.attention.module import Attention, attend
from attnkit.attention.monotonic import MoChA, MonotonicAttention
from attnkit.attention.scores import SCORES
from attnkit.attention.self_attention import SelfAttention

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
    "LocalPAttention",
    "Memory",
    "MoChA",
    "MonotonicAttention",
    "Plan",
    "SelfAttention",
    "attend",
    "lengths_to_mask",
    "make_alignment",
]
