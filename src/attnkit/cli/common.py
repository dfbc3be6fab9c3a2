"""What every task's command line shares: the training options, the run.

Each task adds its own data and model options, builds its task object and model, and hands
them to :func:`train_and_report`; the training options, the refusal to overwrite a run, the
resume, the final held-out report and ``history.json`` are the same for every task. ``--device``
(every command that runs a model) and ``--precision`` are checked by :func:`resolve_run_options`,
and the folders and pages a command writes (``--out``, ``--plot DIR``, ``--html PAGE``) by
:func:`check_arguments`, before a command reads or writes anything. A training command holds
the lock of its ``--out`` (:func:`locked_run_folder`) from start to end.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar

import torch

from attnkit.cli import recipes
from attnkit.cli.argtypes import (
    int_at_least,
    learning_rate,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    proportion,
)
from attnkit.decoding import BEAM_STOPS, DEFAULT_LENGTH_PENALTY, Decoding
from attnkit.diagnose.explorer import write_explorer
from attnkit.tasks.evaluator import TASK_BEAM
from attnkit.tasks.explore import examples_of
from attnkit.tasks.loading import existing_run, initial_checkpoint
from attnkit.train import (
    MAX_ACCUMULATE,
    PRECISIONS,
    SCHEDULES,
    Checkpoint,
    TeacherForcing,
    TrainConfig,
    Trainer,
    TrainResult,
    check_precision,
    distributed,
    lock_folder,
    resolve_device,
)

if TYPE_CHECKING:
    from attnkit.tasks.evaluator import Output

log = logging.getLogger("attnkit")

# argparse's own names for what ``add_subparsers`` returns (a string: the class is not
# subscriptable at run time) and for what options are added to (a parser or one of its groups).
SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Options: TypeAlias = argparse._ActionsContainer

Model = TypeVar("Model", bound=torch.nn.Module)
Example = TypeVar("Example")
_Model_contra = TypeVar("_Model_contra", bound=torch.nn.Module, contravariant=True)


class ModelTask(Protocol[_Model_contra]):
    """:class:`attnkit.train.Task` for a task that trains one kind of model: the tasks' ``loss``
    and ``evaluate`` take their own model class, which ``Task`` (typing it as any
    ``nn.Module``) does not accept."""

    def batches(self, epoch: int) -> Any: ...
    def loss(self, model: _Model_contra, batch: Any, step: int) -> tuple[torch.Tensor, int]: ...
    def evaluate(self, model: _Model_contra) -> dict[str, float]: ...
    def config(self) -> dict: ...
    def vocab(self) -> Any: ...


def typed_trainer(
    model: Model, task: ModelTask[Model], config: TrainConfig, out_dir: str | Path
) -> Trainer:
    """``Trainer(model, task, config, out_dir)``, typed: ``task`` trains ``model``'s class."""
    # Task's methods take any nn.Module, so no task with a model class of its own matches it;
    # ModelTask[Model] is what Trainer needs of the task for this model.
    return Trainer(model, task, config, out_dir)  # type: ignore[arg-type]


__all__ = [
    "Interrupted",
    "add_decoding_args",
    "add_device_arg",
    "add_html_arg",
    "add_task_parser",
    "add_training_args",
    "check_arguments",
    "decoding",
    "held_out",
    "is_training",
    "locked_run_folder",
    "print_outputs",
    "resolve_run_options",
    "run_checkpoints",
    "stop_if_signalled",
    "teacher_forcing",
    "train_and_report",
    "training_config",
    "typed_trainer",
    "wants_weights",
    "write_html",
]

CUDA_DATA_WORKERS = 2  # --workers-data on a GPU when not given (0 on CPU)


