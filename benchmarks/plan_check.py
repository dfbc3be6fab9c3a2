"""The memory planner's predictions against measured peaks, on the attention benchmark cases.

For each case (a module, the sizes of a call and the path it takes), in a fresh process
(:mod:`harness`), forward (under ``no_grad``) and forward + backward:

* predicted: :func:`attnkit.attention.planner.estimate` (the model of the tensors each path
  allocates; nothing run), and its time (the path run at a smaller size, scaled by the work);
* measured: the peak extra tensor memory from the allocator's events
  (:func:`~attnkit.attention.planner.measure_peak`: the quantity predicted, exact to the
  byte); then the same call timed (wall clock, and the CPU time of the calling thread, which
  with one torch thread is all of the call's and does not count time lost to other processes);
  then run again for its peak resident memory (RSS, sampled every millisecond as in
  docs/benchmarks.md, after ``malloc_trim``).

``--size large`` runs the cases of docs/benchmarks.md (B=8 T=800 A=128 additive and the
rest; ~8 GiB at most), ``--size small`` (the default) the same with a quarter of the steps
and half the batch. The table goes to stdout, the rows to ``--json``, and with ``--markdown``
into that file between the markers ``<!-- plan_check -->`` and ``<!-- /plan_check -->`` (added
at its end the first time).

Usage: ``python -m benchmarks.plan_check --size large --threads 1 --json docs/plan_check.json
--markdown docs/benchmarks.md``.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

from attnkit import Attention
from attnkit.attention.planner import CallShape, estimate, example_call, measure_peak

from benchmarks import harness

BEGIN, END = "<!-- plan_check -->", "<!-- /plan_check -->"
SELF = dict(query_is_key=True, value_is_key=True)

# (name, Attention arguments, call sizes, paths); the names of docs/benchmarks.md's groups
CASES = [
    ("self B=32 T=800 D=256", dict(query_dim=256, score="dot"),
     dict(batch=32, queries=800, **SELF), ("reference", "auto")),
    ("mha B=8 T=800 H=4,d=64", dict(query_dim=256, heads=4), dict(batch=8, queries=800, **SELF),
     ("reference", "auto")),
    ("mha B=8 T=2048 H=4,d=64", dict(query_dim=256, heads=4), dict(batch=8, queries=2048,
                                                                    **SELF), ("reference", "auto")),
    ("additive B=8 T=256 A=128", dict(query_dim=128, score="additive"),
     dict(batch=8, queries=256, **SELF), ("reference", "auto")),
    ("additive B=8 T=800 A=128", dict(query_dim=128, score="additive"),
     dict(batch=8, queries=800, **SELF), ("reference", "auto")),
    ("additive B=8 T=2048 A=128", dict(query_dim=128, score="additive"),
     dict(batch=8, queries=2048, **SELF), ("auto",)),
    ("additive B=8 T=400 D=256 H=4, key padding", dict(query_dim=256, score="additive",
                                                       heads=4),
     dict(batch=8, queries=400, key_padding=True), ("reference", "auto")),
    ("general B=8 Tq=600 Tk=800 D=256, key padding", dict(query_dim=256, score="general"),
     dict(batch=8, queries=600, keys=800, key_padding=True), ("reference", "auto")),
    ("cosine B=8 T=800 D=256 H=4", dict(query_dim=256, score="cosine", heads=4),
     dict(batch=8, queries=800, **SELF), ("reference", "auto")),
    ("local B=4 T=4096 D=64 window=(64, 64)", dict(query_dim=64, window=(64, 64)),
     dict(batch=4, queries=4096, **SELF), ("reference", "sdpa", "auto")),
    ("local B=4 T=16384 D=64 window=(64, 64)", dict(query_dim=64, window=(64, 64)),
     dict(batch=4, queries=16384, **SELF), ("auto",)),
    ("decoder step B=8 Tk=800 A=128", dict(query_dim=128, score="additive"),
     dict(batch=8, queries=1, keys=800, one_step=True), ("chunked", "auto")),
    ("location step B=16 Tk=800 D=256 A=128", dict(query_dim=256, score="location",
                                                   attn_dim=128),
     dict(batch=16, queries=1, keys=800, one_step=True, key_padding=True),
     ("reference", "auto")),
    ("location B=8 Tq=100 Tk=800 D=128", dict(query_dim=128, score="location"),
     dict(batch=8, queries=100, keys=800), ("reference", "chunked")),
]


def sizes(case_sizes: dict, size: str) -> dict:
    """The call's sizes for ``--size``: small has a quarter of the steps, half the batch."""
    if size == "large":
        return case_sizes
    small = dict(case_sizes, batch=max(1, case_sizes["batch"] // 2),
                 queries=max(1, case_sizes["queries"] // 4))
    if "keys" in case_sizes:
        small["keys"] = max(1, case_sizes["keys"] // 4)
    return small


def measure(module: dict, call: dict, impl: str) -> dict:
    """One case in this process (the fresh process of :func:`harness.run`)."""
    torch.manual_seed(0)
    if module.get("window") is not None:
        module = {**module, "window": tuple(module["window"])}  # JSON made it a list
    attn = Attention(**module, impl=impl)
    shape = CallShape(**{"keys": call["queries"], **call})
    plan = estimate(attn, shape, timing=True)
    row = {"path": f"{plan.impl} ({plan.kernel})" if plan.impl in ("chunked", "step")
           else plan.impl}
    for mode, train in (("forward", False), ("train", True)):
        run = example_call(attn, shape, train=train)
        measured = measure_peak(run)  # also the warm-up of the runs below
        start, cpu = time.perf_counter(), time.thread_time()
        run()
        seconds, cpu = time.perf_counter() - start, time.thread_time() - cpu
        harness.trim()
        with harness.PeakRSS() as rss:  # its sampling thread would slow a timed run
            run()
        predicted = plan.predicted
        row[mode] = {
            "predicted_mib": (predicted.train_bytes if train else predicted.forward_bytes)
            / 2**20,
            "measured_mib": measured / 2**20,
            "rss_mib": rss.extra_mb,
            "predicted_s": predicted.train_seconds if train else predicted.forward_seconds,
            "measured_s": seconds,
            "cpu_s": cpu,
        }
    return row


def _cells(r: dict) -> list:
    if r["status"] != "ok":
        return [r["case"], r["impl"], f"{r['status']}: {r['note']}"] + [""] * 6
    path = r["path"] if r["path"].startswith(r["impl"]) else f"{r['impl']}: {r['path']}"
    cells = [r["case"], path]
    for mode in ("forward", "train"):
        m = r[mode]
        ratio = m["predicted_mib"] / m["measured_mib"]
        cells += [f"{m['predicted_mib']:.1f} / {m['measured_mib']:.1f} ({ratio:.2f})",
                  f"{m['rss_mib']:.0f}",
                  f"{m['predicted_s']:.3g} / {m['measured_s']:.3g} ({m['cpu_s']:.3g})"]
    return cells


HEADER = harness.table_header([
    "case", "path", "forward MiB predicted / measured (ratio)", "forward RSS MiB",
    "forward s predicted / wall (CPU)", "train MiB predicted / measured (ratio)",
    "train RSS MiB", "train s predicted / wall (CPU)"])


def summary(rows: list[dict]) -> str:
    ratios = [r[m]["predicted_mib"] / r[m]["measured_mib"] for r in rows
              if r["status"] == "ok" for m in ("forward", "train")]
    times = [r[m]["predicted_s"] / r[m]["measured_s"] for r in rows
             if r["status"] == "ok" for m in ("forward", "train")]
    cpu = [r[m]["predicted_s"] / r[m]["cpu_s"] for r in rows
           if r["status"] == "ok" for m in ("forward", "train")]
    if not ratios:
        return "no case ran"
    inside = sum(0.7 <= x <= 1.3 for x in ratios)
    return (f"memory: predicted / measured from {min(ratios):.2f} to {max(ratios):.2f}, "
            f"{inside} of {len(ratios)} within +-30%; time: predicted / wall clock from "
            f"{min(times):.2f} to {max(times):.2f} (median {statistics.median(times):.2f}), "
            f"predicted / CPU from {min(cpu):.2f} to {max(cpu):.2f} (median "
            f"{statistics.median(cpu):.2f})")


def write_section(path: Path, lines: list[str]) -> None:
    """Put ``lines`` between :data:`BEGIN` and :data:`END` in the Markdown file ``path`` (at
    its end the first time)."""
    text = path.read_text() if path.exists() else ""
    block = "\n".join([BEGIN, *lines, END])
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def main(argv=None) -> int:
    p = harness.parser(__doc__.split("\n\n")[0], time_budget=600.0)
    p.add_argument("--size", choices=("small", "large"), default="small",
                   help="large: the cases of docs/benchmarks.md; small (default): a quarter "
                   "of the steps, half the batch")
    p.add_argument("--markdown", type=Path, help="write the table into this file")
    args = p.parse_args(argv)
    print(f"{args.size} cases; {harness.machine()}")
    print(HEADER)
    rows = []
    for name, module, call, impls in CASES:
        for impl in impls:
            label = f"{name} {impl}"
            if args.match is not None and args.match not in label:
                continue
            case = {"module": module, "call": sizes(call, args.size), "impl": impl}
            small = case["call"]
            row = {"case": name if args.size == "large" else f"{name} (small: B="
                   f"{small['batch']}, Tq={small['queries']}, Tk="
                   f"{small.get('keys', small['queries'])})", "impl": impl,
                   **harness.run(measure, case, time_budget=args.time_budget,
                                 threads=args.threads)}
            rows.append(row)
            print(harness.table_row(_cells(row)), flush=True)
    print(summary(rows))
    if args.json:
        harness.write_json(args.json, rows, size=args.size, threads=args.threads)
    if args.markdown:
        write_section(args.markdown, [
            f"`{harness.command()}` ({time.strftime('%Y-%m-%d')}, commit {harness.commit()}, "
            f"{harness.machine()}):", "", HEADER, *(harness.table_row(_cells(r)) for r in rows),
            "", summary(rows)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
