"""``attnkit bench``: the attention benchmarks of a source checkout (``benchmarks/attention.py``).

The benchmarks are scripts in the repository's ``benchmarks/`` folder, not part of the
installed package; this command finds that folder next to the package's source tree (an
editable install) or in the current directory, and runs ``benchmarks/attention.py`` with the
options below (which the script also takes when run directly).
"""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import sys
from pathlib import Path

import attnkit

SCRIPT = "attention.py"


def add_options(p: argparse.ArgumentParser) -> None:
    """The options of the attention benchmarks (``attnkit bench`` and the script alike)."""
    p.add_argument("--quick", action="store_true", help="small cases only (a few minutes)")
    p.add_argument("--group", action="append", help="only these groups (self, mha, additive, "
                   "local, decoder); repeatable; their rows replace those already in --json")
    p.add_argument("--targets", action="store_true",
                   help="only the cases behind the long-sequence targets of docs/benchmarks.md "
                   "(no slow baselines)")
    p.add_argument("--match", help="only the cases whose name contains this")
    p.add_argument("--reps", type=int, default=3, help="measured repetitions (median)")
    p.add_argument("--time-budget", type=float, default=600.0,
                   help="seconds per case; its process is stopped after (default 600)")
    p.add_argument("--json", help="rows as JSON (default docs/benchmarks.json; with --targets, "
                   "--match or a GPU --device, written only where given, never merged into "
                   "the report)")
    p.add_argument("--markdown", help="the report (default docs/benchmarks.md; not written "
                   "with --targets, --match or a --device other than cpu)")
    p.add_argument("--device", default="cpu",
                   help="cpu (default), cuda, cuda:N or auto: where the cases run; on a GPU "
                   "each step is timed to its kernels' end and memory is CUDA's allocator "
                   "peak, and the rows go to --json only")


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="benchmark attention paths (time and peak memory; "
                       "needs a source checkout)")
    add_options(p)
    p.set_defaults(run=run)


def candidates() -> list[Path]:
    """Where ``benchmarks/`` may be: next to ``src/`` of this package, then the current
    directory."""
    return [Path(attnkit.__file__).resolve().parents[2] / "benchmarks", Path.cwd() / "benchmarks"]


def find_script() -> Path | None:
    """``benchmarks/attention.py`` of the first candidate folder that has it."""
    return next((d / SCRIPT for d in candidates() if (d / SCRIPT).is_file()), None)


def run(args: argparse.Namespace) -> int:
    script = find_script()
    if script is None:
        print(f"attnkit bench: benchmarks/{SCRIPT} not found (looked in "
              f"{', '.join(str(d) for d in candidates())}); run it from a source checkout of "
              "attnkit", file=sys.stderr)
        return 2
    sys.path.insert(0, str(script.parent))  # the script imports its neighbour harness.py
    spec = importlib.util.spec_from_file_location("attention_benchmarks", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    args.invocation = shlex.join(["attnkit", *sys.argv[1:]])
    return module.main(args)
