"""Building and loading the C++ additive-attention kernels (``csrc/``), once per machine.

Two kernels share one library and one tanh (``csrc/tanh.h``):

* ``step.cpp``: the decoder step (one query over ``Tk`` keys), a small call made hundreds of
  times per sequence, so what it costs besides its arithmetic matters as much as the arithmetic;
* ``blocks.cpp``: the chunked path's blocks of queries and keys, scores and a one-pass backward.

They are plain C++ with OpenMP and no PyTorch headers: the machine's C++ compiler builds them
in about two seconds with ``-O3 -march=native``, the shared library is cached (keyed by the
sources, the flags, the compiler and the CPU), and a call goes straight from Python to the
kernel through ctypes (:mod:`attnkit.ops.bindings`: the signatures and a checked wrapper
per kernel), with nothing of ``torch.compile``'s guards and wrappers in between.
OpenMP comes from the runtime PyTorch has loaded already (same library name), so the two share
one thread pool.

Loading a library runs its code, so the cache is trusted only when no one else can write to it:
the cache directory and its files must belong to the user running attnkit and must not be
writable by group or others (the directory is created with mode 0700), and the SHA-256 of the
library, recorded next to it at build time (``kernels-<key>.so.sha256``), must match before it
is loaded. A cache that fails the first check is refused: :func:`status` says why (a warning is
logged) and attention runs without the kernels. A library that fails the second (damaged, or
cached by an attnkit that recorded no hash) is built again.

If there is no compiler or the build fails, :func:`status` says why and attention runs in
plain PyTorch (or ``torch.compile``'s kernels). ``ATTNKIT_COMPILE=0`` turns the kernels off (as
it does the compiled additive kernels); ``CXX`` picks the compiler; ``ATTNKIT_CACHE_DIR`` the
cache directory (default ``$XDG_CACHE_HOME/attnkit`` or ``~/.cache/attnkit``).

``ATTNKIT_NATIVE_ARCH`` builds the kernels as another CPU would: ``native`` (the default: this
CPU's vectors and FMA), or one of the x86-64 levels of :data:`ARCH_LEVELS`: ``x86-64`` (SSE2,
no FMA, so no contraction), ``x86-64-v2``, ``x86-64-v3`` (AVX2 and FMA) and ``x86-64-v4``
(AVX-512). A level this CPU cannot run is refused with the features it lacks, and attention runs
without the kernels. ``make test`` runs the kernels' tests once more built for ``x86-64``, so
the results are checked for a build unlike this machine's own on every run.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

__all__ = ["ARCH_LEVELS", "SOURCES", "arch", "available", "library", "status"]

log = logging.getLogger("attnkit")

_CSRC = Path(__file__).with_name("csrc")
SOURCES = (_CSRC / "step.cpp", _CSRC / "blocks.cpp")
_HEADERS = (_CSRC / "tanh.h",)

_COMMON = (
    "-std=c++17",
    "-shared",
    "-fPIC",
    "-O3",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-ffp-contract=fast",
)


# The x86-64 micro-architecture levels (the psABI's), each with the /proc/cpuinfo flags a CPU
# needs to run code built for it: those of the level below and its own.
_V2 = ("cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3")
_V3 = (*_V2, "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave")
_V4 = (*_V3, "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")
ARCH_LEVELS = {"x86-64": (), "x86-64-v2": _V2, "x86-64-v3": _V3, "x86-64-v4": _V4}


def arch() -> str:
    """What the kernels are built for: ``ATTNKIT_NATIVE_ARCH`` (default ``native``).

    Raises:
        ValueError: a value that is neither ``native`` nor a level of :data:`ARCH_LEVELS`.
    """
    value = os.environ.get("ATTNKIT_NATIVE_ARCH", "native")
    if value != "native" and value not in ARCH_LEVELS:
        raise ValueError(
            f"ATTNKIT_NATIVE_ARCH: expected native or one of "
            f"{', '.join(ARCH_LEVELS)}, got {value!r}"
        )
    return value


def _flag_sets(cpu: str, target: str = "native") -> list[tuple[str, ...]]:
    """Flags tried in turn, each dropping what a compiler may not know. With AVX-512, 512-bit
    vectors are asked for first: gcc's tuning keeps 256-bit ones on most such CPUs, and
    Inductor's code for them is 512-bit. (Untimed on AVX-512 hardware.) A named level
    (``target``) is built for that level or not at all."""
    if target != "native":
        march = f"-march={target}"
        return [(march, "-mtune=generic", "-fopenmp"), (march, "-mtune=generic")]
    sets = [("-march=native", "-fopenmp"), ("-fopenmp",), ()]
    if "avx512f" in cpu.split():
        sets.insert(0, ("-march=native", "-mprefer-vector-width=512", "-fopenmp"))
    return sets


def _check_level(target: str, cpu: str) -> None:
    """Refuse a level whose instructions this CPU lacks (its code would die of SIGILL)."""
    if target == "native":
        return
    if platform.machine() not in ("x86_64", "AMD64"):
        raise _Unavailable(
            f"ATTNKIT_NATIVE_ARCH={target}: an x86-64 level, but this machine "
            f"is {platform.machine()}"
        )
    flags = set(cpu.split())
    missing = [f for f in ARCH_LEVELS[target] if f not in flags]
    if missing:
        raise _Unavailable(f"ATTNKIT_NATIVE_ARCH={target}: this CPU lacks {', '.join(missing)}")


class _Native:
    def __init__(self) -> None:
        self.lib: ctypes.CDLL | None = None
        self.failure: str | None = None
        self.tried = False
        self._lock = threading.Lock()

    def load(self) -> ctypes.CDLL | None:
        if not self.tried:
            with self._lock:  # threads asking at once: one build
                if not self.tried:
                    self._try()
        return self.lib

    def _try(self) -> None:
        try:
            self.lib = _load()
        except Exception as exc:  # whatever goes wrong, attention still runs, in plain PyTorch
            self.failure = (
                str(exc) if isinstance(exc, _Unavailable) else f"{type(exc).__name__}: {exc}"
            )[:1000]
            disabled = os.environ.get("ATTNKIT_COMPILE", "1") == "0"
            log.log(
                logging.INFO if disabled else logging.WARNING,
                "attnkit: C++ additive "
                "kernels unavailable, additive attention runs without them (%s)",
                self.failure,
            )
        self.tried = True


class _Unavailable(Exception):
    pass


class _Damaged(_Unavailable):
    """A cached library that is not what was built: built again."""


class _Refused(_Unavailable):
    """A cache that others could have written to: nothing in it is loaded or built."""


_NATIVE = _Native()


def library() -> ctypes.CDLL | None:
    """The loaded kernel library (built on first use), or None if it cannot be had."""
    return _NATIVE.load()


def available() -> bool:
    """Whether the C++ kernels can run (builds them on the first call)."""
    return _NATIVE.load() is not None


def status() -> str:
    """``"available"`` or why the C++ kernels are not used (builds them on the first call)."""
    if available():
        return "available"
    return _NATIVE.failure or "unknown failure"  # a load that returned None sets failure


def _compiler() -> str:
    if os.environ.get("ATTNKIT_COMPILE", "1") == "0":
        raise _Unavailable("disabled by ATTNKIT_COMPILE=0")
    name = os.environ.get("CXX")
    found = (
        shutil.which(name)
        if name
        else (shutil.which("c++") or shutil.which("g++") or shutil.which("clang++"))
    )
    if found is None:
        tried = f"CXX={name}" if name else "c++, g++, clang++"
        raise _Unavailable(f"no C++ compiler found ({tried} not on PATH)")
    return found


def _cache_dir() -> Path:
    if os.environ.get("ATTNKIT_CACHE_DIR"):
        return Path(os.environ["ATTNKIT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "attnkit"


def _cpu() -> str:
    """What -march=native compiles for: the CPU's model and feature flags."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags", "Features"))]
        return "".join(sorted(set(lines)))
    except OSError:
        return platform.processor() or platform.machine()


