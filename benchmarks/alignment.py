"""Which attention decoders align on long inputs, on one CPU budget per model (OCR, ASR).

``--task ocr`` (default) trains one CRNN per method on the same built-in lines (5-80
characters) with ``attnkit train ocr`` and the same ``--time-budget``, then reads held-out lines
(validation fonts) of 5-20, 20-40, 40-80, 80-160 and 160-320 characters (the last two: 2x and
4x the longest training line) and reports the CER of each length bucket:

* ``ctc``: the CTC head (docs/ocr.md's recipe);
* ``additive``, ``location``: the attention head with a softmax of the additive / location
  score; ``monotonic``, ``mocha``: with monotonic / MoChA attention (hard decoding);
  each attention head is trained with an auxiliary CTC loss (``--ctc-weight``, 0.3) and read
  greedily by attention alone and by joint CTC/attention beam search (``--ctc-weight 0.5``,
  beam 4).

``--task asr`` trains LAS (docs/speech.md's recipe, CTC weight 0.2) with the softmax of the
location score and with monotonic attention (energy offset 0, training noise 2), and transcribes
the built-in validation speech, alone and as 2 and 4 utterances joined end to end (inputs 2x and
4x longer than any training utterance): greedy by attention alone, beam 4, joint CTC/attention
(beam 4, ``--ctc-weight 0.5``), joint with a character LM trained on the training transcripts
(``attnkit train lm``, ``--lm-weight 0.3``), and for the monotonic model its soft (expected)
attention against the hard one.

    python -m benchmarks.alignment --out runs/alignment --time-budget 2550 \
        --json results/alignment.json
    python -m benchmarks.alignment --task asr --out runs/alignment-asr --time-budget 2550 \
        --json results/alignment_asr.json
    python -m benchmarks.alignment --out runs/alignment-guided --guided-attention 1 \
        --json results/alignment_guided.json
    python -m benchmarks.alignment --out runs/alignment --skip-training \
        --json results/alignment.json
    python -m benchmarks.alignment --out /tmp/align-smoke --tiny   # checks the script, minutes
    python -m benchmarks.alignment --out runs/alignment-bf16 --ctc-weight 0.5 \
        --json results/alignment_bf16.json -- --precision bf16 --sortagrad 1

Each training runs in its own process (``python -m attnkit.cli.main``); ``--time-budget`` is each
run's training budget in seconds; the options after ``--`` are added to every run's. Runs
already in ``--out`` are resumed where they stopped.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import torch

from attnkit.data import CharVocab, generate_lines, load_vocab, speech_dataset
from attnkit.decoding import Decoding
from attnkit.tasks.asr import metrics, transcribe
from attnkit.tasks.loading import load_lm, load_task_model
from attnkit.tasks.ocr import line_metrics, recognise
from benchmarks import harness

COMMON = [
    "--n-train",
    "20000",
    "--n-valid",
    "300",
    "--max-chars",
    "80",
    "--attention",
    "window",
    "--window",
    "32",
    "--hidden",
    "128",
    "--batch-size",
    "32",
    "--lr",
    "1e-3",
    "--steps",
    "100000",
    "--eval-every",
    "250",
    "--plot",
    "3",
    "--no-progress",
]
TINY = [
    "--n-train",
    "64",
    "--n-valid",
    "8",
    "--max-chars",
    "12",
    "--channels",
    "4,4,8,8,8",
    "--hidden",
    "8",
    "--dec-hidden",
    "8",
    "--batch-size",
    "8",
    "--steps",
    "4",
    "--eval-every",
    "2",
    "--plot",
    "0",
    "--no-progress",
]
ATTENTION = ["--head", "attention"]  # with --ctc-weight (the auxiliary CTC loss's weight)
METHODS = {
    "ctc": ["--head", "ctc"],
    "additive": ATTENTION + ["--dec-score", "additive"],
    "location": ATTENTION + ["--dec-score", "location"],
    "monotonic": ATTENTION + ["--alignment", "monotonic"],
    "mocha": ATTENTION + ["--alignment", "mocha", "--chunk", "8"],
}
BUCKETS = ((5, 20), (20, 40), (40, 80), (80, 160), (160, 320))
# The beams rank by plain log P (length penalty 0), as in docs/alignment.md's tables: by
# attention alone that favours early ends, which the CTC scores of the joint search correct.
JOINT = Decoding(beam=4, ctc_weight=0.5, length_penalty=0.0)

ASR_COMMON = [
    "--kinds",
    "digits,numbers",
    "--n-train",
    "6000",
    "--n-valid",
    "200",
    "--listener-hidden",
    "128",
    "--hidden",
    "256",
    "--key-value-dim",
    "128",
    "--batch-size",
    "32",
    "--lr",
    "1e-3",
    "--pretrain-lm-steps",
    "300",
    "--ctc-weight",
    "0.2",
    "--teacher-forcing",
    "1.0",
    "--teacher-forcing-end",
    "0.8",
    "--teacher-forcing-steps",
    "4000",
    "--eval-every",
    "250",
    "--checkpoint-every",
    "250",
    "--no-progress",
]
ASR_TINY = [
    "--kinds",
    "digits",
    "--n-train",
    "16",
    "--n-valid",
    "4",
    "--listener-hidden",
    "8",
    "--hidden",
    "16",
    "--emb",
    "8",
    "--key-value-dim",
    "8",
    "--batch-size",
    "4",
    "--ctc-weight",
    "0.2",
    "--steps",
    "2",
    "--eval-every",
    "2",
    "--plot",
    "0",
    "--no-progress",
]
# monotonic: energies start at 0 (p_choose 0.5), and noise of std 2 on them in training
# (Raffel et al. 2017) pushes p_choose to 0 or 1, which hard decoding needs (docs/alignment.md,
# "Streaming transcription")
MONOTONIC_ASR = ["--alignment", "monotonic", "--energy-offset", "0", "--energy-noise", "2"]
ASR_METHODS = {"location": [], "monotonic": MONOTONIC_ASR}
JOINED = (1, 2, 4)  # utterances joined end to end
LM = "lm"  # the character LM's run folder, trained on the ASR runs' training transcripts
LM_OPTIONS = ["--hidden", "256", "--steps", "3000", "--eval-every", "500", "--no-progress"]
LM_TINY = ["--hidden", "8", "--emb", "4", "--steps", "2", "--eval-every", "2", "--no-progress"]


def train(task: str, method: str, out: Path, args) -> float:
    """Train (or resume) one method's run; returns the seconds it took."""
    folder = out / method
    if task == "ocr":
        options = [
            "--cache-dir",
            str(out / "lines"),
            *(TINY if args.tiny else COMMON),
            *METHODS[method],
        ]
    else:
        options = [
            "--cache-dir",
            str(out / "speech"),
            *(ASR_TINY if args.tiny else ASR_COMMON),
            *ASR_METHODS[method],
        ]
    if task == "ocr" and method != "ctc":
        options += ["--ctc-weight", str(args.ctc_weight)]
        if args.guided_attention:
            options += ["--guided-attention", str(args.guided_attention)]
    options += args.options
    return _run(
        ["train", task, "--out", str(folder), *options, "--time-budget", str(args.time_budget)],
        folder,
    )


