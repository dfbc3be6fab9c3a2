"""Replay the run-folder, export, checkpoint and data-file cases of docs/reliability.md end to
end, with the command line, in a fresh temporary folder, and print a table of what each did.

    python -m benchmarks.reliability_replay            # a minute or two on 2 CPU cores

Every case runs ``attnkit`` as a user would (in this process, through ``attnkit.cli.main``;
the hang-up and the FIFOs each in a process of its own, the first sent SIGHUP, the others
given 120 s), on built-in data with a tiny translator (hidden size 8, two steps), and for the
data files with the shipped speech and line models. A full
disk and a read-only mount are simulated (the write that would fail raises what it raises
there: ENOSPC, EROFS); everything else is real. A case passes when the command ends as the
table's "expected" column says, with at most a one-line error and no traceback, and nothing
of the user's was lost. Exit status 1 if any case fails.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import json
import logging
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

TINY = [
    "--n-train",
    "64",
    "--n-valid",
    "16",
    "--steps",
    "2",
    "--eval-every",
    "2",
    "--batch-size",
    "8",
    "--hidden",
    "8",
    "--emb",
    "8",
    "--no-progress",
    "--plot",
    "0",
]


def attnkit(*argv) -> tuple[int | None, str]:
    """Run ``attnkit ARGV`` in this process: its exit status and what it wrote on stderr
    (status None and the exception's line when it ended in a traceback)."""
    from attnkit.cli.main import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            return main([str(a) for a in argv]), err.getvalue()
        except Exception as exc:  # what a user would see as a traceback
            return None, f"traceback: {type(exc).__name__}: {exc}"


@contextlib.contextmanager
def patched(owner, name: str, value) -> Iterator[None]:
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def one_line(status: int | None, err: str, code: int = 2) -> bool:
    return status == code and err.count("\n") == 1 and "Traceback" not in err


def train(out: Path, *extra) -> tuple[int | None, str]:
    return attnkit("train", "translate", "--out", out, *TINY, *extra)


# ------------------------------------------------------------------------------ the cases
# Each takes a fresh folder holding `run` (a copy of a tiny translator's run folder) and
# returns (outcome in words, passed).


def export_into_a_users_folder(tmp: Path):
    (tmp / "d").mkdir()
    (tmp / "d" / "thesis.txt").write_text("x")
    status, err = attnkit(
        "export",
        "--format",
        "checkpoint",
        "--checkpoint",
        tmp / "run" / "checkpoint",
        "--out",
        tmp / "d",
    )
    kept = (tmp / "d" / "thesis.txt").exists()
    return f"exit {status}, thesis.txt {'kept' if kept else 'GONE'}: {err}", one_line(
        status, err
    ) and kept


def export_over_the_checkpoint_read(tmp: Path):
    ck = tmp / "run" / "checkpoint"
    status, err = attnkit("export", "--format", "checkpoint", "--checkpoint", ck, "--out", ck)
    resumed, _ = train(tmp / "run", "--steps", "3", "--resume")
    return f"exit {status}: {err}; --resume then: exit {resumed}", one_line(
        status, err
    ) and resumed == 0


def users_checkpoint_named_folder(tmp: Path):
    backup = tmp / "run" / ".checkpoint.backup"
    backup.mkdir()
    (backup / "notes.txt").write_text("mine")
    refused, _ = train(tmp / "run")  # no --resume: refused
    resumed, _ = train(tmp / "run", "--steps", "3", "--resume")
    kept = (backup / "notes.txt").exists()
    return (
        f"refused run exit {refused}, --resume exit {resumed}, .checkpoint.backup "
        f"{'kept' if kept else 'DELETED'}",
        refused == 2 and resumed == 0 and kept,
    )


def re_export_onto_a_full_disk(tmp: Path):
    from attnkit.export import writer

    out = tmp / "d"
    first, _ = attnkit("export", "--checkpoint", tmp / "run" / "checkpoint", "--out", out)
    before = files(out)
    real = writer.export_graph

    def full(module, args, path, *rest, **kwargs):  # the graph cut short by ENOSPC
        real(module, args, path, *rest, **kwargs)
        Path(path).write_bytes(Path(path).read_bytes()[:100])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with patched(writer, "export_graph", full):
        status, err = attnkit(
            "export", "--checkpoint", tmp / "run" / "checkpoint", "--out", out, "--beam", "2"
        )
    whole = files(out) == before
    return (
        f"exit {status}, earlier export {'whole' if whole else 'DAMAGED'}: {err}",
        first == 0 and one_line(status, err) and whole,
    )


def nan_in_the_optimizer_state(tmp: Path):
    from safetensors.torch import load_file, save_file

    path = tmp / "run" / "checkpoint" / "optimizer.safetensors"
    tensors = load_file(path)
    tensors[sorted(tensors)[0]].view(-1)[0] = float("nan")
    save_file(tensors, path)
    before = files(path.parent)
    status, err = train(tmp / "run", "--steps", "3", "--resume")
    kept = files(path.parent) == before
    return f"exit {status}, checkpoint {'kept' if kept else 'OVERWRITTEN'}: {err}", one_line(
        status, err
    ) and kept


def hang_up_during_training(tmp: Path):
    out = tmp / "hup"
    cmd = [
        sys.executable,
        "-m",
        "attnkit",
        "train",
        "translate",
        "--out",
        str(out),
        *TINY[:4],
        "--steps",
        "100000",
        "--batch-size",
        "8",
        "--hidden",
        "8",
        "--emb",
        "8",
        "--plot",
        "0",
        "--eval-every",
        "100000",
        "--checkpoint-every",
        "100000",
    ]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    for line in proc.stderr:  # progress off a terminal: a log line at the first step
        if "step 1/" in line:
            proc.send_signal(signal.SIGHUP)
            break
    err = proc.stderr.read()
    status = proc.wait(timeout=120)
    saved = (out / "checkpoint" / "trainer.json").exists()
    last = err.strip().splitlines()[-1] if err.strip() else ""
    return (
        f"exit {status}, checkpoint {'saved' if saved else 'NOT SAVED'}: {last}",
        status == 128 + signal.SIGHUP and saved and "Traceback" not in err,
    )


def full_disk_during_a_save(tmp: Path):
    from safetensors import SafetensorError

    from attnkit.train import checkpoint

    def full(*args, **kwargs):  # what safetensors raises on ENOSPC
        raise SafetensorError(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        )

    before = files(tmp / "run" / "checkpoint")
    with patched(checkpoint, "save_file", full):
        outcomes = [train(tmp / "run", "--steps", "3", "--resume") for _ in range(2)]
    kept = files(tmp / "run" / "checkpoint") == before
    status, err = outcomes[-1]
    return f"exit {[s for s, _ in outcomes]}, checkpoint {'kept' if kept else 'LOST'}: {err}", all(
        one_line(s, e) for s, e in outcomes
    ) and kept


def export_onto_a_read_only_mount(tmp: Path):
    from attnkit import folders

    (tmp / "ro").mkdir()
    real = folders.tempfile.mkdtemp

    def read_only(*args, dir=None, **kwargs):
        if dir is not None and Path(dir) == tmp / "ro":
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(dir))
        return real(*args, dir=dir, **kwargs)

    with patched(folders.tempfile, "mkdtemp", read_only):
        status, err = attnkit(
            "export", "--checkpoint", tmp / "run" / "checkpoint", "--out", tmp / "ro" / "d"
        )
    return f"exit {status}: {err}", one_line(status, err)


