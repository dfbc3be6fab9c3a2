"""Time to quality: how long `attnkit train TASK` takes to reach a validation target.

Runs one training command in a child process and reads its validation lines (``step N: name
value, ...``) as they are logged; at each it records the step, the metrics, the wall-clock
seconds since the child started and the child's CPU seconds (user + system, from /proc: unlike
wall time, it does not count the time other processes hold the cores). The child is stopped at
the first validation that reaches the target, or at ``--time-budget`` seconds of wall clock.
Both times include starting Python, building the data (the caches given with ``--cache-dir``
are read, not built, when they exist) and the validations themselves, as a user's run would.

To compare two versions of attnkit, run the same command with ``--pythonpath`` pointing at
each checkout's ``src``:

    python -m benchmarks.time_to_quality --task translate --target accuracy>=0.95 \\
        --pythonpath /path/to/old/src --label before --json ttq.json -- \\
        --n-train 50000 --n-valid 1000 --eval-every 250
    python -m benchmarks.time_to_quality --task translate --target accuracy>=0.95 \\
        --label after --json ttq.json -- --recipe translate-dates --eval-every 250

Each run is added to the runs of ``--json`` (``{"runs": [...]}``), so one file collects
before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import harness

VALIDATION = re.compile(r"step (\d+): (.+)$")
TARGET = re.compile(r"^([a-z_0-9]+)(>=|<=)([0-9.eE+-]+)$")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def parse_target(text: str) -> tuple[str, str, float]:
    """``"accuracy>=0.95"`` -> ("accuracy", ">=", 0.95)."""
    found = TARGET.match(text.replace(" ", ""))
    if not found:
        raise argparse.ArgumentTypeError(
            f"--target: expected NAME>=VALUE or NAME<=VALUE, got {text!r}"
        )
    return found.group(1), found.group(2), float(found.group(3))


def reached(metrics: dict[str, float], target: tuple[str, str, float]) -> bool:
    """Whether a validation's ``metrics`` meet ``target``; False for a validation without
    that metric (e.g. the ASR speller's language-model pre-training, which logs its own)."""
    name, op, value = target
    if name not in metrics:
        return False
    return metrics[name] >= value if op == ">=" else metrics[name] <= value


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def metrics_of(text: str) -> dict[str, float]:
    out = {}
    for part in text.split(", "):
        name, _, value = part.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


def run(
    task: str,
    options: list[str],
    target,
    *,
    pythonpath: str | None,
    threads: int,
    time_budget: float,
    out: Path,
) -> dict:
    code = "import sys; from attnkit.cli.main import main; sys.exit(main(sys.argv[1:]))"
    argv = [
        sys.executable,
        "-c",
        code,
        "train",
        task,
        *options,
        "--out",
        str(out),
        "--no-progress",
        "--plot",
        "0",
        "--checkpoint-every",
        "1000000",
    ]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    start = time.monotonic()
    child = subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    curve, hit, status = [], None, "ended"
    try:
        for line in child.stderr:
            wall, cpu = time.monotonic() - start, cpu_seconds(child.pid)
            found = VALIDATION.search(line.strip())
            if found and "checkpoint" not in line:
                point = {
                    "step": int(found.group(1)),
                    "wall_s": round(wall, 1),
                    "cpu_s": round(cpu, 1),
                    **metrics_of(found.group(2)),
                }
                curve.append(point)
                print(json.dumps(point), flush=True)
                if reached(point, target):
                    hit, status = point, "reached"
                    break
            elif "Error" in line or "error:" in line:
                print(line.rstrip(), file=sys.stderr)
            if wall > time_budget:
                status = "time budget"
                break
    finally:
        child.kill()
        child.wait()
    if status == "ended" and child.returncode not in (0, -9):
        status = f"exit {child.returncode}"
    return {
        "status": status,
        "step": hit and hit["step"],
        "wall_s": hit and hit["wall_s"],
        "cpu_s": hit and hit["cpu_s"],
        "curve": curve,
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", required=True, choices=("translate", "asr", "ocr"))
    p.add_argument(
        "--target",
        required=True,
        type=parse_target,
        help="e.g. accuracy>=0.95 or cer<=0.02 (a metric the validation logs)",
    )
    p.add_argument("--label", required=True, help="the row's name, e.g. before or after")
    p.add_argument("--pythonpath", help="the attnkit checkout's src to run (default: this one)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--time-budget", type=float, default=3600.0, help="wall-clock seconds")
    p.add_argument("--json", type=Path, help="add the run to the runs of this file")
    p.add_argument(
        "options", nargs=argparse.REMAINDER, help="-- then the options of `attnkit train TASK`"
    )
    args = p.parse_args(argv)
    options = args.options[1:] if args.options[:1] == ["--"] else args.options
    with tempfile.TemporaryDirectory(prefix="ttq-") as tmp:
        row = run(
            args.task,
            options,
            args.target,
            pythonpath=args.pythonpath,
            threads=args.threads,
            time_budget=args.time_budget,
            out=Path(tmp) / "run",
        )
    name, op, value = args.target
    info = harness.run_info()
    row = {
        "label": args.label,
        "task": args.task,
        "target": f"{name}{op}{value}",
        "options": options,
        "pythonpath": args.pythonpath or "",
        "threads": args.threads,
        **{k: info[k] for k in ("machine", "commit", "date", "command")},
        **row,
    }
    print(
        f"{args.label}: {row['status']}"
        + (
            f" at step {row['step']}: {row['wall_s']} s wall, {row['cpu_s']} s CPU"
            if row["status"] == "reached"
            else ""
        )
    )
    if args.json:
        harness.save_run(args.json, row, add=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