def held_out(
    train: Sequence[Example], valid: Sequence[Example], what: str, *, n: int = 300
) -> Sequence[Example]:
    """``valid``, or when it is empty the first ``n`` training examples (``what``), with a
    warning: a run without validation data validates on what it trains on."""
    if valid:
        return valid
    log.warning(
        "no validation data: validating on the first %d training %s", min(n, len(train)), what
    )
    return train[:n]


def add_task_parser(
    train_sub: SubParsers,
    name: str,
    *,
    help: str,
    description: str,
    files: str,
    valid: str,
    n_train: int,
    n_valid: int,
    paths: str | None = None,
) -> tuple[argparse.ArgumentParser, argparse._ArgumentGroup]:
    """The ``attnkit train NAME`` parser and its "data" group, holding what every task has:
    ``--train`` / ``--valid`` (the user's data: ``files`` and ``valid`` describe them; with
    ``paths``, their argparse ``nargs``: a list of paths) and the sizes of the built-in data
    (``--n-train``, ``--n-valid``). Returns both; the task adds its own options."""
    p = train_sub.add_parser(name, help=help, description=description)
    recipes.add_recipe_arg(p, name)
    data = p.add_argument_group("data")
    data.add_argument("--train", type=Path, nargs=paths, help=f"{files} (else built-in data)")
    data.add_argument(
        "--valid", type=Path, nargs=paths, help=f"{valid} for validation (with --train)"
    )
    data.add_argument(
        "--n-train", type=positive_int, default=n_train, help="built-in training examples"
    )
    data.add_argument(
        "--n-valid", type=positive_int, default=n_valid, help="built-in validation examples"
    )
    data.add_argument(
        "--data-seed",
        type=int,
        metavar="SEED",
        help="the seed the built-in examples are drawn with (default: --seed), "
        "so that runs of other seeds can share one set and its cache",
    )
    return p, data


def data_seed(args: argparse.Namespace) -> int:
    """The seed of the built-in data: ``--data-seed``, else ``--seed``."""
    return args.seed if args.data_seed is None else args.data_seed


def synthetic_count(real: int, share: float) -> int:
    """How many built-in examples make ``share`` of a training set with ``real`` examples of
    the user's (``--synthetic-share``): ``n / (real + n) = share``, rounded (``share`` below 1)."""
    if not 0.0 <= share < 1.0:
        raise ValueError(f"--synthetic-share: expected a share from 0 to below 1, got {share:g}")
    return round(real * share / (1.0 - share))


def add_device_arg(p: Options) -> None:
    """``--device``: where the model runs (checked by :func:`resolve_run_options`)."""
    p.add_argument(
        "--device", default="auto", help="auto (CUDA when available, else CPU), cpu, cuda or cuda:N"
    )


def resolve_run_options(args: argparse.Namespace) -> None:
    """``args.device`` as a :class:`torch.device` (``args.device_asked``: the option as given),
    ``--precision`` checked against it and ``--workers-data`` defaulted (0 on CPU, 2 on
    CUDA), for the commands that have them.

    Raises:
        ValueError: naming a device this machine lacks or a precision it cannot train in.
    """
    if hasattr(args, "device"):
        args.device_asked = args.device
        args.device = resolve_device(args.device)
    if hasattr(args, "precision"):
        check_precision(args.precision, args.device)
    if hasattr(args, "workers_data") and args.workers_data is None:
        args.workers_data = CUDA_DATA_WORKERS if args.device.type == "cuda" else 0


def _check_folder(path: Path, option: str) -> None:
    """Refuse a folder option naming a file, or a folder that could not be created in the
    first existing folder above it (a file on the way, no write permission)."""
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"{option}: {path} is a file, not a folder")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(f"{option}: {path}: no permission to write in it")
        return
    above = next(p for p in path.absolute().parents if p.exists())
    if not above.is_dir():
        raise ValueError(f"{option}: cannot create {path}: {above} is a file")
    if not os.access(above, os.W_OK | os.X_OK):
        raise ValueError(f"{option}: cannot create {path}: no permission to write in {above}")