def export_under_a_file(tmp: Path):
    (tmp / "afile").write_text("")
    status, err = attnkit(
        "export", "--checkpoint", tmp / "run" / "checkpoint", "--out", tmp / "afile" / "sub"
    )
    return f"exit {status}: {err}", one_line(status, err)


def export_to_dot_dot(tmp: Path):
    (tmp / "w" / "x").mkdir(parents=True)
    here = os.getcwd()
    os.chdir(tmp / "w" / "x")
    try:
        status, err = attnkit("export", "--checkpoint", tmp / "run" / "checkpoint", "--out", "..")
    finally:
        os.chdir(here)
    left = [p.name for p in tmp.rglob("*") if p.name.startswith("..") or "attnkit-" in p.name]
    return f"exit {status}, left behind: {left or 'nothing'}: {err}", one_line(
        status, err
    ) and not left


def demo_out_naming_a_file(tmp: Path):
    (tmp / "afile").write_text("keep")
    status, err = attnkit("demo", "--out", tmp / "afile")
    return f"exit {status}: {err}", one_line(status, err) and (tmp / "afile").read_text() == "keep"


def checkpoint_linked_to_another_disk(tmp: Path):
    disk = tmp / "disk"
    disk.mkdir()
    (tmp / "run" / "checkpoint").rename(disk / "checkpoint")
    (tmp / "run" / "checkpoint").symlink_to(disk / "checkpoint")
    statuses = [train(tmp / "run", "--steps", str(n), "--resume")[0] for n in (3, 4)]
    link = (tmp / "run" / "checkpoint").is_symlink()
    return f"exit {statuses}, link {'kept' if link else 'REPLACED'}", statuses == [0, 0] and link


def edit_json(path: Path, edit: Callable) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def translate(checkpoint: Path) -> tuple[int | None, str]:
    return attnkit("translate", "--checkpoint", checkpoint, "3 March 2001")


def resume_with_trainer_json(edit: Callable):
    def case(tmp: Path):
        ck = tmp / "run" / "checkpoint"
        edit_json(ck / "trainer.json", edit)
        before = files(ck)
        status, err = train(tmp / "run", "--steps", "3", "--resume")
        kept = files(ck) == before
        return f"exit {status}, checkpoint {'kept' if kept else 'CHANGED'}: {err}", one_line(
            status, err
        ) and kept

    return case


def checkpoint_file(name: str, write: Callable):
    """A case: ``RUN/checkpoint/NAME`` replaced by what ``write(path)`` makes, then
    ``attnkit translate`` refuses it in one line."""

    def case(tmp: Path):
        path = tmp / "run" / "checkpoint" / name
        write(path)
        status, err = translate(path.parent)
        return f"exit {status}: {err[:300]}", one_line(status, err) and len(err) < 1000

    return case


def nested(path: Path) -> None:
    path.write_text("[" * 200_000 + "]" * 200_000)


def without_src(path: Path) -> None:
    edit_json(path, lambda d: d.pop("src"))


def a_folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


def two_character_symbol(path: Path) -> None:
    edit_json(path, lambda d: d["tgt"]["symbols"].__setitem__(0, "ab"))


def integer_weights(path: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    save_file({k: v.to(torch.int64) for k, v in load_file(path).items()}, path)


def a_huge_name(path: Path) -> None:
    edit_json(path, lambda d: d["config"]["model"].update(name="x" * 100_000_000))


def resume_with_another_vocabulary(tmp: Path):
    status, err = train(tmp / "run", "--steps", "3", "--resume", "--vocab", "bpe")
    return f"exit {status}: {err}", one_line(status, err)


def a_fifo_for_the_weights(tmp: Path):
    ck = tmp / "run" / "checkpoint"
    (ck / "model.safetensors").unlink()
    os.mkfifo(ck / "model.safetensors")
    cmd = [sys.executable, "-m", "attnkit", "translate", "--checkpoint", str(ck), "one"]
    try:  # in a process of its own: reading a FIFO would block it for ever
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "BLOCKED: still waiting after 120 s", False
    return f"exit {proc.returncode}: {proc.stderr}", one_line(proc.returncode, proc.stderr)


def wav_bytes(samples: list[float], rate: int = 8000) -> bytes:
    """A mono 32-bit float WAV of ``samples``, its header claiming ``rate`` Hz."""
    data = struct.pack(f"<{len(samples)}f", *samples)
    fmt = struct.pack("<HHIIHH", 3, 1, rate, (rate * 4) % 2**32, 4, 32)
    return (
        b"RIFF"
        + struct.pack("<I", 36 + len(data))
        + b"WAVEfmt "
        + struct.pack("<I", 16)
        + fmt
        + b"data"
        + struct.pack("<I", len(data))
        + data
    )


def png_bytes(width: int, height: int, rows: int) -> bytes:
    """An 8-bit grey PNG whose header says ``width x height`` and whose (well-formed) image
    data hold ``rows`` white rows."""

    def chunk(kind, data):
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    data = (b"\x00" + b"\xff" * width) * rows
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(data))
        + chunk(b"IEND", b"")
    )


