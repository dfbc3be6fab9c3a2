"""Image files for tests, made byte by byte."""

import struct
import zlib

import numpy as np

# Adam7's passes (x0, y0, dx, dy): PNG specification, section 8.2
ADAM7 = (
    (0, 0, 8, 8),
    (4, 0, 8, 8),
    (0, 4, 4, 8),
    (2, 0, 4, 4),
    (0, 2, 2, 4),
    (1, 0, 2, 2),
    (0, 1, 1, 2),
)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png(width: int, height: int, data: bytes, interlace: int = 0) -> bytes:
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, interlace)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(data))
        + _chunk(b"IEND", b"")
    )


def png_header(width: int, height: int) -> bytes:
    """A PNG that declares ``width x height`` 8-bit gray pixels and holds none: what Pillow
    learns from a file's header, at no cost."""
    return _png(width, height, b"")


def grey_png(pixels: np.ndarray, *, interlace: bool = False, keep: int | None = None) -> bytes:
    """An 8-bit greyscale PNG of ``pixels`` ``(H, W)`` uint8, Adam7-interlaced with
    ``interlace``; with ``keep``, its image data cut to their first ``keep`` bytes before they
    are compressed (a well-formed file whose header promises more than it holds)."""
    passes = ADAM7 if interlace else ((0, 0, 1, 1),)
    data = b"".join(
        b"\x00" + row.tobytes()
        for x0, y0, dx, dy in passes
        for row in pixels[y0::dy, x0::dx]
        if row.size
    )
    height, width = pixels.shape
    return _png(width, height, data[:keep], int(interlace))
