"""Run folders: nothing lost to a cut-short save, a second run, a wrong path or a signal."""

import shutil
import signal

import pytest
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from attnkit.cli import translate as translate_cli
from attnkit.cli.main import main
from attnkit.tasks.translate import TranslateTask
from attnkit.train import checkpoint as checkpoint_module
from attnkit.train import load_checkpoint, lock_folder
from attnkit.train.lock import LOCK_FILE

TINY = [
    "--steps",
    "2",
    "--eval-every",
    "2",
    "--batch-size",
    "4",
    "--hidden",
    "8",
    "--emb",
    "8",
    "--no-progress",
    "--plot",
    "0",
]


def _train(tsv, out, *extra):
    return main(["train", "translate", "--train", str(tsv), "--out", str(out), *TINY, *extra])


def test_a_checkpoint_left_aside_by_a_cut_save_is_neither_overwritten_nor_lost(
    tsv, tmp_path, capsys
):
    out = tmp_path / "run"
    assert _train(tsv, out) == 0
    (out / "checkpoint").rename(out / ".checkpoint.attnkit-old")  # killed between the renames
    (out / ".checkpoint.attnkit-tmp-x7f3k2q9").mkdir()  # a save killed while writing
    (out / ".checkpoint.attnkit-tmp-x7f3k2q9" / "model.safetensors").write_bytes(b"half")
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    assert _train(tsv, out) == 2
    assert "run/checkpoint: already holds a checkpoint; pass --resume" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == before  # refused: nothing changed
    assert _train(tsv, out, "--steps", "3", "--resume") == 0  # the later --steps wins
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".checkpoint")) == []
    assert load_checkpoint(out / "checkpoint").trainer_state["step"] == 3


def test_a_user_s_checkpoint_named_folders_are_never_deleted(tsv, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(tsv, out) == 0
    mine = [".checkpoint.backup", ".checkpoint.old", ".checkpoint.new", ".checkpoint.x7f3k2q9"]
    for name in mine:
        (out / name).mkdir()
        (out / name / "notes.txt").write_text(name)
    capsys.readouterr()
    assert _train(tsv, out) == 2  # refused: no --resume
    assert _train(tsv, out, "--steps", "3", "--resume") == 0
    for name in mine:
        assert (out / name / "notes.txt").read_text() == name
    assert load_checkpoint(out / "checkpoint").trainer_state["step"] == 3
    other = tmp_path / "other"  # a new run beside them
    shutil.copytree(out, other, ignore=shutil.ignore_patterns("checkpoint"))
    assert _train(tsv, other) == 0
    for name in mine:
        assert (other / name / "notes.txt").read_text() == name


def test_a_nan_in_the_optimizer_state_is_refused_and_the_checkpoint_kept(tsv, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(tsv, out) == 0
    path = out / "checkpoint" / "optimizer.safetensors"
    tensors = load_file(path)
    name = sorted(tensors)[0]
    tensors[name].view(-1)[0] = float("nan")
    save_file(tensors, path)
    before = {p.name: p.read_bytes() for p in (out / "checkpoint").iterdir()}
    capsys.readouterr()
    assert _train(tsv, out, "--steps", "3", "--resume") == 2
    err = capsys.readouterr().err
    assert (
        f"{path}: 1 optimizer tensors hold NaN or infinite values ({name}); resuming "
        "would turn the weights into NaN"
    ) in err, err
    assert err.count("\n") == 1
    assert {p.name: p.read_bytes() for p in (out / "checkpoint").iterdir()} == before


@pytest.mark.parametrize(
    "edit, message",
    [
        # finite, but no AdamW state: the square root of a negative second moment is NaN
        (
            lambda t: t["state.0.exp_avg_sq"].view(-1).__setitem__(0, -1.0),
            "1 optimizer tensors hold negative values (state.0.exp_avg_sq); AdamW's running means "
            "of squared gradients are >= 0: resuming would turn the weights into NaN",
        ),
        # finite and of the right sign, but a step of 1e30: the first step's loss is NaN
        (
            lambda t: [
                v.fill_(1e30 if k.endswith(".exp_avg") else 0.0)
                for k, v in t.items()
                if k.endswith((".exp_avg", ".exp_avg_sq"))
            ],
            "step 3: the training loss is nan; the weights ",
        ),
    ],
)
def test_a_finite_but_invalid_optimizer_state_is_one_line(tsv, tmp_path, capsys, edit, message):
    # a FloatingPointError traceback at the first step resumed
    out = tmp_path / "run"
    assert _train(tsv, out) == 0
    path = out / "checkpoint" / "optimizer.safetensors"
    tensors = load_file(path)
    edit(tensors)
    save_file(tensors, path)
    before = {p.name: p.read_bytes() for p in (out / "checkpoint").iterdir()}
    capsys.readouterr()
    assert _train(tsv, out, "--steps", "4", "--resume") == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert {p.name: p.read_bytes() for p in (out / "checkpoint").iterdir()} == before


def test_a_full_disk_during_a_save_is_one_line_and_keeps_the_checkpoint(
    tsv, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "run"
    assert _train(tsv, out) == 0
    before = {p.name: p.read_bytes() for p in (out / "checkpoint").iterdir()}

    def full(*args, **kwargs):  # what safetensors raises on a full disk
        raise SafetensorError(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        )

    monkeypatch.setattr(checkpoint_module, "save_file", full)
    capsys.readouterr()
    for _ in range(2):  # the save at the end of the run, and the same at every resume after it
        assert _train(tsv, out, "--steps", "3", "--resume") == 2
        assert capsys.readouterr().err == (
            f"attnkit: {out / 'checkpoint' / 'model.safetensors'}: not saved (No space left on "
            "device); the checkpoint already there is kept\n"
        )
    assert {p.name: p.read_bytes() for p in (out / "checkpoint").iterdir()} == before
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".checkpoint")) == []


def test_a_checkpoint_linked_to_another_disk_is_saved_there(tsv, tmp_path, capsys):
    out, disk = tmp_path / "run", tmp_path / "disk"
    assert _train(tsv, out) == 0
    disk.mkdir()
    (out / "checkpoint").rename(disk / "checkpoint")
    (out / "checkpoint").symlink_to(disk / "checkpoint")
    assert _train(tsv, out, "--steps", "3", "--resume") == 0
    assert _train(tsv, out, "--steps", "4", "--resume") == 0
    assert (out / "checkpoint").is_symlink()
    assert load_checkpoint(disk / "checkpoint").trainer_state["step"] == 4
    assert sorted(p.name for p in disk.iterdir()) == ["checkpoint"]
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".checkpoint")) == []


