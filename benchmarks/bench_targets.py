"""The cases behind issue 3's figures, without the slow baselines: a quicker check of the targets
on another machine than a full ``attnkit bench`` (which runs for hours on a slow CPU).

Each case runs in a fresh process as in ``attnkit bench``; the rows and the figures are printed
and written as JSON (with the machine) -- not merged into ``docs/benchmarks.json``.

    python benchmarks/bench_targets.py --json docs/benchmarks_targets_amd.json
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from attnkit.bench import HEADER, figures, machine, run_suite, suite

# (group, name fragment, implementations)
TARGETS = [
    ("self", "B=32 T=800 ", ("loop", "auto")),
    ("mha", "T=2048 ", ("auto", "sdpa")),
    ("additive", "B=8 T=800 ", ("naive", "auto")),
    ("additive", "B=8 T=256 ", ("auto",)),
    ("additive", "B=8 T=2048 ", ("auto",)),
    ("additive", "B=1 T=16384 ", ("auto",)),
    ("local", "T=4096 ", ("auto",)),
    ("local", "T=65536 ", ("auto",)),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--budget-s", type=float, default=600.0, help="time limit per case")
    p.add_argument("--json", help="write the rows and the machine here")
    p.add_argument("--match", help="only the cases whose name contains this")
    args = p.parse_args()
    cases = [c for c in suite(False) for group, name, impls in TARGETS
             if c.group == group and name in c.name + " " and c.impl in impls
             and (args.match is None or args.match in c.name)]
    print(HEADER)
    results = run_suite(cases, args.reps, args.budget_s, log=lambda s: print(s, flush=True))
    print("\n".join(figures(results)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine(), "rows": [asdict(r) for r in results]}, f, indent=1)


if __name__ == "__main__":
    main()
