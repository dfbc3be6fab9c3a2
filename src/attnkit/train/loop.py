"""The training loop shared by every task.

A task supplies what differs between tasks; the :class:`Trainer` does the rest: AdamW with a
warm-up/decay schedule, gradient clipping, progress with loss and tokens/s (a bar on a terminal,
log lines elsewhere: :mod:`attnkit.train.progress`), periodic validation, early stopping,
checkpoints (periodic, at the end, and on SIGINT/SIGTERM/SIGHUP), exact resumption and TensorBoard
event files in the run folder.

Besides ``out_dir/checkpoint`` (the last state, what ``--resume`` continues), every validation
that beats the best score so far writes the model as it is into ``out_dir/checkpoint-best``
(:data:`BEST_DIR`: weights, config and vocabulary, no optimizer state; its ``trainer.json``
says the step, the metric and its value), so the model to ship is kept even when later steps
overfit. With ``keep_best`` N > 1 the models of the N best validations are kept too, in
``out_dir/best/step-NNNNNNNN`` (:data:`KEPT_DIR`), for averaging
(:func:`attnkit.train.averaging.average_checkpoints`, ``attnkit average``).

A task is any object with::

    batches(epoch: int) -> Iterable[batch]   # the same batches for the same epoch: seed any
                                             # shuffling with the epoch, not the global RNG;
                                             # a Batches (a sequence) builds only the batches
                                             # used, in DataLoader workers when asked
    loss(model, batch, step) -> (loss: Tensor, tokens: int)   # mean loss and the tokens it
                                             # covers; step: the optimizer step (schedules)
    evaluate(model) -> dict[str, float]      # validation metrics, including `metric` below
    config() -> dict                          # saved in checkpoints (JSON values)
    vocab() -> JSON value or None             # saved in checkpoints

and optionally::

    pictures(model, folder, n) -> list[Path] # PNG pictures of the attention on n validation
                                             # examples, written in folder, for TensorBoard

Rank 0 writes TensorBoard event files into the run folder (:mod:`attnkit.train.events`): the
loss, learning rate and tokens/s of every step, the metrics and pictures of every validation.

A batch is a tensor or a dict, list or tuple of them, built on the CPU; the Trainer moves it to
the model's device (:func:`attnkit.train.device.to_device`). The model trains where it is (move
it first: ``model.to(device)``); batches come through a ``DataLoader``
(:mod:`attnkit.train.loader`: ``data_workers`` worker processes, pinned memory on CUDA).

``precision`` ``"bf16"`` or ``"fp16"`` computes the task's loss, validation and decoding under
``torch.autocast`` (:mod:`attnkit.train.device`); the backward pass runs outside it. The
weights, the optimizer state and the checkpoints stay float32; fp16 scales the loss with a
``torch.amp.GradScaler`` (a step whose gradients overflow is skipped and the scale lowered),
whose state the checkpoint keeps.

Resuming restores the weights, the optimizer, the schedule position, the RNG states, the loss
scale and the position in the epoch (the epoch's batches are regenerated and the done ones
skipped), so a run stopped and resumed ends with the same weights as one that ran straight
through. A run may resume on another device, with another number of data workers, and in
another precision (the weights are float32 in every precision; a loss scale is kept only from
fp16 to fp16): the steps after the resume then compute as the new settings say.

Several processes (data parallel)::

    torchrun --nproc_per_node=N -m attnkit.cli.main train translate ...   # or your own script

Launched by torchrun (``WORLD_SIZE > 1``; see :mod:`attnkit.train.distributed`), :meth:`Trainer.fit`
joins the process group (gloo on CPU; nccl when the model is on ``cuda:LOCAL_RANK``), wraps the
model in ``DistributedDataParallel`` and gives every process its own share of each epoch: at
each step process ``r`` of ``W`` takes batch ``p + r`` of ``task.batches(epoch)``, where ``p``
counts the batches the earlier steps of the epoch used (``W`` per step; an epoch's last
``< W`` batches are left out). The gradients are averaged over the processes, so one step of
``W`` processes equals one step of a single process whose loss is the mean of the ``W`` batches'
mean losses; ``max_steps`` and the schedule count optimizer steps, as alone. The position in the
epoch is saved as that batch count, so a run resumes exactly with the same number of processes
and at the same place with another number. Only rank 0 shows progress (the loss averaged and
the tokens/s summed over the processes), validates and writes checkpoints, which hold the
unwrapped model's weights in the single-process format; early stopping, the time budget (rank
0's clock) and a signal to any process stop every process after the same step. The process
group is ended when :meth:`Trainer.fit` returns. Differences from a single process: the task's
``loss`` receives the wrapped model and must call it (DDP hooks into ``forward``), and
dropout draws differ per process (each process's RNG is seeded with ``seed + rank`` and saved).
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel

import attnkit.train.distributed as distributed
from attnkit.checks import quoted
from attnkit.folders import remove_folder, remove_leftovers
from attnkit.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from attnkit.train.config import Task, TrainConfig, lr_factor
from attnkit.train.device import autocast, check_precision, to_device
from attnkit.train.events import Events
from attnkit.train.loader import EpochLoader
from attnkit.train.progress import Progress
from attnkit.train.state import (
    check_trainer_state,
    differences,
    rng_state,
    seed_everything,
    set_rng_state,
)

__all__ = ["BEST_DIR", "KEPT_DIR", "TrainResult", "Trainer", "kept_models"]

log = logging.getLogger("attnkit")

BEST_DIR = "checkpoint-best"  # the best validation's model, inside the run folder
KEPT_DIR = "best"  # the models of the keep_best best validations, inside the run folder
_NONE = float("-inf")  # the tiebreak of a validation without one: below every other


def _signed(metrics: dict[str, float], name: str, role: str) -> float:
    """``metrics[name]``, or ``-metrics[NAME]`` for ``name`` ``"-NAME"`` (minimised), so that
    the larger is the better; a name the task does not report is a KeyError naming ``role``."""
    sign, field = (-1.0, name[1:]) if name.startswith("-") else (1.0, name)
    if field not in metrics:
        raise KeyError(
            f"{role}: the task's evaluate() returned {sorted(metrics)}, not {quoted(field)}"
        )
    return sign * metrics[field]


PICTURES = 2  # validation examples pictured for TensorBoard at each validation

# The signals that stop a run after its checkpoint is saved: Ctrl-C, kill, and a hang-up (the
# terminal closed, an ssh connection dropped). One that is ignored when the run starts (nohup
# ignores SIGHUP) stays ignored.
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def kept_models(
    run: str | Path, *, remove_broken: bool = False
) -> list[tuple[tuple[float, float, int], Path]]:
    """The models a run kept of its best validations (``RUN/best/step-*``, :data:`KEPT_DIR`)
    with their ranks ``(value, tiebreak value or -inf, step)``, the larger the better, in
    folder order. One that cannot be read (a half-deleted folder, left
    by a kill inside the removal of earlier versions) is skipped with a warning, and deleted
    with ``remove_broken`` (the run's own trainer does that; readers delete nothing)."""
    found = []
    for folder in sorted(Path(run, KEPT_DIR).glob("step-*")):
        try:
            state = load_checkpoint(folder).trainer_state or {}
        except CheckpointError as exc:
            log.warning(
                "%s: %s, unreadable (%s): a kept model whose removal was cut short",
                folder,
                "removed" if remove_broken else "skipped",
                exc,
            )
            if remove_broken:
                remove_folder(folder)
            continue
        if isinstance(state.get("value"), (int, float)):
            tiebreak = state.get("tiebreak_value")
            found.append(
                (
                    (
                        state["value"],
                        tiebreak if isinstance(tiebreak, (int, float)) else _NONE,
                        state.get("step", 0),
                    ),
                    folder,
                )
            )
    return found


@dataclass
class TrainResult:
    """How a run ended: ``stopped`` in "max_steps", "early_stopping", "time_budget", "signal";
    ``signal``: the number of the signal (SIGINT, SIGTERM, SIGHUP) that stopped this process, if one
    did."""

    step: int
    stopped: str
    best: float | None
    history: list[dict] = field(default_factory=list)
    signal: int | None = None


class Trainer:
    """Train ``model`` on ``task``, checkpointing into ``out_dir`` (see the module docstring).

    Under torchrun every process builds the same Trainer and calls :meth:`resume` and
    :meth:`fit`; the :class:`TrainResult` of processes other than rank 0 has no history or best.

    Raises:
        ValueError: ``config.precision`` that the model's device cannot train in.
    """

    def __init__(
        self, model: torch.nn.Module, task: Task, config: TrainConfig, out_dir: str | Path
    ):
        self.model, self.task, self.config = model, task, config
        self.out_dir = Path(out_dir)
        self.device = next(model.parameters()).device
        check_precision(config.precision, self.device)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=config.precision == "fp16")
        decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
        no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
        self.optimizer = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": config.weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=config.lr,
        )
        self.step = 0
        self.epoch = 0
        self.batch_in_epoch = 0
        self.best: float | None = None
        self.best_tiebreak: float | None = None  # the tiebreak's value (maximised) at the best
        self.bad_evals = 0
        self.history: list[dict] = []
        self._signal: int | None = None
        self._rank, self._world = distributed.rank(), distributed.world_size()

    @property
    def checkpoint_dir(self) -> Path:
        return self.out_dir / "checkpoint"

    # ------------------------------------------------------------------ state

    def _trainer_state(self, rngs: list[dict]) -> dict:
        state = {
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "best": self.best,
            "best_tiebreak": self.best_tiebreak,
            "bad_evals": self.bad_evals,
            "history": self.history,
            "train_config": asdict(self.config),
            "rng": rngs[0],
        }
        if self.scaler.is_enabled():
            state["scaler"] = self.scaler.state_dict()
        if self._world > 1:
            state["rng_by_rank"] = rngs
        return state

    def save(self) -> Path:
        """Write ``out_dir/checkpoint``. Under torchrun every process must call it (their RNG
        states are gathered); rank 0 writes, and every process gets the path back."""
        rngs = distributed.all_gather(rng_state())
        if self._rank == 0:
            save_checkpoint(
                self.checkpoint_dir,
                model=self.model,
                config=self.task.config(),
                vocab=self.task.vocab(),
                optimizer=self.optimizer,
                trainer_state=self._trainer_state(rngs),
            )
            log.info("checkpoint saved at step %d: %s", self.step, self.checkpoint_dir)
        return self.checkpoint_dir

    def resume(self) -> None:
        """Continue from ``out_dir/checkpoint``."""
        ck = load_checkpoint(self.checkpoint_dir)
        if ck.optimizer_state is None or ck.trainer_state is None:
            raise CheckpointError(f"{ck.path}: has no optimizer/trainer state to resume from")
        check_trainer_state(ck.trainer_state, ck.path / "trainer.json")
        ck.check_optimizer()
        changed = differences(ck.config, self.task.config())
        if changed:
            raise CheckpointError(
                f"{ck.path}: saved for another task set-up (differs in "
                f"{'; '.join(changed)}); resuming would not continue that run"
            )
        saved = ck.trainer_state.get("train_config", {})
        free = {
            "max_steps",
            "keep_best",
            "time_budget_s",
            "progress",
            "patience",
            "eval_every",
            "checkpoint_every",
            "precision",
            "data_workers",
            "tiebreak",
        }
        changed = sorted(
            k
            for k, v in asdict(self.config).items()
            if k not in free and k in saved and saved[k] != v
        )
        if changed:
            raise CheckpointError(
                f"{ck.path}: saved with other training settings "
                f"({', '.join(f'{k}={quoted(saved[k])}' for k in changed)})"
            )
        if self.config.schedule == "cosine" and saved.get("max_steps") != self.config.max_steps:
            log.warning(
                "resuming a cosine schedule with max_steps %s (was %s): the learning "
                "rate curve changes",
                self.config.max_steps,
                saved.get("max_steps"),
            )
        if saved.get("precision", "fp32") != self.config.precision:
            log.info(
                "resuming a %s run in %s", saved.get("precision", "fp32"), self.config.precision
            )
        ck.load_model(self.model)
        self.optimizer.load_state_dict(ck.optimizer_state)
        st = ck.trainer_state
        if self.scaler.is_enabled() and "scaler" in st:
            self.scaler.load_state_dict(st["scaler"])
        self.step, self.epoch, self.batch_in_epoch = st["step"], st["epoch"], st["batch_in_epoch"]
        self.best, self.bad_evals, self.history = st["best"], st["bad_evals"], st["history"]
        tiebreak = st.get("best_tiebreak")  # absent before tie-breaks, or not a number: none
        self.best_tiebreak = tiebreak if isinstance(tiebreak, (int, float)) else None
        rngs = st.get("rng_by_rank", [st["rng"]])
        if len(rngs) != self._world:
            log.warning(
                "resuming a %d-process run with %d processes: the batches continue from "
                "the same place, the random streams of new processes start from the seed",
                len(rngs),
                self._world,
            )
        if self._rank < len(rngs):
            set_rng_state(rngs[self._rank])
        else:
            seed_everything(self.config.seed + self._rank)

    # ------------------------------------------------------------------ loop

    def _on_signal(self, signum, frame) -> None:
        self._signal = signum

    def _batches(self):
        """This process's batches from the current position on, epoch after epoch: of each
        group of ``world`` consecutive batches, the one at its rank (:mod:`.loader`)."""
        while True:
            start = self.batch_in_epoch
            loader = EpochLoader(
                self.task.batches(self.epoch),
                start=start,
                rank=self._rank,
                world=self._world,
                workers=self.config.data_workers,
                pin_memory=self.device.type == "cuda",
            )
            for k, batch in enumerate(loader):
                self.batch_in_epoch = start + (k + 1) * self._world
                yield batch
            if start == 0 and loader.total < self._world:
                raise ValueError(
                    f"task.batches({self.epoch}): expected at least {self._world} "
                    f"batches (one per process), got {loader.total}"
                )
            self.epoch += 1
            self.batch_in_epoch = 0

    def evaluate(self) -> dict[str, float]:
        """The task's validation metrics: the model in eval mode, without gradients, under the
        training precision's autocast."""
        return self._evaluating(self.task.evaluate)

    def _evaluating(self, fn, *args):
        """``fn(model, *args)`` with the model in eval mode, without gradients, under the
        training precision's autocast."""
        self.model.eval()
        with torch.no_grad(), autocast(self.device, self.config.precision):
            out = fn(self.model, *args)
        self.model.train()
        return out

    def _record(self, events: Events, metrics: dict[str, float]) -> None:
        """The validation's metrics and the task's attention pictures, as TensorBoard events."""
        events.scalars(self.step, {f"valid/{k}": v for k, v in metrics.items()})
        if hasattr(self.task, "pictures"):
            pictures = self.task.pictures  # bound here: a lambda loses hasattr's narrowing
            events.pictures(self.step, lambda folder: self._evaluating(pictures, folder, PICTURES))

    @property
    def best_dir(self) -> Path:
        return self.out_dir / BEST_DIR

    def _save_model(self, folder: Path, rank: tuple[float, float | None]) -> None:
        """The model as it is now into ``folder``, for inference (rank 0 only), with its
        :meth:`_standing` in its ``trainer.json``."""
        state = {"step": self.step, "metric": self.config.metric, "value": rank[0]}
        if self.config.tiebreak is not None:
            state |= {"tiebreak": self.config.tiebreak, "tiebreak_value": rank[1]}
        save_checkpoint(
            folder,
            model=self.model,
            config=self.task.config(),
            vocab=self.task.vocab(),
            trainer_state=state,
        )

    def _standing(self, metrics: dict[str, float]) -> tuple[float, float | None]:
        """A validation's ``(metric, tiebreak)``, both the larger the better (tiebreak None
        without ``config.tiebreak``); a name ``"-NAME"`` is NAME minimised."""
        value = _signed(metrics, self.config.metric, "metric")
        if self.config.tiebreak is None:
            return value, None
        return value, _signed(metrics, self.config.tiebreak, "tiebreak")

    def _best_so_far(self, rank: tuple[float, float | None]) -> bool | None:
        """True when ``rank`` beats the best validation so far, None when it ties it (the
        latest of tied validations is kept), False when it is worse."""
        if self.best is None:
            return True
        best = (self.best, _NONE if self.best_tiebreak is None else self.best_tiebreak)
        mine = (rank[0], _NONE if rank[1] is None else rank[1])
        return True if mine > best else None if mine == best else False

    def _keep(self, rank: tuple[float, float | None]) -> None:
        """Keep the model of this validation if it is among the ``keep_best`` best (in
        ``out_dir/best``; of tied ones the latest), dropping the one it displaces (atomically:
        a kill leaves it whole or gone; what a removal cut short left is deleted here, with a
        warning)."""
        remove_leftovers(self.out_dir / KEPT_DIR)
        folder = self.out_dir / KEPT_DIR / f"step-{self.step:08d}"
        # worst first; a model of this step (kept by a run killed before its next save, then
        # resumed) is replaced, not compared
        kept = sorted(
            ((r, f) for r, f in kept_models(self.out_dir, remove_broken=True) if f != folder),
            key=lambda pair: pair[0],
        )
        mine = (rank[0], _NONE if rank[1] is None else rank[1], self.step)
        if len(kept) >= self.config.keep_best and mine <= kept[0][0]:
            return
        self._save_model(folder, rank)
        for _, folder in kept[: max(0, len(kept) + 1 - self.config.keep_best)]:
            remove_folder(folder)

    def _take_best(self, rank: tuple[float, float | None]) -> None:
        """This model as ``checkpoint-best``, of this validation's ``rank``."""
        self.best, self.best_tiebreak = rank
        self._save_model(self.best_dir, rank)

    def _keep_ranked(
        self, rank: tuple[float, float | None], better: bool | None, message: str
    ) -> None:
        """Keep this model of validation ``rank``: as ``checkpoint-best`` unless ``better``
        (:meth:`_best_so_far`) is False, logged by ``message`` (``%`` fields: the metric, its
        value, the step, the folder); and among the ``keep_best`` best models."""
        if better is not False:
            self._take_best(rank)
            log.info(message, self.config.metric, rank[0], self.step, self.best_dir)
        if self.config.keep_best > 1:
            self._keep(rank)

    def _validate(self, events: Events) -> bool:
        """Evaluate, record, keep the best (and its checkpoint); returns True when early
        stopping says stop."""
        metrics = self.evaluate()
        self._record(events, metrics)
        rank = self._standing(metrics)
        self.history.append({"step": self.step, **metrics})
        better = self._best_so_far(rank)
        self.bad_evals = 0 if better else self.bad_evals + 1
        self._keep_ranked(rank, better, "best %s so far (%.4g) at step %d: %s")
        log.info("step %d: %s", self.step, ", ".join(f"{k} {v:.4g}" for k, v in metrics.items()))
        return self.config.patience is not None and self.bad_evals >= self.config.patience

    def _loss(self, net, batches, device: torch.device) -> tuple[torch.Tensor, int]:
        """The task's loss on the next batch, under the training precision's autocast."""
        batch = to_device(next(batches), device, non_blocking=device.type == "cuda")
        with autocast(device, self.config.precision):
            loss, tokens = self.task.loss(net, batch, self.step)
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"step {self.step}: the training loss is {loss.item()}; {self._weights_said()}"
            )
        return loss, tokens

    def _weights_said(self) -> str:
        """What the weights hold, for the error of a loss that is not finite."""
        with torch.no_grad():
            largest = max(
                (float(p.detach().abs().max()) for p in self.model.parameters() if p.numel()),
                default=0.0,
            )
        if not math.isfinite(largest):
            return (
                "the weights hold NaN or infinite values (the learning rate, or an "
                "optimizer state resumed, drove them there); the checkpoint saved last is "
                "kept"
            )
        return (
            f"the weights are finite, at most {largest:.0e} in magnitude (a batch, or "
            "weights that large, overflowed); the checkpoint saved last is kept"
        )

    def _stop_requested(self, device: torch.device) -> bool:
        """Whether a signal came to any process (every process must ask at the same batch)."""
        return distributed.sum_across([self._signal is not None], device)[0] > 0

    def _backward(self, net, batches, device: torch.device) -> tuple[torch.Tensor, int] | None:
        """The gradients of one optimizer step in the parameters' ``.grad`` (fp16: scaled),
        from ``config.accumulate`` batches; returns the loss (their token-weighted mean) and
        the tokens, or None when a signal came before the last of them (the gradients are
        then partial). Several processes: DDP averages the gradients in the last backward."""
        k = self.config.accumulate
        if k == 1:
            loss, tokens = self._loss(net, batches, device)
            # fp16: the loss scaled up, the gradients unscaled before clipping; without a
            # scaler (fp32, bf16) each call is the plain one
            self.scaler.scale(loss).backward()
            return loss.detach(), tokens
        # Each batch's backward adds tokens_k * grad(loss_k); dividing the sum by the tokens
        # of all k weighs each batch by its share of them.
        total_loss, total = torch.zeros((), device=device), 0
        for i in range(k):
            quiet = self._world > 1 and i < k - 1
            with net.no_sync() if quiet else contextlib.nullcontext():
                loss, tokens = self._loss(net, batches, device)
                self.scaler.scale(loss * max(tokens, 1)).backward()
            total_loss += loss.detach() * max(tokens, 1)
            total += max(tokens, 1)
            if i < k - 1 and self._stop_requested(device):
                return None
        for param in self.model.parameters():
            if param.grad is not None:
                param.grad.div_(total)
        return total_loss / total, total

    def keep_final(self, metrics: dict[str, float]) -> None:
        """Keep the model as :meth:`fit` left it as the best (and among the ``keep_best``) when
        ``metrics``, its evaluation after the last step, beat the validations': a run whose
        last step is not a validation step would otherwise never keep its last steps' model.
        ``metrics`` join the history as the last step's. Nothing is done when the last step was
        validated (rank 0 only)."""
        if self.history and self.history[-1].get("step") == self.step:
            return
        self.history.append({"step": self.step, **metrics})
        rank = self._standing(metrics)
        self._keep_ranked(
            rank, self._best_so_far(rank), "best %s (%.4g) after the last step %d: %s"
        )

    def fit(self) -> TrainResult:
        """Train up to ``config.max_steps`` (see the module docstring for several processes)."""
        owned = distributed.setup(self.device)
        try:
            return self._fit(self.device)
        finally:
            distributed.shutdown(owned)

    def _fit(self, device: torch.device) -> TrainResult:
        cfg = self.config
        if self.step == 0:
            seed_everything(cfg.seed + self._rank)
        main = self._rank == 0
        net = self.model
        if self._world > 1:
            net = DistributedDataParallel(
                self.model, device_ids=[device.index] if device.type == "cuda" else None
            )
        handlers = {}
        try:
            for sig in STOP_SIGNALS:
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    handlers[sig] = signal.signal(sig, self._on_signal)
        except ValueError:  # not the main thread: no signal handling
            handlers = {}
        start = time.monotonic()
        stopped = "max_steps"
        progress = Progress(
            max_steps=cfg.max_steps,
            step=self.step,
            time_budget_s=cfg.time_budget_s,
            enabled=cfg.progress and main,
        )
        events = Events(self.out_dir, self.step) if main else None
        saved_at = None
        self.model.train()
        batches = self._batches()
        try:
            while self.step < cfg.max_steps:
                for group in self.optimizer.param_groups:
                    group["lr"] = cfg.lr * lr_factor(self.step, cfg)
                self.optimizer.zero_grad(set_to_none=True)
                # where the step starts, to come back to when a signal cuts its batches short
                start_of_step = (
                    (self.epoch, self.batch_in_epoch, rng_state()) if cfg.accumulate > 1 else None
                )
                done = self._backward(net, batches, device)
                if done is None:
                    assert start_of_step is not None  # None comes only with accumulate > 1
                    self.epoch, self.batch_in_epoch, rngs = start_of_step
                    set_rng_state(rngs)
                    self.optimizer.zero_grad(set_to_none=True)
                    log.info(
                        "stopped by a signal within step %d's %d batches: its partial "
                        "gradients are discarded, the run resumes at its start",
                        self.step + 1,
                        cfg.accumulate,
                    )
                    stopped = "signal"
                    break
                loss, tokens = done
                if cfg.clip_norm:
                    self.scaler.unscale_(self.optimizer)
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip_norm)
                self.scaler.step(self.optimizer)  # fp16: skipped when a gradient overflowed
                self.scaler.update()
                self.step += 1
                now = time.monotonic()
                # Rank 0 alone validates and keeps the clock; one sum tells every process.
                # (events: rank 0's alone, so None exactly when not main)
                early = (
                    events is not None
                    and self.step % cfg.eval_every == 0
                    and self._validate(events)
                )
                late = main and cfg.time_budget_s is not None and now - start > cfg.time_budget_s
                # sums over the processes (floats): stop flags become counts of processes
                loss_sum, tokens_sum, early_sum, signalled, late_sum = distributed.sum_across(
                    [loss.item(), tokens, early, self._signal is not None, late], device
                )
                progress.update(self.step, loss_sum / self._world, int(tokens_sum))
                if events is not None:
                    events.scalars(
                        self.step,
                        {
                            "train/loss": loss_sum / self._world,
                            "train/tokens_per_s": progress.tokens_per_s,
                            "train/lr": self.optimizer.param_groups[0]["lr"],
                        },
                    )
                if early_sum:
                    stopped = "early_stopping"
                    break
                if signalled:
                    stopped = "signal"
                    break
                if late_sum:
                    stopped = "time_budget"
                    break
                if self.step % cfg.checkpoint_every == 0:
                    self.save()
                    saved_at = self.step
        finally:
            batches.close()  # ends the DataLoader's workers
            progress.close()
            if events is not None:
                events.close()
            for sig, old in handlers.items():
                signal.signal(sig, old)
        if saved_at != self.step:
            self.save()
        distributed.barrier()  # every process returns once the checkpoint is written
        return TrainResult(self.step, stopped, self.best, self.history, self._signal)
