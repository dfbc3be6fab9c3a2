"""The files attnkit reads data from: regular files only, and, when a data file names them,
where it names them (or, confined, inside its folder).

:func:`regular_file` refuses a FIFO, a device or a folder before anything opens it: reading a
FIFO blocks until a writer comes, reading ``/dev/zero`` never ends. A ``labels.tsv``, a
manifest or a captions file names the files it labels: :func:`inside` reads a relative name
from the data folder and an absolute name as it is, inside the folder or not, as every peer
reads a user's own corpus (Kaldi and ESPnet data directories and NeMo manifests list absolute
paths, their audio usually elsewhere). With ``confine`` (``--confine`` on the command line),
for data files that are not their user's own, a name that leaves the folder (``../x``, an
absolute path elsewhere, a link pointing out of it) is refused before anything opens it; an
absolute name inside the folder is read.
"""

from __future__ import annotations

import os
from pathlib import Path

from attnkit.errors import DataError
from attnkit.folders import unreadable

__all__ = ["inside", "not_found", "regular_file"]


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


def inside(folder: Path, name: str, where: str, *, confine: bool = False) -> Path:
    """The file ``name`` of the data folder ``folder``.

    Args:
        folder: the data folder (a manifest's, a ``labels.tsv``'s).
        name: the file as the data file writes it: relative to ``folder``, or absolute.
        where: the data file and line, for the error (``labels.tsv:3``).
        confine: take only a file inside ``folder`` (links followed).

    Raises:
        DataError: naming ``where``, ``name`` and ``--confine``, when ``confine`` and the file
            is outside ``folder``, or a link leads out of it.
    """
    path = folder / name
    if not confine:
        return path
    base = folder.resolve()
    if path.resolve().is_relative_to(base):
        return path
    # written inside the folder (absolute or not), but a link on the way leads out of it
    linked = Path(os.path.normpath(folder.absolute() / name)).is_relative_to(folder.absolute())
    how = "leads out of" if linked else "is outside"
    raise DataError(
        f"{where}: {name[:200]!r} {how} the data folder {folder}"
        f"{' through a link' if linked else ''}; leave out --confine (confine=True) "
        "to read it"
    )


def not_found(name: str, folder: Path) -> str:
    """Why the file ``name`` of the data folder ``folder`` cannot be read: it is not there
    (the folder named only where a relative name was looked up in it)."""
    return f"{name[:200]!r} not found" + ("" if Path(name).is_absolute() else f" in {folder}")