def data_file(name: str, write: Callable[[Path], None], *argv, code: int = 2):
    """A case: the file ``name`` made by ``write(path)``, then ``attnkit ARGV`` (``{}`` in it
    standing for the file, ``hf:{}`` for it as a dataset, ``{run}`` for a new run folder)
    ends in one line with exit status ``code``."""

    def case(tmp: Path):
        path = tmp / name
        write(path)
        start = time.monotonic()
        given = {"{}": str(path), "hf:{}": f"hf:{path}", "{run}": str(tmp / "new-run")}
        status, err = attnkit(*(given.get(a, a) for a in argv))
        took = time.monotonic() - start
        return f"exit {status} in {took:.0f} s: {err[:300]}", one_line(status, err, code)

    return case


def sparse(size: int) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        with path.open("wb") as f:
            f.truncate(size)

    return write


def one_long_line(path: Path) -> None:
    with path.open("wb") as f:
        for _ in range(20):
            f.write(b"x" * (1 << 20))
        f.write(b"\t1\n")


def a_fifo_for_a_wav(tmp: Path):
    os.mkfifo(tmp / "x.wav")
    cmd = [
        sys.executable,
        "-m",
        "attnkit",
        "transcribe",
        "--checkpoint",
        "builtin:asr-digits",
        str(tmp / "x.wav"),
    ]
    try:  # in a process of its own: reading a FIFO would block it for ever
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "BLOCKED: still waiting after 120 s", False
    err = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("INFO"))
    return f"exit {proc.returncode}: {err}", one_line(proc.returncode, err + "\n")


def outside_the_data_folder(tmp: Path):
    data = tmp / "data"
    data.mkdir()
    (data / "manifest.tsv").write_text("/etc/passwd\tone\n")
    status, err = attnkit(
        "eval", "--checkpoint", "builtin:asr-digits", "--data", data / "manifest.tsv"
    )
    return f"exit {status}: {err}", one_line(status, err) and "root:" not in err


