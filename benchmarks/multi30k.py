"""Multi30k translation: a model trained from a recipe, scored on the corpus's test sets.

``python -m benchmarks.multi30k --data DIR`` (DIR: the corpus files as the public repository
multi30k/dataset has them, ``data/task1/raw/*.gz``) trains ``attnkit train translate --recipe
multi30k-en-de`` (``--pair en-fr``: ``-en-fr``; ``--model rnn``: the ``-rnn`` recipes) in
``--out`` under the recipe's time budget, or takes the run already there (``--checkpoint``
scores another one), then decodes test_2016_flickr, test_2017_flickr and test_2017_mscoco and
prints, per test set, sacreBLEU (cased, detokenised: the references as the corpus has them;
its signature printed), chrF, exact match and the outputs the loop detector stopped, with the
run's steps, tokens/s and training time. ``--json`` writes the rows (results/multi30k.json
for docs/translation.md).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import torch

from attnkit.cli.main import main as attnkit
from attnkit.decoding import Decoding
from attnkit.tasks.evaluator import evaluate
from attnkit.tasks.loading import load_evaluator
from attnkit.tasks.metrics import signature
from benchmarks import harness

TEST_SETS = ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco")


class LoopCount(logging.Handler):
    """Counts the outputs that :mod:`attnkit.decoding.front` says it stopped as loops."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.looped = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "(a loop)" in message:
            self.looped += int(message.split(" of ", 1)[0])


def recipe(pair: str, model: str) -> str:
    """The recipe of ``pair`` (``en-de``) and ``model`` (``transformer`` or ``rnn``)."""
    return f"multi30k-{pair}" + ("-rnn" if model == "rnn" else "")


def train(
    data: Path,
    recipe: str,
    out: Path,
    budget: float | None,
    steps: int | None,
    unlikelihood: float | None = None,
    eval_every: int | None = None,
    enc_hidden: int | None = None,
) -> None:
    """``attnkit train translate --recipe RECIPE`` on ``data`` into ``out``.

    ``unlikelihood`` adds the token-level unlikelihood loss with that weight to the recipe;
    ``eval_every`` validates and saves every that many steps instead of the recipe's 500;
    ``enc_hidden`` sizes an RNN's encoder (units per direction) apart from its decoder.
    """
    src, tgt = recipe.split("-")[1:3]
    argv = ["train", "translate", "--recipe", recipe, "--out", str(out)]
    argv += ["--train", str(data / f"train.{src}.gz"), str(data / f"train.{tgt}.gz")]
    argv += ["--valid", str(data / f"val.{src}.gz"), str(data / f"val.{tgt}.gz")]
    argv += [] if budget is None else ["--time-budget", str(budget)]
    argv += [] if steps is None else ["--steps", str(steps)]
    argv += [] if unlikelihood is None else ["--unlikelihood", str(unlikelihood)]
    argv += [] if enc_hidden is None else ["--enc-hidden", str(enc_hidden)]
    if eval_every is not None:
        argv += ["--eval-every", str(eval_every), "--checkpoint-every", str(eval_every)]
    argv += ["--no-progress", "--plot", "0"]
    if attnkit(argv) != 0:
        raise SystemExit(f"training failed: attnkit {' '.join(argv)}")


def run_summary(run: Path) -> dict:
    """The steps and epochs of the run in ``run``, the step of its best validation and the
    validation BLEU there (its trainer state)."""
    state = json.loads((run / "checkpoint" / "trainer.json").read_text())
    best = json.loads((run / "checkpoint-best" / "trainer.json").read_text())
    return {
        "steps": state["step"],
        "epochs": state["epoch"],
        "best_step": best["step"],
        "best_valid": {best["metric"]: best["value"]},
    }


