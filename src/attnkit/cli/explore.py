"""``attnkit explore``: the alignment explorer, one self-contained HTML page of a checkpoint's
outputs and their attention (:mod:`attnkit.diagnose.explorer`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from attnkit.cli import argtypes, common
from attnkit.diagnose.explorer import write_explorer
from attnkit.tasks import loading
from attnkit.tasks.evaluator import read_examples
from attnkit.tasks.explore import explore_examples

INPUTS = {
    "translate": "source texts",
    "ocr": "line image files",
    "asr": "WAV files",
    "caption": "image files",
    "vqa": "an image file, then questions about it",
}


def add_parser(sub: common.SubParsers) -> None:
    p = sub.add_parser(
        "explore",
        help="write an HTML page of outputs and their attention",
        description="Decode inputs with a checkpoint and write one "
        "self-contained HTML page: each input, its outputs (the n-best with "
        "--beam K --n-best K) with their scores, the attention as a heat-map "
        "per layer and head, and a step through the output tokens.",
    )
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument(
        "inputs",
        nargs="*",
        metavar="INPUT",
        help="; ".join(f"{task}: {what}" for task, what in INPUTS.items()),
    )
    p.add_argument(
        "--data",
        type=Path,
        help="labelled data instead of INPUTs (as attnkit eval reads it): the "
        "references are shown too",
    )
    p.add_argument(
        "--limit",
        type=argtypes.positive_int,
        metavar="N",
        help="the first N examples of --data only",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("explore.html"),
        help="the page to write (default explore.html)",
    )
    common.add_decoding_args(p, beam=1)
    common.add_device_arg(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if bool(args.inputs) == bool(args.data):
        raise ValueError(
            "INPUT: expected inputs or --data, got " + ("both" if args.inputs else "neither")
        )
    if args.limit and not args.data:
        raise ValueError(f"--limit: applies to --data, got --limit {args.limit} with INPUTs")
    decoding = common.decoding(args)
    evaluator = loading.load_evaluator(args.checkpoint, args.device)
    if evaluator.task not in INPUTS:
        raise ValueError(
            f"--checkpoint: explore takes a checkpoint of {', '.join(INPUTS)}, "
            f"got one of task {evaluator.task!r}"
        )
    if args.data:
        labelled = read_examples(evaluator, args.data, args.limit)
        examples = explore_examples(
            evaluator,
            [e.input for e in labelled],
            decoding,
            names=[e.origin for e in labelled],
            references=[e.reference for e in labelled],
        )
    else:
        inputs, names = evaluator.load_inputs(list(args.inputs))
        examples = explore_examples(evaluator, inputs, decoding, names=names)
    path = write_explorer(
        examples, args.out, title=f"attnkit explore: {args.checkpoint} ({evaluator.task})"
    )
    print(f"wrote {path} ({len(examples)} examples)")
    return 0