def a_picture_onto_a_full_disk(tmp: Path):
    from matplotlib.figure import Figure

    def full(self, path, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    with patched(Figure, "savefig", full):
        status, err = attnkit(
            "translate", "--checkpoint", tmp / "run" / "checkpoint", "one", "--plot", tmp / "plots"
        )
    return f"exit {status}: {err}", one_line(status, err)


def events_onto_a_full_disk(tmp: Path):
    from torch.utils.tensorboard import SummaryWriter

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with patched(SummaryWriter, "add_scalar", full):
        status, err = train(tmp / "run", "--steps", "4", "--resume")
    trainer = json.loads((tmp / "run" / "checkpoint" / "trainer.json").read_text())
    return f"exit {status}, checkpoint at step {trainer['step']}", status == 0 and trainer[
        "step"
    ] == 4


def plan_of_a_trillion_queries(tmp: Path):
    start = time.monotonic()
    status, err = attnkit("plan", "--tq", "1000000000000", "--dim", "64")
    took = time.monotonic() - start
    return f"exit {status} in {took:.1f} s{': ' + err if err else ''}", status == 0 and took < 30


# ---------------------------------------------- manifests naming files by absolute paths


def kaldi_scp(data: Path, name: str) -> Path:
    (data / "wav.scp").write_text(f"u1 {name}\n")
    (data / "text").write_text("u1 one\n")
    return data


def nemo_lines(data: Path, name: str) -> Path:
    (data / "train.json").write_text(
        json.dumps({"audio_filepath": name, "text": "one", "duration": 0.5}) + "\n"
    )
    return data / "train.json"


def own_manifest(data: Path, name: str) -> Path:
    (data / "manifest.tsv").write_text(f"{name}\tone\n")
    return data / "manifest.tsv"


def common_voice(data: Path, name: str) -> Path:
    (data / "clips").mkdir()
    (data / "train.tsv").write_text(f"client_id\tpath\tsentence\nc1\t{name}\tone\n")
    return data / "train.tsv"


def labels_tsv(data: Path, name: str) -> Path:
    (data / "labels.tsv").write_text(f"{name}\thello\n")
    return data / "labels.tsv"


def absolute_paths(write: Callable[[Path, str], Path], where: str, *options: str):
    """A case: the corpus ``write(folder, name)`` names its one file (a WAV, for labels.tsv a
    line image) by its absolute path, the file ``where`` is "inside" the corpus's folder or
    "elsewhere"; ``attnkit eval`` with the shipped model of its task and ``options`` reads
    it, or, with ``--confine`` and the file elsewhere, refuses it in one line naming the
    option."""

    def case(tmp: Path):
        data, image = tmp / "corpus", write is labels_tsv
        data.mkdir()
        file = (data / "files" if where == "inside" else tmp / "elsewhere") / (
            "a.png" if image else "a.wav"
        )
        file.parent.mkdir(parents=True)
        file.write_bytes(
            png_bytes(200, 32, 32)
            if image
            else wav_bytes([0.3 * math.sin(i / 5) for i in range(8000)], 16000)
        )
        status, err = attnkit(
            "eval",
            "--checkpoint",
            "builtin:ocr-lines" if image else "builtin:asr-digits",
            "--data",
            write(data, str(file)),
            *options,
        )
        if "--confine" in options and where == "elsewhere":
            return f"exit {status}: {err}", one_line(
                status, err
            ) and "leave out --confine" in err and "name files relative" not in err
        return f"exit {status}{': ' + err if err else ''}", status == 0

    return case


# ------------------------------------------------ training, averaging and serving: third probe


def _average_over(tmp: Path, out: Path, why: str):
    """``average RUN/checkpoint-best --out OUT``: refused naming ``why``, --resume works."""
    run = tmp / "run"
    before = {p.name: files(p) for p in (run / "checkpoint", run / "checkpoint-best")}
    status, err = attnkit("average", run / "checkpoint-best", "--out", out)
    kept = {p.name: files(p) for p in (run / "checkpoint", run / "checkpoint-best")} == before
    resumed, _ = train(run, "--steps", "3", "--resume")
    return (
        f"exit {status}, run {'kept' if kept else 'OVERWRITTEN'}: {err}; --resume then: "
        f"exit {resumed}"
    ), one_line(status, err) and why in err and kept and resumed == 0


def average_over_the_resumable_checkpoint(tmp: Path):
    return _average_over(tmp, tmp / "run" / "checkpoint", "is not empty")


def average_over_its_own_input(tmp: Path):
    return _average_over(tmp, tmp / "run" / "checkpoint-best", "is the checkpoint being averaged")


def average_inside_the_checkpoint(tmp: Path):
    return _average_over(tmp, tmp / "run" / "checkpoint" / "sub", "is inside the checkpoint")


def accumulate_a_trillion(tmp: Path):
    from attnkit.cli.main import main

    err = io.StringIO()  # attnkit() would lose what argparse writes before its SystemExit
    argv = ["train", "translate", "--out", str(tmp / "acc"), *TINY, "--accumulate", "1000000000000"]
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main(argv)
        except SystemExit as exc:  # argparse's usage error
            status = exc.code
    last = err.getvalue().strip().splitlines()[-1]
    return (
        f"exit {status}: {last}",
        status == 2
        and "--accumulate" in last
        and "1000000000000" in last
        and not (tmp / "acc").exists(),
    )


def sigterm_within_a_long_accumulation(tmp: Path):
    out = tmp / "term"
    cmd = [
        sys.executable,
        "-m",
        "attnkit",
        "train",
        "translate",
        "--out",
        str(out),
        *TINY[:4],
        "--steps",
        "100000",
        "--batch-size",
        "8",
        "--hidden",
        "8",
        "--emb",
        "8",
        "--plot",
        "0",
        "--eval-every",
        "100000",
        "--checkpoint-every",
        "100000",
        "--accumulate",
        "4096",
    ]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    for line in proc.stderr:  # progress off a terminal: a log line at the first step
        if "step 1/" in line:
            break
    time.sleep(1)  # inside the second step's 4,096 batches
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    err = proc.stderr.read()
    status = proc.wait(timeout=120)
    took = time.monotonic() - sent
    resumable = (out / "checkpoint" / "trainer.json").exists()
    if resumable:
        resumable = json.loads((out / "checkpoint" / "trainer.json").read_text())["step"] == 1
    return (
        f"exit {status} {took:.1f} s after SIGTERM, checkpoint at step 1 "
        f"{'saved' if resumable else 'NOT SAVED'}"
    ), status == 128 + signal.SIGTERM and resumable and took < 10 and "Traceback" not in err


def half_deleted_kept_model(tmp: Path):
    run = tmp / "kept"
    first, _ = train(run, "--steps", "4", "--eval-every", "1", "--keep-best", "2")
    broken = min((run / "best").glob("step-*"))
    (broken / "model.safetensors").unlink()  # what a kill inside rmtree left
    status, err = train(run, "--steps", "6", "--eval-every", "1", "--keep-best", "2", "--resume")
    kept = len(list((run / "best").glob("step-*")))
    return (
        f"exit {status}, {kept} kept models: {err.strip()[:200]}",
        first == 0 and status == 0 and kept == 2,
    )


def slow_connections_to_serve(tmp: Path):
    import re
    import socket

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attnkit",
            "serve",
            "--checkpoint",
            "builtin:translate-dates",
            "--port",
            "0",
            "--read-timeout",
            "2",
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        found = None
        for line in proc.stderr:
            found = found or re.search(r"running on http://127\.0\.0\.1:(\d+)", line)
            if found:
                break
        socks = [socket.create_connection(("127.0.0.1", int(found.group(1)))) for _ in range(300)]
        start = time.monotonic()
        for sock in socks:
            sock.settimeout(30)
            sock.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: 99\r\n")
        for sock in socks:
            while sock.recv(4096):
                pass
        took = time.monotonic() - start
        for sock in socks:
            sock.close()
    finally:
        proc.terminate()
        proc.wait(30)
    return (
        f"300 connections sending half the headers: all closed within {took:.1f} s "
        "(--read-timeout 2)"
    ), took < 5


# ------------------------------------------------- issue 57, the third probe (the cases below)
def on_stdin(data: bytes, *argv) -> tuple[int | None, str, str]:
    """``attnkit ARGV`` reading ``data`` as standard input (as Python opens it in the C
    locale): its exit status, what it printed and what it wrote on stderr."""
    from attnkit.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="surrogateescape")
    with (
        patched(sys, "stdin", stdin),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            status = main(list(argv))
        except Exception as exc:  # what a user would see as a traceback
            status = None
            err.write(f"traceback: {type(exc).__name__}: {exc}")
    return status, out.getvalue(), err.getvalue()


def latin1_on_stdin(tmp: Path):
    status, out, err = on_stdin(
        "<fr> 5 août 2010\n".encode("latin-1"),
        "translate",
        "--checkpoint",
        "builtin:translate-dates",
        "--json",
        "-",
    )
    error = json.loads(out)["error"] if out.count("\n") == 1 else out
    return f"exit {status}: {error}", status == 2 and "not valid UTF-8" in error


def a_long_line_on_stdin(tmp: Path):
    status, out, err = on_stdin(
        b"9" * (100 << 20) + b"\n",
        "translate",
        "--checkpoint",
        "builtin:translate-dates",
        "--json",
        "-",
    )
    return f"exit {status}, {len(out):,} characters printed: {out[-160:]}", status == 2 and len(
        out
    ) < 1000


def ties_broken_by_cer(tmp: Path):
    best = json.loads((tmp / "run" / "checkpoint-best" / "trainer.json").read_text())
    return f"checkpoint-best: {best}", best.get("tiebreak") == "-cer"


def a_librispeech_id_twice(path: Path) -> None:
    import numpy as np
    import soundfile

    folder = path / "19" / "198"
    folder.mkdir(parents=True)
    soundfile.write(folder / "19-198-0001.flac", np.zeros(8000, np.float32), 16000)
    (folder / "19-198.trans.txt").write_text("19-198-0001 ONE TWO\n19-198-0001 THREE\n")


def standard_output_closed(*argv):
    """A case: ``attnkit ARGV`` with standard output closed (``sys.stdout`` None, as Python
    leaves it when fd 1 is closed) ends in one line on stderr, exit status 2."""

    def case(tmp: Path):
        from attnkit.cli.main import main

        err = io.StringIO()
        with patched(sys, "stdout", None), contextlib.redirect_stderr(err):
            try:
                status = main([str(a) for a in argv])
            except Exception as exc:  # what a user would see as a traceback
                status, err = None, io.StringIO(f"traceback: {type(exc).__name__}: {exc}")
        return f"exit {status}: {err.getvalue()}", one_line(status, err.getvalue())

    return case


def a_huge_unknown_field_to_serve(tmp: Path):
    from starlette.testclient import TestClient

    from attnkit.serve import Limits, create_app
    from attnkit.tasks.loading import load_evaluator

    app = create_app(load_evaluator("builtin:translate-dates"), Limits(max_body_bytes=20 << 20))
    with TestClient(app) as client:
        r = client.post("/translate", json={"text": "<en> 3 March 2001", "extra": "x" * (8 << 20)})
    return (
        f"{r.status_code}, {len(r.content):,} bytes: {r.text[:120]}",
        r.status_code == 422 and len(r.content) < 1000,
    )


def ask_past_max_pixels(tmp: Path):
    from PIL import Image
    from starlette.testclient import TestClient

    from attnkit.serve import Limits, create_app
    from attnkit.tasks.loading import load_evaluator

    status, err = attnkit(
        "train",
        "vqa",
        "--out",
        tmp / "vqa",
        "--n-train",
        "6",
        "--n-valid",
        "2",
        "--steps",
        "2",
        "--batch-size",
        "8",
        "--image-size",
        "32",
        "--channels",
        "4,8",
        "--hidden",
        "8",
        "--emb",
        "8",
        "--attn-dim",
        "8",
        "--no-progress",
        "--plot",
        "0",
        "--max-objects",
        "4",
    )
    if status != 0:
        return f"training a tiny VQA model failed: {err}", False
    picture = io.BytesIO()
    Image.new("RGB", (50, 40)).save(picture, format="PNG")
    evaluator = load_evaluator(str(tmp / "vqa" / "checkpoint"))
    question = " ".join(evaluator.words.symbols[4:6])
    with TestClient(create_app(evaluator, Limits(max_pixels=1000))) as client:
        r = client.post(
            "/ask", files={"image": ("p.png", picture.getvalue())}, data={"question": question}
        )
    return f"{r.status_code}: {r.text[:200]}", r.status_code == 422 and "max-pixels" in r.text


def what_a_killed_export_left(tmp: Path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid: no process now
    left = tmp / f".e.attnkit-tmp-{gone.pid}-k2j4h6g8"
    left.mkdir()
    (left / "model.onnx").write_bytes(b"half")
    hour = time.time() - 3600
    os.utime(left, (hour, hour))
    status, err = attnkit("export", "--checkpoint", tmp / "run" / "checkpoint", "--out", tmp / "e")
    return (
        f"exit {status}, {left.name} {'still there' if left.exists() else 'removed'}",
        status == 0 and not left.exists(),
    )


def a_saved_dataset_with_state_json_empty(path: Path) -> None:
    import datasets

    datasets.Dataset.from_dict(
        {"source": ["<en> 3 March 2001"], "target": ["2001-03-03"]}
    ).save_to_disk(str(path))
    (path / "state.json").write_text("{}")


def an_optimizer_state(edit: Callable[[dict], None], steps: str):
    """A case: the tiny translator's optimizer state edited by ``edit(tensors)``, then
    ``--resume`` to ``steps``: one line, and the checkpoint kept."""

    def case(tmp: Path):
        from safetensors.torch import load_file, save_file

        path = tmp / "run" / "checkpoint" / "optimizer.safetensors"
        tensors = load_file(path)
        edit(tensors)
        save_file(tensors, path)
        before = files(path.parent)
        status, err = train(tmp / "run", "--steps", steps, "--resume")
        kept = files(path.parent) == before
        return f"exit {status}, checkpoint {'kept' if kept else 'OVERWRITTEN'}: {err}", one_line(
            status, err
        ) and kept

    return case


def timing_a_trillion_queries(tmp: Path):
    start = time.monotonic()
    status, err = attnkit("plan", "--tq", "1000000000000", "--dim", "64", "--time")
    took = time.monotonic() - start
    return f"exit {status} in {took:.0f} s{': ' + err if err else ''}", status == 0 and took < 60


def export_under_umask_022(tmp: Path):
    old = os.umask(0o022)
    try:
        status, err = attnkit(
            "export", "--checkpoint", tmp / "run" / "checkpoint", "--out", tmp / "e"
        )
    finally:
        os.umask(old)
    mode = (tmp / "e").stat().st_mode & 0o777 if (tmp / "e").exists() else None
    return f"exit {status}, mode {mode:o}" if mode else f"exit {status}: {err}", mode == 0o755


def a_multipart_body_without_boundary(tmp: Path):
    from starlette.testclient import TestClient

    from attnkit.serve import Limits, create_app
    from attnkit.tasks.loading import load_evaluator

    with TestClient(create_app(load_evaluator("builtin:asr-digits"), Limits())) as client:
        r = client.post(
            "/transcribe", content=b"abc", headers={"content-type": "multipart/form-data"}
        )
    return f"{r.status_code}: {r.text[:200]}", r.status_code == 400 and r.json().get(
        "field"
    ) == "body"


def resumed_with_another_pitch_shift(tmp: Path):
    from attnkit.cli import augment

    parser = argparse.ArgumentParser()
    augment.add_speech_args(parser)
    parser.add_argument("--out", default="run")
    started = parser.parse_args(["--augment", "light", "--pitch-shift", "0.8,1.2"])
    saved = argparse.Namespace(
        config={
            "augment": [a.config() for a in augment.speech_augmentations(started).augmentations]
        }
    )
    asked = parser.parse_args(["--augment", "light", "--pitch-shift", "0.8,1.3"])
    try:
        augment.speech_augmentations(asked, saved)
    except ValueError as exc:
        return str(exc), "factor=[0.8, 1.2] saved, factor=[0.8, 1.3] asked" in str(exc)
    return "accepted", False


def parquet_beside_garbage(folder: Path) -> None:
    import datasets

    folder.mkdir()
    datasets.Dataset.from_dict(
        {"source": ["<en> 3 March 2001"], "target": ["2001-03-03"]}
    ).to_parquet(str(folder / "train-0.parquet"))
    (folder / "train-1.parquet").write_bytes(b"garbage" * 100)


CASES: list[tuple[str, str, Callable]] = [
    (
        "export --format checkpoint --out d, d holding thesis.txt",
        "refused, file kept",
        export_into_a_users_folder,
    ),
    (
        "export --out RUN/checkpoint (the checkpoint read)",
        "refused, --resume works",
        export_over_the_checkpoint_read,
    ),
    (
        "a user's .checkpoint.backup in the run folder",
        "kept by a refused and a resumed run",
        users_checkpoint_named_folder,
    ),
    (
        "re-export onto a full disk (ENOSPC, simulated)",
        "one line, earlier export whole",
        re_export_onto_a_full_disk,
    ),
    (
        "one NaN in optimizer.safetensors, then --resume",
        "refused, checkpoint kept",
        nan_in_the_optimizer_state,
    ),
    ("SIGHUP during training", "checkpoint saved, exit 129", hang_up_during_training),
    (
        "full disk during a save, twice (ENOSPC, simulated)",
        "one line each, checkpoint kept",
        full_disk_during_a_save,
    ),
    ("export onto a read-only mount (EROFS, simulated)", "one line", export_onto_a_read_only_mount),
    ("export --out afile/sub", "one line", export_under_a_file),
    ("export --out ..", "one line, nothing left behind", export_to_dot_dot),
    ("demo --out afile", "one line, file kept", demo_out_naming_a_file),
    (
        "RUN/checkpoint a link to a folder, --resume twice",
        "saved at the target, link kept",
        checkpoint_linked_to_another_disk,
    ),
    (
        "trainer.json with step -5, then --resume",
        "one line, checkpoint kept",
        resume_with_trainer_json(lambda d: d.update(step=-5)),
    ),
    (
        "trainer.json without rng, then --resume",
        "one line, checkpoint kept",
        resume_with_trainer_json(lambda d: d.pop("rng")),
    ),
    (
        'trainer.json with train_config "x", then --resume',
        "one line, checkpoint kept",
        resume_with_trainer_json(lambda d: d.update(train_config="x")),
    ),
    ("config.json of 200,000 nested [", "one line", checkpoint_file("config.json", nested)),
    ("vocab.json of 200,000 nested [", "one line", checkpoint_file("vocab.json", nested)),
    ("vocab.json without src", "one line", checkpoint_file("vocab.json", without_src)),
    ("vocab.json a folder", "one line", checkpoint_file("vocab.json", a_folder)),
    (
        'a character symbol "ab" in vocab.json',
        "one line",
        checkpoint_file("vocab.json", two_character_symbol),
    ),
    (
        "int64 tensors in model.safetensors",
        "one line",
        checkpoint_file("model.safetensors", integer_weights),
    ),
    (
        "a 100 MB model name in config.json",
        "one line, under 1,000 characters",
        checkpoint_file("config.json", a_huge_name),
    ),
    ("--resume --vocab bpe on a character run", "one line", resume_with_another_vocabulary),
    ("model.safetensors a FIFO", "one line, not blocked", a_fifo_for_the_weights),
    ("a WAV that is a FIFO, to transcribe", "one line, not blocked", a_fifo_for_a_wav),
    (
        "/dev/zero as training pairs",
        "one line",
        data_file(
            "unused",
            lambda path: None,
            "train",
            "translate",
            "--train",
            "/dev/zero",
            "--out",
            "{run}",
            *TINY,
        ),
    ),
    (
        "a 2 GB sparse file as training pairs",
        "one line: binary",
        data_file(
            "pairs.tsv",
            sparse(2 << 30),
            "train",
            "translate",
            "--train",
            "{}",
            "--out",
            "{run}",
            *TINY,
        ),
    ),
    (
        "a 20 MB TSV of one line",
        "one line at 16 MiB",
        data_file(
            "pairs.tsv",
            one_long_line,
            "train",
            "translate",
            "--train",
            "{}",
            "--out",
            "{run}",
            *TINY,
        ),
    ),
    (
        "a PNG whose header says 9,000 rows, holding one",
        "one line",
        data_file(
            "short.png",
            lambda p: p.write_bytes(png_bytes(200, 9000, 1)),
            "read",
            "--checkpoint",
            "builtin:ocr-lines",
            "{}",
        ),
    ),
    (
        "a line image 1 px wide at height 32",
        "one line",
        data_file(
            "tall.png",
            lambda p: p.write_bytes(png_bytes(200, 9000, 9000)),
            "read",
            "--checkpoint",
            "builtin:ocr-lines",
            "{}",
        ),
    ),
    (
        "a float WAV holding NaN, beam 5",
        "one line",
        data_file(
            "nan.wav",
            lambda p: p.write_bytes(wav_bytes([0.0] * 100 + [float("nan")] * 10)),
            "transcribe",
            "--checkpoint",
            "builtin:asr-digits",
            "--beam",
            "5",
            "{}",
        ),
    ),
    (
        "a WAV header claiming 4,294,967,291 Hz",
        "one line",
        data_file(
            "fast.wav",
            lambda p: p.write_bytes(wav_bytes([0.0] * 100, 4_294_967_291)),
            "transcribe",
            "--checkpoint",
            "builtin:asr-digits",
            "{}",
        ),
    ),
    ("a manifest naming /etc/passwd", "one line, nothing of it quoted", outside_the_data_folder),
    (
        "translate --plot onto a full disk (ENOSPC, simulated)",
        "one line",
        a_picture_onto_a_full_disk,
    ),
    (
        "TensorBoard events onto a full disk (ENOSPC, simulated)",
        "trained and saved",
        events_onto_a_full_disk,
    ),
    ("plan --tq 1000000000000", "a table within seconds", plan_of_a_trillion_queries),
    # manifests naming their files by absolute paths (issue 57): read, unless --confine
    (
        "a Kaldi wav.scp naming absolute paths inside its folder",
        "read",
        absolute_paths(kaldi_scp, "inside"),
    ),
    *[
        (f"{corpus} naming absolute paths elsewhere", "read", absolute_paths(write, "elsewhere"))
        for corpus, write in (
            ("a Kaldi wav.scp", kaldi_scp),
            ("a NeMo manifest", nemo_lines),
            ("an attnkit manifest", own_manifest),
            ("a Common Voice TSV", common_voice),
            ("a labels.tsv", labels_tsv),
        )
    ],
    (
        "--confine, a Kaldi wav.scp naming absolute paths inside its folder",
        "read",
        absolute_paths(kaldi_scp, "inside", "--confine"),
    ),
    (
        "--confine, a NeMo manifest naming absolute paths elsewhere",
        "one line naming --confine",
        absolute_paths(nemo_lines, "elsewhere", "--confine"),
    ),
]


def coco_eval_with_a_limit(tmp: Path):
    """``eval --limit 5`` on a COCO captions file of 2,000 images x 5 captions: the headers
    of 5 images checked (they were all 2,000)."""
    from PIL import Image

    from attnkit.data.corpora import image_folders as images

    status, err = attnkit(
        "train",
        "caption",
        "--out",
        tmp / "cap",
        "--n-train",
        "6",
        "--n-valid",
        "2",
        "--steps",
        "2",
        "--batch-size",
        "4",
        "--image-size",
        "32",
        "--channels",
        "4,8",
        "--hidden",
        "8",
        "--emb",
        "8",
        "--attn-dim",
        "8",
        "--no-progress",
        "--plot",
        "0",
        "--max-objects",
        "4",
    )
    if status != 0:
        return f"training a tiny captioner failed: {err}", False
    (tmp / "val2014").mkdir()
    (tmp / "annotations").mkdir()
    picture = io.BytesIO()
    Image.new("RGB", (40, 32), (120, 30, 200)).save(picture, format="PNG")
    for i in range(2000):
        (tmp / "val2014" / f"{i:012d}.png").write_bytes(picture.getvalue())
    path = tmp / "annotations" / "captions_val2014.json"
    path.write_text(
        json.dumps(
            {
                "images": [{"id": i, "file_name": f"{i:012d}.png"} for i in range(2000)],
                "annotations": [
                    {"id": 2000 * j + i, "image_id": i, "caption": f"a purple square {j}"}
                    for j in range(5)
                    for i in range(2000)
                ],
            }
        )
    )
    checked, check = [], images.image_header
    with patched(
        images, "image_header", lambda p, *a, **k: (checked.append(p), check(p, *a, **k))[1]
    ):
        status, err = attnkit(
            "eval", "--checkpoint", tmp / "cap" / "checkpoint", "--data", path, "--limit", "5"
        )
    return f"exit {status}, {len(checked)} image headers checked of 2,000", status == 0 and len(
        checked
    ) == 5


# ------------------------------------------- serving security and gt-txt links (the third probe)
# docs/reliability.md, "Documented claims and serving security: the third probe".


def serve_refusing(*options: str, env: dict | None = None):
    """A case: ``attnkit serve OPTIONS`` (in a process of its own, the environment plus
    ``env``) ends in one line with exit status 2 instead of serving."""

    def case(tmp: Path):
        cmd = [
            sys.executable,
            "-m",
            "attnkit",
            "serve",
            "--checkpoint",
            "builtin:translate-dates",
            "--port",
            "0",
            *options,
        ]
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})}
            )
        except subprocess.TimeoutExpired:
            return "SERVED: still running after 60 s", False
        err = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("INFO"))
        return f"exit {proc.returncode}: {err}", one_line(proc.returncode, err + "\n")

    return case


