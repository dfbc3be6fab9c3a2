"""``attnkit average``: one checkpoint whose weights are the mean of several of one run
(:mod:`attnkit.train.averaging`), for inference, export and serving."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnkit.cli.common import SubParsers

import argparse
from pathlib import Path

from attnkit.export import check_out
from attnkit.train import save_checkpoint
from attnkit.train.averaging import average_checkpoints, best_checkpoints


def add_parser(sub: SubParsers) -> None:
    p = sub.add_parser(
        "average",
        help="average the weights of several checkpoints of one model",
        description="Write a checkpoint for inference whose weights are the mean of the "
        "given checkpoints' (floating-point tensors averaged, integer ones their largest "
        "value); they must be of one task, model and vocabulary, and may come from runs "
        "trained with other augmentation, batching or dropout (the first one's config is "
        "kept, e.g. fine-tunings of one model: a model soup). Either name the checkpoints, "
        "or --run a run trained with --keep-best N and --best N to average its N best "
        "validations.",
    )
    p.add_argument(
        "checkpoints", nargs="*", type=Path, metavar="CHECKPOINT", help="checkpoint folders"
    )
    p.add_argument(
        "--run",
        dest="run_folder",
        type=Path,
        metavar="RUN",
        help="a run folder trained with --keep-best",
    )
    p.add_argument(
        "--best",
        type=int,
        metavar="N",
        help="with --run: average its N best kept validations (default all kept)",
    )
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help="the averaged checkpoint's folder: new, empty, or an earlier average "
        "or export, which is replaced; never a checkpoint averaged, a run's "
        "checkpoint or a folder inside one (the checks of attnkit export --out)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace --out even when it holds other files (they are deleted)",
    )
    p.set_defaults(run=run_average)


def run_average(args: argparse.Namespace) -> int:
    run = args.run_folder
    if bool(args.checkpoints) == bool(run):
        raise ValueError(
            f"average: expected CHECKPOINT folders or --run RUN, got {'both' if run else 'neither'}"
        )
    if args.best is not None and (run is None or args.best < 1):
        raise ValueError(
            f"--best: expected a positive int with --run, got {args.best}"
            f"{'' if run else ' without --run'}"
        )
    paths = best_checkpoints(run, args.best) if run else args.checkpoints
    out = check_out(args.out, reading=paths, force=args.force, doing="averaged")
    ck = average_checkpoints(paths)
    save_checkpoint(
        out, model=ck.model_state, config=ck.config, vocab=ck.vocab, trainer_state=ck.trainer_state
    )
    assert ck.trainer_state is not None  # average_checkpoints lists the steps averaged there
    steps = ", ".join(str(s) for s in ck.trainer_state["steps"])
    print(f"averaged {len(paths)} checkpoints (steps {steps}) into {args.out}")
    return 0
