"""Corpus formats: the layouts each task's data comes in, read into the examples the task uses.

Each format is a :class:`Format` registered under a name (``--format NAME`` on the command
line), for one task, with a reader and a detector. A reader returns what the task's native
reader returns for the same examples (a format is only another way of writing them down), and
:func:`choose_format` picks the reader of a path: the one named, or the first registered format
of the task whose detector accepts the path, logging which it chose (and the one named).

One module per family of formats registers its formats when imported; importing this package
imports them all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnkit.errors import DataError

__all__ = ["FORMATS", "Format", "choose_format", "formats_of", "register"]

log = logging.getLogger("attnkit")


@dataclass(frozen=True)
class Format:
    """A corpus format of one ``task``: ``read(path, **options)`` returns the task's examples,
    ``detect(path)`` says whether ``path`` looks like this format (cheaply: names and the first
    bytes, never the whole corpus); ``summary`` is one line for the format tables and the help
    texts, ``example`` a short example of its files."""

    name: str
    task: str
    read: Callable[..., Any]
    detect: Callable[[Path], bool]
    summary: str
    example: str = ""


FORMATS: dict[tuple[str, str], Format] = {}


def register(fmt: Format) -> Format:
    """Add ``fmt``; a second format of one name for one task is refused."""
    key = (fmt.task, fmt.name)
    if key in FORMATS:
        raise ValueError(f"format {fmt.name!r} of task {fmt.task!r} is already registered")
    FORMATS[key] = fmt
    return fmt


def formats_of(task: str) -> list[Format]:
    """The formats of ``task``, in the order detection tries them."""
    return [f for (t, _), f in FORMATS.items() if t == task]


def choose_format(task: str, path: str | Path, name: str | None = None) -> Format:
    """The format to read ``path`` with: ``name`` (``--format``) when given, else the first
    format of ``task`` whose detector accepts ``path``.

    Raises:
        ValueError: naming ``--format`` when ``name`` is not a format of ``task``.
        DataError: naming ``path`` when no format of ``task`` recognises it.
    """
    known = {f.name: f for f in formats_of(task)}
    if name is not None:
        if name not in known:
            raise ValueError(f"--format: expected one of {', '.join(known) or 'none'} for "
                             f"{task}, got {name!r}")
        log.info("%s: read as %s, as --format says (%s)", path, name, known[name].summary)
        return known[name]
    path = Path(path)
    for fmt in known.values():
        if fmt.detect(path):
            log.info("%s: read as %s (%s)", path, fmt.name, fmt.summary)
            return fmt
    raise DataError(f"{path}: not a corpus of task {task} in any format attnkit reads "
                    f"({', '.join(known) or 'none'}); name one with --format")

from attnkit.data.formats import hf, images, lines, text  # noqa: E402,F401  (the other tasks)

from attnkit.data.formats import speech  # noqa: E402,F401  (registers the speech formats)