def _run(arguments: list[str], folder: Path) -> float:
    """``attnkit ARGUMENTS`` in a fresh process (resuming the run in ``folder`` if there is
    one); returns the seconds it took."""
    command = [sys.executable, "-m", "attnkit.cli.main", *arguments]
    if (folder / "checkpoint").exists():
        command.append("--resume")
    start = time.perf_counter()
    subprocess.run(command, check=True)
    return time.perf_counter() - start


@torch.no_grad()
def evaluate(
    method: str,
    out: Path,
    lines_per_bucket: int,
    seed: int,
    buckets: tuple[tuple[int, int], ...] = BUCKETS,
) -> list[dict]:
    """CER of each length bucket for each way of reading this method's model."""
    model, ck = load_task_model(out / method / "checkpoint", "ocr")
    chars = CharVocab.from_json(ck.vocab)
    readings = {"greedy": Decoding()}
    if model.head_kind == "attention" and model.has_ctc:
        readings["joint"] = JOINT
    rows = []
    for lo, hi in buckets:
        lines = generate_lines(
            lines_per_bucket, split="valid", seed=seed + lo, min_chars=lo, max_chars=hi
        )
        images, refs = [image for image, _ in lines], [text for _, text in lines]
        for name, decoding in readings.items():
            start = time.perf_counter()
            texts, _, _ = recognise(model, chars, images, decoding=decoding, batch_size=16)
            rows.append(
                {
                    "method": method,
                    "reading": name,
                    "chars": f"{lo}-{hi}",
                    **line_metrics(texts, refs),
                    "seconds": time.perf_counter() - start,
                }
            )
    return rows


def train_lm(out: Path, args) -> float:
    """Train (or resume) the character LM on the training transcripts of the ASR runs (the
    same built-in utterances each run synthesised), with the first run's characters."""
    tiny = args.tiny
    speech = speech_dataset(
        16 if tiny else 6000,
        split="train",
        seed=0,
        cache_dir=out / "speech",
        kinds=("digits",) if tiny else ("digits", "numbers"),
        normalize=True,
    )
    text = out / "transcripts.txt"
    text.write_text("".join(t + "\n" for t in speech.transcripts), encoding="utf-8")
    folder = out / LM
    return _run(
        [
            "train",
            "lm",
            "--text",
            str(text),
            "--vocab-from",
            str(out / next(iter(ASR_METHODS)) / "checkpoint"),
            "--out",
            str(folder),
            *(LM_TINY if tiny else LM_OPTIONS),
            "--time-budget",
            str(min(args.time_budget, 600)),
        ],
        folder,
    )


