"""Corpus formats: the layouts each task's data comes in, read into the examples the task uses.

Each format is a :class:`Format` registered under a name (``--format NAME`` on the command
line), for one task, with a reader and a detector. A reader returns what the task's native
reader returns for the same examples (a format is only another way of writing them down), and
:func:`~attnkit.data.corpora.reading.choose_format` picks the reader of a path: the one named, or
the first registered format of the task whose detector accepts the path, logging which it chose (and
the one named).

One module per family of formats (``*_formats.py`` beside this one) registers its formats when
imported, with :func:`register` from here; :mod:`attnkit.data.corpora.reading` imports them all
and is where a format is chosen (``choose_format``, ``formats_of``) and read (``read_corpus``).
This module imports none of them, so none of them imports a module that imports it back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["FORMATS", "ROLES", "Format", "register"]

# What a corpus is read for: a file holding several splits (Karpathy's, a Hugging Face
# dataset) gives the split of this role unless one is named.
ROLES = ("train", "valid", "test")


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
