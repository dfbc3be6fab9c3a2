"""Peak training memory of the LAS speller's location-aware attention: attnkit vs the usual way.

The usual way (as in most LAS implementations) computes each decoder step's energies as
``v^T tanh(W s + V h + U f)`` with ``f = conv(previous weights)`` in plain PyTorch, so autograd
keeps every step's ``(B, S, A)`` tanh input until backward. attnkit's location score goes through
its one-step path (scores built block by block, the pair tensor recomputed in backward).

Two levels, each case in a fresh process (:mod:`harness`: peak RSS during its first training
step minus the RSS before it; batch 16, 25 output characters):

* ``las``: a whole :class:`attnkit.models.LAS` training step (listener + speller) on ``frames``
  input frames (the speller attends over ``frames // 8`` listener steps);
* ``attention``: the speller alone over ``keys`` memory steps given directly (1,600 frames
  are only 200 keys after the three halvings).

Usage: ``python -m benchmarks.las_memory [--time-budget 60] [--json results/las_memory.json]``.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from attnkit.models import LAS
from benchmarks import harness
from benchmarks.plain import UsualLocationAttention

BATCH, STEPS, FEATURES = 16, 25, 80
CASES = [("las", 1600), ("attention", 1600)]
IMPLS = ("attnkit", "usual")


def build(level: str, size: int, impl: str):
    """A training step (a function) of one case."""
    torch.manual_seed(0)
    model = LAS(
        30,
        features=FEATURES,
        listener_hidden=128,
        hidden=256,
        emb=64,
        key_value_dim=128,
        score="location",
    )
    if impl == "usual":
        model.speller.attention = UsualLocationAttention(256, 128, 256)
    tgt = torch.randint(4, 30, (BATCH, STEPS))
    if level == "las":
        x, lengths = torch.randn(BATCH, size, FEATURES), torch.full((BATCH,), size)

        def step():
            logits, _ = model(x, lengths, tgt)
            F.cross_entropy(logits.flatten(0, 1), tgt.flatten()).backward()
    else:
        memory = torch.randn(BATCH, size, model.listener.output_dim, requires_grad=True)
        lengths = torch.full((BATCH,), size)

        def step():
            logits, _ = model.speller(memory, lengths, tgt)
            F.cross_entropy(logits.flatten(0, 1), tgt.flatten()).backward()

    return step, model


def measure(level: str, size: int, impl: str) -> dict:
    """One case in this process (the fresh process of :func:`harness.run`): no full-size
    warm-up (it would double the run), both paths pay first calls alike."""
    step, _ = build(level, size, impl)
    timing = harness.timed(step, reps=1, time_budget=float("inf"), warmup=0)
    return {"train_mb": round(timing.extra_mb, 1), "train_s": round(timing.times[0], 2)}


def row(r: dict) -> str:
    keys = r["size"] // 8 if r["level"] == "las" else r["size"]
    what = f"{r['size']} frames" if r["level"] == "las" else f"{r['size']} keys"
    if r["status"] != "ok":
        return harness.table_row(
            [r["level"], what, keys, r["impl"], f"{r['status']}: {r['note']}", ""]
        )
    return harness.table_row(
        [r["level"], what, keys, r["impl"], f"{r['train_mb']:.0f}", f"{r['train_s']:.1f}"]
    )


HEADER = harness.table_header(
    ["level", "input", "keys attended", "attention", "train extra MiB", "train s"]
)


def main(argv=None) -> int:
    p = harness.parser(
        __doc__.split("\n\n")[0], time_budget=60.0, json_path="results/las_memory.json"
    )
    args = p.parse_args(argv)
    print(f"batch {BATCH}, {STEPS} output steps, location-aware attention; {harness.machine()}")
    print(HEADER)
    results = []
    for level, size in CASES:
        for impl in IMPLS:
            if args.match is not None and args.match not in f"{level} {size} {impl}":
                continue
            case = {"level": level, "size": size, "impl": impl}
            results.append(
                {
                    **case,
                    **harness.run(
                        measure, case, time_budget=args.time_budget, threads=args.threads
                    ),
                }
            )
            print(row(results[-1]), flush=True)
    if args.json:
        harness.write_json(args.json, results, batch=BATCH, steps=STEPS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