def _check_page(path: Path, option: str) -> None:
    """Refuse a page option naming a folder or a file that cannot be written, or a page whose
    folder could not be created."""
    if path.is_dir():
        raise ValueError(f"{option}: {path} is a folder, not a file")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise ValueError(f"{option}: {path}: no permission to write it")
        return
    _check_folder(path.parent, option)


def check_arguments(args: argparse.Namespace) -> None:
    """The checks argparse cannot make, before any work: ``--valid`` only with ``--train``
    (for the commands that have both; ``train lm`` validates on ``--valid`` or its ``--text``);
    a run folder ``--out`` (training, the demo) or a picture folder ``--plot DIR`` must not
    name a file and must be possible to create; an explorer page (``--html PAGE``,
    ``explore --out``) must not name a folder and must be possible to write.

    Raises:
        ValueError: naming the option, the path and why.
    """
    if getattr(args, "valid", None) is not None and hasattr(args, "train") and args.train is None:
        raise ValueError(
            "--valid: only with --train (the built-in data has its own validation split)"
        )
    if is_training(args) or getattr(args, "command", None) == "demo":
        _check_folder(args.out, "--out")
    if isinstance(getattr(args, "plot", None), Path):
        _check_folder(args.plot, "--plot")
    if isinstance(getattr(args, "html", None), Path):
        _check_page(args.html, "--html")
    if getattr(args, "command", None) == "explore":
        _check_page(args.out, "--out")


def is_training(args: argparse.Namespace) -> bool:
    """Whether ``args`` are those of a training command (:func:`add_training_args`)."""
    return isinstance(getattr(args, "out", None), Path) and hasattr(args, "resume")


def locked_run_folder(args: argparse.Namespace) -> AbstractContextManager[Path | None]:
    """A context holding the lock of a training command's ``--out`` (only the main process of
    a torchrun job takes it); a no-op for other commands.

    Raises:
        attnkit.train.FolderBusy: another live attnkit process trains in it.
    """
    if not is_training(args) or not distributed.is_main():
        return nullcontext()
    return lock_folder(args.out)


class Interrupted(Exception):
    """A run stopped by SIGINT, SIGTERM or SIGHUP after saving its checkpoint; ``exit_code``
    is ``128 + signal`` (130, 143, 129), as a shell reports a process ended by that signal."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.exit_code = 128 + signum


def stop_if_signalled(result: TrainResult, checkpoint: Path) -> None:
    """Raise :class:`Interrupted` when a signal stopped the run of ``result`` (its checkpoint
    saved in ``checkpoint``): the command ends there, with the signal's exit code."""
    if result.stopped != "signal":
        return
    signum = result.signal or signal.SIGTERM  # another process of a torchrun job got it
    raise Interrupted(
        signum,
        f"stopped by {signal.Signals(signum).name} after {result.step} "
        f"steps; the checkpoint is saved in {checkpoint}: continue with "
        "--resume",
    )


