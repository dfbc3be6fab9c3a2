"""``attnkit bench [NAME] [OPTIONS]``: run ``python -m benchmarks.NAME OPTIONS`` in a source
checkout (NAME defaults to ``attention``, the attention paths' time and memory).

The benchmarks are the ``benchmarks`` package of the repository, not part of the installed
package: this command finds the checkout next to the package's source tree (an editable
install) or in the current directory and runs the script there, in a child process whose
working directory is the checkout's root (relative paths in OPTIONS are taken from there).
Every word after ``bench`` goes to the script: ``attnkit bench NAME --help`` lists its options.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnkit.cli.common import SubParsers

import argparse
import subprocess
import sys
from pathlib import Path

import attnkit

DEFAULT = "attention"
# modules of the package that are not benchmarks
SHARED = {"__init__", "harness", "plain"}


def add_parser(sub: SubParsers) -> None:
    # "+" as the only prefix: no word after `bench` is parsed here, all go to the script
    p = sub.add_parser(
        "bench",
        prefix_chars="+",
        add_help=False,
        help="run a benchmark of a source checkout (default: the attention "
        "paths' time and peak memory); attnkit bench --help lists them",
    )
    p.add_argument("words", nargs=argparse.REMAINDER)
    p.set_defaults(run=run)


def candidates() -> list[Path]:
    """Where the checkout may be: the folder above ``src/`` of this package, then the current
    directory."""
    return [Path(attnkit.__file__).resolve().parents[2], Path.cwd()]


def find_checkout() -> Path | None:
    """The first candidate folder holding the ``benchmarks`` package."""
    return next((d for d in candidates() if (d / "benchmarks" / "__init__.py").is_file()), None)


def names(root: Path) -> list[str]:
    """The benchmarks of the checkout at ``root``."""
    return sorted(f.stem for f in (root / "benchmarks").glob("*.py") if f.stem not in SHARED)


def usage(root: Path | None) -> str:
    """``attnkit bench --help``: what it does and the benchmarks it finds."""
    what = __doc__.split("\n\n")[0]
    found = (
        f"Benchmarks in {root}: {', '.join(names(root))}."
        if root is not None
        else f"No source checkout found ({_looked()})."
    )
    return (
        f"usage: attnkit bench [NAME] [OPTIONS]\n\n{what}\n\n{found}\n"
        "`attnkit bench NAME --help` prints the options of NAME.\n"
    )


def _looked() -> str:
    return f"looked in {', '.join(str(d) for d in candidates())}"


def run(args: argparse.Namespace) -> int:
    words = list(args.words)
    root = find_checkout()
    if words[:1] in (["-h"], ["--help"]):
        print(usage(root), end="")
        return 0
    name = words.pop(0) if words and not words[0].startswith("-") else DEFAULT
    if root is None:
        print(
            f"attnkit bench: the benchmarks package was not found ({_looked()}); run it "
            "from a source checkout of attnkit",
            file=sys.stderr,
        )
        return 2
    if name not in names(root):
        print(
            f"attnkit bench: no benchmark {name!r} in {root / 'benchmarks'} (there are: "
            f"{', '.join(names(root))})",
            file=sys.stderr,
        )
        return 2
    return subprocess.run([sys.executable, "-m", f"benchmarks.{name}", *words], cwd=root).returncode
