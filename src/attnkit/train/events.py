"""TensorBoard event files of a training run (``torch.utils.tensorboard``), written in the run
folder: ``tensorboard --logdir runs/`` shows every run under it.

Scalars: ``train/loss``, ``train/lr`` and ``train/tokens_per_s`` at every step,
``valid/<metric>`` at every validation; images: ``attention/<name>``, the task's attention
pictures at every validation (PNG files read back as ``(H, W, 3)`` arrays).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["Events"]


class Events:
    """The event writer of a run in ``folder`` whose last step done is ``step``: a resumed
    run's events after ``step`` replace those a run stopped later had written."""

    def __init__(self, folder: str | Path, step: int = 0):
        from torch.utils.tensorboard import SummaryWriter  # its import takes ~0.3 s

        self.writer = SummaryWriter(str(folder), purge_step=step + 1 if step else None)

    def scalars(self, step: int, values: dict[str, float]) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)

    def pictures(self, step: int, paths: Sequence[Path]) -> None:
        """Add the PNG files ``paths`` as images tagged ``attention/<file stem>``."""
        for path in paths:
            with Image.open(path) as image:
                pixels = np.asarray(image.convert("RGB"))  # (H, W, 3) uint8
            self.writer.add_image(f"attention/{Path(path).stem}", pixels, step,
                                  dataformats="HWC")

    def close(self) -> None:
        self.writer.close()
