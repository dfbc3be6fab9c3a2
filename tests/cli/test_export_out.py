"""attnkit export --out: what is already in the folder is replaced only when it is an earlier
export (or with --force), never the checkpoint being read, and a failed export leaves the
earlier one whole."""

import errno
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError

from attnkit import folders
from attnkit.cli.main import main
from attnkit.data import CharVocab
from attnkit.export import writer
from attnkit.models import CRNN, model_config
from attnkit.train import checkpoint as checkpoint_module
from attnkit.train import load_checkpoint, save_checkpoint


@pytest.fixture
def run(tiny_translator, tmp_path):
    """A copy of the tiny translator's run folder."""
    shutil.copytree(tiny_translator.parent, tmp_path / "run")
    return tmp_path / "run"


def _export(checkpoint, out, *extra):
    return main(["export", "--checkpoint", str(checkpoint), "--out", str(out), *extra])


def test_a_folder_holding_other_files_is_refused_unless_forced(run, tmp_path, capsys):
    out = tmp_path / "d"
    out.mkdir()
    (out / "thesis.txt").write_text("x")
    for fmt in ("checkpoint", "onnx"):
        assert _export(run / "checkpoint", out, "--format", fmt) == 2
        err = capsys.readouterr().err
        assert (
            f"out: {out} is not empty and not an earlier attnkit export (it holds "
            "thesis.txt); expected a new or empty folder, or pass --force"
        ) in err, err
        assert err.count("\n") == 1
        assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "run"]
        assert (out / "thesis.txt").read_text() == "x"
    assert _export(run / "checkpoint", out, "--format", "checkpoint", "--force") == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "MODEL_CARD.md",
        "config.json",
        "model.safetensors",
        "vocab.json",
    ]


@pytest.mark.parametrize("name, fmt", [("attnkit.json", "onnx"), ("config.json", "checkpoint")])
def test_a_fifo_named_as_an_export_file_is_not_read(run, tmp_path, capsys, name, fmt):
    # whether a folder holds an earlier export is read from these files: a FIFO would block
    out = tmp_path / "d"
    out.mkdir()
    os.mkfifo(out / name)
    assert _export(run / "checkpoint", out, "--format", fmt) == 2
    assert (
        f"out: {out} is not empty and not an earlier attnkit export (it holds {name})"
        in capsys.readouterr().err
    )


def test_an_earlier_export_or_an_empty_folder_is_replaced(run, tmp_path, capsys):
    out = tmp_path / "d"
    out.mkdir()
    assert _export(run / "checkpoint", out, "--format", "checkpoint") == 0
    assert _export(run / "checkpoint", out, "--format", "checkpoint") == 0  # again
    assert load_checkpoint(out).optimizer_state is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "run"]


def test_a_checkpoint_export_drafts_a_model_card_and_keeps_its_authors(run, tmp_path, capsys):
    out = tmp_path / "my-model"
    assert _export(run / "checkpoint", out, "--format", "checkpoint") == 0
    assert f"wrote {out / 'MODEL_CARD.md'}: a model card drafted" in capsys.readouterr().out
    card = (out / "MODEL_CARD.md").read_text("utf-8")
    source = load_checkpoint(run / "checkpoint")
    trainer = source.trainer_state
    assert card.startswith("# my-model (model card)\n") and f"`{run / 'checkpoint'}`" in card
    assert "Task `translate`, model `seq2seq`" in card
    model = source.config["model"]
    assert all(f"- `{k}`: " in card for k in model if k != "name")
    assert f"- `hidden`: {model['hidden']}\n" in card and "`None`" not in card
    assert f"{trainer['step']} steps (epoch {trainer['epoch']})" in card
    batching = source.config["batching"]  # the task's options, apart from the trainer's
    assert all(f"- `batching.{k}`: " in card for k in batching) and "seed" in batching
    rows = [line for line in card.splitlines() if line.startswith("| ") and "step" not in line]
    assert [int(r.split("|")[1]) for r in rows] == [h["step"] for h in trainer["history"]]
    for part in ("## Model", "## Data", "## Recipe", "## Figures", "## Limits"):
        assert part in card
    assert card.count("\nTODO: ") == 5  # what, data, command, held-out figures, limits
    (out / "MODEL_CARD.md").write_text("# my-model, by its author\n", "utf-8")
    assert _export(run / "checkpoint", out, "--format", "checkpoint") == 0  # again
    assert f"kept {out / 'MODEL_CARD.md'} as it was" in capsys.readouterr().out
    assert (out / "MODEL_CARD.md").read_text("utf-8") == "# my-model, by its author\n"


