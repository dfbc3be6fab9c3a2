"""Shuffled batches of similar lengths, or of whole groups, the same for the same (seed,
epoch)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["group_batches", "length_batches", "task_config", "token_batches"]


def length_batches(
    lengths: Sequence[int], batch_size: int, *, seed: int, epoch: int, ascending: bool = False
) -> list[list[int]]:
    """Indices of ``lengths`` in batches of ``batch_size``, shuffled (seeded by ``seed`` and
    ``epoch``), each batch drawn from one pool of ``50 * batch_size`` examples sorted by length,
    so batches hold similar lengths (little padding) and their order stays random.

    ``ascending``: instead, every example sorted by length (ties in a seeded random order) and
    the batches taken shortest first: SortaGrad's curriculum (Amodei et al. 2016), for a first
    epoch in which an attention decoder learns to align on short inputs first.

    Example:
        >>> length_batches([5, 1, 4, 2, 3], 2, seed=0, epoch=0, ascending=True)
        [[1, 3], [4, 2], [0]]
    """
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    order = torch.randperm(len(lengths), generator=g).tolist()
    if ascending:
        order.sort(key=lambda i: lengths[i])
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    pool = 50 * batch_size
    batches = []
    for p in range(0, len(order), pool):
        chunk = sorted(order[p : p + pool], key=lambda i: lengths[i])
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    return [batches[j] for j in torch.randperm(len(batches), generator=g).tolist()]


def token_batches(
    lengths: Sequence[int], max_tokens: int, *, seed: int, epoch: int
) -> list[list[int]]:
    """Indices of ``lengths`` in batches of at most ``max_tokens`` padded tokens each: a batch
    of ``n`` examples whose longest has length ``L`` holds ``n * L <= max_tokens`` (an example
    longer than ``max_tokens`` alone is a batch of one). As :func:`length_batches`: shuffled
    (seeded by ``seed`` and ``epoch``), each batch drawn from one pool of examples sorted by
    length (a pool: about 50 batches' worth), the batches' order random. Short sentences then
    come many to a batch and long ones few, so each batch costs about the same (Vaswani et al.
    2017 batched by about 25,000 tokens).

    Example:
        >>> token_batches([5, 1, 4, 2, 3], 6, seed=0, epoch=0)
        [[0], [4], [1, 3], [2]]
    """
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens: expected an int >= 1, got {max_tokens!r}")
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    order = torch.randperm(len(lengths), generator=g).tolist()
    mean = sum(lengths) / max(len(lengths), 1)
    pool = 50 * max(1, int(max_tokens // max(mean, 1)))
    batches: list[list[int]] = []
    for p in range(0, len(order), pool):
        batch: list[int] = []
        for i in sorted(order[p : p + pool], key=lambda i: lengths[i]):
            # sorted ascending: the newcomer is the batch's longest
            if batch and (len(batch) + 1) * max(lengths[i], 1) > max_tokens:
                batches.append(batch)
                batch = []
            batch.append(i)
        if batch:
            batches.append(batch)
    return [batches[j] for j in torch.randperm(len(batches), generator=g).tolist()]


def group_batches(
    groups: Sequence[int], batch_size: int, *, seed: int, epoch: int
) -> list[list[int]]:
    """Indices of ``groups`` (each example's group id, e.g. the image a question is about) in
    batches of whole groups: the groups shuffled (seeded by ``seed`` and ``epoch``) and taken
    in turn until a batch holds ``batch_size`` examples or more (the last batch: what is
    left), so that what a group shares (the image) is computed once per batch.

    Example:
        >>> group_batches([0, 0, 1, 2, 2, 2], 3, seed=0, epoch=0)
        [[3, 4, 5], [0, 1, 2]]
    """
    members: dict[int, list[int]] = {}
    for i, group in enumerate(groups):
        members.setdefault(group, []).append(i)
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    order = list(members)
    batches, batch = [], []
    for j in torch.randperm(len(order), generator=g).tolist():
        batch += members[order[j]]
        if len(batch) >= batch_size:
            batches.append(batch)
            batch = []
    return batches + ([batch] if batch else [])


def task_config(name: str, task: Any, *, batching: dict | None = None, **more: Any) -> dict:
    """The config a training task's checkpoint keeps (read back by
    :mod:`attnkit.tasks.loading`): ``{"task": name, "model": ..., "data": ..., "batching":
    ...}`` from ``task``'s ``model_config`` and ``data``, its ``batch_size``, ``seed`` and
    ``label_smoothing`` followed by ``batching`` in the batching settings, and ``more`` beside
    them."""
    return {
        "task": name,
        "model": task.model_config,
        "data": task.data,
        "batching": {
            "batch_size": task.batch_size,
            "seed": task.seed,
            "label_smoothing": task.label_smoothing,
            **(batching or {}),
        },
        **more,
    }
