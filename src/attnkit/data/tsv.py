"""The user's own tab-separated files: UTF-8 ``source<TAB>target`` lines, or any fixed number
of columns (``filename<TAB>text``, ``filename<TAB>question<TAB>answer``)."""

from __future__ import annotations

import logging
from pathlib import Path

from attnkit.data.paths import regular_file
from attnkit.errors import DataError

__all__ = ["HEADER_WORDS", "MAX_CHARS", "read_tsv", "read_tsv_rows"]

log = logging.getLogger("attnkit")

# Characters per field at most, by default: one training line of 100,000 characters would take
# gigabytes in one step, and a sentence that long could not be translated in useful time.
MAX_CHARS = 1000
# A first line made of two of these (or of the column names) is a header, not an example.
HEADER_WORDS = frozenset({"source", "src", "target", "tgt", "input", "output", "text",
                          "filename", "file", "path", "image", "wav", "wav_path", "audio",
                          "transcript", "transcription", "label", "sentence", "translation"})


def read_tsv(path: str | Path, *, skip_bad_lines: bool = False,
             max_chars: int | None = MAX_CHARS) -> list[tuple[str, str]]:
    """Read ``source<TAB>target`` pairs.

    A line without exactly one tab, with an empty side, with a side longer than
    ``max_chars`` characters (None: no limit), with a NUL character, or that is not valid
    UTF-8 raises a :class:`DataError` naming the file and line, or with ``skip_bad_lines`` is
    skipped and counted in one warning. Blank lines (no tab) are ignored; a UTF-8 byte-order
    mark is dropped; a first line of column names (``source<TAB>target``: two of
    :data:`HEADER_WORDS`) is skipped with a warning. A UTF-16 file is refused as a whole.
    """
    return [(a, b) for _, a, b in read_tsv_rows(path, skip_bad_lines=skip_bad_lines,
                                                 max_chars=max_chars)]


def read_tsv_rows(
    path: str | Path,
    *,
    columns: tuple[str, ...] = ("source", "target"),
    skip_bad_lines: bool = False,
    max_chars: int | None = MAX_CHARS,
) -> list[tuple]:
    """``(line number, *fields)`` for each usable line, checked as in :func:`read_tsv`: one
    field per name in ``columns``, none empty; a first line of column names (each field one of
    ``columns`` or :data:`HEADER_WORDS`) is skipped with a warning.

    ``columns`` names the fields in error messages (``"expected filename<TAB>text"``).
    """
    path = regular_file(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or raw.count(b"\x00") * 4 > len(raw):
        raise DataError(f"{path}: looks like UTF-16 text (a byte-order mark or NUL bytes "
                        "between the characters); save it as UTF-8")
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]  # a UTF-8 byte-order mark is not part of the first source
    layout = "<TAB>".join(columns)
    header = {c.lower() for c in columns} | HEADER_WORDS
    rows, bad = [], []
    for n, line in enumerate(raw.split(b"\n"), start=1):
        line = line.rstrip(b"\r")
        if not line.strip() and b"\t" not in line:
            continue
        problem = _problem(line, columns, max_chars)
        if problem is None:
            parts = line.decode("utf-8").split("\t")
            if not rows and not bad and {part.strip().lower() for part in parts} <= header:
                log.warning("%s:%d: %r is a header, not an example: skipped", path, n,
                            "\t".join(parts))
                continue
            rows.append((n, *parts))
        elif skip_bad_lines:
            bad.append(n)
        else:
            raise DataError(f"{path}:{n}: {problem}")
    if bad:
        log.warning("%s: skipped %d bad lines (first at line %d)", path, len(bad), bad[0])
    if not rows:
        raise DataError(f"{path}: no usable {layout} lines")
    return rows


def _problem(line: bytes, columns: tuple[str, ...], max_chars: int | None) -> str | None:
    """What is wrong with one line (without its newline), or None."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not valid UTF-8 (byte {exc.start})"
    parts = text.split("\t")
    if len(parts) != len(columns):
        return f"expected {'<TAB>'.join(columns)}, found {len(parts) - 1} tabs"
    for name, part in zip(columns, parts):
        if not part.strip():
            return f"empty {name}"
        if "\x00" in part:
            return f"NUL character in the {name}"
        if max_chars is not None and len(part) > max_chars:
            return f"{name} of {len(part)} characters, more than the limit of {max_chars}"
    return None
