"""Text files as every reader of attnkit opens them: one place for encodings, line ends,
compression and Unicode normalisation.

* **Encoding**: UTF-8, with or without a byte-order mark (dropped). A UTF-16 file (a UTF-16
  byte-order mark, or NUL bytes between the characters of its first block) is refused as a
  whole; a line that is not valid UTF-8 is named ``file:line`` in the error.
* **Line ends**: LF or CRLF (the ``\\r`` is dropped with the ``\\n``). A line's text never
  holds its line end.
* **Compression**: gzip, xz and bzip2 files are decompressed as they are read, known by
  their first bytes (their magic numbers), whatever their names end with; a stream cut short
  is named with the line it stopped in. zstd and zip files are refused with what to do.
* **Normalisation**: every text is Unicode NFC (composed characters: ``"e" + U+0301`` reads as
  ``"é"``), so a vocabulary never holds two spellings of one character.

Files are read a block at a time: memory holds one block and one line, however long the
file. A line may have :data:`MAX_LINE` bytes (16 MiB), a file read whole :data:`MAX_WHOLE`
(1 GiB); a file whose first block is mostly NUL bytes (binary data, a sparse file) is refused.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import unicodedata
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from attnkit.data.paths import regular_file
from attnkit.errors import DataError

__all__ = [
    "BLOCK",
    "MAX_LINE",
    "MAX_WHOLE",
    "byte_lines",
    "compression",
    "decode_line",
    "json_value",
    "nfc",
    "open_bytes",
    "read_text",
    "text_lines",
    "undecodable",
]

BLOCK = 1 << 20  # bytes read at a time
MAX_LINE = 1 << 24  # bytes in one line at most: a longer one is no line of text
MAX_WHOLE = 1 << 30  # bytes of a file read whole (read_text) at most, decompressed
# Magic numbers: (first bytes, name). bzip2's is "BZh", the block size digit and the
# first block's (or an empty stream's end) signature, so text starting "BZh" is not taken.
_COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"\xfd7zXZ\x00", "xz"))
_BZIP2 = (b"\x31\x41\x59\x26\x53\x59", b"\x17\x72\x45\x38\x50\x90")
_REFUSED = (
    (
        b"\x28\xb5\x2f\xfd",
        "zstd-compressed; decompress it (zstd -d FILE) or "
        "compress it with gzip, xz or bzip2, which attnkit reads",
    ),
    (b"PK\x03\x04", "a zip archive; unpack it (unzip FILE) and name the file inside"),
)
_ERRORS = (OSError, EOFError, lzma.LZMAError, zlib.error)
_OPEN: dict[str | None, Callable[..., Any]] = {
    "gzip": gzip.open,
    "xz": lzma.open,
    "bzip2": bz2.open,
}


def compression(path: str | Path) -> str | None:
    """``"gzip"``, ``"xz"`` or ``"bzip2"`` when the file's first bytes say it is compressed
    so, else None.

    Raises:
        DataError: naming the file: not a regular file, unreadable, or compressed in a way
            attnkit does not read (zstd, zip: the message says what to do).
    """
    path = regular_file(path)
    try:
        with path.open("rb") as f:
            head = f.read(10)
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    return _compression(path, head)


def _compression(path: Path, head: bytes) -> str | None:
    """:func:`compression` from the file's first bytes ``head``."""
    for magic, what in _REFUSED:
        if head.startswith(magic):
            raise DataError(f"{path}: {what}")
    if head.startswith(b"BZh") and head[3:4].isdigit() and head[4:10] in _BZIP2:
        return "bzip2"
    return next((name for magic, name in _COMPRESSED if head.startswith(magic)), None)


@contextmanager
def open_bytes(path: str | Path) -> Iterator[BinaryIO]:
    """The file's bytes, decompressed when :func:`compression` says it is compressed.

    Raises:
        DataError: as :func:`compression`.
    """
    opener = _OPEN.get(compression(path), open)
    with opener(Path(path), "rb") as f:
        yield f