def empty_key_header(tmp: Path):
    import httpx

    (tmp / "key").write_text("s3cret\n")
    cmd = [
        sys.executable,
        "-m",
        "attnkit",
        "serve",
        "--checkpoint",
        "builtin:translate-dates",
        "--port",
        "0",
        "--api-key-file",
        str(tmp / "key"),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = next(
            (
                found.group(1)
                for line in proc.stderr
                if (found := re.search(r"running on (http://[\d.]+:\d+)", line))
            ),
            None,
        )
        if url is None:
            return f"the server did not start (exit {proc.wait()})", False
        codes = [
            httpx.get(f"{url}/health", headers=headers).status_code
            for headers in ({"X-API-Key": ""}, {"X-API-Key": "s3cret"})
        ]
    finally:
        proc.kill()
        proc.wait()
    return f"empty header {codes[0]}, the key {codes[1]}", codes == [401, 200]


def gt_txt_link_out(tmp: Path):
    from PIL import Image

    data = tmp / "gt"
    data.mkdir()
    Image.new("L", (64, 32), 255).save(data / "0001.png")
    (tmp / "secret.txt").write_text("password hunter2\n")
    (data / "0001.gt.txt").symlink_to(tmp / "secret.txt")
    status, err = attnkit("eval", "--checkpoint", "builtin:ocr-lines", "--data", data, "--confine")
    error = [line for line in err.splitlines() if not line.startswith("INFO")]
    return f"exit {status}: {err}", (
        status == 2
        and len(error) == 1
        and "hunter2" not in err
        and "a link leading out of the data folder" in err
    )


CASES += [
    ("serve --api-key ''", "refused in one line, not served", serve_refusing("--api-key", "")),
    (
        "serve with ATTNKIT_API_KEY set but empty",
        "refused in one line, not served",
        serve_refusing(env={"ATTNKIT_API_KEY": ""}),
    ),
    (
        "serve --api-key-file FILE, then an empty X-API-Key header",
        "401 (the key: 200)",
        empty_key_header,
    ),
    (
        "a .gt.txt that is a link out of its folder, to eval --confine",
        "one line, nothing of it quoted",
        gt_txt_link_out,
    ),
    # training, averaging and serving: the third probe (docs/reliability.md)
    (
        "average --out RUN/checkpoint",
        "refused, --resume works",
        average_over_the_resumable_checkpoint,
    ),
    ("average CK --out CK (its own input)", "refused, --resume works", average_over_its_own_input),
    ("average --out RUN/checkpoint/sub", "refused, --resume works", average_inside_the_checkpoint),
    ("--accumulate 1000000000000", "usage error naming it", accumulate_a_trillion),
    (
        "SIGTERM within a step of --accumulate 4096",
        "saved at the step's start, exit 143",
        sigterm_within_a_long_accumulation,
    ),
    (
        "a half-deleted best/step-*, then --resume",
        "trained, the leftover removed",
        half_deleted_kept_model,
    ),
    (
        "serve: 300 connections sending half a request",
        "all closed within --read-timeout",
        slow_connections_to_serve,
    ),
    # issue 57, the third probe: corpora, decoding options and inference verbs
    (
        "probe: a float WAV holding 1e30, beam 5",
        "one line",
        data_file(
            "loud.wav",
            lambda p: p.write_bytes(wav_bytes([0.01] * 100 + [1e30] * 10)),
            "transcribe",
            "--checkpoint",
            "builtin:asr-digits",
            "--beam",
            "5",
            "{}",
        ),
    ),
    (
        "probe: latin-1 on standard input, translate --json -",
        "the line refused: not UTF-8",
        latin1_on_stdin,
    ),
    (
        "probe: a 100 MB line on standard input, --json",
        "refused, not echoed whole",
        a_long_line_on_stdin,
    ),
    (
        "probe: translate --length-penalty 100",
        "one line naming the option",
        data_file(
            "unused",
            lambda path: None,
            "translate",
            "--checkpoint",
            "builtin:translate-dates",
            "--length-penalty",
            "100",
            "<en> 3 March 2001",
        ),
    ),
    (
        "probe: translate --coverage-penalty 1e38",
        "one line naming the option",
        data_file(
            "unused",
            lambda path: None,
            "translate",
            "--checkpoint",
            "builtin:translate-dates",
            "--coverage-penalty",
            "1e38",
            "<en> 3 March 2001",
        ),
    ),
    (
        "probe: the tiny translator's checkpoint-best",
        "ranked by exact match, then CER",
        ties_broken_by_cer,
    ),
    (
        "probe: a LibriSpeech utterance id listed twice, to eval",
        "one line naming both",
        data_file(
            "libri",
            a_librispeech_id_twice,
            "eval",
            "--checkpoint",
            "builtin:asr-digits",
            "--data",
            "{}",
        ),
    ),
    (
        "probe: eval with standard output closed",
        "one line, exit 2",
        standard_output_closed(
            "eval", "--checkpoint", "builtin:translate-dates", "--data", "pairs.tsv"
        ),
    ),
    (
        "probe: translate with standard output closed",
        "one line, exit 2",
        standard_output_closed("translate", "--checkpoint", "builtin:translate-dates", "one"),
    ),
    ("probe: serve, an 8 MiB unknown field", "422 of under 1 KB", a_huge_unknown_field_to_serve),
    (
        "probe: serve --max-pixels 1000, a 50 x 40 image to /ask",
        "422 naming image",
        ask_past_max_pixels,
    ),
    (
        "probe: export beside an hour-old folder of a killed export",
        "exported, folder removed",
        what_a_killed_export_left,
    ),
    (
        "probe: translate --sample 2 --temperature 1e-300",
        "one line naming the option",
        data_file(
            "unused",
            lambda path: None,
            "translate",
            "--checkpoint",
            "builtin:translate-dates",
            "--sample",
            "2",
            "--temperature",
            "1e-300",
            "one",
        ),
    ),
    (
        "probe: translate --sample 2 --seed 2**64",
        "one line naming the option",
        data_file(
            "unused",
            lambda path: None,
            "translate",
            "--checkpoint",
            "builtin:translate-dates",
            "--sample",
            "2",
            "--seed",
            str(2**64),
            "one",
        ),
    ),
    (
        "probe: a NeMo manifest line nested 100,000 deep, to eval",
        "one line naming the line",
        data_file(
            "nemo.jsonl",
            lambda p: p.write_text("[" * 100_000 + "]" * 100_000 + "\n"),
            "eval",
            "--checkpoint",
            "builtin:asr-digits",
            "--data",
            "{}",
            "--format",
            "jsonl",
        ),
    ),
    (
        "probe: eval --data hf:FOLDER whose state.json is {}",
        "one line naming the folder",
        data_file(
            "saved",
            a_saved_dataset_with_state_json_empty,
            "eval",
            "--checkpoint",
            "builtin:translate-dates",
            "--data",
            "hf:{}",
        ),
    ),
    (
        "probe: a negative exp_avg_sq in optimizer.safetensors, then --resume",
        "one line, checkpoint kept",
        an_optimizer_state(lambda t: t["state.0.exp_avg_sq"].view(-1).__setitem__(0, -1.0), "3"),
    ),
    (
        "probe: exp_avg 1e30 and exp_avg_sq 0, then --resume",
        "one line, checkpoint kept",
        an_optimizer_state(
            lambda t: [
                v.fill_(1e30 if k.endswith(".exp_avg") else 0.0)
                for k, v in t.items()
                if k.endswith((".exp_avg", ".exp_avg_sq"))
            ],
            "4",
        ),
    ),
    (
        "probe: plan --tq 1000000000000 --dim 64 --time",
        "a table within a minute",
        timing_a_trillion_queries,
    ),
    ("probe: export under umask 022", "a folder of mode 755", export_under_umask_022),
    (
        "probe: 100 KB of random bytes as an MP3, to transcribe",
        "one line",
        data_file(
            "noise.mp3",
            lambda p: p.write_bytes(os.urandom(100_000)),
            "transcribe",
            "--checkpoint",
            "builtin:asr-digits",
            "{}",
        ),
    ),
    (
        "probe: train asr --time-mask 20000",
        "one line giving 10,000",
        data_file(
            "unused", lambda path: None, "train", "asr", "--out", "{run}", "--time-mask", "20000"
        ),
    ),
    (
        "probe: serve, a multipart body without a boundary",
        "400 naming body",
        a_multipart_body_without_boundary,
    ),
    (
        "probe: --resume asking another --pitch-shift",
        "the values that differ named",
        resumed_with_another_pitch_shift,
    ),
    (
        "probe: a garbage Parquet file in an hf: folder, to eval",
        "one line naming the file",
        data_file(
            "pq",
            parquet_beside_garbage,
            "eval",
            "--checkpoint",
            "builtin:translate-dates",
            "--data",
            "hf:{}",
            "--max-unusable",
            "0.9",
        ),
    ),
    (
        "probe: eval --limit 5 on a COCO file of 2,000 images",
        "5 image headers checked",
        coco_eval_with_a_limit,
    ),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--match", default="", help="only the cases whose name holds this")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    logging.basicConfig(handlers=[logging.NullHandler()])  # attnkit's log lines: not shown
    import torch

    torch.set_num_threads(1)
    rows, start = [], time.monotonic()
    with tempfile.TemporaryDirectory(prefix="attnkit-replay-") as root:
        base = Path(root) / "base"
        status, err = train(base / "run")
        if status != 0:
            print(f"training the tiny translator failed: {err}", file=sys.stderr)
            return 1
        for k, (name, expected, case) in enumerate(CASES):
            if args.match not in name:
                continue
            folder = Path(root) / f"case{k}"
            shutil.copytree(base, folder)
            try:
                outcome, ok = case(folder)
            except Exception as exc:  # the replay's own failure: shown as the outcome
                outcome, ok = f"replay failed: {type(exc).__name__}: {exc}", False
            outcome = " ".join(outcome.split()).replace(f"{folder}/", "")  # paths in the case
            rows.append((name, expected, outcome, ok))
    print("| case | expected | outcome | |\n|---|---|---|---|")
    for name, expected, outcome, ok in rows:
        print(f"| {name} | {expected} | {outcome} | {'ok' if ok else 'FAILED'} |")
    print(
        f"\n{sum(ok for *_, ok in rows)} of {len(rows)} cases as expected, "
        f"{time.monotonic() - start:.0f} s"
    )
    return 0 if all(ok for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
