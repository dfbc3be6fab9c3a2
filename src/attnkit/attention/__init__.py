"""Attention: masks, scores, paths (reference, SDPA) and the modules built on them."""

from attnkit.attention.core import AttentionOutput, Memory
from attnkit.attention.dispatch import IMPLS, Plan
from attnkit.attention.masks import lengths_to_mask
from attnkit.attention.module import Attention, attention
from attnkit.attention.scores import SCORES
from attnkit.attention.self_attention import SelfAttention
from attnkit.attention.tracing import export_mode, exporting

__all__ = [
    "IMPLS",
    "SCORES",
    "Attention",
    "AttentionOutput",
    "Memory",
    "Plan",
    "SelfAttention",
    "attention",
    "export_mode",
    "exporting",
    "lengths_to_mask",
]
