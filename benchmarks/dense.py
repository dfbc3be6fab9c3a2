"""Dense layers: ``F.linear`` (PyTorch's BLAS, MKL in the official wheels) against
:func:`attnkit.ops.linear` on oneDNN's inner product (CPU float32), forward and
forward + backward, float32. attnkit's own choice between the two on this machine
(:func:`attnkit.ops.dense.onednn_is_faster`) is recorded as ``chosen``; oneDNN is measured
whatever it is.

Each shape ``(N rows, Din, Dout)`` runs in a fresh process (:mod:`harness`); the median of
``--reps`` calls of each path is reported with its GFLOP/s (forward ``2 N Din Dout``, backward
twice that) and the ratio of the times. The shapes are those of attnkit's models: decoder steps
(32-64 rows), CRNN and seq2seq projections over whole sequences (thousands of rows).

    python -m benchmarks.dense --threads 1 --json results/dense.json
"""

from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F

from attnkit.ops import dense, linear
from attnkit.ops.dense import uses_onednn
from benchmarks import harness

SHAPES = [
    (32, 512, 512),
    (64, 768, 256),
    (256, 512, 512),
    (1024, 512, 512),
    (4096, 256, 100),
    (6400, 512, 512),
    (6400, 1024, 512),
    (6400, 256, 1024),
    (12800, 128, 512),
]


def measure(rows: int, din: int, dout: int, reps: int) -> dict:
    """Median seconds of forward and forward + backward for both paths, in this process."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, din, generator=gen, requires_grad=True)
    w = (torch.randn(dout, din, generator=gen) / din**0.5).requires_grad_(True)
    b = torch.zeros(dout, requires_grad=True)
    g = torch.randn(rows, dout, generator=gen)
    out = {
        "onednn": uses_onednn(x, w),
        "chosen": "onednn" if dense.ONEDNN_DENSE else "blas",
        "threads": torch.get_num_threads(),
    }
    dense.ONEDNN_DENSE = True  # this process measures oneDNN, whichever is chosen
    for name, fn in (("torch", F.linear), ("attnkit", linear)):

        def forward(fn=fn):
            with torch.no_grad():
                fn(x, w, b)

        def train(fn=fn):
            torch.autograd.grad(fn(x, w, b), (x, w, b), g)

        for what, call in (("forward", forward), ("train", train)):
            timing = harness.timed(call, reps=reps, time_budget=math.inf, warmup=3, memory=False)
            out[f"{name}_{what}_s"] = timing.median
    return out


def main(argv=None) -> int:
    p = harness.parser(__doc__.split("\n\n")[0], time_budget=300.0, reps=20)
    args = p.parse_args(argv)
    rows = [{"name": f"N={n} Din={i} Dout={o}", "size": [n, i, o]} for n, i, o in SHAPES]
    rows = [r for r in rows if args.match is None or args.match in r["name"]]
    print(
        harness.table_header(
            [
                "shape",
                "forward GFLOP/s torch",
                "attnkit",
                "speed-up",
                "train GFLOP/s torch",
                "attnkit",
                "speed-up",
            ]
        )
    )
    for row in rows:
        n, i, o = row["size"]
        row.update(
            harness.run(
                measure,
                {"rows": n, "din": i, "dout": o, "reps": args.reps},
                time_budget=args.time_budget,
                threads=args.threads,
            )
        )
        if row["status"] != "ok":
            print(
                harness.table_row(
                    [row["name"], f"{row['status']}: {row['note']}", "", "", "", "", ""]
                ),
                flush=True,
            )
            continue
        flop = 2 * n * i * o
        cells = [row["name"]]
        for what, mult in (("forward", 1), ("train", 3)):
            t, a = row[f"torch_{what}_s"], row[f"attnkit_{what}_s"]
            cells += [
                f"{mult * flop / t / 1e9:.0f}",
                f"{mult * flop / a / 1e9:.0f}",
                f"{t / a:.2f}x",
            ]
        print(harness.table_row(cells), flush=True)
    if args.json:
        harness.write_json(args.json, rows, reps=args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
