"""Training shared by every task: checkpoints (more to come: the loop, schedules, DDP)."""

from attnkit.train.checkpoint import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint

__all__ = ["Checkpoint", "CheckpointError", "load_checkpoint", "save_checkpoint"]
