"""attnkit export --out: what is already in the folder is replaced only when it is an earlier
export (or with --force), never the checkpoint being read, and a failed export leaves the
earlier one whole."""

import errno
import os
import shutil
from pathlib import Path

import pytest

from attnkit.cli.main import main
from attnkit.data import CharVocab
from attnkit.export import writer
from attnkit.models import CRNN, model_config
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
        assert (f"out: {out} is not empty and not an earlier attnkit export (it holds "
                "thesis.txt); expected a new or empty folder, or pass --force") in err, err
        assert err.count("\n") == 1
        assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "run"]
        assert (out / "thesis.txt").read_text() == "x"
    assert _export(run / "checkpoint", out, "--format", "checkpoint", "--force") == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors",
                                                      "vocab.json"]


def test_an_earlier_export_or_an_empty_folder_is_replaced(run, tmp_path, capsys):
    out = tmp_path / "d"
    out.mkdir()
    assert _export(run / "checkpoint", out, "--format", "checkpoint") == 0
    assert _export(run / "checkpoint", out, "--format", "checkpoint") == 0  # again
    assert load_checkpoint(out).optimizer_state is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "run"]


def test_the_checkpoint_being_read_or_another_run_is_never_written_over(run, tmp_path, capsys):
    before = sorted(p.name for p in (run / "checkpoint").iterdir())
    assert "trainer.json" in before
    cases = [(run / "checkpoint", "is the checkpoint being exported"),
             (run, "holds the checkpoint being exported"),
             (run / "checkpoint" / "sub", "is inside the checkpoint being exported")]
    for out, why in cases:
        for force in ([], ["--force"]):
            assert _export(run / "checkpoint", out, "--format", "checkpoint", *force) == 2
            err = capsys.readouterr().err
            assert f"out: {out} {why} ({run / 'checkpoint'}); expected another folder" in err
    assert sorted(p.name for p in (run / "checkpoint").iterdir()) == before
    other = tmp_path / "other"
    shutil.copytree(run, other)
    assert _export(run / "checkpoint", other / "checkpoint", "--format", "checkpoint") == 2
    assert "(it holds optimizer.json, optimizer.safetensors, trainer.json)" in \
        capsys.readouterr().err
    assert load_checkpoint(other / "checkpoint").trainer_state is not None


def full_disk(monkeypatch, disk: Path) -> None:
    """Make the folder ``disk`` behave as a full disk: a file that attnkit's export writes
    there (a graph, the JSON, the runner, a file moved in from elsewhere) is cut short and
    the write raises ENOSPC."""
    def filling(real, written: int):
        def write(*args, **kwargs):
            path = Path(args[written])
            if disk not in path.absolute().parents:
                return real(*args, **kwargs)
            real(*args, **kwargs)
            path.write_bytes(path.read_bytes()[:100]) if path.is_file() else None
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write

    for module, function, written in [(writer, "export_graph", 2), (shutil, "copyfile", 1),
                                      (shutil, "move", 1), (Path, "write_text", 0)]:
        monkeypatch.setattr(module, function, filling(getattr(module, function), written))


def test_a_re_export_onto_a_full_disk_leaves_the_earlier_export_whole(run, tmp_path,
                                                                     monkeypatch):
    pytest.importorskip("onnx")
    out = tmp_path / "d"
    assert _export(run / "checkpoint", out) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    full_disk(monkeypatch, tmp_path)
    with pytest.raises(OSError):
        _export(run / "checkpoint", out, "--beam", "2")
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "run"]


def test_an_export_replaces_the_earlier_one_whole(run, tmp_path):
    pytest.importorskip("onnx")
    vocab = CharVocab(list("ab"))
    model = CRNN(len(vocab), channels=(4, 4, 8, 8, 8), hidden=8)
    ctc = tmp_path / "ctc"
    save_checkpoint(ctc, model=model, config={"task": "ocr", "model": model_config(model)},
                    vocab=vocab.to_json())
    out = tmp_path / "d"
    assert _export(run / "checkpoint", out) == 0
    assert (out / "decoder_step.onnx").exists()
    assert _export(ctc, out) == 0  # a CTC model has no decoder step
    assert sorted(p.name for p in out.iterdir()) == ["attnkit.json", "attnkit_runner.py",
                                                      "encoder.onnx"]
