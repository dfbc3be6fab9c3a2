"""Examples a reader could not use, counted: one rule for every corpus reader.

A reader drops an example it cannot use (an image without its transcription, an annotation
naming a missing image, a line that is not UTF-8) with a message naming the file and line or
entry and why, and counts it in an :class:`Unusable`. When more than ``max_unusable`` of the
corpus (a share, 0 to 1; :data:`MAX_UNUSABLE` by default) was dropped, or nothing is left,
reading stops with an error that gives the counts by kind and the first few messages;
otherwise one warning says how many were dropped, why, and the first few.
"""

from __future__ import annotations

import collections
import logging
from pathlib import Path

from attnkit.checks import quoted
from attnkit.errors import DataError

__all__ = ["FIRST_FEW", "MAX_UNUSABLE", "Unusable", "listed_twice"]

log = logging.getLogger("attnkit")

MAX_UNUSABLE = 0.01  # the share of a corpus's examples that may be dropped, by default
FIRST_FEW = 5  # unusable examples an error or warning names


def listed_twice(where: str, key: str, first: str) -> DataError:
    """The error of an id (an utterance's, an image's, a question's; ``key`` as the message
    shows it) listed a second time at ``where``, first at ``first``: refused whatever
    ``max_unusable`` says, since which of the entries is meant cannot be told."""
    return DataError(
        f"{where}: {key} is listed twice (first at {first}); expected one entry per id"
    )


class Unusable:
    """The examples of ``source`` that a reader dropped, by kind, and the first few messages.

    Args:
        source: the corpus, as errors name it.
        max_unusable: the share of the corpus's examples that may be dropped (0 to 1).
        what: what an example is, plural (``"lines"``, ``"captions"``).
    """

    def __init__(
        self, source: str | Path, *, max_unusable: float = MAX_UNUSABLE, what: str = "examples"
    ):
        if not (isinstance(max_unusable, (int, float)) and 0.0 <= max_unusable <= 1.0):
            raise ValueError(
                f"max_unusable: expected a share from 0 to 1, got {quoted(max_unusable)}"
            )
        self.source, self.max_unusable, self.what = str(source), float(max_unusable), what
        self.kinds: collections.Counter[str] = collections.Counter()
        self.first: list[str] = []

    @property
    def count(self) -> int:
        return sum(self.kinds.values())

    def drop(self, message: str, kind: str) -> None:
        """Count one unusable example of ``kind`` (a few words: ``"no .gt.txt"``),
        ``message`` naming where it is and why."""
        self.kinds[kind] += 1
        if len(self.first) < FIRST_FEW:
            self.first.append(message)

    def check(self, kept: int) -> None:
        """Stop, or warn, as the module docstring says, with ``kept`` examples kept.

        Raises:
            DataError: naming the corpus, the counts by kind and the first few messages,
                when nothing was kept or more than ``max_unusable`` was dropped.
        """
        dropped = self.count
        total = kept + dropped
        kinds = ", ".join(f"{n} {kind}" for kind, n in self.kinds.most_common())
        first = "; ".join(self.first) + ("; ..." if dropped > len(self.first) else "")
        if kept == 0 or dropped > self.max_unusable * total:
            what = (
                f"no usable {self.what}"
                if kept == 0
                else (
                    f"{dropped} of {total} {self.what} are unusable ({kinds}), more than "
                    f"max_unusable={self.max_unusable:g} allows (--max-unusable)"
                )
            )
            raise DataError(f"{self.source}: {what}" + (f": {first}" if dropped else ""))
        if dropped:
            log.warning(
                "%s: dropped %d of %d %s as unusable (%s): %s",
                self.source,
                dropped,
                total,
                self.what,
                kinds,
                first,
            )
