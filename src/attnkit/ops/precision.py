"""The dtype attention computes in: float16 and bfloat16 inputs in float32, others as given.

float16 overflows past 65504, which scores and their sums reach easily, and both low-precision
formats round away the small weights of a long softmax. So every path computes scores, softmax
and accumulators of low-precision inputs in float32 (the reference path, the chunked blocks and
the additive kernels alike) and returns the context in the inputs' dtype.

Under ``torch.autocast`` the inputs arrive in mixed dtypes (a linear layer's bfloat16 output as
the query, an RNN's float32 output as the keys): the :class:`~attnkit.attention.Attention`
module takes them in float32, its multi-head projections follow autocast, and scores, softmax
and the weighted sum run in float32 with autocast off (:func:`autocast_enabled`,
:func:`no_autocast`), so autocast cannot recast them to low precision op by op.
"""

from __future__ import annotations

import contextlib
from typing import TypeVar

import torch

__all__ = ["LOW_PRECISION", "autocast_enabled", "compute_dtype", "no_autocast", "upcast"]

LOW_PRECISION = (torch.float16, torch.bfloat16)

# Tensors in, tensors out; only where some input may be None may the outputs be None.
_MaybeTensor = TypeVar("_MaybeTensor", torch.Tensor, torch.Tensor | None)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for float16/bfloat16, else ``dtype``."""
    return torch.float32 if dtype in LOW_PRECISION else dtype


def upcast(*xs: _MaybeTensor) -> list[_MaybeTensor]:
    """Each tensor in its :func:`compute_dtype` (``None`` stays ``None``)."""
    return [x.float() if x is not None and x.dtype in LOW_PRECISION else x for x in xs]


def autocast_enabled(device: torch.device) -> bool:
    """True when ``torch.autocast`` is on for ``device``'s type."""
    try:
        return torch.is_autocast_enabled(device.type)
    except (TypeError, RuntimeError):  # a device type autocast does not know
        return False


def no_autocast(device: torch.device):
    """A context with autocast off for ``device``'s type (nothing to do when it is off)."""
    if not autocast_enabled(device):
        return contextlib.nullcontext()
    return torch.autocast(device.type, enabled=False)