def add_training_args(
    p: argparse.ArgumentParser,
    *,
    steps: int = 20000,
    batch_size: int = 64,
    lr: float = 3e-3,
    eval_every: int = 200,
    label_smoothing: float = 0.1,
) -> None:
    """The "training" option group, with per-task defaults."""
    train = p.add_argument_group("training")
    train.add_argument("--out", type=Path, required=True, help="run folder (checkpoint, plots)")
    train.add_argument("--resume", action="store_true", help="continue the run in --out")
    train.add_argument(
        "--init",
        type=Path,
        metavar="CHECKPOINT",
        help="fine-tune: start from the weights of a checkpoint folder or a "
        "built-in model (builtin:NAME), keeping its model and vocabulary (the "
        "model options must be those it was trained with); the optimizer, "
        "warm-up and schedule start afresh",
    )
    train.add_argument("--steps", type=positive_int, default=steps)
    train.add_argument(
        "--time-budget", type=positive_float, help="seconds; stop and save after this"
    )
    train.add_argument("--batch-size", type=positive_int, default=batch_size)
    train.add_argument(
        "--accumulate",
        default=1,
        metavar="K",
        type=int_at_least(1, f"int in [1, {MAX_ACCUMULATE}]", at_most=MAX_ACCUMULATE),
        help="gradient accumulation: K batches per optimizer step, weighted by "
        "their tokens (the update of one batch K times larger; default 1, at "
        f"most {MAX_ACCUMULATE}). Ctrl-C or SIGTERM within a step's K batches "
        "stops after the batch at hand: the step's partial gradients are "
        "discarded and the run resumes at its start",
    )
    train.add_argument("--lr", type=learning_rate, default=lr)
    train.add_argument(
        "--warmup", type=non_negative_int, default=100, help="steps of linear learning-rate warm-up"
    )
    train.add_argument(
        "--schedule",
        choices=SCHEDULES,
        default="inverse_sqrt",
        help="the learning rate after the warm-up: constant, inverse_sqrt "
        "(lr * sqrt(warmup / step)) or cosine (down to 0 at --steps)",
    )
    train.add_argument("--label-smoothing", type=proportion, default=label_smoothing)
    train.add_argument(
        "--teacher-forcing",
        type=float,
        default=1.0,
        help="probability of feeding the reference token (at the start)",
    )
    train.add_argument(
        "--teacher-forcing-end",
        type=float,
        help="scheduled sampling: the probability reached after "
        "--teacher-forcing-steps (default: constant)",
    )
    train.add_argument("--teacher-forcing-steps", type=positive_int, default=10000)
    train.add_argument(
        "--teacher-forcing-shape", choices=("linear", "inverse_sigmoid"), default="linear"
    )
    train.add_argument("--eval-every", type=positive_int, default=eval_every)
    train.add_argument("--checkpoint-every", type=positive_int, default=eval_every)
    train.add_argument("--patience", type=positive_int, help="early stopping: validations w/o gain")
    train.add_argument(
        "--keep-best",
        type=positive_int,
        default=1,
        metavar="N",
        help="keep the models of the N best validations in OUT/best/ for "
        "attnkit average (default 1: OUT/checkpoint-best alone)",
    )
    train.add_argument("--seed", type=int, default=0)
    add_device_arg(train)
    train.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="fp32",
        help="bf16: bfloat16 autocast (CPU, recent GPUs); fp16: float16 autocast "
        "with loss scaling (CUDA); weights stay float32",
    )
    train.add_argument(
        "--workers-data",
        type=non_negative_int,
        metavar="N",
        help=f"processes building batches (default 0 on CPU, {CUDA_DATA_WORKERS} on CUDA)",
    )
    train.add_argument("--no-progress", action="store_true")
    train.add_argument(
        "--plot", type=non_negative_int, default=3, help="pictures of N validation examples"
    )


BEAM_OPTIONS = (
    ("--length-penalty", "length_penalty", None),
    ("--coverage-penalty", "coverage_penalty", 0.0),
    ("--no-repeat-ngram", "no_repeat_ngram", 0),
    ("--n-best", "n_best", 1),
    ("--beam-stop", "beam_stop", "bound"),
)
SAMPLING_OPTIONS = ("--pick", "--temperature", "--top-k", "--top-p", "--seed")


