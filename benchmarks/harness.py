"""The benchmark harness: each case in a fresh process, its time and peak memory, the machine.

Every script of the :mod:`benchmarks` package measures through this module.

* :func:`run` calls a module-level function of a benchmark script in a fresh Python process
  (``python -m benchmarks.harness MODULE FUNCTION KWARGS-JSON``), so that memory is measured
  from a clean process, and returns the dict that function returns with ``status: "ok"``, or a
  row saying why not: ``skipped`` (its estimated memory would not fit in the free memory),
  ``timeout`` (still running after the time budget: the process is stopped) or ``error`` (the
  last line of its stderr).
* Inside that process, :func:`timed` runs a step after its warm-up (first-call allocations,
  kernel compilation) and returns the times of the measured runs and their *extra memory*: a
  thread samples the resident set size (RSS) every millisecond (:class:`PeakRSS`), and the peak
  minus the RSS just before is reported. Before the measured runs, glibc is asked to return
  freed memory to the system (:func:`trim`): it keeps blocks freed during the warm-up in its
  heap, which would otherwise stay resident and hide the measured runs' peak. Allocation itself
  is left as it is, so timings are those of an ordinary process. On a CUDA device
  (``timed(..., device=...)``) each run ends with ``torch.cuda.synchronize`` (kernels run
  asynchronously: the clock must wait for them) and the extra memory is the peak of CUDA's
  allocator (``torch.cuda.max_memory_allocated``) above what was allocated before the runs.
  ``timed(..., memory=False)`` measures time alone, with any clock (``clock=``).
* :func:`machine`, :func:`commit` and :func:`command` say what measured a row
  (:func:`run_info`: all of them); :func:`write_json` writes rows with them, as a file of
  ``results/`` holds them (:func:`save_run`: a file of several runs gets one more);
  :func:`table_header` / :func:`table_row` print Markdown tables; :func:`write_markdown`
  rewrites a report and keeps the hand-written notes below :data:`NOTES_MARK`.

A script's ``--time-budget`` is the time budget of one case (one process). Its measured loop
stops repeating early enough to leave room for building and warm-up (:func:`timed` is given a
fraction of the budget).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import attnkit
from attnkit.train import resolve_device

# Text below this line in a Markdown report is written by hand and kept when it is rewritten.
NOTES_MARK = "<!-- notes: hand-written below; kept when the report is regenerated -->"


# --------------------------------------------------------------------------- in the fresh process


def rss() -> int:
    """This process's resident set size, bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRSS:
    """Samples RSS every millisecond in a thread; ``peak - start`` is the extra memory."""

    def __enter__(self):
        self.start = self.peak = rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss())
            time.sleep(0.001)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss())

    @property
    def extra_mb(self) -> float:
        return (self.peak - self.start) / 2**20


def trim() -> None:
    """Return memory freed so far to the system (glibc only; a no-op elsewhere)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


@dataclass
class Timing:
    """Seconds of each measured run and the peak extra memory (MiB) during them: resident
    memory (``memory="rss"``) or, on a GPU, CUDA's allocator (``memory="cuda"``); None with
    ``memory="none"`` (not measured)."""

    times: list[float]
    extra_mb: float | None
    memory: str = "rss"

    @property
    def median(self) -> float:
        return statistics.median(self.times)


class PeakCUDA:
    """The peak of CUDA's allocator on ``device`` above what was allocated on entering."""

    def __init__(self, device: torch.device):
        self.device = device

    def __enter__(self):
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.start = torch.cuda.memory_allocated(self.device)
        return self

    def __exit__(self, *exc):
        torch.cuda.synchronize(self.device)
        self.peak = torch.cuda.max_memory_allocated(self.device)

    @property
    def extra_mb(self) -> float:
        return (self.peak - self.start) / 2**20


def timed(
    step,
    *,
    reps: int,
    time_budget: float,
    warmup: int = 1,
    device: torch.device | str = "cpu",
    memory: bool = True,
    clock=time.perf_counter,
) -> Timing:
    """Run ``step()`` ``warmup`` times, then up to ``reps`` times under :class:`PeakRSS` (on a
    CUDA ``device``: :class:`PeakCUDA`, each run timed to its kernels' end), stopping after the
    run that ends past ``time_budget`` seconds of wall clock (at least one run).

    ``memory=False`` measures no memory (no sampling thread: for steps of microseconds, and
    for CPU time, which would count the sampler's); ``clock`` times each run, e.g.
    ``time.process_time`` for the CPU time of the whole process."""
    device = torch.device(device)
    cuda = device.type == "cuda"

    def run():
        step()
        if cuda:
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        run()
    trim()
    times = []
    kind = ("cuda" if cuda else "rss") if memory else "none"
    sampler = (PeakCUDA(device) if cuda else PeakRSS()) if memory else contextlib.nullcontext()
    with sampler as mem:
        start = time.perf_counter()
        for _ in range(reps):
            t0 = clock()
            run()
            times.append(clock() - t0)
            if time.perf_counter() - start > time_budget:
                break
    return Timing(times, mem.extra_mb if memory else None, kind)


