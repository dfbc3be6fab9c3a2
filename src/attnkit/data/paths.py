"""The files attnkit reads data from: regular files only, and, when a data file names them,
inside its folder.

:func:`regular_file` refuses a FIFO, a device or a folder before anything opens it: reading a
FIFO blocks until a writer comes, reading ``/dev/zero`` never ends. A ``labels.tsv``, a manifest or a captions file names the files it labels. Those names are
read relative to the data folder, and one that leaves it (``../x``, an absolute path, a link
pointing elsewhere) is refused unless the caller allows it: a data file from elsewhere must not
make attnkit read, and report on, files its user did not hand over.
"""

from __future__ import annotations

import stat
from pathlib import Path

from attnkit.errors import DataError

__all__ = ["inside", "regular_file"]

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character "
          "device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def regular_file(path: str | Path) -> Path:
    """``path``, checked to be a regular file (links followed) before anything opens it.

    Raises:
        DataError: naming ``path`` when it does not exist, cannot be looked at, or is a
            folder, a FIFO, a device or a socket.
    """
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise DataError(f"{path}: cannot read (no such file)") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a file")
        raise DataError(f"{path}: not a regular file ({kind})")
    return path


def inside(folder: Path, name: str, where: str, *, anywhere: bool = False) -> Path:
    """The file ``name`` of the data folder ``folder``.

    Args:
        folder: the data folder (a manifest's, a ``labels.tsv``'s).
        name: the file as the data file writes it, relative to ``folder``.
        where: the data file and line, for the error (``labels.tsv:3``).
        anywhere: also take absolute names and names outside ``folder``.

    Raises:
        DataError: naming ``where`` and ``name`` when it leaves ``folder`` and ``anywhere`` is
            off.
    """
    path = folder / name
    if anywhere:
        return path
    base = folder.resolve()
    if Path(name).is_absolute() or not path.resolve().is_relative_to(base):
        raise DataError(f"{where}: {name[:200]!r} is outside the data folder {folder}; "
                        "name files relative to it, inside it")
    return path