def test_the_checkpoint_being_read_or_another_run_is_never_written_over(run, tmp_path, capsys):
    before = sorted(p.name for p in (run / "checkpoint").iterdir())
    assert "trainer.json" in before
    cases = [
        (run / "checkpoint", "is the checkpoint being exported"),
        (run, "holds the checkpoint being exported"),
        (run / "checkpoint" / "sub", "is inside the checkpoint being exported"),
    ]
    for out, why in cases:
        for force in ([], ["--force"]):
            assert _export(run / "checkpoint", out, "--format", "checkpoint", *force) == 2
            err = capsys.readouterr().err
            assert f"out: {out} {why} ({run / 'checkpoint'}); expected another folder" in err
    assert sorted(p.name for p in (run / "checkpoint").iterdir()) == before
    other = tmp_path / "other"
    shutil.copytree(run, other)
    assert _export(run / "checkpoint", other / "checkpoint", "--format", "checkpoint") == 2
    assert (
        "(it holds optimizer.json, optimizer.safetensors, trainer.json)" in capsys.readouterr().err
    )
    assert load_checkpoint(other / "checkpoint").trainer_state is not None


def _enospc() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _safetensors_enospc() -> SafetensorError:
    return SafetensorError(
        "Error while serializing: I/O error: No space left on device (os error 28)"
    )


def full_disk(monkeypatch, disk: Path) -> None:
    """Make the folder ``disk`` behave as a full disk: a file that attnkit's export writes
    there (a graph, the JSON, the runner, the tensors of a checkpoint, a file moved in from
    elsewhere) is cut short and the write raises what it raises on ENOSPC."""

    def filling(real, written: int, error):
        def write(*args, **kwargs):
            path = Path(args[written])
            if disk not in path.absolute().parents:
                return real(*args, **kwargs)
            real(*args, **kwargs)
            path.write_bytes(path.read_bytes()[:100]) if path.is_file() else None
            raise error()

        return write

    for module, function, written, error in [
        (writer, "export_graph", 2, _enospc),
        (shutil, "copyfile", 1, _enospc),
        (shutil, "move", 1, _enospc),
        (Path, "write_text", 0, _enospc),
        (checkpoint_module, "save_file", 1, _safetensors_enospc),
    ]:
        monkeypatch.setattr(module, function, filling(getattr(module, function), written, error))


def read_only(monkeypatch, disk: Path) -> None:
    """Make the folder ``disk`` behave as a read-only mount: nothing can be created in it."""
    real = folders.tempfile.mkdtemp

    def mkdtemp(*args, dir=None, **kwargs):
        if dir is not None and (Path(dir) == disk or disk in Path(dir).parents):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(dir))
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(folders.tempfile, "mkdtemp", mkdtemp)


@pytest.mark.parametrize("fmt", ["onnx", "checkpoint"])
def test_a_re_export_onto_a_full_disk_leaves_the_earlier_export_whole(
    run, tmp_path, capsys, monkeypatch, fmt
):
    pytest.importorskip("onnx")
    out = tmp_path / "d"
    assert _export(run / "checkpoint", out, "--format", fmt) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    full_disk(monkeypatch, tmp_path)
    capsys.readouterr()
    assert _export(run / "checkpoint", out, "--format", fmt, "--force") == 2
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert (
        err
        == {
            "onnx": f"attnkit: out: cannot write the export in {out}: No space left on device; "
            "the earlier export there is left as it was\n",
            "checkpoint": f"attnkit: {out / 'config.json'}: not saved (No space left on device); "
            "the checkpoint already there is kept\n",
        }[fmt]
    )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "run"]


@pytest.mark.parametrize("fmt", ["onnx", "checkpoint"])
def test_an_export_that_cannot_be_written_is_one_line_naming_the_folder(
    run, tmp_path, capsys, monkeypatch, fmt
):
    pytest.importorskip("onnx")
    (tmp_path / "afile").write_text("")
    read_only(monkeypatch, tmp_path / "ro")
    (tmp_path / "ro").mkdir()
    (tmp_path / "w" / "x").mkdir(parents=True)
    (tmp_path / "w" / "notes.txt").write_text("")
    monkeypatch.chdir(tmp_path / "w" / "x")
    cases = [
        (
            tmp_path / "ro" / "d",
            {
                "onnx": f"out: cannot write the export in {tmp_path / 'ro' / 'd'}: Read-only file "
                "system",
                "checkpoint": f"{tmp_path / 'ro' / 'd'}: not saved (Read-only file system)",
            }[fmt],
        ),
        (
            tmp_path / "afile" / "sub",
            f"out: cannot create {tmp_path / 'afile' / 'sub'}: {tmp_path / 'afile'} is a file",
        ),
        ("..", "out: .. is not empty and not an earlier attnkit export (it holds notes.txt, x)"),
    ]
    capsys.readouterr()
    for out, message in cases:
        assert _export(run / "checkpoint", out, "--format", fmt) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"attnkit: {message}") and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "ro", "run", "w"]
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["notes.txt", "x"]
    assert [p.name for p in (tmp_path / "ro").iterdir()] == []


