"""One process at a time in a run folder: a lock file holding the pid of its owner.

Two runs writing checkpoints into one folder would delete each other's files in the middle of
a save, and the last writer would win. :func:`lock_folder` takes an exclusive ``flock`` on
``FOLDER/.attnkit.lock`` and writes the process id into it; the kernel releases the lock
when the process ends, however it ends, so a lock file left by a killed process (a stale
lock) is recognised and taken over, and a live owner is named in the error.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

__all__ = ["LOCK_FILE", "FolderBusy", "lock_folder"]

log = logging.getLogger("attnkit")

LOCK_FILE = ".attnkit.lock"


class FolderBusy(ValueError):
    """The run folder is locked by another live process."""


def _read_pid(fd: int) -> int | None:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 32).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def _open_locked(path: Path) -> int:
    """A descriptor of ``path`` holding its exclusive lock, the file being the one at ``path``
    (not one a releasing owner unlinked in between)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _read_pid(fd)
            os.close(fd)
            raise FolderBusy(
                f"{path.parent}: in use by another attnkit process"
                f"{f' (pid {owner})' if owner else ''}; wait for it to end or "
                "choose another folder"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


@contextmanager
def lock_folder(folder: str | Path) -> Iterator[Path]:
    """Hold ``folder``'s lock until the block ends; yields the folder. A folder that this
    creates is removed again if it is still empty at the end (a run that failed to start).

    Raises:
        FolderBusy: another live process holds it (its pid in the message).
        ValueError: the folder cannot be created or written (naming it and why).
    """
    folder = Path(folder)
    created = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = _open_locked(folder / LOCK_FILE)
    except FolderBusy:
        raise
    except OSError as exc:
        raise ValueError(f"{folder}: cannot use as a run folder ({exc.strerror})") from None
    stale = _read_pid(fd)
    if stale is not None and stale != os.getpid():
        log.info("%s: taking over the lock of process %d, which has ended", folder, stale)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    try:
        yield folder
    finally:
        with suppress(FileNotFoundError):  # before the lock goes: no one takes a doomed file
            os.unlink(folder / LOCK_FILE)
        os.close(fd)
        if created:
            with suppress(OSError):  # not empty: the run wrote something
                folder.rmdir()