def byte_lines(path: str | Path, *, max_line: int = MAX_LINE) -> Iterator[tuple[int, bytes]]:
    """``(line number, bytes)`` of each line of a text file, without its line end (LF or
    CRLF); the first line without a UTF-8 byte-order mark. A last line without a line end is
    a line; an empty file has none.

    Raises:
        DataError: naming the file: as :func:`compression`, UTF-16 or binary data, a line of
            more than ``max_line`` bytes (named as soon as it is that long), or a compressed
            stream that cannot be read (cut short, corrupt), with the line it stopped in.
    """
    path = Path(path)
    parts: list[bytes]
    n, parts, size = 0, [], 0  # the pieces of a line not yet ended, and their bytes
    with open_bytes(path) as f:
        try:
            block = _first_block(path, f.read(BLOCK))
            while block:
                lines = block.split(b"\n")
                if len(lines) > 1:
                    if parts:
                        lines[0] = b"".join(parts) + lines[0]
                        parts, size = [], 0
                    for line in lines[:-1]:
                        n += 1
                        _check_line(path, n, len(line), max_line)
                        yield n, line.removesuffix(b"\r")
                parts.append(lines[-1])
                size += len(lines[-1])
                _check_line(path, n + 1, size, max_line)
                block = f.read(BLOCK)
        except _ERRORS as exc:
            raise DataError(f"{path}:{n + 1}: cannot read ({exc})") from None
    if size:
        yield n + 1, b"".join(parts).removesuffix(b"\r")


def _check_line(path: Path, n: int, size: int, max_line: int) -> None:
    if size > max_line:
        raise DataError(
            f"{path}:{n}: a line of more than {max_line:,} bytes; expected a text "
            "file of shorter lines (is it text?)"
        )


def _first_block(path: Path, block: bytes) -> bytes:
    """The first block of a file without its UTF-8 byte-order mark; UTF-16 and binary data
    (NUL bytes) refused."""
    nul = block.count(b"\x00")
    mostly = nul * 4 > len(block)
    # UTF-16 text of a Latin script has its NULs at every other byte, on one side only
    sides = sorted((block[0::2].count(0), block[1::2].count(0)))
    if block.startswith((b"\xff\xfe", b"\xfe\xff")) or (mostly and sides[0] <= 0.1 * nul):
        raise DataError(
            f"{path}: looks like UTF-16 text (a byte-order mark or NUL bytes "
            "between the characters); save it as UTF-8"
        )
    if mostly:
        raise DataError(
            f"{path}: holds NUL bytes ({nul:,} in its first {len(block):,}): binary "
            "data, not UTF-8 text"
        )
    return block.removeprefix(b"\xef\xbb\xbf")


def nfc(text: str) -> str:
    """``text`` in Unicode normal form C (ASCII text as it is)."""
    return text if text.isascii() else unicodedata.normalize("NFC", text)


def decode_line(line: bytes) -> str:
    """One line's text: UTF-8, in NFC.

    Raises:
        UnicodeDecodeError: the bytes are not UTF-8 (:func:`undecodable` says so in words).
    """
    return nfc(line.decode("utf-8"))


def undecodable(exc: UnicodeDecodeError) -> str:
    """What is wrong with a line :func:`decode_line` refused."""
    return f"not valid UTF-8 (byte {exc.start})"


def text_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each line of a text file (see the module docstring), read
    one block at a time.

    Raises:
        DataError: naming the file (as :func:`byte_lines`), or ``file:line`` of a line that
            is not valid UTF-8.
    """
    for n, line in byte_lines(path):
        try:
            yield n, decode_line(line)
        except UnicodeDecodeError as exc:
            raise DataError(f"{path}:{n}: {undecodable(exc)}") from None


def read_text(path: str | Path) -> str:
    """A whole text file (see the module docstring) as one string, CRLF line ends as LF:
    for files read whole (a ``.gt.txt``, a JSON file), of at most :data:`MAX_WHOLE` bytes
    (decompressed).

    Raises:
        DataError: as :func:`text_lines`.
    """
    path = regular_file(path)
    too_big = (
        f"{path}: more than {MAX_WHOLE:,} bytes of text (decompressed), more than a "
        "file read whole may have"
    )
    with open_bytes(path) as f:
        try:
            raw = _first_block(path, f.read(BLOCK))
            if compression(path) is None and path.stat().st_size > MAX_WHOLE:
                raise DataError(too_big)
            raw += f.read(MAX_WHOLE + 1 - len(raw))
        except _ERRORS as exc:
            raise DataError(f"{path}: cannot read ({exc})") from None
    if len(raw) > MAX_WHOLE:
        raise DataError(too_big)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DataError(f"{path}:{line}: {undecodable(exc)}") from None
    return nfc(text.replace("\r\n", "\n"))


def json_value(text: str, where: str):
    """``json.loads(text)`` of a corpus file (or one line of it, named ``where``).

    Raises:
        json.JSONDecodeError: not JSON (the caller names the line and column as it reads).
        DataError: naming ``where``: JSON nested deeper than Python's reader goes (a
            ``RecursionError`` near 1,000 levels), or a number of more than 4,300 digits.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise DataError(
            f"{where}: JSON nested deeper than Python reads (about 1,000 "
            "levels); expected a corpus's records"
        ) from None
    except ValueError as exc:  # Python's limit on the digits of an int
        raise DataError(f"{where}: not valid JSON ({str(exc)[:200]})") from None
