"""The dtype attention computes in: float16 and bfloat16 inputs in float32, others as given.

float16 overflows past 65504, which scores and their sums reach easily, and both low-precision
formats round away the small weights of a long softmax. So every path computes scores, softmax
and accumulators of low-precision inputs in float32 (the reference path, the chunked blocks and
the additive kernels alike) and returns the context in the inputs' dtype.
"""

from __future__ import annotations

import torch

__all__ = ["LOW_PRECISION", "compute_dtype", "upcast"]

LOW_PRECISION = (torch.float16, torch.bfloat16)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for float16/bfloat16, else ``dtype``."""
    return torch.float32 if dtype in LOW_PRECISION else dtype


def upcast(*xs: torch.Tensor | None) -> list[torch.Tensor | None]:
    """Each tensor in its :func:`compute_dtype` (``None`` stays ``None``)."""
    return [x.float() if x is not None and x.dtype in LOW_PRECISION else x for x in xs]
