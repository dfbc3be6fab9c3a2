"""The suite behind ``make bench``: the benchmarks whose figures the documentation cites.

Each entry runs ``python -m benchmarks.NAME`` with the options that measured the figures of
the page it names, in a child process stopped after its time budget (with everything it
started). Its output goes to ``OUT/logs/ENTRY.log`` and its results to ``OUT`` (never to
``results/`` or ``docs/``: compare them with ``results/``, then copy what should replace
the cited figures). ``--quick`` runs each entry at small sizes through its own options
(``--quick``, ``--smoke``, ``--tiny``, fewer cases, repetitions or training seconds): minutes
in all, a check that every script runs, not figures to cite. A summary table is printed
and written to ``OUT/suite.json``.

    python -m benchmarks.suite --quick                # make bench QUICK=1, make bench-quick
    python -m benchmarks.suite --match models_vs_plain    # make bench (all), one entry here
    python -m benchmarks.suite --list

Left out: ``streaming`` needs a streaming ASR checkpoint (``--streaming-checkpoint``), and
the 45-minute captioning and VQA trainings of docs/images.md are not repeated (the 7-minute
table of ``visual_tasks`` is).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import harness

HOUR = 3600.0


@dataclass(frozen=True)
class Entry:
    """One run of a benchmark script: ``{out}`` in the options is the output folder."""

    name: str
    script: str
    cited_in: str
    options: tuple[str, ...]
    budget_s: float  # the whole script, full run
    quick: tuple[str, ...]
    quick_budget_s: float = 300.0


ENTRIES = [
    Entry(
        "attention",
        "attention",
        "benchmarks.md",
        (
            "--reps",
            "3",
            "--time-budget",
            "600",
            "--json",
            "{out}/attention.json",
            "--markdown",
            "{out}/benchmarks.md",
        ),
        6 * HOUR,
        (
            "--quick",
            "--match",
            "B=8 T=256",
            "--reps",
            "1",
            "--time-budget",
            "120",
            "--json",
            "{out}/attention.json",
            "--markdown",
            "{out}/benchmarks.md",
        ),
    ),
    Entry(
        "plan_check",
        "plan_check",
        "benchmarks.md",
        (
            "--size",
            "large",
            "--threads",
            "1",
            "--json",
            "{out}/plan_check.json",
            "--markdown",
            "{out}/plan_check.md",
        ),
        2 * HOUR,
        (
            "--size",
            "small",
            "--match",
            "additive B=8 T=256",
            "--threads",
            "1",
            "--json",
            "{out}/plan_check.json",
        ),
    ),
    Entry(
        "decoder_training",
        "decoder_training",
        "benchmarks.md",
        ("--json", "{out}/decoder_training.json"),
        1 * HOUR,
        ("--match", "bahdanau default", "--steps", "1", "--json", "{out}/decoder_training.json"),
    ),
    Entry(
        "dense",
        "dense",
        "performance.md",
        ("--threads", "1", "--json", "{out}/dense.json"),
        0.5 * HOUR,
        ("--threads", "1", "--reps", "3", "--match", "N=32 ", "--json", "{out}/dense.json"),
    ),
    Entry(
        "decoding_speed",
        "decoding_speed",
        "performance.md",
        ("--threads", "1", "--json", "{out}/decoding_speed.json"),
        0.5 * HOUR,
        (
            "--threads",
            "1",
            "--reps",
            "1",
            "--match",
            "bahdanau greedy",
            "--json",
            "{out}/decoding_speed.json",
        ),
    ),
    Entry(
        "models_vs_plain",
        "models_vs_plain",
        "performance.md",
        ("--threads", "1", "--reps", "5", "--json", "{out}/models_vs_plain.json"),
        4 * HOUR,
        ("--smoke", "--threads", "1", "--json", "{out}/models_vs_plain.json"),
    ),
    Entry(
        "profile_models",
        "profile_models",
        "performance.md",
        ("--threads", "1", "--top", "10", "--json", "{out}/profile_models.json"),
        0.5 * HOUR,
        (
            "--threads",
            "1",
            "--top",
            "5",
            "--match",
            "bahdanau",
            "--json",
            "{out}/profile_models.json",
        ),
    ),
    Entry(
        "task_steps_fp32",
        "task_steps",
        "performance.md",
        ("--threads", "1", "--reps", "8", "--json", "{out}/task_steps_fp32.json"),
        0.5 * HOUR,
        (
            "--threads",
            "1",
            "--reps",
            "1",
            "--match",
            "translate",
            "--json",
            "{out}/task_steps_fp32.json",
        ),
    ),
    Entry(
        "task_steps_bf16",
        "task_steps",
        "performance.md",
        (
            "--threads",
            "1",
            "--reps",
            "8",
            "--precision",
            "bf16",
            "--json",
            "{out}/task_steps_bf16.json",
        ),
        0.5 * HOUR,
        (
            "--threads",
            "1",
            "--reps",
            "1",
            "--match",
            "translate",
            "--precision",
            "bf16",
            "--json",
            "{out}/task_steps_bf16.json",
        ),
    ),
    Entry(
        "time_to_quality_translate",
        "time_to_quality",
        "performance.md",
        (
            "--task",
            "translate",
            "--target",
            "accuracy>=0.95",
            "--label",
            "make bench",
            "--time-budget",
            "1800",
            "--json",
            "{out}/time_to_quality.json",
            "--",
            "--recipe",
            "translate-dates",
            "--eval-every",
            "250",
        ),
        0.6 * HOUR,
        (
            "--task",
            "translate",
            "--target",
            "accuracy>=0",
            "--label",
            "make bench QUICK=1",
            "--time-budget",
            "240",
            "--json",
            "{out}/time_to_quality.json",
            "--",
            "--n-train",
            "500",
            "--n-valid",
            "50",
            "--steps",
            "20",
            "--eval-every",
            "10",
        ),
    ),
    Entry(
        "time_to_quality_asr",
        "time_to_quality",
        "performance.md",
        (
            "--task",
            "asr",
            "--target",
            "cer<=0.05",
            "--label",
            "make bench",
            "--time-budget",
            "1800",
            "--json",
            "{out}/time_to_quality.json",
            "--",
            "--recipe",
            "asr-digits",
            "--cache-dir",
            "{out}/speech-cache",
            "--eval-every",
            "125",
        ),
        0.75 * HOUR,
        (),
    ),
    Entry(
        "time_to_quality_ocr",
        "time_to_quality",
        "performance.md",
        (
            "--task",
            "ocr",
            "--target",
            "cer<=0.02",
            "--label",
            "make bench",
            "--time-budget",
            "3600",
            "--json",
            "{out}/time_to_quality.json",
            "--",
            "--recipe",
            "ocr-lines",
            "--cache-dir",
            "{out}/lines-cache",
            "--eval-every",
            "125",
        ),
        1.25 * HOUR,
        (),
    ),
    Entry(
        "seq2seq_speed",
        "seq2seq_speed",
        "translation.md",
        ("--threads", "1", "--json", "{out}/seq2seq_speed.json"),
        0.5 * HOUR,
        ("--threads", "1", "--reps", "1", "--match", "beam", "--json", "{out}/seq2seq_speed.json"),
    ),
    Entry(
        "length_curve",
        "length_curve",
        "translation.md",
        (
            "--time-budget",
            "200",
            "--json",
            "{out}/length_curve.json",
            "--plot",
            "{out}/length_curve.png",
        ),
        0.5 * HOUR,
        (
            "--time-budget",
            "15",
            "--n-train",
            "1000",
            "--n-test",
            "100",
            "--json",
            "{out}/length_curve.json",
            "--plot",
            "{out}/length_curve.png",
        ),
    ),
    Entry(
        "ocr_speed",
        "ocr_speed",
        "ocr.md",
        ("--json", "{out}/ocr_speed.json"),
        1 * HOUR,
        (
            "--batch",
            "4",
            "--width",
            "400",
            "--reps",
            "1",
            "--match",
            "attnkit-window",
            "--json",
            "{out}/ocr_speed.json",
        ),
    ),
    Entry(
        "las_memory",
        "las_memory",
        "speech.md",
        ("--time-budget", "120", "--json", "{out}/las_memory.json"),
        0.5 * HOUR,
        ("--match", "attention 1600 attnkit", "--json", "{out}/las_memory.json"),
    ),
    Entry(
        "alignment_ocr",
        "alignment",
        "alignment.md",
        (
            "--out",
            "{out}/alignment-ocr",
            "--time-budget",
            "2550",
            "--lines",
            "60",
            "--json",
            "{out}/alignment_ocr.json",
        ),
        5 * HOUR,
        ("--out", "{out}/alignment-ocr", "--tiny", "--json", "{out}/alignment_ocr.json"),
        600.0,
    ),
    Entry(
        "alignment_asr",
        "alignment",
        "alignment.md",
        (
            "--task",
            "asr",
            "--out",
            "{out}/alignment-asr",
            "--time-budget",
            "2550",
            "--lines",
            "200",
            "--json",
            "{out}/alignment_asr.json",
        ),
        3 * HOUR,
        (),
    ),
    Entry(
        "loops",
        "loops",
        "reliability.md",
        ("--json", "{out}/loops.json"),
        1 * HOUR,
        ("--smoke", "--json", "{out}/loops.json"),
    ),
    Entry("nan_checks", "nan_checks", "reliability.md", (), 0.25 * HOUR, ("--reps", "3")),
    Entry(
        "export_latency",
        "export_latency",
        "deploy.md",
        ("--threads", "1", "--json", "{out}/export_latency.json"),
        0.5 * HOUR,
        (
            "--threads",
            "1",
            "--reps",
            "20",
            "--match",
            "batch 1",
            "--json",
            "{out}/export_latency.json",
        ),
    ),
    Entry(
        "visual_tasks",
        "visual_tasks",
        "images.md",
        (
            "--time-budget",
            "420",
            "--out",
            "{out}/visual-tasks",
            "--json",
            "{out}/visual_tasks.json",
        ),
        2 * HOUR,
        (
            "--match",
            "caption-soft",
            "--time-budget",
            "20",
            "--n-train",
            "300",
            "--n-valid",
            "20",
            "--n-test",
            "20",
            "--out",
            "{out}/visual-tasks",
            "--json",
            "{out}/visual_tasks.json",
        ),
    ),
    Entry(
        "corpus_scale",
        "corpus_scale",
        "speech.md",
        ("--threads", "1", "--json", "{out}/corpus_scale.json"),
        1 * HOUR,
        (
            "--threads",
            "1",
            "--sizes",
            "200,1000",
            "--formats",
            "manifest,kaldi",
            "--json",
            "{out}/corpus_scale.json",
        ),
    ),
    Entry(
        "corpus_scale_text",
        "corpus_scale_text",
        "ocr.md",
        ("--threads", "1", "--json", "{out}/corpus_scale_text.json"),
        1 * HOUR,
        (
            "--threads",
            "1",
            "--lines",
            "200,1000",
            "--pairs",
            "1000,10000",
            "--json",
            "{out}/corpus_scale_text.json",
        ),
    ),
    Entry(
        "quantized",
        "quantized",
        "deploy.md",
        ("--threads", "1", "--n", "40", "--json", "{out}/quantized.json"),
        1 * HOUR,
        ("--threads", "1", "--n", "4", "--match", "translate", "--json", "{out}/quantized.json"),
    ),
    Entry(
        "heldout_worlds",
        "heldout_worlds",
        "models.md",
        ("--threads", "1", "--json", "{out}/heldout_worlds.json"),
        2 * HOUR,
        (
            "--threads",
            "1",
            "--utterances",
            "4",
            "--lines",
            "3",
            "--json",
            "{out}/heldout_worlds.json",
        ),
    ),
    Entry(
        "streaming",
        "streaming",
        "alignment.md",
        (
            "--checkpoint",
            "{streaming_checkpoint}",
            "--n",
            "200",
            "--chunk-ms",
            "80,200,400",
            "--time-budget",
            "400",
            "--json",
            "{out}/alignment_streaming.json",
        ),
        1 * HOUR,
        (
            "--checkpoint",
            "{streaming_checkpoint}",
            "--n",
            "5",
            "--chunk-ms",
            "200",
            "--time-budget",
            "30",
            "--json",
            "{out}/alignment_streaming.json",
        ),
    ),
]


def command(
    entry: Entry, *, quick: bool, out: Path, streaming_checkpoint: str | None
) -> list[str] | None:
    """The entry's command line, or None where it does not run (no quick form, or no
    checkpoint for streaming)."""
    options = entry.quick if quick else entry.options
    if (quick and not options) or (
        "{streaming_checkpoint}" in options and streaming_checkpoint is None
    ):
        return None
    values = {"out": str(out), "streaming_checkpoint": streaming_checkpoint}
    return [
        sys.executable,
        "-m",
        f"benchmarks.{entry.script}",
        *(o.format(**values) for o in options),
    ]


def run_entry(
    cmd: list[str], budget: float, log: Path, *, env: dict | None = None, cwd: Path | None = None
) -> tuple[str, float]:
    """Run ``cmd`` (in ``cwd``, with the environment ``env``; default: this process's) with
    its output in ``log``, stopped with all it started after ``budget`` seconds; its status
    ("ok", "exit N" or "over the budget") and seconds."""
    start = time.perf_counter()
    with open(log, "w") as f:
        child = subprocess.Popen(
            cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
        )  # a process group of its own
        try:
            code = child.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            return f"over the {budget:.0f} s budget", time.perf_counter() - start
    return ("ok" if code == 0 else f"exit {code}"), time.perf_counter() - start


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.suite", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--quick", action="store_true", help="small sizes: checks every script")
    p.add_argument(
        "--out",
        type=Path,
        default=Path("build/bench"),
        help="results, logs and summary (default build/bench)",
    )
    p.add_argument("--match", help="only the entries whose name contains this")
    p.add_argument(
        "--streaming-checkpoint",
        help="a streaming ASR checkpoint for the streaming entry (attnkit train asr "
        "--listener uni --alignment monotonic); without it, that entry is skipped",
    )
    p.add_argument("--list", action="store_true", help="print the commands, run nothing")
    args = p.parse_args(argv)
    rows = []
    if not args.list:
        (args.out / "logs").mkdir(parents=True, exist_ok=True)
        print(harness.table_header(["entry", "cited in", "status", "seconds"]), flush=True)
    for entry in ENTRIES:
        if args.match is not None and args.match not in entry.name:
            continue
        cmd = command(
            entry, quick=args.quick, out=args.out, streaming_checkpoint=args.streaming_checkpoint
        )
        budget = entry.quick_budget_s if args.quick else entry.budget_s
        row = {
            "name": entry.name,
            "cited_in": entry.cited_in,
            "budget_s": budget,
            "command": shlex.join(["python", *cmd[1:]]) if cmd else "",
        }
        if args.list:
            print(f"{entry.name} ({budget:.0f} s): {row['command'] or 'skipped'}")
            continue
        if cmd is None:
            row.update(status="skipped", seconds=0.0)
        else:
            log = args.out / "logs" / f"{entry.name}.log"
            status, seconds = run_entry(cmd, budget, log)
            row.update(status=status, seconds=round(seconds, 1), log=str(log))
        rows.append(row)
        print(
            harness.table_row([entry.name, entry.cited_in, row["status"], f"{row['seconds']:.0f}"]),
            flush=True,
        )
    if args.list:
        return 0
    harness.write_json(args.out / "suite.json", rows, quick=args.quick)
    failed = [r["name"] for r in rows if r["status"] not in ("ok", "skipped")]
    if failed:
        print(f"failed: {', '.join(failed)} (logs in {args.out / 'logs'})", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
