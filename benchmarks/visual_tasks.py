"""Captioning and visual question answering on built-in scenes: with and without attention.

Each model trains for ``--time-budget`` seconds on the same built-in training scenes, in a
fresh process (:mod:`harness`), then is scored on ``--n-test`` scenes of two splits: ``test``
(like the training scenes) and ``heldout`` (every scene shows a colour-shape pair no training
scene has; the captions and questions are about those objects):

* captioning, greedy and with ``attnkit caption``'s default beam search (beam 5, length penalty
  1: the ``SPLIT_beam5`` keys of the JSON rows): BLEU-4 (sacrebleu, against each scene's 5
  references), the share of captions whose every stated fact is true of the scene, and the
  share of object-naming words whose attention peak falls on that object; runs: soft attention
  with the doubly stochastic term (lambda 1) and without it (lambda 0), hard attention
  (REINFORCE), and no attention (the mean-pooled grid);
* VQA: accuracy per question type, non-relational and relational; runs: the stacked attention
  network (2 hops), the same with the relational reader (``kind="relational"``, 2 hops) and
  the baseline without attention (CNN and LSTM features concatenated).

The scores are those of ``attnkit eval`` (the tasks' evaluators, ``score_examples``): with the
default ``--n-test 1000``, ``attnkit eval --checkpoint OUT/RUN/checkpoint --data scenes:test``
prints the same figures for a run's checkpoint (the last one saved).

Prints Markdown tables, writes JSON and one attention picture per model.

    python -m benchmarks.visual_tasks --time-budget 600 --json results/visual_tasks.json
    python -m benchmarks.visual_tasks --match vqa --time-budget 900      # one figure
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from attnkit.data import generate_scenes, question_set
from attnkit.data.worlds.scenes import ANSWERS, QUESTION_TYPES
from attnkit.decoding import Decoding
from attnkit.tasks.caption import CaptionEvaluator, CaptionTask, caption_examples
from attnkit.tasks.evaluator import score_examples
from attnkit.tasks.vqa import VqaEvaluator, VqaTask, question_examples
from attnkit.train import TrainConfig, Trainer
from benchmarks import harness

GRID = dict(image_size=64, channels=[32, 64, 128])
RUNS = {  # name: (task, model config, task options)
    "caption-soft": ("caption", dict(attention="soft"), dict(doubly_stochastic=1.0)),
    "caption-soft-no-ds": ("caption", dict(attention="soft"), dict(doubly_stochastic=0.0)),
    "caption-hard": ("caption", dict(attention="hard"), dict(doubly_stochastic=1.0)),
    "caption-none": ("caption", dict(attention="none"), dict(doubly_stochastic=0.0)),
    "vqa-san": ("vqa", dict(kind="san", hops=2), {}),
    "vqa-relational": ("vqa", dict(kind="relational", hops=2), {}),
    "vqa-none": ("vqa", dict(kind="none"), {}),
}
SPLITS = ("test", "heldout")
CAPTION_BEAM = Decoding(beam=5)  # attnkit caption's default


def train_and_score(
    name: str,
    n_train: int,
    n_valid: int,
    n_test: int,
    time_budget: float,
    out: str,
    eval_every: int | None = None,
    precision: str = "fp32",
    lr: float = 1e-3,
) -> dict:
    """Train run ``name`` for ``time_budget`` seconds (validating every ``eval_every`` steps:
    the row's ``curve``; None: never) in ``precision`` at learning rate ``lr``, then score it
    on each of :data:`SPLITS`."""
    task_name, model, options = RUNS[name]
    torch.manual_seed(0)
    train = generate_scenes(n_train, split="train", size=GRID["image_size"])
    valid = generate_scenes(n_valid, split="valid", size=GRID["image_size"])
    if task_name == "caption":
        task = CaptionTask(
            train, valid, model_config={**GRID, **model, "dropout": 0.1}, batch_size=32, **options
        )
    else:
        task = VqaTask(
            question_set(train),
            question_set(valid),
            answers=ANSWERS,
            model_config={**GRID, **model, "dropout": 0.1},
            batch_size=64,
        )
    net = task.build_model()
    cfg = TrainConfig(
        max_steps=10**7,
        lr=lr,
        precision=precision,
        warmup_steps=100,
        eval_every=eval_every or 10**7,
        checkpoint_every=10**7,
        time_budget_s=time_budget,
        progress=False,
        metric="bleu" if task_name == "caption" else "accuracy",
    )
    result = Trainer(net, task, cfg, Path(out) / name).fit()
    row = {
        "name": name,
        "task": task_name,
        "steps": result.step,
        "curve": result.history,
        "parameters": sum(p.numel() for p in net.parameters()),
        "precision": precision,
        "lr": lr,
    }
    evaluator = (CaptionEvaluator if task_name == "caption" else VqaEvaluator)(
        net, task.config(), task.vocab()
    )
    for split in SPLITS:
        scenes = generate_scenes(n_test, split=split, size=GRID["image_size"])
        examples = (
            caption_examples(scenes, split)
            if task_name == "caption"
            else question_examples(*question_set(scenes, split))
        )
        result = score_examples(evaluator, examples, weights=True)
        drawn = result.outputs[0].draw(Path(out) / f"{name}_{split}.png")
        row[split] = {**result.metrics, "picture": None if drawn is None else str(drawn)}
        if task_name == "caption":
            row[f"{split}_beam5"] = score_examples(evaluator, examples, CAPTION_BEAM).metrics
    return row


def _cell(row: dict, split: str, key: str, scale: float = 1.0) -> str:
    value = row.get(split, {}).get(key)
    return "" if value is None else f"{value * scale:.1f}"


def main(argv=None) -> int:
    p = harness.parser(
        __doc__.splitlines()[0], time_budget=600.0, time_budget_help="training seconds per model"
    )
    p.add_argument("--n-train", type=int, default=10000, help="training scenes")
    p.add_argument("--n-valid", type=int, default=300, help="validation scenes")
    p.add_argument("--n-test", type=int, default=1000, help="scenes per scored split")
    p.add_argument(
        "--eval-every",
        type=int,
        help="validate every N steps (the JSON rows' "
        "curve; default: never), on the --n-valid scenes, inside the time budget",
    )
    p.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        default="fp32",
        help="training precision (bf16: autocast, as `attnkit train --precision`)",
    )
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    p.add_argument(
        "--out",
        type=Path,
        default=Path("/tmp/attnkit-visual-tasks"),
        help="run folders and pictures",
    )
    args = p.parse_args(argv)
    rows = []
    # --match NAME: that run alone when NAME is one (caption-soft is part of caption-soft-no-ds)
    names = (
        [args.match]
        if args.match in RUNS
        else [name for name in RUNS if args.match is None or args.match in name]
    )
    for name in names:
        row = harness.run(
            train_and_score,
            {
                "name": name,
                "n_train": args.n_train,
                "n_valid": args.n_valid,
                "n_test": args.n_test,
                "time_budget": args.time_budget,
                "out": str(args.out),
                "eval_every": args.eval_every,
                "precision": args.precision,
                "lr": args.lr,
            },
            time_budget=None,
            threads=args.threads,
        )
        if row["status"] != "ok":
            raise SystemExit(f"visual_tasks: {name}: {row['status']}: {row['note']}")
        rows.append(row)
    captions = [r for r in rows if r["task"] == "caption"]
    if captions:
        print(
            harness.table_header(
                [
                    "model",
                    "decoding",
                    "steps",
                    *(
                        f"{s} {m}"
                        for s in SPLITS
                        for m in ("BLEU-4", "true captions %", "attention on object %")
                    ),
                ]
            )
        )
        for r in captions:
            for decoding, suffix in (("greedy", ""), ("beam 5", "_beam5")):
                print(
                    harness.table_row(
                        [
                            r["name"],
                            decoding,
                            r["steps"],
                            *(
                                cell
                                for s in SPLITS
                                for cell in (
                                    _cell(r, s + suffix, "bleu"),
                                    _cell(r, s + suffix, "true_captions", 100),
                                    _cell(r, s + suffix, "attention_on_object", 100),
                                )
                            ),
                        ]
                    )
                )
    answers = [r for r in rows if r["task"] == "vqa"]
    if answers:
        print()
        print(
            harness.table_header(
                [
                    "question type (accuracy %)",
                    *(f"{r['name']} {s}" for s in SPLITS for r in answers),
                ]
            )
        )
        for kind in (*QUESTION_TYPES, "non_relational", "relational", None):
            key = f"accuracy_{kind}" if kind else "accuracy"
            print(
                harness.table_row(
                    [kind or "all", *(_cell(r, s, key, 100) for s in SPLITS for r in answers)]
                )
            )
        print(harness.table_row(["steps", *(r["steps"] for _ in SPLITS for r in answers)]))
    if args.json:
        harness.write_json(
            args.json,
            rows,
            time_budget_s=args.time_budget,
            n_train=args.n_train,
            n_test=args.n_test,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
