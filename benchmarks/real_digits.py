"""Real people saying digit strings: a speech model (``builtin:asr-digits`` by default) on AN4's
digit utterances of each split's speakers, exact-utterance rate with its Wilson interval, and
CER. Prints a Markdown table and writes JSON.

    python -m benchmarks.real_digits --data build/corpora/an4/data/an4 \\
        --json results/real_digits_an4.json
    python -m benchmarks.real_digits --data build/corpora/an4/data/an4 \\
        --checkpoint runs/asr-digits-real/checkpoint-best --against builtin:asr-digits

``--data`` is the AN4 folder (``--format an4``, docs/speech.md). Each split's utterances are
read with ``--words digits`` (every word ZERO to NINE or OH, OH written ZERO: the one spelling
of the digit 0 the model writes) and, with ``--words numbers``, the number utterances as
well ("FIFTY ONE FIFTY SIX", read word for word). The splits are ESPnet's: ``test`` (10
speakers, the held-out set of AN4 and of the ``asr-digits-real`` recipe), ``train_dev`` (8
speakers; that recipe's validation, so not trained on but used to pick its checkpoint) and
``train_nodev`` (64 speakers: unheard voices for a model trained on synthetic speech only, the
training set of that recipe).

Scores: an utterance is exactly right when its output, lower case with white space collapsed,
is its reference (lower case words); the 95% interval of that rate is Wilson's score interval
(Wilson 1927), which stays inside 0-100% for a handful of utterances. CER is jiwer's, edits
summed over utterances. Decoding is greedy unless ``--beam``, as ``attnkit eval`` scores
without options. ``--against`` scores a second model on the same utterances; per split the
table then gives the utterances only one of the two gets right.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import jiwer
import torch

from attnkit.decoding import Decoding
from attnkit.tasks.evaluator import evaluate
from attnkit.tasks.loading import load_evaluator
from benchmarks import harness

SPLITS = ("test", "train_dev", "train_nodev")
WORDS = ("digits", "numbers")
NORMALIZATION = "lower case, white space collapsed; OH written ZERO (jiwer CER)"
Z95 = 1.959963984540054  # the standard normal's 97.5th percentile


def wilson(right: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval ``(low, high)`` of a proportion ``right / n`` (Wilson 1927):
    ``(p + z²/2n ± z sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)``; ``(0, 1)`` for ``n = 0``."""
    if n == 0:
        return 0.0, 1.0
    p = right / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    scale = 1 + z * z / n
    return max(0.0, (centre - half) / scale), min(1.0, (centre + half) / scale)


def normalized(text: str) -> str:
    """A transcript as it is scored: lower case, white space collapsed."""
    return " ".join(text.lower().split())


def score(checkpoint: str, data: Path, split: str, words: str, decoding: Decoding) -> dict:
    """The row of ``checkpoint`` on the ``words`` utterances of ``split``: ``n``, ``exact``
    with its Wilson interval, ``cer``, the speakers, and each utterance's output."""
    evaluator = load_evaluator(Path(checkpoint))
    options = {"format": "an4", "split": split, "words": words, "transcripts": "normalize"}
    start = time.perf_counter()
    evaluation = evaluate(evaluator, data, decoding, options=options)
    seconds = time.perf_counter() - start
    refs = [normalized(str(e.reference)) for e in evaluation.examples]
    hyps = [normalized(o.text) for o in evaluation.outputs]
    ids = [Path(e.origin.split(" ")[0]).stem for e in evaluation.examples]
    right = sum(r == h for r, h in zip(refs, hyps))
    low, high = wilson(right, len(refs))
    return {
        "model": checkpoint,
        "split": split,
        "words": words,
        "n": len(refs),
        "speakers": len({utt.split("-")[1] for utt in ids}),
        "right": right,
        "exact": right / max(len(refs), 1),
        "exact_low": low,
        "exact_high": high,
        "cer": float(jiwer.cer(refs, hyps)),
        "decode_s": round(seconds, 1),
        "utterances": [
            {"id": utt, "reference": r, "output": h} for utt, r, h in zip(ids, refs, hyps)
        ],
    }


def only_right(ours: dict, theirs: dict) -> tuple[int, int]:
    """How many utterances ``ours`` gets right and ``theirs`` wrong, and the other way round
    (the two rows of one split and word set)."""
    a = [u["reference"] == u["output"] for u in ours["utterances"]]
    b = [u["reference"] == u["output"] for u in theirs["utterances"]]
    return sum(x and not y for x, y in zip(a, b)), sum(y and not x for x, y in zip(a, b))


def main(argv=None) -> int:
    p = harness.parser(__doc__.splitlines()[0], time_budget=3600.0)
    p.add_argument("--data", type=Path, required=True, help="the AN4 folder (etc/ and wav/)")
    p.add_argument("--checkpoint", default="builtin:asr-digits", help="the model to score")
    p.add_argument("--against", help="a second model scored on the same utterances")
    p.add_argument(
        "--splits", default=",".join(SPLITS), help=f"comma-separated (default {','.join(SPLITS)})"
    )
    p.add_argument(
        "--words", default="digits", help="digits (default) or digits,numbers: the word sets"
    )
    p.add_argument("--beam", type=int, default=1, help="beam width (default 1: greedy)")
    args = p.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    splits, word_sets = args.splits.split(","), args.words.split(",")
    for given, allowed, option in ((splits, SPLITS, "--splits"), (word_sets, WORDS, "--words")):
        wrong = [g for g in given if g not in allowed]
        if wrong:
            p.error(f"{option}: expected some of {', '.join(allowed)}, got {wrong[0]!r}")
    decoding = Decoding(beam=args.beam)
    models = [args.checkpoint, *([args.against] if args.against else [])]
    rows = [
        score(model, args.data, split, words, decoding)
        for words in word_sets
        for split in splits
        for model in models
    ]
    columns = ["model", "split", "words", "utterances", "speakers", "exact %", "95% interval"]
    columns += ["CER %", "only this one right"] if args.against else ["CER %"]
    print(harness.table_header(columns))
    for i, row in enumerate(rows):
        cells = [row["model"], row["split"], row["words"], row["n"], row["speakers"]]
        cells += [f"{100 * row['exact']:.1f} ({row['right']}/{row['n']})"]
        cells += [f"{100 * row['exact_low']:.1f}-{100 * row['exact_high']:.1f}"]
        cells += [f"{100 * row['cer']:.2f}"]
        if args.against:
            other = rows[i + 1] if i % 2 == 0 else rows[i - 1]
            cells.append(only_right(row, other)[0])
        print(harness.table_row(cells))
    for row in rows:
        wrong = [u for u in row["utterances"] if u["reference"] != u["output"]]
        for u in wrong[:3]:
            print(
                f"  {row['model']} {row['split']} {u['id']}: {u['output']!r} ({u['reference']!r})"
            )
    if args.json:
        harness.write_json(
            args.json,
            rows,
            data=str(args.data),
            normalization=NORMALIZATION,
            beam=args.beam,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
