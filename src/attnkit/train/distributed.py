"""Which process this is in a data-parallel run, and the process group's set-up.

``torchrun --nproc_per_node=N prog ...`` starts N copies of ``prog`` and tells each its place in
environment variables: ``WORLD_SIZE`` (N), ``RANK`` (0..N-1), ``LOCAL_RANK`` (its index on this
machine) and ``MASTER_ADDR``/``MASTER_PORT`` (where the processes meet). Without them (a plain
``python prog``) the run is one process of rank 0 and nothing here communicates. A process group
initialised by the caller (``torch.distributed.init_process_group``) is used as it is.

:class:`attnkit.train.Trainer` calls these; a program needs only :func:`is_main` to leave
printing and writing results to one process.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
import torch.distributed as dist

from attnkit.checks import quoted

__all__ = [
    "all_gather",
    "barrier",
    "is_main",
    "local_rank",
    "rank",
    "setup",
    "shutdown",
    "sum_across",
    "world_size",
]

log = logging.getLogger("attnkit")


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(
            f"{name}: expected an integer in the environment, got {quoted(text)}"
        ) from None


def world_size() -> int:
    """How many processes train together (the process group's size, else ``WORLD_SIZE``, else 1)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    size = _env_int("WORLD_SIZE", 1)
    if size < 1:
        raise ValueError(f"WORLD_SIZE: expected a positive integer, got {size}")
    return size


def rank() -> int:
    """This process's index in ``0 .. world_size() - 1`` (0 when training alone)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    r = _env_int("RANK", 0)
    if not 0 <= r < world_size():
        raise ValueError(f"RANK: expected 0 <= RANK < WORLD_SIZE={world_size()}, got {r}")
    return r


def local_rank() -> int:
    """This process's index on its machine (``LOCAL_RANK``, 0 when training alone): the GPU
    it takes, ``cuda:LOCAL_RANK``."""
    return _env_int("LOCAL_RANK", 0)


def is_main() -> bool:
    """True in the process that prints, validates and writes files (rank 0)."""
    return rank() == 0


def setup(device: torch.device) -> bool:
    """Join the other processes when launched by torchrun with ``WORLD_SIZE > 1``.

    Uses the ``nccl`` backend for a CUDA ``device`` (which must be ``cuda:LOCAL_RANK``, one GPU
    per process) and ``gloo`` otherwise. Returns True when it initialised the process group (the
    caller then ends it with :func:`shutdown`); False when training alone or when the group
    already existed.
    """
    if world_size() == 1 or dist.is_initialized():
        return False
    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE > 1 but this PyTorch build has no torch.distributed")
    backend = "gloo"
    if device.type == "cuda":
        local = local_rank()
        if device.index is not None and device.index != local:
            raise ValueError(
                f"model device: expected cuda:{local} (LOCAL_RANK={local}: one GPU "
                f"per process), got {device}"
            )
        torch.cuda.set_device(local)
        backend = "nccl"
    dist.init_process_group(backend=backend, rank=rank(), world_size=world_size())
    log.info("joined a process group of %d (%s) on %s", world_size(), backend, device)
    return True


def shutdown(owned: bool) -> None:
    """End the process group if :func:`setup` started it (``owned``)."""
    if owned and dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    """Wait for every process (nothing to wait for when training alone)."""
    if world_size() > 1:
        dist.barrier()


def sum_across(values: list[float], device: torch.device) -> list[float]:
    """Element-wise sums of ``values`` over all processes (``values`` itself when alone).

    ``device`` is where the reduction runs (the model's: nccl reduces CUDA tensors only).
    """
    if world_size() == 1:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def all_gather(obj: Any) -> list[Any]:
    """Every process's ``obj`` (picklable), in rank order; ``[obj]`` when alone."""
    if world_size() == 1:
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out
