"""``attnkit average`` and ``--keep-best``: a run's best validations averaged into one
checkpoint that the other commands load."""

import shutil

import pytest
import torch

from attnkit.cli.main import main
from attnkit.train import load_checkpoint

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("average")
    tsv = folder / "pairs.tsv"
    tsv.write_text("".join(f"<en> {w}\t{n}\n" for n, w in enumerate(WORDS)), encoding="utf-8")
    assert (
        main(
            [
                "train",
                "translate",
                "--train",
                str(tsv),
                "--out",
                str(folder / "run"),
                "--steps",
                "8",
                "--eval-every",
                "2",
                "--batch-size",
                "4",
                "--hidden",
                "8",
                "--emb",
                "8",
                "--lr",
                "0.05",
                "--keep-best",
                "2",
                "--no-progress",
                "--plot",
                "0",
            ]
        )
        == 0
    )
    return folder


def test_average_of_a_runs_best_validations_is_a_checkpoint_the_verbs_load(run, capsys):
    kept = sorted((run / "run" / "best").iterdir())
    assert len(kept) == 2 and (run / "run" / "checkpoint-best" / "model.safetensors").is_file()
    assert main(["average", "--run", str(run / "run"), "--out", str(run / "avg")]) == 0
    assert "averaged 2 checkpoints" in capsys.readouterr().out
    mean = load_checkpoint(run / "avg")
    states = [load_checkpoint(p).model_state for p in kept]
    for name, tensor in mean.model_state.items():
        torch.testing.assert_close(tensor, (states[0][name] + states[1][name]) / 2, msg=name)
    # loads and decodes: one output line for the one input (a model of a few steps may
    # well translate it as nothing)
    assert main(["translate", "--checkpoint", str(run / "avg"), "three"]) == 0
    assert capsys.readouterr().out.count("\n") == 1
    assert main(["average", *map(str, kept), "--out", str(run / "avg2")]) == 0


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "expected CHECKPOINT folders or --run RUN, got neither"),
        (["--best", "2", "x"], "--best: expected a positive int with --run, got 2 without --run"),
    ],
)
def test_average_option_errors(tmp_path, capsys, args, message):
    assert main(["average", *args, "--out", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err


def test_average_will_not_overwrite_another_folder(run, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["average", "--run", str(run / "run"), "--out", str(tmp_path)]) != 0
    assert (
        "is not empty and not an earlier attnkit export (it holds notes.txt)"
        in capsys.readouterr().err
    )
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.fixture
def copied(run, tmp_path):
    """A copy of the run folder, to be written over if a refusal fails."""
    shutil.copytree(run / "run", tmp_path / "run")
    return tmp_path / "run"


def test_average_never_writes_over_the_run_it_reads(run, copied, capsys):
    # issue 57: --out RUN/checkpoint replaced the resumable checkpoint, --out RUN/best/step-N
    # one of its inputs, and --out RUN/checkpoint/sub was deleted by the run's next save
    kept = sorted((copied / "best").iterdir())
    before = {
        p: sorted(f.name for f in p.iterdir())
        for p in [copied / "checkpoint", copied / "checkpoint-best", *kept]
    }
    foreign = "is not empty and not an earlier attnkit export (it holds"
    cases = [
        (copied / "checkpoint", f"{foreign} optimizer.json, optimizer.safetensors, trainer.json)"),
        (copied / "checkpoint-best", f"{foreign} trainer.json)"),
        (kept[0], f"is the checkpoint being averaged ({kept[0]})"),
        (copied / "best", "holds the checkpoint being averaged ("),
        (kept[1] / "sub", f"is inside the checkpoint being averaged ({kept[1]})"),
        (
            copied / "checkpoint" / "sub",
            f"is inside the checkpoint {copied / 'checkpoint'}, which its next save",
        ),
    ]
    for out, why in cases:
        for given in (["--run", str(copied)], list(map(str, kept))):
            assert main(["average", *given, "--out", str(out)]) == 2
            err = capsys.readouterr().err
            assert f"out: {out} {why}" in err, err
            assert err.count("\n") == 1
    assert {p: sorted(f.name for f in p.iterdir()) for p in before} == before
    assert not (copied / "checkpoint" / "sub").exists()
    assert (
        main(
            [
                "train",
                "translate",
                "--train",
                str(run / "pairs.tsv"),
                "--out",
                str(copied),
                "--resume",
                "--steps",
                "10",
                "--eval-every",
                "2",
                "--batch-size",
                "4",
                "--hidden",
                "8",
                "--emb",
                "8",
                "--lr",
                "0.05",
                "--keep-best",
                "2",
                "--no-progress",
                "--plot",
                "0",
            ]
        )
        == 0
    )


def test_average_replaces_an_earlier_average(run, tmp_path, capsys):
    out = tmp_path / "avg"
    for _ in range(2):
        assert main(["average", "--run", str(run / "run"), "--out", str(out)]) == 0
    assert "averaged 2 checkpoints" in capsys.readouterr().out
    assert load_checkpoint(out).trainer_state["steps"]
