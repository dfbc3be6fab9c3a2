"""Training shared by every task: the loop, its schedule, the checkpoint format, the device and
precision (:mod:`attnkit.train.device`), the batches' way in (:mod:`attnkit.train.loader`), the
multi-process (torchrun) set-up in :mod:`attnkit.train.distributed`, the lock that keeps one
process at a time in a run folder (:mod:`attnkit.train.lock`) and the losses beside
cross-entropy (:mod:`attnkit.train.losses`)."""

from attnkit.train import distributed
from attnkit.train.checkpoint import (
    Checkpoint,
    CheckpointError,
    builtin_checkpoints,
    load_checkpoint,
    recover_checkpoint,
    resolve_checkpoint,
    save_checkpoint,
)
from attnkit.train.config import MAX_ACCUMULATE, SCHEDULES, Task, TrainConfig, lr_factor
from attnkit.train.device import (
    PRECISIONS,
    autocast,
    check_precision,
    resolve_device,
    to_device,
)
from attnkit.train.loader import Batches
from attnkit.train.lock import FolderBusy, lock_folder
from attnkit.train.loop import Trainer, TrainResult
from attnkit.train.losses import (
    cross_entropy_and_unlikelihood,
    smoothed_cross_entropy,
    token_unlikelihood,
)
from attnkit.train.teacher_forcing import TeacherForcing

__all__ = [
    "MAX_ACCUMULATE",
    "PRECISIONS",
    "SCHEDULES",
    "Batches",
    "Checkpoint",
    "CheckpointError",
    "FolderBusy",
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
    "lock_folder",
    "lr_factor",
    "recover_checkpoint",
    "resolve_checkpoint",
    "resolve_device",
    "save_checkpoint",
    "to_device",
    "cross_entropy_and_unlikelihood",
    "smoothed_cross_entropy",
    "token_unlikelihood",
]
