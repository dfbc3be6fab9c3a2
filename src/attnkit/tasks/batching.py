"""Shuffled batches of similar lengths, the same for the same (seed, epoch)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["length_batches"]


def length_batches(lengths: Sequence[int], batch_size: int, *, seed: int,
                   epoch: int) -> list[list[int]]:
    """Indices of ``lengths`` in batches of ``batch_size``, shuffled (seeded by ``seed`` and
    ``epoch``), each batch drawn from one pool of ``50 * batch_size`` examples sorted by length,
    so batches hold similar lengths (little padding) and their order stays random."""
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    order = torch.randperm(len(lengths), generator=g).tolist()
    pool = 50 * batch_size
    batches = []
    for p in range(0, len(order), pool):
        chunk = sorted(order[p : p + pool], key=lambda i: lengths[i])
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    return [batches[j] for j in torch.randperm(len(batches), generator=g).tolist()]