def test_demo_out_naming_a_file_is_refused_before_any_work(tmp_path, capsys):
    (tmp_path / "afile").write_text("keep me")
    assert main(["demo", "--out", str(tmp_path / "afile")]) == 2
    assert capsys.readouterr().err == (
        f"attnkit: --out: {tmp_path / 'afile'} is a file, not a folder\n"
    )
    assert main(["demo", "--out", str(tmp_path / "afile" / "sub")]) == 2
    assert capsys.readouterr().err == (
        f"attnkit: --out: cannot create "
        f"{tmp_path / 'afile' / 'sub'}: {tmp_path / 'afile'} is "
        "a file\n"
    )
    assert (tmp_path / "afile").read_text() == "keep me"


@pytest.mark.parametrize(
    "option, value, named",
    [
        ("--hidden", "16", "--hidden 8 saved, 16 given"),
        ("--model", "luong", "--model 'bahdanau' saved, 'luong' given"),
        ("--dropout", "0.3", "--dropout 0.0 saved, 0.3 given"),
    ],
)
def test_resume_refuses_changed_model_settings_by_name(tsv, tmp_path, capsys, option, value, named):
    out = tmp_path / "run"
    assert _train(tsv, out) == 0
    capsys.readouterr()
    assert _train(tsv, out, "--resume", option, value) == 2
    err = capsys.readouterr().err
    assert f"saved with other model settings ({named})" in err
    assert err.count("\n") == 1  # one line, no traceback


@pytest.mark.parametrize(
    "first, then, named",
    [
        ((), ("--vocab", "bpe"), "--vocab 'char' saved, 'bpe' given"),
        (("--vocab", "bpe"), ("--vocab", "unigram"), "--vocab 'bpe' saved, 'unigram' given"),
        (
            ("--vocab", "bpe"),
            ("--vocab", "bpe", "--vocab-size", "500"),
            "--vocab-size 1000 saved, 500 given",
        ),
    ],
)
def test_resume_refuses_changed_vocabulary_settings_by_name(
    tsv, tmp_path, capsys, first, then, named
):
    out = tmp_path / "run"
    assert _train(tsv, out, *first) == 0
    capsys.readouterr()
    assert _train(tsv, out, "--resume", *then) == 2
    err = capsys.readouterr().err
    assert f"saved with other vocabulary settings ({named})" in err
    assert err.count("\n") == 1  # one line, no traceback
    assert _train(tsv, out, "--resume", "--steps", "3", *first) == 0  # the same: resumed


