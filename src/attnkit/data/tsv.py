"""The user's own parallel text: UTF-8 ``source<TAB>target`` lines."""

from __future__ import annotations

import logging
from pathlib import Path

from attnkit.errors import DataError

__all__ = ["read_tsv", "read_tsv_rows"]

log = logging.getLogger("attnkit")


def read_tsv(path: str | Path, *, skip_bad_lines: bool = False) -> list[tuple[str, str]]:
    """Read ``source<TAB>target`` pairs.

    A line without exactly one tab, with an empty side, or that is not valid UTF-8 raises a
    :class:`DataError` naming the file and line, or with ``skip_bad_lines`` is skipped and
    counted in one warning. Blank lines (no tab) are ignored; a UTF-8 byte-order mark is dropped.
    """
    return [(a, b) for _, a, b in read_tsv_rows(path, skip_bad_lines=skip_bad_lines)]


def read_tsv_rows(
    path: str | Path,
    *,
    columns: tuple[str, str] = ("source", "target"),
    skip_bad_lines: bool = False,
) -> list[tuple[int, str, str]]:
    """``(line number, first, second)`` for each usable line, checked as in :func:`read_tsv`.

    ``columns`` names the two sides in error messages (``"expected filename<TAB>text"``).
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]  # a UTF-8 byte-order mark is not part of the first source
    rows, bad = [], []
    for n, line in enumerate(raw.split(b"\n"), start=1):
        line = line.rstrip(b"\r")
        if not line.strip() and b"\t" not in line:
            continue
        problem = None
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            problem = f"not valid UTF-8 (byte {exc.start})"
        else:
            parts = text.split("\t")
            if len(parts) != 2:
                problem = f"expected {columns[0]}<TAB>{columns[1]}, found {len(parts) - 1} tabs"
            elif not parts[0].strip() or not parts[1].strip():
                problem = "empty " + (columns[0] if not parts[0].strip() else columns[1])
        if problem is None:
            rows.append((n, parts[0], parts[1]))
        elif skip_bad_lines:
            bad.append(n)
        else:
            raise DataError(f"{path}:{n}: {problem}")
    if bad:
        log.warning("%s: skipped %d bad lines (first at line %d)", path, len(bad), bad[0])
    if not rows:
        raise DataError(f"{path}: no usable {columns[0]}<TAB>{columns[1]} lines")
    return rows
