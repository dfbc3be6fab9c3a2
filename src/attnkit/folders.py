"""Folders written whole: the new content beside the folder, then swapped in by renames.

Checkpoints (:func:`attnkit.train.save_checkpoint`) and exports
(:func:`attnkit.export.export_onnx`) are written through :func:`write_folder`. For a folder
``NAME`` it yields an empty temporary folder beside it, ``.NAME.attnkit-tmp-PID-XXXXXXXX``
(``PID``: the writing process); when
the block ends without an error, every file in it is flushed to disk, it is renamed
``.NAME.attnkit-new``, the previous ``NAME`` (if any) is renamed ``.NAME.attnkit-old``,
``.NAME.attnkit-new`` becomes ``NAME`` and ``.NAME.attnkit-old`` is deleted. On an error the
temporary folder is deleted and ``NAME`` is left as it was.

Whatever deletes a folder renames it to a temporary name first, so ``NAME``,
``.NAME.attnkit-new`` and ``.NAME.attnkit-old`` are always complete, and a write cut short at
any point (a crash, a SIGKILL, a power cut) leaves at least one of them: :func:`folder_copies`
lists them newest first, :func:`recover_folder` puts the newest in place and deletes the rest.
A write also deletes the temporary folders that writes cut short left beside ``NAME``: those
of a process no longer running here, untouched for :data:`STALE_DEAD_S`, and any untouched for
:data:`STALE_S` (a process of another machine sharing the disk may still be writing the
others).

Only these exact names are ever deleted (``XXXXXXXX``: the 8 characters that
:func:`tempfile.mkdtemp` draws; ``PID-`` absent in the names of earlier versions), so a folder
of someone else's beside ``NAME`` (``.NAME.backup``, ``.NAME.old``) is never touched. A
``NAME`` that is a symbolic link to a folder (a checkpoint kept on another disk) is written
at the link's target, beside which the other names then are; the link stays.

:func:`unreadable` says why a path cannot be read as a regular file (missing, a folder, a
FIFO, a device), without opening it: the readers of checkpoints and data files refuse those before
they open them, since reading a FIFO blocks until a writer comes and reading ``/dev/zero``
never ends.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "NO_SUCH_FILE",
    "folder_copies",
    "recover_folder",
    "remove_folder",
    "remove_leftovers",
    "unreadable",
    "write_folder",
]

log = logging.getLogger("attnkit")

TEMPORARY = "attnkit-tmp-"
# What follows the prefix: the writer's pid (absent from the names of earlier versions) and
# the 8 characters tempfile.mkdtemp draws.
RANDOM = re.compile(r"(?:(\d+)-)?[a-z0-9_]{8}")
STALE_DEAD_S = 600.0  # a temporary folder of a process gone, untouched this long, is deleted
STALE_S = 86400.0  # a temporary folder untouched this long is deleted, whoever wrote it


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


NO_SUCH_FILE = "cannot read (no such file)"


def unreadable(path: str | Path) -> str | None:
    """Why ``path`` cannot be read as a regular file (links followed), in words, or None when
    it can: :data:`NO_SUCH_FILE`, ``cannot read (Permission denied)``, ``not a regular file
    (a FIFO)`` (a folder, a character device...). It is looked at, not opened."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return NO_SUCH_FILE
    except OSError as exc:
        return f"cannot read ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None
    return f"not a regular file ({next((n for test, n in _KINDS if test(mode)), 'not a file')})"


def _target(directory: str | Path) -> Path:
    """Where ``directory`` is written: itself, or the target of the link it is."""
    directory = Path(directory)
    return Path(os.path.realpath(directory)) if directory.is_symlink() else directory


def _new(directory: Path) -> Path:
    """The complete new folder, before it replaces the previous one."""
    return directory.with_name(f".{directory.name}.attnkit-new")


def _old(directory: Path) -> Path:
    """The previous folder, moved aside while the new one takes its place."""
    return directory.with_name(f".{directory.name}.attnkit-old")


def _temporary(directory: Path) -> Path:
    """A new empty temporary folder beside ``directory``."""
    return Path(
        tempfile.mkdtemp(
            prefix=f".{directory.name}.{TEMPORARY}{os.getpid()}-", dir=directory.parent
        )
    )


def _temporaries(directory: Path) -> list[Path]:
    """The temporary folders of writes of ``directory`` that were cut short."""
    prefix = f".{directory.name}.{TEMPORARY}"
    return sorted(
        p
        for p in directory.parent.iterdir()
        if p.name.startswith(prefix)
        and RANDOM.fullmatch(p.name[len(prefix) :])
        and p.is_dir()
        and not p.is_symlink()
    )


