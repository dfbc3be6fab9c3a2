"""Check that two revisions of attnkit train every task identically: the same command, the same
seed, the same per-step losses and validation scores.

Each revision is checked out into a temporary git worktree and run with this interpreter and
that worktree's ``src`` first on the path; each task trains a small model on its built-in data
for ``--steps`` steps (one thread, so that the float sums are ordered the same way), and the
curves of the two runs (the training loss of every step, the learning rate and the validation
scores, read from the run's TensorBoard events) must be equal, value for value. A restructuring
that moves code without changing what it computes passes; anything else names the first step
that differs.

    python tools/same_training.py --before d5b0ad4 --after HEAD --json results/same_training.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Small models on small built-in sets: every task's whole path (data, model, loss, optimiser,
# validation) in about a minute each on one core.
TASKS = {
    "translate": [
        "--n-train",
        "2000",
        "--n-valid",
        "100",
        "--emb",
        "32",
        "--hidden",
        "64",
        "--batch-size",
        "32",
    ],
    "ocr": [
        "--n-train",
        "400",
        "--n-valid",
        "50",
        "--channels",
        "16,16,32,32,32",
        "--hidden",
        "64",
        "--batch-size",
        "16",
        "--max-chars",
        "12",
    ],
    "asr": [
        "--n-train",
        "200",
        "--n-valid",
        "30",
        "--listener-hidden",
        "32",
        "--hidden",
        "64",
        "--emb",
        "16",
        "--batch-size",
        "16",
    ],
    "caption": [
        "--n-train",
        "400",
        "--n-valid",
        "50",
        "--channels",
        "16,32,32",
        "--hidden",
        "64",
        "--emb",
        "32",
        "--batch-size",
        "16",
    ],
    "vqa": [
        "--n-train",
        "400",
        "--n-valid",
        "50",
        "--channels",
        "16,32,32",
        "--hidden",
        "32",
        "--emb",
        "32",
        "--batch-size",
        "16",
    ],
}


def train(src: Path, task: str, out: Path, steps: int, seed: int) -> dict:
    """The curves of ``attnkit train TASK`` run from the sources in ``src``."""
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "attnkit",
        "train",
        task,
        *TASKS[task],
        "--steps",
        str(steps),
        "--eval-every",
        str(steps // 2),
        "--checkpoint-every",
        str(steps),
        "--seed",
        str(seed),
        "--no-progress",
        "--out",
        str(out),
    ]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=out.parent)
    if proc.returncode != 0:
        raise SystemExit(f"{task} at {src}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    return {"seconds": round(time.perf_counter() - start, 1), "curves": curves(out)}


def curves(out: Path) -> dict[str, list[list[float]]]:
    """Every scalar the run logged but its speed: ``{tag: [[step, value], ...]}`` (the
    training loss at every step, the learning rate, the validation scores)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out), size_guidance={"scalars": 0})
    events.Reload()
    return {
        tag: [[e.step, e.value] for e in events.Scalars(tag)]
        for tag in sorted(events.Tags()["scalars"])
        if not tag.endswith("_per_s")
    }


def first_difference(a, b, where: str = "curves") -> str | None:
    """Where ``a`` and ``b`` first differ, None when they are equal."""
    if type(a) is not type(b):
        return f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{where}[{key!r}]: only in {'after' if key in b else 'before'}"
            found = first_difference(a[key], b[key], f"{where}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{where}[{i}]")
            if found:
                return found
        return None if len(a) == len(b) else f"{where}: {len(a)} vs {len(b)} entries"
    return None if a == b else f"{where}: {a!r} vs {b!r}"


def commit(rev: str) -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="git revision of the reference")
    p.add_argument("--after", default="HEAD", help="git revision to compare (default HEAD)")
    p.add_argument("--tasks", default=",".join(TASKS), help="comma-separated tasks")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="write the comparison here")
    args = p.parse_args(argv)
    tasks = args.tasks.split(",")
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        p.error(f"--tasks: unknown {', '.join(unknown)}; expected some of {', '.join(TASKS)}")
    revs = {"before": commit(args.before), "after": commit(args.after)}
    rows, same = [], True
    with tempfile.TemporaryDirectory(prefix="same-training-") as tmp:
        tmp = Path(tmp)
        for side, rev in revs.items():
            subprocess.run(
                ["git", "worktree", "add", "--detach", str(tmp / side), rev],
                cwd=ROOT,
                check=True,
                capture_output=True,
            )
        try:
            for task in tasks:
                runs = {
                    side: train(
                        tmp / side / "src", task, tmp / f"{side}-{task}", args.steps, args.seed
                    )
                    for side in revs
                }
                after = runs["after"]["curves"]
                diff = first_difference(runs["before"]["curves"], after)
                same &= diff is None
                losses = after.get("train/loss", [])
                rows.append(
                    {
                        "task": task,
                        "identical": diff is None,
                        "first_difference": diff,
                        "tags": sorted(after),
                        "steps_logged": len(losses),
                        "loss_first_last": [losses[0][1], losses[-1][1]] if losses else None,
                        "last_validation": {
                            t: v[-1][1] for t, v in after.items() if t.startswith("valid/")
                        },
                        "seconds": {s: r["seconds"] for s, r in runs.items()},
                    }
                )
                print(
                    f"{task:10} {'identical' if diff is None else 'DIFFERS: ' + diff}"
                    f"  ({len(losses)} training losses, {len(after)} curves; "
                    f"{runs['before']['seconds']} s / {runs['after']['seconds']} s)",
                    flush=True,
                )
        finally:
            for side in revs:
                subprocess.run(
                    ["git", "worktree", "remove", "--force", str(tmp / side)],
                    cwd=ROOT,
                    capture_output=True,
                )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "what": "every task's training curves (loss per step, lr, validation), "
                    "two revisions, same seed",
                    "command": "python tools/same_training.py " + " ".join(argv or sys.argv[1:]),
                    "commit": revs["after"],
                    "date": time.strftime("%Y-%m-%d"),
                    "revisions": revs,
                    "steps": args.steps,
                    "seed": args.seed,
                    "tasks": rows,
                },
                indent=1,
            )
            + "\n"
        )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