# --------------------------------------------------------------------------- the parent process


def available_bytes() -> int:
    """MemAvailable of /proc/meminfo (0 where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run(
    fn,
    kwargs: dict,
    *,
    time_budget: float | None,
    need_bytes: int = 0,
    env: dict | None = None,
    threads: int | None = None,
) -> dict:
    """``fn(**kwargs)`` in a fresh process; its dict with ``status: "ok"``, or a failure row.

    Args:
        fn: a module-level function of an importable module (a benchmark script run with
            ``python -m benchmarks.NAME`` counts as ``benchmarks.NAME``), returning a
            JSON-serialisable dict.
        kwargs: its keyword arguments (JSON-serialisable).
        time_budget: seconds before the process is stopped (None: no limit).
        need_bytes: estimated peak memory; the case is skipped when it exceeds 80% of the
            free memory.
        env: variables added to the process's environment.
        threads: ``torch.set_num_threads`` in the process (None: torch's default).

    Returns:
        The function's dict with ``status`` "ok", or ``{"status": "skipped" | "timeout" |
        "error", "note": why}``.
    """
    if fn.__qualname__ != fn.__name__:
        raise ValueError(f"fn: expected a module-level function, got {fn.__qualname__!r}")
    module, root = _importable(fn)
    free = available_bytes()
    if need_bytes > 0.8 * free:
        return {
            "status": "skipped",
            "note": f"needs ~{need_bytes / 2**30:.0f} GiB, {free / 2**30:.0f} GiB free",
        }
    cmd = [sys.executable, "-m", __name__, module, fn.__name__, json.dumps(kwargs)]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    # the child imports the module by name: the folder holding its package goes first on the
    # child's PYTHONPATH (what is already there, e.g. another checkout's src, stays after it)
    pythonpath = os.pathsep.join(x for x in (root, os.environ.get("PYTHONPATH")) if x)
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=time_budget,
            env={**os.environ, "PYTHONPATH": pythonpath, **(env or {})},
        )
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "note": f"over the {time_budget:.0f} s budget"}
    if proc.returncode != 0:
        return {"status": "error", "note": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return {"status": "ok", **json.loads(proc.stdout.strip().splitlines()[-1])}


def _importable(fn) -> tuple[str, str]:
    """The name under which ``fn``'s module imports, and the folder its top package is in."""
    name = fn.__module__
    if name == "__main__":
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        if spec is None:
            raise ValueError(
                f"{fn.__name__}: its script was run as a file; run it as a module "
                "(python -m benchmarks.NAME from the repository root)"
            )
        name = spec.name
    top = importlib.import_module(name.partition(".")[0])
    where = Path(top.__file__).resolve()
    return name, str(where.parent.parent if where.name == "__init__.py" else where.parent)


