"""TensorBoard event files of a training run (``torch.utils.tensorboard``), written in the run
folder: ``tensorboard --logdir runs/`` shows every run under it.

Scalars: ``train/loss``, ``train/lr`` and ``train/tokens_per_s`` at every step,
``valid/<metric>`` at every validation; images: ``attention/<name>``, the task's attention
pictures at every validation (PNG files read back as ``(H, W, 3)`` arrays).
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["Events"]

log = logging.getLogger("attnkit")


class Events:
    """The event writer of a run in ``folder`` whose last step done is ``step``: a resumed
    run's events after ``step`` replace those a run stopped later had written.

    Events are a view of the training, not its result: when they cannot be written (a full
    disk, a read-only folder) a warning says so once and the training goes on without them,
    so that the steps since the last checkpoint are not lost with the events.
    """

    def __init__(self, folder: str | Path, step: int = 0):
        from torch.utils.tensorboard import SummaryWriter  # its import takes ~0.3 s

        self.folder, self.broken = Path(folder), False
        self.writer: SummaryWriter | None = None  # None only when broken: nothing to write
        self._write(lambda: _wait_for_a_later_second(self.folder))
        self._write(
            lambda: setattr(
                self, "writer", SummaryWriter(str(folder), purge_step=step + 1 if step else None)
            )
        )

    def scalars(self, step: int, values: dict[str, float]) -> None:
        # _write writes at once, so a closure over the loop variables would write the current
        # values too; partial binds them, which stays right should _write ever defer
        for tag, value in values.items():
            self._write(partial(self._add_scalar, tag, value, step))

    def _add_scalar(self, tag: str, value: float, step: int) -> None:
        self._live().add_scalar(tag, value, step)

    def pictures(self, step: int, draw: Callable[[Path], Sequence[Path]]) -> None:
        """Add the PNG files that ``draw(folder)`` writes into a temporary folder and returns
        as images tagged ``attention/<file stem>``."""

        def add():
            with tempfile.TemporaryDirectory() as folder:
                for path in draw(Path(folder)):
                    with Image.open(path) as image:
                        pixels = np.asarray(image.convert("RGB"))  # (H, W, 3) uint8
                    self._live().add_image(
                        f"attention/{Path(path).stem}", pixels, step, dataformats="HWC"
                    )

        self._write(add)

    def close(self) -> None:
        self._write(lambda: self._live().close())
        self.broken = True  # nothing more to write

    def _live(self) -> SummaryWriter:
        """The writer, for a write that ``_write`` makes (it makes none once broken)."""
        assert self.writer is not None, "no writer: only a broken Events has none"
        return self.writer

    def _write(self, write: Callable[[], object]) -> None:
        """``write()``, unless an earlier write failed; an OSError ends the events."""
        if self.broken:
            return
        try:
            write()
        except OSError as exc:
            log.warning(
                "%s: cannot write TensorBoard events (%s); the training goes on without them",
                self.folder,
                exc.strerror or exc,
            )
            self.broken = True


def _wait_for_a_later_second(folder: Path) -> None:
    """Sleep until the clock's second is past the newest event file's in ``folder``.

    TensorBoard reads a folder's event files in name order; a name is
    ``events.out.tfevents.<second>.<host>.<pid>.<counter>``, and within one second and one
    process the counter sorts as text (``.10`` before ``.9``), which would put a resumed run's
    steps before the steps it continues.
    """
    seconds = [
        int(parts[3])
        for parts in (p.name.split(".") for p in folder.glob("events.out.tfevents.*"))
        if len(parts) > 3 and parts[3].isdigit()
    ]
    newest = max(seconds, default=-1)
    now = time.time()
    if int(now) == newest:  # a newest file from a clock ahead of ours cannot be waited out
        time.sleep(newest + 1 - now)