def _umask() -> int:
    """The process's umask (read by setting it, then restoring it)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def _stale(tmp: Path) -> bool:
    """Whether the temporary folder ``tmp`` is left by a write cut short: untouched for
    :data:`STALE_S`, or for :data:`STALE_DEAD_S` when its writer's process is not running."""
    try:
        age = time.time() - tmp.stat().st_mtime
    except OSError:  # gone meanwhile
        return False
    match = RANDOM.fullmatch(tmp.name.rpartition(TEMPORARY)[2])
    assert match is not None, tmp  # _temporaries lists only names that match
    pid = match.group(1)
    return age > STALE_S or (pid is not None and age > STALE_DEAD_S and not _running(int(pid)))


def _running(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # no such process, or no such pid
        return False
    except OSError:  # not ours to signal: it runs
        return True
    return True


def folder_copies(directory: str | Path) -> list[Path]:
    """The complete copies of ``directory`` that exist, newest first: ``.NAME.attnkit-new``
    (a write cut short after it finished), the folder itself, ``.NAME.attnkit-old``."""
    directory = _target(directory)
    return [p for p in (_new(directory), directory, _old(directory)) if p.is_dir()]


@contextmanager
def write_folder(directory: str | Path) -> Iterator[Path]:
    """Yield an empty folder beside ``directory`` to write the new content into; when the
    block ends without an error, that folder replaces ``directory`` whole (see the module
    docstring). Creates the folders above ``directory``."""
    directory = _target(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    for stale in _temporaries(directory):
        if _stale(stale):
            log.info("removing %s, left by a write that was cut short", stale)
            shutil.rmtree(stale, ignore_errors=True)
    tmp = _temporary(directory)
    try:
        yield tmp
        tmp.chmod(0o777 & ~_umask())  # mkdtemp makes it 0700; a folder made here follows umask
        for f in tmp.rglob("*"):  # on disk before the rename makes it visible
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _replace(tmp, _new(directory), directory)  # complete: from here on a cut keeps it
    if directory.exists():
        _replace(directory, _old(directory), directory)
    os.replace(_new(directory), directory)
    _fsync_dir(directory.parent)
    _delete(_old(directory), directory)


def _delete(path: Path, directory: Path) -> None:
    """Remove ``path``, a copy of ``directory``: renamed to a temporary name first, so that no
    complete copy is ever seen half deleted (:func:`recover_folder` finishes a removal cut
    short)."""
    if not path.exists():
        return
    doomed = _temporary(directory)
    os.replace(path, doomed)  # over the empty folder that mkdtemp made
    shutil.rmtree(doomed)


def remove_folder(path: str | Path) -> None:
    """Delete the folder ``path`` as a whole: renamed to ``.NAME.attnkit-tmp-XXXXXXXX`` first,
    then deleted, so that a removal cut short leaves a temporary folder
    (:func:`remove_leftovers`), never a half-deleted ``NAME``."""
    _delete(Path(path), Path(path))


def remove_leftovers(folder: str | Path) -> list[Path]:
    """Delete the temporary folders that writes and removals cut short left directly in
    ``folder`` (``.NAME.attnkit-tmp-XXXXXXXX``, whatever ``NAME``); returns them. Call it only
    where no other process is writing in ``folder``."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = sorted(
        p
        for p in folder.iterdir()
        if p.is_dir()
        and not p.is_symlink()
        and p.name.startswith(".")
        and TEMPORARY in p.name
        and RANDOM.fullmatch(p.name.rsplit(TEMPORARY, 1)[1])
    )
    for tmp in found:
        log.info("removing %s, left by a write or removal that was cut short", tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    return found


def _replace(src: Path, dst: Path, directory: Path) -> None:
    """Move ``src`` to ``dst`` (copies of ``directory``), deleting what ``dst`` held."""
    _delete(dst, directory)
    os.replace(src, dst)


def recover_folder(directory: str | Path) -> Path | None:
    """Finish what a write cut short left at ``directory``: the newest complete copy becomes
    ``directory``, the other copies and the temporary folders are deleted. Returns the
    folder's path, or None when there is no copy. Call it only where no other process is
    writing the same folder."""
    directory = _target(directory)
    if not directory.parent.is_dir():
        return None
    for tmp in _temporaries(directory):
        log.info("removing %s, left by a write that was cut short", tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    copies = folder_copies(directory)
    if not copies:
        return None
    if copies[0] != directory:
        log.warning("%s: restored from %s (a write was cut short)", directory, copies[0].name)
        _replace(copies[0], directory, directory)
        _fsync_dir(directory.parent)
    for stale in (_new(directory), _old(directory)):
        _delete(stale, directory)
    return directory


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
