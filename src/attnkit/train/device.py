"""Where training and decoding run, and in what precision.

``--device`` and ``--precision`` of the command line are checked here, once, before anything is
read or written: :func:`resolve_device` turns ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` into a
:class:`torch.device` (``auto``: CUDA when available; under torchrun ``auto`` and ``cuda`` mean
``cuda:LOCAL_RANK``, one GPU per process), and :func:`check_precision` refuses a precision the
device cannot train in. Nothing falls back to the CPU silently: an unusable device is an error.

Precisions (:data:`PRECISIONS`): ``fp32``; ``bf16``, autocast to bfloat16 (CPU, and GPUs with
bfloat16); ``fp16``, autocast to float16 with a ``GradScaler`` (CUDA only). Under both autocast
modes the weights, the optimizer and the checkpoints stay float32 and attention computes its
scores in float32 (:mod:`attnkit.ops.precision`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping

import torch

import attnkit.train.distributed as distributed
from attnkit.checks import quoted

__all__ = ["PRECISIONS", "autocast", "check_precision", "resolve_device", "to_device"]

PRECISIONS = ("fp32", "bf16", "fp16")
_AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
_DEVICE = re.compile(r"cuda(?::(\d+))?")


def resolve_device(spec: str) -> torch.device:
    """The device that ``spec`` (``auto``, ``cpu``, ``cuda`` or ``cuda:N``) names on this machine.

    Raises:
        ValueError: another string, CUDA asked for on a machine without it, a GPU index this
            machine lacks, or (under torchrun) a GPU other than ``cuda:LOCAL_RANK``.
    """
    text = spec.strip().lower() if isinstance(spec, str) else None
    if text == "auto":
        text = "cuda" if torch.cuda.is_available() else "cpu"
    if text == "cpu":
        return torch.device("cpu")
    match = _DEVICE.fullmatch(text or "")
    if match is None:
        raise ValueError(f"device: expected auto, cpu, cuda or cuda:N, got {quoted(spec)}")
    if not torch.cuda.is_available():
        raise ValueError(
            f"device: {quoted(spec)} needs CUDA, which this machine lacks "
            f"(torch.cuda.is_available() is False); expected auto or cpu"
        )
    count = torch.cuda.device_count()
    several = distributed.world_size() > 1
    local = distributed.local_rank()
    index = int(match[1]) if match[1] is not None else (local if several else 0)
    if index >= count:
        raise ValueError(
            f"device: expected cuda:0 .. cuda:{count - 1} ({count} GPU(s)), "
            f"got {quoted(spec)}" + (f" (LOCAL_RANK={local})" if several else "")
        )
    if several and index != local:
        raise ValueError(
            f"device: under torchrun each process takes cuda:LOCAL_RANK "
            f"(cuda:{local} here), got {quoted(spec)}"
        )
    return torch.device("cuda", index)


def check_precision(precision: str, device: torch.device) -> None:
    """Refuse a precision that ``device`` cannot train in, naming both.

    Raises:
        ValueError: not one of :data:`PRECISIONS`; ``fp16`` off CUDA; ``bf16`` on a GPU
            without bfloat16.
    """
    if precision not in PRECISIONS:
        raise ValueError(
            f"precision: expected one of {', '.join(PRECISIONS)}, got {quoted(precision)}"
        )
    device = torch.device(device)
    if precision == "fp16" and device.type != "cuda":
        raise ValueError(
            f"precision: fp16 trains on CUDA only (float16 autocast with a "
            f"GradScaler), the device is {device}; use bf16 or fp32"
        )
    if precision == "bf16" and device.type == "cuda" and not _cuda_bf16(device):
        raise ValueError(
            f"precision: bf16 needs a GPU with bfloat16, "
            f"{torch.cuda.get_device_name(device)} ({device}) has none; use fp16 "
            f"or fp32"
        )


def _cuda_bf16(device: torch.device) -> bool:
    """Whether the GPU computes in bfloat16 natively (compute capability 8.0 or more)."""
    return torch.cuda.get_device_capability(device) >= (8, 0)


def autocast(device: torch.device, precision: str):
    """The context that computes in ``precision`` on ``device`` (none for ``fp32``)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=_AUTOCAST_DTYPES[precision])


def to_device(batch, device: torch.device, *, non_blocking: bool = False):
    """``batch`` with every tensor on ``device``: a tensor, or dicts, lists and tuples of them
    (other values as they are). ``non_blocking``: copy asynchronously from pinned memory.

    Example:
        >>> batch = {"src": torch.ones(2, 3), "lengths": [torch.tensor([3, 1])], "n": 2}
        >>> to_device(batch, torch.device("cpu"))["lengths"][0].device
        device(type='cpu')
    """
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        return {k: to_device(v, device, non_blocking=non_blocking) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a named tuple
        return type(batch)(*(to_device(v, device, non_blocking=non_blocking) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device, non_blocking=non_blocking) for v in batch)
    return batch
