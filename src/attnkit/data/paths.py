"""The files attnkit reads data from: regular files only, and, when a data file names them,
inside its folder.

:func:`regular_file` refuses a FIFO, a device or a folder before anything opens it: reading a
FIFO blocks until a writer comes, reading ``/dev/zero`` never ends. A ``labels.tsv``, a manifest or a captions file names the files it labels. Those names are
read relative to the data folder, and one that leaves it (``../x``, an absolute path, a link
pointing elsewhere) is refused unless the caller allows it: a data file from elsewhere must not
make attnkit read, and report on, files its user did not hand over.
"""

from __future__ import annotations

from pathlib import Path

from attnkit.errors import DataError
from attnkit.folders import unreadable

__all__ = ["inside", "regular_file"]


def regular_file(path: str | Path) -> Path:
    """``path``, checked to be a regular file (links followed) before anything opens it.

    Raises:
        DataError: naming ``path`` when it does not exist, cannot be looked at, or is a
            folder, a FIFO, a device or a socket.
    """
    path = Path(path)
    why = unreadable(path)
    if why is not None:
        raise DataError(f"{path}: {why}")
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
