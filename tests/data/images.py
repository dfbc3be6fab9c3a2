"""Image files for tests, made byte by byte."""

import struct
import zlib


def png_header(width: int, height: int) -> bytes:
    """A PNG that declares ``width x height`` 8-bit gray pixels and holds none: what Pillow
    learns from a file's header, at no cost."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b""))
            + chunk(b"IEND", b""))