def test_an_export_replaces_the_earlier_one_whole(run, tmp_path):
    pytest.importorskip("onnx")
    vocab = CharVocab(list("ab"))
    model = CRNN(len(vocab), channels=(4, 4, 8, 8, 8), hidden=8)
    ctc = tmp_path / "ctc"
    save_checkpoint(
        ctc,
        model=model,
        config={"task": "ocr", "model": model_config(model)},
        vocab=vocab.to_json(),
    )
    out = tmp_path / "d"
    assert _export(run / "checkpoint", out) == 0
    assert (out / "decoder_step.onnx").exists()
    assert _export(ctc, out) == 0  # a CTC model has no decoder step
    assert sorted(p.name for p in out.iterdir()) == [
        "attnkit.json",
        "attnkit_runner.py",
        "encoder.onnx",
    ]


def test_a_folder_inside_another_runs_checkpoint_is_refused(run, tmp_path, capsys):
    # issue 57: the run's next save replaces its checkpoint whole, and the export inside it
    other = tmp_path / "other"
    shutil.copytree(run, other)
    out = other / "checkpoint" / "sub"
    for force in ([], ["--force"]):
        assert _export(run / "checkpoint", out, "--format", "checkpoint", *force) == 2
        assert (
            f"out: {out} is inside the checkpoint {other / 'checkpoint'}, which its next "
            "save replaces whole; expected a folder outside it"
        ) in capsys.readouterr().err
    assert not out.exists()


def test_an_export_removes_what_killed_exports_left_beside_its_folder(run, tmp_path):
    # an export killed while writing left .OUT.attnkit-tmp-* folders that no later export
    # removed
    out = tmp_path / "e"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid: no process now
    dead = out.with_name(f".e.attnkit-tmp-{gone.pid}-k2j4h6g8")
    day_old = out.with_name(".e.attnkit-tmp-a1b2c3d4")  # named before pids were
    live = out.with_name(f".e.attnkit-tmp-{os.getpid()}-m5n6p7q8")  # an export running
    fresh = out.with_name(".e.attnkit-tmp-z9y8x7w6")  # maybe another version's, running
    for folder in (dead, day_old, live, fresh):
        folder.mkdir()
        (folder / "model.onnx").write_bytes(b"half")
    hour, days = time.time() - 3600, time.time() - 2 * 86400
    for folder, when in ((dead, hour), (day_old, days), (live, hour)):
        os.utime(folder, (when, when))
    assert _export(run / "checkpoint", out) == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".e.")) == sorted(
        [live.name, fresh.name]
    )


def test_an_export_folder_follows_the_umask(run, tmp_path):
    # it was written mode 0700 (tempfile.mkdtemp's) whatever the umask
    old = os.umask(0o022)
    try:
        assert _export(run / "checkpoint", tmp_path / "e") == 0
    finally:
        os.umask(old)
    assert (tmp_path / "e").stat().st_mode & 0o777 == 0o755
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in (tmp_path / "e").iterdir() if p.is_file())


def test_a_float16_checkpoint_is_half_the_size_and_reads_back_as_float32(run, tmp_path, capsys):
    full, half = tmp_path / "full", tmp_path / "half"
    assert _export(run / "checkpoint", full, "--format", "checkpoint") == 0
    assert _export(run / "checkpoint", half, "--format", "checkpoint", "--quantize", "float16") == 0
    f, h = load_checkpoint(full), load_checkpoint(half)
    assert f.config == h.config and f.vocab == h.vocab
    assert set(f.model_state) == set(h.model_state)
    for name, w in f.model_state.items():
        if w.is_floating_point():
            # each weight is its float32 value rounded to the nearest float16
            assert h.model_state[name].dtype == torch.float16
            assert torch.equal(h.model_state[name], w.half()), name
    size = {d: (d / "model.safetensors").stat().st_size for d in (full, half)}
    # two bytes fewer for each floating-point element (the header's offsets only shrink)
    saved = 2 * sum(w.numel() for w in f.model_state.values() if w.is_floating_point())
    assert size[full] - size[half] >= saved
    # a float16 checkpoint translates as any other
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(half), "--json", "<en> 12"]) == 0
    assert json.loads(capsys.readouterr().out)["input"] == "<en> 12"


@pytest.mark.parametrize(
    ("fmt", "choice"), [("checkpoint", "int8"), ("onnx", "float16"), ("ctranslate2", "float16")]
)
def test_a_quantisation_of_another_format_is_a_one_line_error(run, tmp_path, capsys, fmt, choice):
    out = tmp_path / "x"
    assert _export(run / "checkpoint", out, "--format", fmt, "--quantize", choice) == 2
    err = capsys.readouterr().err
    assert f"--quantize: {choice} is not a choice of --format {fmt}" in err, err
    assert err.count("\n") == 1 and not out.exists()