def test_a_changed_task_setting_is_named_with_both_values(tsv, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(tsv, out) == 0
    capsys.readouterr()
    assert _train(tsv, out, "--resume", "--label-smoothing", "0.2") == 2
    assert "differs in batching.label_smoothing: 0.1 saved, 0.2 now" in capsys.readouterr().err


def test_a_run_folder_in_use_is_refused_naming_the_process(tsv, tmp_path, capsys):
    with lock_folder(tmp_path / "run"):
        assert _train(tsv, tmp_path / "run") == 2
        assert "in use by another attnkit process (pid" in capsys.readouterr().err
    assert _train(tsv, tmp_path / "run") == 0
    assert not (tmp_path / "run" / LOCK_FILE).exists()


def test_out_and_plot_naming_files_are_refused_before_any_work(tsv, tmp_path, capsys, monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("the data was read")

    monkeypatch.setattr("attnkit.cli.corpus.read_data", no_work)
    monkeypatch.setattr(translate_cli.loading, "load_task_model", no_work)
    (tmp_path / "file").write_text("keep me")
    assert _train(tsv, tmp_path / "file") == 2
    assert f"--out: {tmp_path / 'file'} is a file, not a folder" in capsys.readouterr().err
    assert _train(tsv, tmp_path / "file" / "run") == 2
    assert f"{tmp_path / 'file'} is a file" in capsys.readouterr().err
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                str(tmp_path / "ck"),
                "x",
                "--plot",
                str(tmp_path / "file"),
            ]
        )
        == 2
    )
    assert "--plot: " in capsys.readouterr().err
    assert (tmp_path / "file").read_text() == "keep me"


def _signalled_at_step_2(monkeypatch, signum):
    loss, calls = TranslateTask.loss, []

    def signalled(self, model, batch, step=0):
        calls.append(step)
        if len(calls) == 2:
            signal.raise_signal(signum)
        return loss(self, model, batch, step)

    monkeypatch.setattr(TranslateTask, "loss", signalled)


@pytest.mark.parametrize(
    "signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]
)
def test_a_signal_saves_then_exits_with_its_code(tsv, tmp_path, capsys, monkeypatch, signum, code):
    _signalled_at_step_2(monkeypatch, signum)
    out = tmp_path / "run"
    # A shell starts its background jobs with SIGINT ignored, which the trainer then leaves
    # ignored (as nohup's SIGHUP, below): this test sets the foreground job's disposition.
    previous = signal.signal(
        signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
    )
    try:
        assert _train(tsv, out, "--steps", "50") == code
    finally:
        signal.signal(signum, previous)
    err = capsys.readouterr().err
    assert f"stopped by {signal.Signals(signum).name} after 2 steps; the checkpoint is saved" in err
    assert "Traceback" not in err
    assert load_checkpoint(out / "checkpoint").trainer_state["step"] == 2
    assert not (out / "history.json").exists()  # stopped: no final evaluation


def test_a_hangup_that_nohup_ignores_stays_ignored(tsv, tmp_path, monkeypatch):
    _signalled_at_step_2(monkeypatch, signal.SIGHUP)
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert _train(tsv, tmp_path / "run", "--steps", "4") == 0
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert load_checkpoint(tmp_path / "run" / "checkpoint").trainer_state["step"] == 4


def test_ctrl_c_before_training_stops_cleanly(tsv, tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("attnkit.cli.corpus.read_data", interrupted)
    assert _train(tsv, tmp_path / "run") == 130
    assert capsys.readouterr().err == "attnkit: interrupted\n"
    assert not (tmp_path / "run" / LOCK_FILE).exists()
    assert not (tmp_path / "run" / "checkpoint").exists()


def test_a_full_disk_at_history_json_says_so_and_keeps_the_checkpoint(
    tmp_path, capsys, monkeypatch
):
    import errno
    import os
    from pathlib import Path

    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"<en> {n}\t{n}{n}\n" for n in range(8)), encoding="utf-8")
    write_text = Path.write_text

    def full(self, *args, **kwargs):
        if self.name == "history.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    assert (
        main(
            [
                "train",
                "translate",
                "--train",
                str(tsv),
                "--out",
                str(tmp_path / "run"),
                "--steps",
                "2",
                "--batch-size",
                "4",
                "--hidden",
                "8",
                "--emb",
                "8",
                "--no-progress",
                "--plot",
                "0",
            ]
        )
        != 0
    )
    err = capsys.readouterr().err
    assert (
        "history.json: cannot write the validation history (No space left on device); "
        "the trained model is saved in"
        in err
        and "Traceback" not in err
    )
    assert (tmp_path / "run" / "checkpoint" / "model.safetensors").is_file()
