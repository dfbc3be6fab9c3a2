"""Training shared by every task: the loop, its schedule and the checkpoint format."""

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
    "load_checkpoint",
    "lr_factor",
    "save_checkpoint",
]
