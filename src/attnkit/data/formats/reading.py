"""What the corpus readers of :mod:`attnkit.data.formats` share: :func:`read_corpus` reads a
path in the format named or detected, with the options that format takes, and
:class:`~attnkit.data.unusable.Unusable` counts the examples a reader could not use (every
format drops and counts them up to ``max_unusable``; attnkit's own TSV formats, ``labels.tsv``,
``source<TAB>target``, ``captions.tsv`` and ``questions.tsv``, stop at their first bad line
unless ``max_unusable`` is given). ``limit`` (``eval --limit N``) asks for the first N
examples only: a reader that takes it reads no more of the corpus than they need (the COCO,
Karpathy and VQA v2 readers check the images of those examples only); the caller still takes
the first N of what any reader returns.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from attnkit.data.formats import choose_format

__all__ = ["ROLES", "read_corpus"]

# What a corpus is read for: a file holding several splits (Karpathy's, a Hugging Face
# dataset) gives the split of this role unless one is named.
ROLES = ("train", "valid", "test")
# Options every reader may be given, taken only by the readers that have them.
CONTEXT = frozenset({"role", "max_unusable", "references", "limit"})


def read_corpus(task: str, path: str | Path, format: str | None = None,
                **options: Any) -> Any:
    """The examples of ``path`` for ``task``, read in the format ``format`` (``--format``)
    or the one detected (:func:`attnkit.data.formats.choose_format`, which logs its choice).

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
            raise ValueError(f"{given}: not an option of the {task} format {fmt.name} "
                             f"({fmt.summary}), which {path} is read as")
    return fmt.read(path, **kept)
