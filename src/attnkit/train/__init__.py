"""Training shared by every task: the loop, its schedule, the checkpoint format, the device and
precision (:mod:`attnkit.train.device`), the batches' way in (:mod:`attnkit.train.loader`) and
the multi-process (torchrun) set-up in :mod:`attnkit.train.distributed`."""

from attnkit.train import distributed
from attnkit.train.checkpoint import (
    Checkpoint,
    CheckpointError,
    builtin_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from attnkit.train.device import (
    PRECISIONS,
    autocast,
    check_precision,
    resolve_device,
    to_device,
)
from attnkit.train.loader import Batches
from attnkit.train.loop import Task, TrainConfig, Trainer, TrainResult, lr_factor
from attnkit.train.teacher_forcing import TeacherForcing

__all__ = [
    "PRECISIONS",
    "Batches",
    "Checkpoint",
    "CheckpointError",
    "Task",
    "TeacherForcing",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "autocast",
    "builtin_checkpoints",
    "check_precision",
    "distributed",
    "load_checkpoint",
    "lr_factor",
    "resolve_device",
    "save_checkpoint",
    "to_device",
]
