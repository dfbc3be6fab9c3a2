"""What a training run is asked to do: :class:`TrainConfig` (every setting, saved with the
checkpoint), the learning-rate schedule (:func:`lr_factor`) and the :class:`Task` protocol a
task implements for :class:`attnkit.train.loop.Trainer`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from attnkit.checks import quoted
from attnkit.train.device import PRECISIONS

__all__ = ["MAX_ACCUMULATE", "SCHEDULES", "Task", "TrainConfig", "lr_factor"]

SCHEDULES = ("constant", "inverse_sqrt", "cosine")  # TrainConfig.schedule, see lr_factor
# TrainConfig.accumulate at most: a step of more batches is better made of larger batches
MAX_ACCUMULATE = 4096


class Task(Protocol):
    def batches(self, epoch: int): ...
    def loss(self, model: torch.nn.Module, batch, step: int) -> tuple[torch.Tensor, int]: ...
    def evaluate(self, model: torch.nn.Module) -> dict[str, float]: ...
    def config(self) -> dict: ...
    def vocab(self) -> Any: ...


@dataclass
class TrainConfig:
    """Training settings (all saved with the checkpoint).

    ``schedule``: "constant", "inverse_sqrt" or "cosine" after ``warmup_steps`` of linear
    warm-up. ``metric``: the validation metric to maximise (``"-NAME"``: NAME minimised, e.g.
    ``"-loss"``). ``patience``: stop after this many validations
    without improvement (None: never). ``time_budget_s``: stop (and save) after this long.
    ``precision``: ``"fp32"``, ``"bf16"`` or ``"fp16"`` (see the module docstring; the model's
    device must support it). ``data_workers``: ``DataLoader`` worker processes building batches
    (0: in the training process). A resumed run may change ``precision`` and ``data_workers``.
    ``accumulate``: batches per optimizer step (gradient accumulation): the gradients of ``K``
    batches are summed, each weighted by its share of their tokens (``tokens_k / sum(tokens)``,
    the count ``task.loss`` returns), which is exactly the update of one batch ``K`` times
    larger when the task's loss is the mean over those tokens (the cross-entropy of every
    task); a CTC loss, a mean over lines of each line's loss per label, is weighted by its
    lines' labels; at most :data:`MAX_ACCUMULATE`. A stop request (a signal) is looked at
    after every batch: one that comes in the middle of a step's ``K`` batches discards the
    gradients summed so far and saves the checkpoint at the step's start (its position in the
    epoch and its random states rewound), so the resumed run redoes those batches and ends as
    one that ran straight through. ``max_steps`` and the schedule count optimizer steps.
    ``keep_best``: the
    number of best validations whose models are kept (1: ``checkpoint-best`` alone; see the
    module docstring). ``tiebreak``: a second validation metric that ranks validations tied on
    ``metric`` (maximised; ``"-cer"``: minimised), e.g. CER while exact match stays 0; among
    validations tied on both (or on ``metric`` without it) the latest is kept, though it does
    not count as progress for ``patience``.
    """

    max_steps: int = 1000
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = 100
    schedule: str = "inverse_sqrt"
    clip_norm: float | None = 1.0
    eval_every: int = 200
    checkpoint_every: int = 200
    metric: str = "accuracy"
    patience: int | None = None
    time_budget_s: float | None = None
    seed: int = 0
    progress: bool = True
    precision: str = "fp32"
    data_workers: int = 0
    accumulate: int = 1
    keep_best: int = 1
    tiebreak: str | None = None

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ValueError(
                f"schedule: expected one of {', '.join(SCHEDULES)}, got {quoted(self.schedule)}"
            )
        for name in ("max_steps", "eval_every", "checkpoint_every", "accumulate", "keep_best"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive int, got {quoted(value)}")
        if self.accumulate > MAX_ACCUMULATE:
            raise ValueError(
                f"accumulate: expected a positive int at most {MAX_ACCUMULATE} "
                f"(batches per optimizer step), got {quoted(self.accumulate)}"
            )
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(
                f"warmup_steps: expected a non-negative int, got {quoted(self.warmup_steps)}"
            )
        if not self.lr > 0:
            raise ValueError(f"lr: expected a positive number, got {quoted(self.lr)}")
        if self.patience is not None and (not isinstance(self.patience, int) or self.patience < 1):
            raise ValueError(
                f"patience: expected a positive int or None, got {quoted(self.patience)}"
            )
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise ValueError(
                f"time_budget_s: expected a positive number, got {quoted(self.time_budget_s)}"
            )
        if self.tiebreak is not None and (
            not isinstance(self.tiebreak, str) or not self.tiebreak.removeprefix("-")
        ):
            raise ValueError(
                f'tiebreak: expected None or a metric\'s name ("-NAME": '
                f"minimised), got {quoted(self.tiebreak)}"
            )
        if self.precision not in PRECISIONS:
            raise ValueError(
                f"precision: expected one of {', '.join(PRECISIONS)}, got {quoted(self.precision)}"
            )
        if not isinstance(self.data_workers, int) or self.data_workers < 0:
            raise ValueError(
                f"data_workers: expected a non-negative int, got {quoted(self.data_workers)}"
            )


def lr_factor(step: int, config: TrainConfig) -> float:
    """Multiplier of ``config.lr`` at optimizer step ``step`` (0-based)."""
    s = step + 1
    if config.warmup_steps and s <= config.warmup_steps:
        return s / config.warmup_steps
    if config.schedule == "constant":
        return 1.0
    if config.schedule == "inverse_sqrt":
        return math.sqrt(max(config.warmup_steps, 1) / s)
    span = max(1, config.max_steps - config.warmup_steps)
    done = min(1.0, (s - config.warmup_steps - 1) / span)  # the last step still learns
    return 0.5 * (1 + math.cos(math.pi * done))
