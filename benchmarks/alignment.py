"""OCR on long lines: which attention decoders align, by line length, on one CPU budget.

Trains one CRNN per method on the same built-in lines (5-80 characters) with ``attnkit train
ocr`` and the same ``--time-budget``, then reads held-out lines (validation fonts) of 5-20,
20-40, 40-80, 80-160 and 160-320 characters (the last two: 2x and 4x the longest training
line) and reports the CER of each length bucket:

* ``ctc``: the CTC head (docs/ocr.md's recipe);
* ``additive``, ``location``: the attention head with a softmax of the additive / location
  score; ``monotonic``, ``mocha``: with monotonic / MoChA attention (hard decoding);
  each attention head is trained with an auxiliary CTC loss (``--ctc-weight 0.3``) and read
  greedily by attention alone and by joint CTC/attention beam search (``--ctc-weight 0.5``,
  beam 4).

    python benchmarks/alignment.py --out runs/alignment --time-budget 2550 --json docs/alignment.json
    python benchmarks/alignment.py --out runs/alignment --skip-training --json docs/alignment.json
    python benchmarks/alignment.py --out /tmp/align-smoke --tiny   # checks the script, minutes

Each training runs in its own process (``python -m attnkit.cli.main``); ``--time-budget`` is each run's
training budget in seconds. Runs already in ``--out`` are resumed where they stopped.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

from attnkit.cli.common import load_task_model
from attnkit.data import CharVocab, generate_lines
from attnkit.decoding import Decoding
from attnkit.tasks.ocr import line_metrics, recognise

import harness

COMMON = ["--n-train", "20000", "--n-valid", "300", "--max-chars", "80", "--attention",
          "window", "--window", "32", "--hidden", "128", "--batch-size", "32", "--lr", "1e-3",
          "--steps", "100000", "--eval-every", "250", "--plot", "3", "--no-progress"]
TINY = ["--n-train", "64", "--n-valid", "8", "--max-chars", "12", "--channels", "4,4,8,8,8",
        "--hidden", "8", "--dec-hidden", "8", "--batch-size", "8", "--steps", "4",
        "--eval-every", "2", "--plot", "0", "--no-progress"]
ATTENTION = ["--head", "attention", "--ctc-weight", "0.3"]
METHODS = {
    "ctc": ["--head", "ctc"],
    "additive": ATTENTION + ["--dec-score", "additive"],
    "location": ATTENTION + ["--dec-score", "location"],
    "monotonic": ATTENTION + ["--alignment", "monotonic"],
    "mocha": ATTENTION + ["--alignment", "mocha", "--chunk", "8"],
}
BUCKETS = ((5, 20), (20, 40), (40, 80), (80, 160), (160, 320))
JOINT = Decoding(beam=4, ctc_weight=0.5)


def train(method: str, out: Path, args) -> float:
    """Train (or resume) one method's run; returns the seconds it took."""
    folder = out / method
    command = [sys.executable, "-m", "attnkit.cli.main", "train", "ocr", "--out", str(folder),
               "--cache-dir", str(out / "lines"), *(TINY if args.tiny else COMMON),
               *METHODS[method]]
    if args.time_budget:
        command += ["--time-budget", str(args.time_budget)]
    if (folder / "checkpoint").exists():
        command.append("--resume")
    start = time.perf_counter()
    subprocess.run(command, check=True)
    return time.perf_counter() - start


@torch.no_grad()
def evaluate(method: str, out: Path, lines_per_bucket: int, seed: int) -> list[dict]:
    """CER of each length bucket for each way of reading this method's model."""
    model, ck = load_task_model(out / method / "checkpoint", "ocr")
    chars = CharVocab.from_json(ck.vocab)
    readings = {"greedy": Decoding()}
    if model.head_kind == "attention" and model.has_ctc:
        readings["joint"] = JOINT
    rows = []
    for lo, hi in BUCKETS:
        lines = generate_lines(lines_per_bucket, split="valid", seed=seed + lo, min_chars=lo,
                               max_chars=hi)
        images, refs = [image for image, _ in lines], [text for _, text in lines]
        for name, decoding in readings.items():
            start = time.perf_counter()
            texts, _, _ = recognise(model, chars, images, decoding=decoding, batch_size=16)
            rows.append({"method": method, "reading": name, "chars": f"{lo}-{hi}",
                         **line_metrics(texts, refs), "seconds": time.perf_counter() - start})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="run folders, one per method")
    p.add_argument("--time-budget", type=float, default=2550.0,
                   help="training seconds of each run (default 2550: 45 minutes with rendering "
                        "and the final evaluation)")
    p.add_argument("--match", help="only the methods whose name contains this")
    p.add_argument("--lines", type=int, default=60, help="held-out lines per length bucket")
    p.add_argument("--skip-training", action="store_true", help="evaluate the runs in --out")
    p.add_argument("--tiny", action="store_true",
                   help="a tiny model and data: checks the script, measures nothing")
    p.add_argument("--seed", type=int, default=10)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    methods = [m for m in METHODS if not args.match or args.match in m]
    trained = {}
    if not args.skip_training:
        for method in methods:
            trained[method] = train(method, args.out, args)
    rows = []
    for method in methods:
        found = evaluate(method, args.out, 2 if args.tiny else args.lines, args.seed)
        for row in found:
            row["training_seconds"] = trained.get(method)
        rows += found
    print(harness.table_header(["method", "reading", "chars", "CER %", "line acc %"]))
    for row in rows:
        print(harness.table_row([row["method"], row["reading"], row["chars"],
                                 f"{100 * row['cer']:.2f}", f"{100 * row['line_accuracy']:.1f}"]))
    if args.json:
        harness.write_json(args.json, rows)


if __name__ == "__main__":
    main()
