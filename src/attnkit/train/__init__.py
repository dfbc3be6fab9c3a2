"""Training shared by every task: the loop, its schedule, the checkpoint format and the
multi-process (torchrun) set-up in :mod:`attnkit.train.distributed`."""

from attnkit.train import distributed
from attnkit.train.checkpoint import (
    Checkpoint,
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from attnkit.train.loop import Task, TrainConfig, Trainer, TrainResult, lr_factor
from attnkit.train.teacher_forcing import TeacherForcing

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "Task",
    "TeacherForcing",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "distributed",
    "load_checkpoint",
    "lr_factor",
    "save_checkpoint",
]
