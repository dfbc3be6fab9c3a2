"""attnkit: correct, fast, memory-light attention for PyTorch sequence models.

Mask convention everywhere: a boolean mask is **True where a query may attend**.
"""

from attnkit._version import __version__
from attnkit.attention import (
    IMPLS,
    SCORES,
    Attention,
    AttentionOutput,
    Memory,
    Plan,
    SelfAttention,
    attention,
    lengths_to_mask,
)
from attnkit.doctor import doctor
from attnkit.plot import plot_attention

__all__ = ["IMPLS", "SCORES", "Attention", "AttentionOutput", "Memory", "Plan", "SelfAttention",
           "__version__", "attention", "doctor", "lengths_to_mask", "plot_attention"]