def score(checkpoint: str, data: Path, pair: str, beam: int, limit: int | None) -> list[dict]:
    """One row per test set: BLEU, chrF, exact match, outputs stopped as loops, seconds."""
    src, tgt = pair.split("-")
    evaluator = load_evaluator(checkpoint)
    rows = []
    for name in TEST_SETS:
        if not (data / f"{name}.{tgt}.gz").exists():
            continue
        loops = LoopCount()
        logging.getLogger("attnkit.decoding.front").addHandler(loops)
        start = time.perf_counter()
        try:
            result = evaluate(
                evaluator,
                data / name,
                Decoding(beam=beam),
                limit=limit,
                options={"src_lang": src, "tgt_lang": tgt},
            )
        finally:
            logging.getLogger("attnkit.decoding.front").removeHandler(loops)
        rows.append(
            {
                "test set": name,
                "sentences": len(result.examples),
                "bleu": round(result.metrics["bleu"], 2),
                "chrf": round(result.metrics["chrf"], 2),
                "exact": round(100 * result.metrics["exact"], 2),
                "looped": loops.looped,
                "decode_s": round(time.perf_counter() - start, 1),
            }
        )
    return rows


def main(argv=None) -> int:
    p = harness.parser(
        __doc__.splitlines()[0], time_budget=5400.0, time_budget_help="seconds of training"
    )
    p.add_argument("--data", type=Path, required=True, help="the folder of train.en.gz ...")
    p.add_argument("--pair", choices=("en-de", "en-fr"), default="en-de")
    p.add_argument(
        "--model",
        choices=("transformer", "rnn"),
        default="transformer",
        help="the recipe's model: the Transformer or Luong's RNN (the -rnn recipe)",
    )
    p.add_argument("--out", type=Path, default=Path("build/runs/multi30k"), help="run folder")
    p.add_argument("--checkpoint", help="score this checkpoint instead of --out's best")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--limit", type=int, help="the first N sentences of each test set")
    p.add_argument("--steps", type=int, help="training steps at most (default: the recipe's)")
    p.add_argument(
        "--unlikelihood",
        type=float,
        metavar="ALPHA",
        help="train with the token-level unlikelihood loss of this weight beside the recipe's",
    )
    p.add_argument(
        "--eval-every",
        type=int,
        metavar="N",
        help="validate and save every N steps instead of the recipe's 500 (a finer curve)",
    )
    p.add_argument(
        "--enc-hidden",
        type=int,
        metavar="N",
        help="--model rnn: the encoder's units per direction instead of the recipe's 256 "
        "(OpenNMT-py's encoder of the same recipe has 128)",
    )
    args = p.parse_args(argv)
    if args.enc_hidden is not None and args.model != "rnn":
        p.error(f"--enc-hidden: sizes the RNN's encoder; --model is {args.model}")
    if args.threads:
        torch.set_num_threads(args.threads)
    settings: dict = {"pair": args.pair, "recipe": recipe(args.pair, args.model), "beam": args.beam}
    if args.unlikelihood is not None:
        settings["unlikelihood"] = args.unlikelihood
    if args.eval_every is not None:
        settings["eval_every"] = args.eval_every
    if args.enc_hidden is not None:
        settings["enc_hidden"] = args.enc_hidden
    if args.checkpoint is None and not (args.out / "checkpoint").exists():
        start = time.perf_counter()
        train(
            args.data,
            settings["recipe"],
            args.out,
            args.time_budget,
            args.steps,
            args.unlikelihood,
            args.eval_every,
            enc_hidden=args.enc_hidden,
        )
        settings["train_s"] = round(time.perf_counter() - start, 1)
    checkpoint = args.checkpoint or str(args.out / "checkpoint-best")
    rows = score(checkpoint, args.data, args.pair, args.beam, args.limit)
    print(f"sacreBLEU: {signature('bleu')}; chrF: {signature('chrf')}")
    columns = ["test set", "sentences", "bleu", "chrf", "exact", "looped", "decode_s"]
    print(harness.table_header(columns))
    for row in rows:
        print(harness.table_row([row[c] for c in columns]))
    settings["checkpoint"] = checkpoint
    if args.checkpoint is None:
        settings["run"] = run_summary(args.out)
    if args.json:
        harness.write_json(args.json, rows, **settings, bleu_signature=signature("bleu"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
