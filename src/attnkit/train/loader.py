"""One process's batches of one epoch, from a position on, through a torch ``DataLoader``.

A task's ``batches(epoch)`` is either a sequence (``len`` and indexing: each batch built when
indexed, as :class:`Batches` does) or any iterable. Of each complete group
of ``world`` consecutive batches from ``start`` on, process ``rank`` takes the one at its rank;
an epoch's last ``< world`` batches are left out.

- A sequence is indexed by the ``DataLoader``'s sampler: only this process's batches are built,
  by ``workers`` worker processes when ``workers > 0`` (each builds whole batches, returned in
  order), else in this process.
- Any other iterable is walked in this process (``workers`` must be 0): it cannot be split
  between workers without every worker building every batch.

Either way the batches come out in the order of ``batches(epoch)``, so the position in the
epoch (counted by the caller) resumes exactly. With ``pin_memory`` (a CUDA device) the
``DataLoader`` copies each batch to page-locked memory, from which the move to the GPU can
overlap the computation. The ``DataLoader`` gets its own ``torch.Generator``: it never draws from
the global RNG, whose state a checkpoint saves.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, cast, overload

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

__all__ = ["Batches", "EpochLoader"]


class Batches(Sequence):
    """The batches of one epoch, each built when indexed: ``batches[i] = collate(plan[i])``.

    What a task's ``batches(epoch)`` returns so that the Trainer's ``DataLoader`` builds only
    the batches this process takes, in worker processes when asked. ``plan``: what ``collate``
    builds each batch from (e.g. lists of example indices). ``collate`` must not draw from the
    global RNG (it may run in a worker process).

    Example:
        >>> batches = Batches([[0, 1], [2]], lambda idx: torch.tensor(idx))
        >>> len(batches), batches[1], [b.tolist() for b in batches]
        (2, tensor([2]), [[0, 1], [2]])
    """

    def __init__(self, plan: Sequence, collate):
        self.plan, self.collate = plan, collate

    def __len__(self) -> int:
        return len(self.plan)

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> Batches: ...
    def __getitem__(self, i: int | slice) -> Any:
        # a slice is the Batches of that part of the plan, as a Sequence's slice must be
        if isinstance(i, slice):
            return Batches(self.plan[i], self.collate)
        return self.collate(self.plan[i])


def _as_built(batch):
    """The ``DataLoader``'s collate function: batches come built (tuples stay tuples)."""
    return batch


class _Walk(IterableDataset):
    """An iterable of batches walked in this process, yielding this process's share."""

    def __init__(self, batches: Iterable, start: int, rank: int, world: int):
        self.batches, self.start, self.rank, self.world = batches, start, rank, world
        self.total: int | None = None

    def __iter__(self) -> Iterator:
        n, mine = 0, None
        for i, batch in enumerate(self.batches):
            n = i + 1
            if i < self.start:
                continue  # done before a resume
            if (i - self.start) % self.world == self.rank:
                mine = batch
            if (i - self.start) % self.world == self.world - 1:
                yield mine
        self.total = n


class EpochLoader:
    """This process's batches of one epoch from batch ``start`` on (see the module docstring).

    Args:
        batches: the task's ``batches(epoch)``.
        start: batches of the epoch done before (a multiple of ``world`` or a resume point).
        rank, world: this process and how many train together.
        workers: ``DataLoader`` worker processes (a sequence only; 0: build here).
        pin_memory: copy batches to page-locked memory (for a CUDA device).

    Raises:
        ValueError: ``workers > 0`` for batches that are not a sequence.
    """

    def __init__(
        self,
        batches: Iterable,
        *,
        start: int,
        rank: int,
        world: int,
        workers: int,
        pin_memory: bool,
    ):

        def loader(
            dataset: Dataset[Any], sampler: Iterable[int] | None = None, workers: int = 0
        ) -> DataLoader[Any]:
            return DataLoader(
                dataset,
                batch_size=None,
                sampler=sampler,
                num_workers=workers,
                collate_fn=_as_built,
                pin_memory=pin_memory,
                generator=torch.Generator(),
            )

        self._walk: _Walk | None = None
        if isinstance(batches, Sequence):
            self.total: int | None = len(batches)
            done = start + (self.total - start) // world * world  # complete groups only
            # a sequence is a map-style dataset as it is (len and indexing)
            dataset = cast("Dataset[Any]", batches)
            self._loader = loader(dataset, range(start + rank, done, world), workers)
            return
        if workers:
            raise ValueError(
                f"workers: {workers} data workers need task.batches(epoch) to be a "
                f"sequence (len and indexing), got {type(batches).__name__}; use "
                f"0 workers or return attnkit.train.Batches"
            )
        self.total = None
        self._walk = _Walk(batches, start, rank, world)
        self._loader = loader(self._walk)

    def __iter__(self) -> Iterator:
        yield from self._loader
        if self._walk is not None:
            self.total = self._walk.total
