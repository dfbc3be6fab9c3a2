"""``attnkit eval``: score a checkpoint of any task on labelled data.

The task comes from the checkpoint; its :class:`attnkit.tasks.evaluator.Evaluator` reads the
data, decodes and scores, so a new task needs no change here.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from attnkit.cli import argtypes, common
from attnkit.cli.corpus import add_format_args, format_options, named
from attnkit.cli.decoder_options import add_joint_args, joint_decoding
from attnkit.tasks import EVALUATORS, evaluate, loading
from attnkit.tasks.metrics import closest_reference, example_cer, signature


def add_parser(sub: common.SubParsers) -> None:
    formats = "; ".join(f"{name}: {cls.data}" for name, cls in sorted(EVALUATORS.items()))
    p = sub.add_parser(
        "eval",
        help="score a checkpoint of any task on labelled data",
        description="Decode labelled data with a checkpoint and print its "
        "scores. The task is the checkpoint's.",
    )
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument(
        "--data",
        type=Path,
        nargs="+",
        required=True,
        help=f"labelled data ({formats}; in another corpus format: see --format; "
        "translation: also the two files of a Moses corpus)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument(
        "--limit",
        type=argtypes.positive_int,
        metavar="N",
        help="score the first N examples of --data only (a COCO, Karpathy or "
        "VQA v2 file: only their images are checked)",
    )
    p.add_argument(
        "--plot",
        type=Path,
        metavar="DIR",
        help="pictures of the attention of the worst examples (by CER against "
        "the closest reference) in DIR",
    )
    p.add_argument(
        "--worst",
        type=argtypes.positive_int,
        default=5,
        metavar="N",
        help="examples pictured with --plot (default 5)",
    )
    common.add_html_arg(p)
    common.add_decoding_args(p, beam=1)
    add_joint_args(p)
    common.add_device_arg(p)
    add_format_args(p, None)
    p.set_defaults(run=run)


def _one_output(args: argparse.Namespace) -> None:
    """eval scores one output per input: the n-best lists and all-draws options are refused."""
    if args.n_best > 1:
        raise ValueError(f"--n-best: eval scores one output per input, got {args.n_best}")
    if args.sample is not None and args.pick != "best":
        raise ValueError(
            "--sample: eval scores one output per input; add --pick best to keep "
            "the draw the model scores highest"
        )


def run(args: argparse.Namespace) -> int:
    decoding = joint_decoding(args, common.decoding(args))
    _one_output(args)
    evaluator = loading.load_evaluator(args.checkpoint, args.device)
    evaluator.lm = loading.load_lm(args.lm, evaluator.vocab, args.device, args.checkpoint)
    data, options = format_options(args, args.data, None)
    result = evaluate(
        evaluator,
        data,
        decoding,
        weights=common.wants_weights(args),
        limit=args.limit,
        options=options,
    )
    page = common.write_html(
        args,
        result.outputs,
        names=[e.origin for e in result.examples],
        references=[e.reference for e in result.examples],
        report=False,
    )
    worst = []
    for rank, i in enumerate(result.worst(args.worst) if args.plot else [], start=1):
        example, output = result.examples[i], result.outputs[i]
        reference = closest_reference(output.text, example.reference)
        path = output.draw(
            args.plot / f"worst_{rank}.png", title=f"{output.text!r}  (reference: {reference!r})"
        )
        worst.append(
            {
                "origin": example.origin,
                "reference": reference,
                "output": output.text,
                "cer": example_cer(output.text, reference),
                "picture": None if path is None else str(path),
            }
        )
    if args.json:
        print(
            json.dumps(
                {
                    "task": evaluator.task,
                    "checkpoint": str(args.checkpoint),
                    "data": named(args.data),
                    "examples": len(result.examples),
                    "decoding": asdict(decoding),
                    "metrics": result.metrics,
                    "signatures": {
                        name: signature(name) for name in result.metrics if signature(name)
                    },
                    **({"worst": worst} if args.plot else {}),
                    **({"html": str(page)} if page else {}),
                },
                indent=1,
            )
        )
        return 0
    print(
        f"{args.checkpoint} ({evaluator.task}) on {named(args.data)}: "
        f"{len(result.examples)} examples, {decoding.describe()}"
    )
    width = max(len(evaluator.label(name)) for name in result.metrics)
    for name, value in result.metrics.items():
        print(f"  {evaluator.label(name):<{width}}  {value:.4f}")
    if worst:
        print(f"worst {len(worst)} by CER:")
    for w in worst:
        print(
            f"  {w['cer']:.3f}  {w['origin']}: {w['output']!r} (reference {w['reference']!r})"
            + (f"  -> {w['picture']}" if w["picture"] else "  (no attention to draw)")
        )
    if page:
        print(f"explorer page of the {len(result.examples)} examples: {page}")
    return 0