def add_decoding_args(
    p: argparse.ArgumentParser, *, beam: int | None = 1, pick: bool = True
) -> None:
    """The decoding options, the same on every command that decodes (README: "Decoding
    options"). ``beam``: the command's beam width when neither ``--beam`` nor ``--sample`` is
    given (None: the checkpoint's task's, :data:`TASK_BEAM`, which the command sets as
    ``args.default_beam``); ``pick``: offer ``--pick`` (what is printed of the samples).
    :func:`decoding` turns them into a :class:`attnkit.decoding.Decoding`."""
    group = p.add_argument_group("decoding (beam search, or sampling with --sample)")
    default = (
        f"{beam}"
        if beam is not None
        else "the task's: " + ", ".join(f"{task} {k}" for task, k in TASK_BEAM.items())
    )
    group.add_argument(
        "--beam", type=positive_int, metavar="K", help=f"beam width (default {default}; 1: greedy)"
    )
    group.add_argument(
        "--length-penalty",
        type=non_negative_float,
        metavar="ALPHA",
        help="beam search ranks by log P / ((5 + |Y|) / 6) ** ALPHA (Wu et al. "
        f"2016; default {DEFAULT_LENGTH_PENALTY:g} with a beam, 0: plain log P, "
        "which favours short outputs; at most 10)",
    )
    group.add_argument(
        "--coverage-penalty",
        type=non_negative_float,
        default=0.0,
        metavar="BETA",
        help="beam search adds BETA * sum_j log(min(attention "
        "on input j, 1)) (Wu et al. 2016; default 0, at most 100)",
    )
    group.add_argument(
        "--no-repeat-ngram",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="beam search never repeats an N-gram of output tokens (0: off)",
    )
    group.add_argument(
        "--n-best",
        type=positive_int,
        default=1,
        metavar="K",
        help="print the K best beam hypotheses of each input, best first (K <= --beam)",
    )
    group.add_argument(
        "--beam-stop",
        choices=BEAM_STOPS,
        default="bound",
        help="when beam search ends an input: once no live hypothesis can outrank the "
        "finished ones (bound, the default: the result of searching to the length limit) or "
        "once its most probable hypothesis has finished (best: OpenNMT-py's and "
        "CTranslate2's rule; fewer steps, and it may miss a longer output)",
    )
    group.add_argument(
        "--max-len",
        type=positive_int,
        metavar="N",
        help="output tokens at most, EOS included (default: the task's limit "
        "from each input's length)",
    )
    group.add_argument(
        "--no-loop-stop",
        action="store_true",
        help="decode an output that loops (repeats a unit of tokens while its "
        "attention stands still) to the length limit; by default it stops "
        "there, with a warning",
    )
    group.add_argument(
        "--sample",
        type=positive_int,
        metavar="N",
        help="draw N outputs per input from the model instead of beam search",
    )
    if pick:
        group.add_argument(
            "--pick",
            choices=("all", "best"),
            help="with --sample: print all N draws, the most probable first "
            "(all, the default), or only the one the model scores highest (best)",
        )
    group.add_argument("--temperature", type=float, help="with --sample (default 1.0)")
    group.add_argument(
        "--top-k", type=positive_int, help="with --sample: the K most probable tokens only"
    )
    group.add_argument("--top-p", type=float, help="with --sample: nucleus sampling")
    group.add_argument("--seed", type=int, help="with --sample: the draws' seed (default 0)")
    p.set_defaults(default_beam=beam, **({} if pick else {"pick": None}))


def decoding(args: argparse.Namespace) -> Decoding:
    """The :class:`attnkit.decoding.Decoding` that the options of :func:`add_decoding_args`
    ask for.

    Raises:
        ValueError: naming the option: a beam search option with ``--sample``, a sampling
            option without it, ``--n-best`` above the beam width, or a value
            :class:`~attnkit.decoding.Decoding` refuses (its field named as the option).
    """
    try:
        return _decoding(args)
    except ValueError as exc:
        field, sep, rest = str(exc).partition(": ")
        option = OPTION_OF_FIELD.get(field, "--" + field.replace("_", "-"))
        if sep and field.isidentifier() and hasattr(args, option[2:].replace("-", "_")):
            raise ValueError(f"{option}: {rest}") from None
        raise


# Decoding's fields whose option is not named after them.
OPTION_OF_FIELD = {"samples": "--sample", "loop_stop": "--no-loop-stop"}


