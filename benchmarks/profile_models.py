"""Where one training step of each attnkit model spends its time: torch.profiler's top ops.

Each model of ``models_vs_plain.py`` (Bahdanau, Luong, LAS, CRNN with global attention,
Transformer) at one
shape: one warm-up step, then one profiled step (forward + backward + Adam), in a fresh process
each. Prints one Markdown table per model (self CPU time of the top ops, their share of the
step, call counts and input shapes) for docs/performance.md.

    python -m benchmarks.profile_models --threads 1 [--match las] [--top 12]
"""

from __future__ import annotations

import sys

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks import harness, models_vs_plain

CASES = {  # family -> (implementation, shape)
    "bahdanau": ("attnkit", (32, 400, 100)),
    "luong": ("attnkit", (32, 400, 100)),
    "las": ("attnkit", (16, 800, 100)),
    "crnn": ("attnkit-global", (32, 800)),
    "transformer": ("attnkit", (32, 200, 50)),
}


def top_ops(family: str, impl: str, shape: list, top: int) -> dict:
    """In a fresh process: the profiled step's total and its ``top`` ops by self CPU time."""
    model, loss_of = models_vs_plain.build(family, impl, tuple(shape))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        loss_of(model).backward()
        opt.step()

    step()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step()
    events = prof.key_averages(group_by_input_shape=True)
    total = sum(e.self_cpu_time_total for e in events)
    rows = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return {
        "total_s": total / 1e6,
        "threads": torch.get_num_threads(),
        "ops": [
            {
                "name": e.key,
                "self_s": e.self_cpu_time_total / 1e6,
                "share": e.self_cpu_time_total / total,
                "calls": e.count,
                "shapes": str(e.input_shapes)[:60],
            }
            for e in rows
        ],
    }


def main(argv=None) -> int:
    p = harness.parser(__doc__.split("\n\n")[0], time_budget=900.0)
    p.add_argument("--top", type=int, default=12, help="ops per model")
    args = p.parse_args(argv)
    names = list(CASES)
    rows = []
    for i in harness.select(names, args.match):
        family = names[i]
        impl, shape = CASES[family]
        out = harness.run(
            top_ops,
            {"family": family, "impl": impl, "shape": list(shape), "top": args.top},
            time_budget=args.time_budget,
            threads=args.threads,
        )
        rows.append({"family": family, "impl": impl, "shape": list(shape), **out})
        print(f"\n### {family} ({impl}, shape {tuple(shape)}): ", end="")
        if out["status"] != "ok":
            print(f"{out['status']}: {out.get('note', '')}")
            continue
        print(f"{out['total_s']:.2f} s of self CPU time, {out['threads']} thread(s)\n")
        print(harness.table_header(["op", "self s", "share", "calls", "input shapes"]))
        for op in out["ops"]:
            print(
                harness.table_row(
                    [
                        f"`{op['name']}`",
                        f"{op['self_s']:.3f}",
                        f"{100 * op['share']:.1f}%",
                        op["calls"],
                        f"`{op['shapes']}`",
                    ]
                )
            )
    if args.json:
        harness.write_json(args.json, rows)
    print(f"\n{harness.machine()}, commit {harness.commit()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