def _worker(argv: list[str]) -> int:
    """The fresh process of :func:`run`: import the module, call the function, print JSON."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.harness")
    p.add_argument("module", help="e.g. benchmarks.attention")
    p.add_argument("function")
    p.add_argument("kwargs", help="the keyword arguments as JSON")
    p.add_argument("--threads", type=int)
    args = p.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    module = importlib.import_module(args.module)
    row = getattr(module, args.function)(**json.loads(args.kwargs))
    print(json.dumps(row))
    return 0


def select(names: list[str], match: str | None) -> list[int]:
    """Indices of the names containing ``match`` (all when it is None)."""
    return [i for i, name in enumerate(names) if match is None or match in name]


def device_arg(text: str) -> str:
    """``--device``: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` as the device it names on this
    machine (:func:`attnkit.train.resolve_device`: a GPU it lacks is refused in one line)."""
    try:
        return str(resolve_device(text))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("device: ")) from None


def add_device_arg(p: argparse.ArgumentParser) -> None:
    """``--device`` (default cpu), see :func:`device_arg`."""
    p.add_argument(
        "--device",
        type=device_arg,
        default="cpu",
        help="cpu (default), cuda, cuda:N or auto: where the cases run",
    )


def parser(
    description: str,
    *,
    time_budget: float,
    json_path: str | None = None,
    reps: int | None = None,
    device: bool = False,
    time_budget_help: str = "seconds per case; its process is stopped after",
) -> argparse.ArgumentParser:
    """A script's argument parser with the options every benchmark shares: ``--time-budget``
    (seconds per case), ``--json``, ``--match`` (rows whose name contains it), ``--threads``,
    with a default given ``--reps``, and with ``device`` the ``--device`` of
    :func:`add_device_arg`."""
    p = argparse.ArgumentParser(prog=shlex.join(["python", *program()]), description=description)
    p.add_argument(
        "--time-budget",
        type=float,
        default=time_budget,
        help=f"{time_budget_help} (default {time_budget:g})",
    )
    p.add_argument(
        "--json",
        type=Path,
        default=json_path,
        help=f"write the rows here (default {json_path or 'none'})",
    )
    p.add_argument("--match", help="only the rows whose name contains this")
    p.add_argument("--threads", type=int, help="torch threads per case (default: torch's)")
    if reps is not None:
        p.add_argument(
            "--reps",
            type=int,
            default=reps,
            help=f"measured repetitions, median reported (default {reps})",
        )
    if device:
        add_device_arg(p)
    return p


# --------------------------------------------------------------------------- what measured it


def machine(device: torch.device | str = "cpu") -> str:
    """CPU model (with its family and widest vector unit: one model name covers several
    generations), cores, torch version and threads, Python version; and the GPU of a CUDA
    ``device`` (its name, memory and CUDA version)."""
    cpu, family, flags = platform.processor() or "?", "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = (part.strip() for part in line.partition(":"))
                if key == "model name":
                    cpu = value
                elif key == "cpu family":
                    family = f"family {value}"
                elif key == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    vector = next(
        (v for v, flag in (("AVX-512", "avx512f"), ("AVX2", "avx2")) if flag in flags), ""
    )
    details = ", ".join(x for x in (family, vector) if x)
    if details:
        cpu += f" ({details})"
    text = (
        f"{cpu}; {os.cpu_count()} cores, torch {torch.__version__} with "
        f"{torch.get_num_threads()} threads, Python {platform.python_version()}"
    )
    device = torch.device(device)
    if device.type == "cuda":
        gpu = torch.cuda.get_device_properties(device)
        text += (
            f"; GPU {device}: {gpu.name}, {gpu.total_memory / 2**30:.0f} GiB, "
            f"CUDA {torch.version.cuda}"
        )
    return text


def commit() -> str:
    """The checkout's git commit, + "-dirty" with uncommitted changes to attnkit or the
    benchmarks ("" outside a git checkout)."""
    here = Path(__file__).resolve().parent
    code = [str(Path(attnkit.__file__).resolve().parent), str(here)]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=here,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", *code],
            cwd=here,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head + ("-dirty" if dirty else "")


def program() -> list[str]:
    """How this process was started, after ``python``: ``["-m", "benchmarks.NAME"]`` for a
    script run as a module, else the script's path."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    return ["-m", spec.name] if spec is not None else sys.argv[:1]


def command() -> str:
    """This process's command line, as a user would type it."""
    return shlex.join(["python", *program(), *sys.argv[1:]])


# --------------------------------------------------------------------------- reports


def table_header(columns: list[str]) -> str:
    """The first two lines of a Markdown table."""
    return "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns)


def table_row(cells: list) -> str:
    """One Markdown table row (empty cells as ``| |``)."""
    return "|" + "".join(f" {c} |" if c != "" else " |" for c in cells)


def run_info(device: torch.device | str = "cpu") -> dict:
    """What measured a run: ``{"machine", "commit", "date", "command", "device"}`` (the
    machine with the GPU of a CUDA ``device``)."""
    return {
        "machine": machine(device),
        "commit": commit(),
        "date": time.strftime("%Y-%m-%d"),
        "command": command(),
        "device": str(device),
    }


def save_run(path: Path, run: dict, *, add: bool = False) -> None:
    """Write ``run`` as JSON at ``path``. A file there that holds several runs
    (``{"runs": [...]}``: the same experiment at several commits) gets ``run`` as its last
    one, and so does a new file with ``add``; any other file there is replaced."""
    path = Path(path)
    old = json.loads(path.read_text()) if path.exists() else None
    runs = old.get("runs") if isinstance(old, dict) else None
    if runs is None and add:
        runs = []
    data = run if runs is None else {"runs": [*runs, run]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def write_json(path: Path, rows: list[dict], *, device: str = "cpu", **settings) -> None:
    """``{"machine", "commit", "date", "command", "device", **settings, "rows"}`` as JSON at
    ``path`` (:func:`run_info`; added to the runs already there, see :func:`save_run`)."""
    save_run(path, {**run_info(device), **settings, "rows": rows})


def write_markdown(path: Path, lines: list[str]) -> None:
    """Write ``lines`` then :data:`NOTES_MARK` and the notes below it in the file already
    at ``path`` (none when there is no file or no mark)."""
    path = Path(path)
    notes = ""
    if path.exists() and NOTES_MARK in path.read_text():
        notes = path.read_text().split(NOTES_MARK, 1)[1]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([*lines, NOTES_MARK + notes.rstrip("\n"), ""]))


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1:]))