def _decoding(args: argparse.Namespace) -> Decoding:
    if args.sample is None:
        given = [
            opt for opt in SAMPLING_OPTIONS if getattr(args, opt[2:].replace("-", "_")) is not None
        ]
        if given:
            raise ValueError(f"{given[0]}: a sampling option; it needs --sample N")
        beam = args.beam or args.default_beam
        if args.n_best > beam:
            raise ValueError(f"--n-best: expected at most --beam ({beam}), got {args.n_best}")
        return Decoding(
            beam=beam,
            length_penalty=args.length_penalty,
            coverage_penalty=args.coverage_penalty,
            no_repeat_ngram=args.no_repeat_ngram,
            n_best=args.n_best,
            max_len=args.max_len,
            loop_stop=not args.no_loop_stop,
            beam_stop=args.beam_stop,
        )
    given = (["--beam"] if args.beam is not None else []) + [
        opt for opt, name, default in BEAM_OPTIONS if getattr(args, name) != default
    ]
    if given:
        raise ValueError(
            f"{given[0]}: a beam search option; --sample N draws outputs instead "
            f"of searching, give one or the other"
        )
    return Decoding(
        sample=True,
        samples=args.sample,
        temperature=1.0 if args.temperature is None else args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=0 if args.seed is None else args.seed,
        max_len=args.max_len,
        loop_stop=not args.no_loop_stop,
    )


def add_html_arg(p: Options) -> None:
    """``--html PAGE``: the alignment explorer page of the outputs just decoded
    (:func:`write_html`)."""
    p.add_argument(
        "--html",
        type=Path,
        metavar="PAGE",
        help="write the alignment explorer page of these outputs (as attnkit "
        "explore does): one self-contained HTML file",
    )


def wants_weights(args: argparse.Namespace) -> bool:
    """Whether a decoding command draws or explores its outputs (``--plot``, ``--html``): only
    then does decoding keep the attention weights."""
    return getattr(args, "plot", None) is not None or getattr(args, "html", None) is not None


def write_html(
    args: argparse.Namespace,
    outputs: Sequence[Output],
    *,
    names: list[str],
    references: Sequence[str | Sequence[str] | None] | None = None,
    report: bool = True,
) -> Path | None:
    """With ``--html PAGE``: write the explorer page of ``outputs`` (an evaluator's, decoded
    with ``weights=True``), each example named by ``names`` (with its ``references`` when
    given), and with ``report`` print where; returns the page, or None without ``--html``."""
    if args.html is None:
        return None
    examples = examples_of(outputs, names=names, references=references)
    path = write_explorer(examples, args.html, title=f"attnkit {args.command}: {args.checkpoint}")
    if report:
        print(f"  wrote {path} ({len(examples)} examples)")
    return path


def print_outputs(
    outputs: Sequence[Output], args: argparse.Namespace, name: str | None = None
) -> None:
    """Print each input's outputs (:class:`attnkit.tasks.evaluator.Output`), one a line: all of
    them (the n-best, or the ``--sample`` draws, best first), or with ``--pick best`` the best
    alone; each after ``name`` and a tab when one is given."""
    for output in outputs:
        for text in output.texts[:1] if args.pick == "best" else output.texts:
            print(text if name is None else f"{name}\t{text}")


def teacher_forcing(args: argparse.Namespace) -> TeacherForcing:
    """The schedule given by the ``--teacher-forcing*`` options."""
    return TeacherForcing(
        args.teacher_forcing,
        args.teacher_forcing_end,
        args.teacher_forcing_steps,
        args.teacher_forcing_shape,
    )


