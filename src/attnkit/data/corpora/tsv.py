"""The user's own tab-separated files, read as :mod:`attnkit.data.corpora.text_files` reads text:
``source<TAB>target`` lines, or any fixed number of columns (``filename<TAB>text``,
``filename<TAB>question<TAB>answer``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

from attnkit.data.corpora.text_files import byte_lines, decode_line, undecodable
from attnkit.data.corpora.unusable import Unusable
from attnkit.errors import DataError

__all__ = [
    "HEADER_WORDS",
    "MAX_CHARS",
    "field_problem",
    "iter_tsv_rows",
    "read_tsv",
    "read_tsv_rows",
]

log = logging.getLogger("attnkit")

# Characters per field at most, by default: one training line of 100,000 characters would take
# gigabytes in one step, and a sentence that long could not be translated in useful time.
MAX_CHARS = 1000
# A first line made of two of these (or of the column names) is a header, not an example.
HEADER_WORDS = frozenset(
    {
        "source",
        "src",
        "target",
        "tgt",
        "input",
        "output",
        "text",
        "filename",
        "file",
        "path",
        "image",
        "wav",
        "wav_path",
        "audio",
        "transcript",
        "transcription",
        "label",
        "sentence",
        "translation",
    }
)


def read_tsv(
    path: str | Path, *, skip_bad_lines: bool = False, max_chars: int | None = MAX_CHARS
) -> list[tuple[str, str]]:
    """Read ``source<TAB>target`` pairs from a text file as :mod:`attnkit.data.corpora.text_files`
    reads them (UTF-8 in NFC, LF or CRLF, gzip, xz or bzip2 decompressed).

    A line without exactly one tab, with an empty side, with a side longer than
    ``max_chars`` characters (None: no limit), with a NUL character, or that is not valid
    UTF-8 raises a :class:`DataError` naming the file and line, or with ``skip_bad_lines`` is
    skipped and counted in one warning. Blank lines (no tab) are ignored; a first line of
    column names (``source<TAB>target``: two of :data:`HEADER_WORDS`) is skipped with a
    warning. A UTF-16 file is refused as a whole.
    """
    return [
        (a, b)
        for _, a, b in read_tsv_rows(path, skip_bad_lines=skip_bad_lines, max_chars=max_chars)
    ]


def read_tsv_rows(
    path: str | Path,
    *,
    columns: tuple[str, ...] = ("source", "target"),
    skip_bad_lines: bool = False,
    max_chars: int | None = MAX_CHARS,
    unusable: Unusable | None = None,
) -> list[tuple]:
    """``(line number, *fields)`` for each usable line, checked as in :func:`read_tsv`: one
    field per name in ``columns``, none empty; a first line of column names (each field one of
    ``columns`` or :data:`HEADER_WORDS`) is skipped with a warning.

    ``columns`` names the fields in error messages (``"expected filename<TAB>text"``). With
    ``unusable`` (and not ``skip_bad_lines``), a bad line is dropped and counted in it, as
    every corpus reader drops what it cannot use, and the caller checks it
    (:meth:`attnkit.data.corpora.unusable.Unusable.check`) once it knows what it kept; without, the
    first bad line raises.
    """
    return list(
        iter_tsv_rows(
            path,
            columns=columns,
            skip_bad_lines=skip_bad_lines,
            max_chars=max_chars,
            unusable=unusable,
        )
    )


def iter_tsv_rows(
    path: str | Path,
    *,
    columns: tuple[str, ...] = ("source", "target"),
    skip_bad_lines: bool = False,
    max_chars: int | None = MAX_CHARS,
    unusable: Unusable | None = None,
) -> Iterator[tuple]:
    """The rows of :func:`read_tsv_rows`, one at a time as the file is read: memory holds
    one line, however long the file."""
    layout = "<TAB>".join(columns)
    header = {c.lower() for c in columns} | HEADER_WORDS
    rows, bad, first_bad = 0, 0, 0
    for n, line in byte_lines(path):
        if not line.strip() and b"\t" not in line:
            continue
        parts = _fields(line, columns, max_chars)
        if isinstance(parts, list):
            if not rows and not bad and {part.strip().lower() for part in parts} <= header:
                log.warning(
                    "%s:%d: %r is a header, not an example: skipped", path, n, "\t".join(parts)
                )
                continue
            rows += 1
            yield (n, *parts)
        elif skip_bad_lines:
            bad, first_bad = bad + 1, first_bad or n
        elif unusable is not None:
            bad += 1
            unusable.drop(f"{path}:{n}: {parts}", "bad lines")
        else:
            raise DataError(f"{path}:{n}: {parts}")
    if unusable is not None:  # the caller checks it
        return
    if bad:
        log.warning("%s: skipped %d bad lines (first at line %d)", path, bad, first_bad)
    if not rows:
        raise DataError(f"{path}: no usable {layout} lines")


def _fields(line: bytes, columns: tuple[str, ...], max_chars: int | None) -> list[str] | str:
    """The fields of one line (without its line end), or what is wrong with it."""
    try:
        parts = decode_line(line).split("\t")
    except UnicodeDecodeError as exc:
        return undecodable(exc)
    if len(parts) != len(columns):
        return f"expected {'<TAB>'.join(columns)}, found {len(parts) - 1} tabs"
    for name, part in zip(columns, parts):
        problem = field_problem(name, part, max_chars)
        if problem is not None:
            return problem
    return parts


def field_problem(name: str, text: str, max_chars: int | None = MAX_CHARS) -> str | None:
    """What makes ``text``, the field ``name`` of an example, unusable (empty, a NUL
    character, more than ``max_chars`` characters), or None."""
    if not text.strip():
        return f"empty {name}"
    if "\x00" in text:
        return f"NUL character in the {name}"
    if max_chars is not None and len(text) > max_chars:
        return f"{name} of {len(text)} characters, more than the limit of {max_chars}"
    return None
