"""Text pairs of any number kept on disk: a translation corpus's ``(source, target)`` pairs
and the line each came from, in memory flat in the corpus's size.

A :class:`TextPairs` writes its pairs, as they are read, to one temporary file (each pair's
source and target in UTF-8, separated by a NUL, which no text attnkit reads holds) and keeps
in memory 24 bytes per pair: where the pair starts and ends in that file and its line. A pair
is read back from the file when indexed, with ``os.pread`` (so forked DataLoader workers
share the open file without sharing a position in it). A million pairs take 24 MB of memory,
where a list of Python strings takes about 130 bytes per pair plus its characters.

The file is removed when the :class:`TextPairs` that wrote it, and every slice of it, are
garbage-collected, or when the process exits; a copy sent to a spawned worker process reads
the same file.
"""

from __future__ import annotations

import os
import tempfile
import weakref
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

__all__ = ["TextPairs"]

SEPARATOR = b"\x00"
ITER_BLOCK = 4096  # pairs read at once when iterating


class TextPairs(Sequence):
    """``(source, target)`` pairs on disk (see the module docstring): ``pairs[i]`` is a
    tuple of two ``str``, ``pairs.origin(i)`` where it came from (``file:line``); a slice is
    a :class:`TextPairs` over the same file.

    Made by :meth:`collect`; compares equal to any sequence of the same pairs (a list of
    tuples from :func:`attnkit.data.read_tsv`).
    """

    def __init__(
        self,
        path: Path,
        starts: np.ndarray,
        ends: np.ndarray,
        lines: np.ndarray,
        source: str,
        *,
        owner: object = None,
    ):
        self.path, self.starts, self.ends, self.lines = Path(path), starts, ends, lines
        self.source = source  # the file origin() names
        self._owner = owner  # what removes the file once no TextPairs over it is left
        self._fd: int | None = None
        self._pid: int | None = None

    @classmethod
    def collect(cls, pairs: Iterable[tuple[int, str, str]], source: str | Path) -> TextPairs:
        """The pairs of ``pairs``, ``(line, source text, target text)`` each, read from
        ``source`` (as ``origin`` names it), written to a new temporary file as they come."""
        fd, name = tempfile.mkstemp(prefix="attnkit-pairs-", suffix=".txt")
        owner = _File(name)
        start_list, line_list = array("q"), array("q")
        end = 0
        try:
            with os.fdopen(fd, "wb", buffering=1 << 20) as f:
                for line, src, tgt in pairs:
                    start_list.append(end)
                    line_list.append(line)
                    end += f.write(src.encode("utf-8") + SEPARATOR + tgt.encode("utf-8"))
        except BaseException:
            owner.remove()
            raise
        starts = np.frombuffer(start_list, np.int64).copy() if start_list else np.zeros(0, np.int64)
        ends = np.append(starts[1:], end) if len(starts) else starts
        lines = np.frombuffer(line_list, np.int64).copy() if line_list else np.zeros(0, np.int64)
        return cls(Path(name), starts, ends, lines, str(source), owner=owner)

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return TextPairs(
                self.path,
                self.starts[i],
                self.ends[i],
                self.lines[i],
                self.source,
                owner=self._owner,
            )
        start, end = int(self.starts[i]), int(self.ends[i])
        source, target = self._pread(end - start, start).split(SEPARATOR)
        return source.decode("utf-8"), target.decode("utf-8")

    def __iter__(self):
        """The pairs in order, read a block of pairs lying back to back at a time (one read
        for thousands of pairs: the passes over a whole corpus)."""
        for i in range(0, len(self), ITER_BLOCK):
            j = min(len(self), i + ITER_BLOCK)
            starts, ends = self.starts[i:j], self.ends[i:j]
            if not np.array_equal(starts[1:], ends[:-1]):  # a slice with gaps: one at a time
                yield from (self[k] for k in range(i, j))
                continue
            first = int(starts[0])
            block = self._pread(int(ends[-1]) - first, first)
            for start, end in zip((starts - first).tolist(), (ends - first).tolist()):
                source, target = block[start:end].split(SEPARATOR)
                yield source.decode("utf-8"), target.decode("utf-8")

    def _pread(self, size: int, offset: int) -> bytes:
        if self._fd is None or self._pid != os.getpid():
            self._fd, self._pid = os.open(self.path, os.O_RDONLY), os.getpid()
        return os.pread(self._fd, size, offset)

    def origin(self, i: int) -> str:
        """Where pair ``i`` came from: ``file:line``."""
        return f"{self.source}:{self.lines[i]}"

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, Sequence)
            and len(self) == len(other)
            and all(tuple(a) == tuple(b) for a, b in zip(self, other))
        )

    def __repr__(self) -> str:
        head = ", ".join(repr(self[k]) for k in range(min(2, len(self))))
        return f"TextPairs([{head}{', ...' if len(self) > 2 else ''}], {len(self)} pairs)"

    def __getstate__(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k != "_fd"}
        state["_owner"] = None  # a copy in another process reads the file, never removes it
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _fd=None, _pid=None)

    def __del__(self):
        if getattr(self, "_fd", None) is not None and self._pid == os.getpid():
            os.close(self._fd)


class _File:
    """A temporary file, removed when this object is garbage-collected (the last
    :class:`TextPairs` over it is) or at exit."""

    def __init__(self, name: str):
        self.remove = weakref.finalize(self, _remove, name)


def _remove(name: str) -> None:
    try:
        os.unlink(name)
    except FileNotFoundError:
        pass
