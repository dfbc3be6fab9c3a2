"""What the corpus readers of :mod:`attnkit.data.corpora` share: every format registered (this
module imports each ``*_formats.py``), :func:`choose_format` and :func:`formats_of` over them,
and :func:`read_corpus`, which reads a path in the format named or detected, with the options
that format takes; :class:`~attnkit.data.corpora.unusable.Unusable` counts the examples a reader
could not use (every format drops and counts them up to ``max_unusable``; attnkit's own TSV formats,
``labels.tsv``, ``source<TAB>target``, ``captions.tsv`` and ``questions.tsv``, stop at their first
bad line unless ``max_unusable`` is given). ``limit`` (``eval --limit N``) asks for the first N
examples only: a reader that takes it reads no more of the corpus than they need (the COCO,
Karpathy and VQA v2 readers check the images of those examples only); the caller still takes
the first N of what any reader returns.
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any

# the formats register themselves when imported (attnkit.data.corpora.format_registry)
from attnkit.data.corpora import (  # noqa: F401
    an4_formats,
    hf_formats,
    image_formats,
    line_formats,
    mini_librispeech_formats,
    page_formats,
    speech_formats,
    text_formats,
)
from attnkit.data.corpora.format_registry import FORMATS, ROLES, Format
from attnkit.errors import DataError

__all__ = ["FORMATS", "ROLES", "Format", "choose_format", "formats_of", "read_corpus"]

log = logging.getLogger("attnkit")

# Options every reader may be given, taken only by the readers that have them.
CONTEXT = frozenset({"role", "max_unusable", "references", "limit"})


def read_corpus(task: str, path: str | Path, format: str | None = None, **options: Any) -> Any:
    """The examples of ``path`` for ``task``, read in the format ``format`` (``--format``)
    or the one detected (:func:`choose_format`, which logs its choice).

    ``options`` go to the format's reader, but for those that are None (the reader's default
    stands); those it does not take are left out when they are :data:`CONTEXT` options
    (``role``, ``max_unusable``, ``references``, ``limit``), and refused otherwise.

    Raises:
        ValueError: an unknown format, or an option given that the format does not take
            (named as its command-line option).
        DataError: as the reader raises (naming the file and line).
    """
    fmt = choose_format(task, path, format)
    taken = inspect.signature(fmt.read).parameters
    kept = {}
    for name, value in options.items():
        if value is None:  # not given: the reader's default
            continue
        if name in taken:
            kept[name] = value
        elif name not in CONTEXT:
            given = "a second path" if name == "target" else f"--{name.replace('_', '-')}"
            raise ValueError(
                f"{given}: not an option of the {task} format {fmt.name} "
                f"({fmt.summary}), which {path} is read as"
            )
    return fmt.read(path, **kept)


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
            raise ValueError(
                f"--format: expected one of {', '.join(known) or 'none'} for {task}, got {name!r}"
            )
        log.info("%s: read as %s, as --format says (%s)", path, name, known[name].summary)
        return known[name]
    path = Path(path)
    for fmt in known.values():
        if fmt.detect(path):
            log.info("%s: read as %s (%s)", path, fmt.name, fmt.summary)
            return fmt
    raise DataError(
        f"{path}: not a corpus of task {task} in any format attnkit reads "
        f"({', '.join(known) or 'none'}); name one with --format"
    )
