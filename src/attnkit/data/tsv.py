"""The user's own tab-separated files: UTF-8 ``source<TAB>target`` lines, or any fixed number
of columns (``filename<TAB>text``, ``filename<TAB>question<TAB>answer``)."""

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
    columns: tuple[str, ...] = ("source", "target"),
    skip_bad_lines: bool = False,
) -> list[tuple]:
    """``(line number, *fields)`` for each usable line, checked as in :func:`read_tsv`: one
    field per name in ``columns``, none empty.

    ``columns`` names the fields in error messages (``"expected filename<TAB>text"``).
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]  # a UTF-8 byte-order mark is not part of the first source
    layout = "<TAB>".join(columns)
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
            empty = [c for c, part in zip(columns, parts) if not part.strip()]
            if len(parts) != len(columns):
                problem = f"expected {layout}, found {len(parts) - 1} tabs"
            elif empty:
                problem = "empty " + empty[0]
        if problem is None:
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