def _load() -> ctypes.CDLL:
    cxx = _compiler()
    try:
        target = arch()
    except ValueError as exc:
        raise _Unavailable(str(exc)) from exc
    try:
        version = subprocess.run(
            [cxx, "--version"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise _Unavailable(f"{cxx} --version failed: {exc}") from exc
    source, cpu = b"\0".join(f.read_bytes() for f in SOURCES + _HEADERS), _cpu()
    _check_level(target, cpu)
    cache = _private_cache_dir()
    errors = []
    for flags in _flag_sets(cpu, target):
        key = hashlib.sha256(
            b"\0".join(
                [
                    source,
                    " ".join(flags + _COMMON).encode(),
                    cxx.encode(),
                    version.encode(),
                    cpu.encode(),
                ]
            )
        )
        path = cache / f"kernels-{key.hexdigest()[:16]}.so"
        try:
            lib = _open(cxx, flags, path)
        except _Refused:
            raise
        except _Unavailable as exc:
            errors.append(str(exc))
            continue
        return lib
    raise _Unavailable("; ".join(errors))


def _private_cache_dir() -> Path:
    """The cache directory, created private (0700) if missing; refused unless it is private."""
    cache = _cache_dir()
    try:
        cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise _Unavailable(f"cache directory {cache} cannot be created: {exc}") from exc
    _check_private(cache, "cache directory")
    return cache


def _check_private(path: Path, what: str) -> None:
    """Refuse ``path`` unless this user owns it and neither group nor others may write to it."""
    st = path.stat()
    if st.st_uid != os.getuid():
        raise _Refused(
            f"{what} {path} belongs to uid {st.st_uid}, not to this user (uid "
            f"{os.getuid()}): refusing to load compiled code from it; set "
            "ATTNKIT_CACHE_DIR to a directory of your own"
        )
    if st.st_mode & 0o022:
        raise _Refused(
            f"{what} {path} is writable by group or others (mode "
            f"{st.st_mode & 0o777:o}): refusing to load compiled code from it; "
            f"`chmod go-w {path}` or set ATTNKIT_CACHE_DIR"
        )


def _digest_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _verified(path: Path) -> ctypes.CDLL:
    """The library at ``path``, loaded once its SHA-256 matches the one recorded at build time.
    (The directory is private, checked first: no one else can replace the file between the
    check and the load.)

    Raises:
        _Refused: the file or its recorded hash is not private to this user.
        _Damaged: no hash recorded, a different hash, or a library that does not load.
    """
    digest = _digest_path(path)
    _check_private(path, "cached library")
    if not digest.exists():
        raise _Damaged(f"no content hash recorded for {path}")
    _check_private(digest, "recorded hash")
    recorded = digest.read_text().strip()
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    if actual != recorded:
        raise _Damaged(
            f"the content hash of {path} ({actual[:16]}...) is not the one recorded "
            f"at build time ({recorded[:16]}...)"
        )
    try:
        return ctypes.CDLL(str(path))
    except OSError as exc:
        raise _Damaged(f"loading {path} failed: {exc}") from exc


def _open(cxx: str, flags: tuple[str, ...], path: Path) -> ctypes.CDLL:
    """The library at ``path``, built first if missing; a cached file that is damaged (another
    hash than recorded, or one that does not load) is built again once."""
    if path.exists():
        try:
            return _verified(path)
        except _Damaged as exc:
            log.warning("attnkit: rebuilding the C++ kernels: %s", exc)
    _build(cxx, flags, path)
    return _verified(path)


def _build(cxx: str, flags: tuple[str, ...], path: Path) -> None:
    """Compile into a temporary file next to ``path``, then move it there (atomic: processes
    building at once, e.g. under torchrun, never load a half-written library)."""
    try:
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
        os.close(fd)
        fd, tmp_digest = tempfile.mkstemp(suffix=".sha256", dir=path.parent)
        os.close(fd)
    except OSError as exc:
        raise _Unavailable(f"cache directory {path.parent} is not writable: {exc}") from exc
    cmd = [cxx, *flags, *_COMMON, *map(str, SOURCES), "-o", tmp]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise _Unavailable(f"`{' '.join(cmd)}` failed: {done.stderr.strip()[-400:]}")
        with open(tmp, "rb") as f:  # on disk before it is renamed: never a truncated library
            digest = hashlib.sha256(f.read()).hexdigest()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o700)  # the linker's mode follows the umask: private, like the hash
        with open(tmp_digest, "w") as f:
            f.write(digest + "\n")
            f.flush()
            os.fsync(f.fileno())
        # The hash first: a process between the two renames finds no library, or one whose
        # hash it can check.
        os.replace(tmp_digest, _digest_path(path))
        os.replace(tmp, path)
    except (OSError, subprocess.SubprocessError) as exc:
        raise _Unavailable(f"`{' '.join(cmd)}` failed: {exc}") from exc
    finally:
        for name in (tmp, tmp_digest):
            if os.path.exists(name):
                os.unlink(name)
    log.info("attnkit: built the C++ additive kernels (%s): %s", " ".join(flags), path)
