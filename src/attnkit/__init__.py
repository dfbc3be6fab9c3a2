"""attnkit: correct, fast, memory-light attention for PyTorch sequence models.

Mask convention everywhere: a boolean mask is **True where a query may attend**.

The names below are imported from their modules on first use (PEP 562), so that importing
``attnkit`` (and its command line's entry point, which must answer a Ctrl-C at any moment)
does not load PyTorch before it is needed.
"""

import importlib as _importlib
from typing import Any as _Any

from attnkit._version import __version__

_EXPORTS = {
    "IMPLS": "attnkit.attention",
    "SCORES": "attnkit.attention",
    "Attention": "attnkit.attention",
    "AttentionOutput": "attnkit.attention",
    "Memory": "attnkit.attention",
    "Plan": "attnkit.attention",
    "SelfAttention": "attnkit.attention",
    "attend": "attnkit.attention",
    "lengths_to_mask": "attnkit.attention",
    "doctor": "attnkit.diagnose",
    "plot_attention": "attnkit.diagnose",
}

__all__ = [
    "IMPLS",
    "SCORES",
    "Attention",
    "AttentionOutput",
    "Memory",
    "Plan",
    "SelfAttention",
    "__version__",
    "attend",
    "doctor",
    "lengths_to_mask",
    "plot_attention",
]


def __getattr__(name: str) -> _Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'attnkit' has no attribute {name!r}")
    value = getattr(_importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