@torch.no_grad()
def evaluate_asr(method: str, out: Path, utterances: int, seed: int, tiny: bool) -> list[dict]:
    """CER of each reading on the validation speech, alone and joined 2 and 4 at a time."""
    model, ck = load_task_model(out / method / "checkpoint", "asr")
    vocab = load_vocab(ck.vocab)
    lm = load_lm(out / LM / "checkpoint", ck.vocab, "cpu")
    kinds = ("digits",) if tiny else ("digits", "numbers")
    speech = speech_dataset(
        utterances, split="valid", seed=seed, cache_dir=out / "speech", kinds=kinds, normalize=True
    )
    readings = {
        "greedy": Decoding(),
        "beam": Decoding(beam=4, length_penalty=0.0),
        "joint": JOINT,
        "joint+lm": dataclasses.replace(JOINT, lm_weight=0.3),
    }
    rows = []
    for joined in JOINED:
        n = len(speech.features) // joined * joined
        features = [torch.cat(list(speech.features[i : i + joined])) for i in range(0, n, joined)]
        refs = [" ".join(speech.transcripts[i : i + joined]) for i in range(0, n, joined)]
        for name, decoding in readings.items():
            for inference in ("hard", "soft") if method == "monotonic" else ("",):
                if inference:
                    model.speller.attention.inference = inference
                start = time.perf_counter()
                texts, _ = transcribe(
                    model, vocab, features, decoding=decoding, batch_size=16, lm=lm
                )
                rows.append(
                    {
                        "method": method,
                        "reading": name,
                        "inference": inference,
                        "joined": joined,
                        **metrics(texts, refs),
                        "seconds": time.perf_counter() - start,
                    }
                )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", choices=("ocr", "asr"), default="ocr")
    p.add_argument("--out", type=Path, required=True, help="run folders, one per method")
    p.add_argument(
        "--time-budget",
        type=float,
        default=2550.0,
        help="training seconds of each run (default 2550: 45 minutes with rendering "
        "and the final evaluation)",
    )
    p.add_argument("--match", help="only the methods whose name contains this")
    p.add_argument(
        "--guided-attention",
        type=float,
        default=0.0,
        help="ocr: the attention heads' guided attention loss weight (0: none)",
    )
    p.add_argument(
        "--ctc-weight",
        type=float,
        default=0.3,
        help="ocr: the attention heads' auxiliary CTC loss weight (default 0.3)",
    )
    p.add_argument(
        "--lines",
        type=int,
        default=60,
        help="held-out lines per length bucket (ocr), utterances (asr)",
    )
    p.add_argument("--skip-training", action="store_true", help="evaluate the runs in --out")
    p.add_argument(
        "--tiny",
        action="store_true",
        help="a tiny model and data: checks the script, measures nothing",
    )
    p.add_argument("--seed", type=int, default=10)
    p.add_argument("--json", type=Path)
    p.add_argument(
        "options",
        nargs=argparse.REMAINDER,
        help="-- then options added to every training run's `attnkit train`, e.g. "
        "-- --precision bf16 --sortagrad 1",
    )
    args = p.parse_args()
    args.options = args.options[1:] if args.options[:1] == ["--"] else args.options
    methods = [
        m
        for m in (METHODS if args.task == "ocr" else ASR_METHODS)
        if not args.match or args.match in m
    ]
    trained = {}
    if not args.skip_training:
        for method in methods:
            trained[method] = train(args.task, method, args.out, args)
        if args.task == "asr":
            trained[LM] = train_lm(args.out, args)
    rows = []
    for method in methods:
        if args.task == "ocr":
            found = (
                evaluate(method, args.out, 2, args.seed, BUCKETS[:1])
                if args.tiny
                else evaluate(method, args.out, args.lines, args.seed)
            )
        else:
            found = evaluate_asr(
                method, args.out, 4 if args.tiny else args.lines, args.seed, args.tiny
            )
        for row in found:
            row["training_seconds"] = trained.get(method)
            row["options"] = args.options
        rows += found
    columns = (
        ["method", "reading", "chars"]
        if args.task == "ocr"
        else ["method", "reading", "inference", "joined"]
    )
    print(harness.table_header(columns + ["CER %"]))
    for row in rows:
        print(harness.table_row([row[c] for c in columns] + [f"{100 * row['cer']:.2f}"]))
    if args.json:
        harness.write_json(args.json, rows)


if __name__ == "__main__":
    main()