def sequence_task_options(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The keyword arguments that the training options (:func:`add_training_args`) give a task
    whose model writes sequences (ASR, OCR, captions): ``batch_size``, ``seed``,
    ``label_smoothing``, ``teacher_forcing`` (the schedule of :func:`teacher_forcing`), and the
    options ``names`` as they were given."""
    return {
        "batch_size": args.batch_size,
        "seed": args.seed,
        "label_smoothing": args.label_smoothing,
        "teacher_forcing": teacher_forcing(args),
        **{name: getattr(args, name) for name in names},
    }


def training_config(args: argparse.Namespace, **overrides: Any) -> TrainConfig:
    """The :class:`attnkit.train.TrainConfig` of the training options (``overrides``: fields
    to set otherwise, and ``warmup`` for ``warmup_steps``)."""
    warmup = overrides.pop("warmup", args.warmup)
    settings = dict(
        max_steps=args.steps,
        lr=args.lr,
        warmup_steps=warmup,
        schedule=args.schedule,
        eval_every=args.eval_every,
        checkpoint_every=args.checkpoint_every,
        patience=args.patience,
        time_budget_s=args.time_budget,
        seed=args.seed,
        progress=not args.no_progress,
        precision=args.precision,
        data_workers=args.workers_data,
        accumulate=args.accumulate,
        keep_best=args.keep_best,
    )
    return TrainConfig(**{**settings, **overrides})


def run_checkpoints(
    args: argparse.Namespace, task: str, *, pending: Path | None = None, **checks: Any
) -> tuple[Checkpoint | None, Checkpoint | None]:
    """The checkpoint ``attnkit train TASK`` resumes (``--resume``: :func:`attnkit.tasks.
    loading.existing_run`, with ``pending``), and when there is none the one it starts from
    (``--init``: :func:`attnkit.tasks.loading.initial_checkpoint`; else None), both checked
    against ``checks`` (``model``, ``options``, ``vocab``)."""
    ck = existing_run(args.out, task, resume=args.resume, pending=pending, **checks)
    return ck, None if ck is not None else initial_checkpoint(args.init, task, **checks)


def train_and_report(
    model: Model,
    task: ModelTask[Model],
    args: argparse.Namespace,
    *,
    metric: str = "accuracy",
    tiebreak: str | None = None,
    init: Checkpoint | None = None,
) -> TrainResult | None:
    """Train (resuming with ``--resume``), print the held-out scores (computed as validation
    is: in the training precision) and write ``history.json``. ``model``: on ``args.device``.
    ``metric``: the validation metric early stopping maximises; ``tiebreak``: the one that
    ranks validations tied on it (:class:`attnkit.train.TrainConfig`). ``init``: the checkpoint a
    new run starts from (``--init``, :func:`attnkit.tasks.loading.initial_checkpoint`); its
    weights are loaded into ``model``. Returns None on the other processes of a torchrun job,
    which leave reporting to rank 0.

    Raises:
        Interrupted: SIGINT, SIGTERM or SIGHUP stopped the training (the checkpoint is
            saved).
    """
    if init is not None:
        init.load_model(model)
    trainer = typed_trainer(
        model, task, training_config(args, metric=metric, tiebreak=tiebreak), args.out
    )
    if args.resume and trainer.checkpoint_dir.exists():  # else a pre-training was resumed
        trainer.resume()
    result = trainer.fit()
    stop_if_signalled(result, trainer.checkpoint_dir)
    if not distributed.is_main():
        return None
    final = trainer.evaluate()  # on the whole validation set, after the last step
    trainer.keep_final(final)  # checkpoint-best: the last step's model, if it is the best
    print(
        f"stopped after {result.step} steps ({result.stopped}); held-out: "
        + ", ".join(f"{k} {v:.4f}" for k, v in final.items())
    )
    history = args.out / "history.json"
    try:
        history.write_text(json.dumps(trainer.history, indent=1))
    except OSError as exc:  # a full disk, a read-only folder: the training itself is saved
        raise ValueError(
            f"{history}: cannot write the validation history "
            f"({exc.strerror or exc}); the trained model is saved in "
            f"{trainer.checkpoint_dir}"
        ) from None
    return result
