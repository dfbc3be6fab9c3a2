"""``attnkit train TASK --init CHECKPOINT``: fine-tuning starts from a checkpoint's weights,
model and vocabulary, with a fresh optimizer and step count."""

import pytest
import torch

from attnkit.cli.main import main
from attnkit.models import complete_config
from attnkit.train import load_checkpoint

TINY = [
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


@pytest.fixture
def trained(tiny_translator):
    return load_checkpoint(tiny_translator)


def test_init_starts_from_the_weights_with_a_fresh_step_count(tsv, tmp_path, trained):
    out = tmp_path / "tuned"
    assert _train(tsv, out, "--init", str(trained.path), "--steps", "1", "--lr", "1e-9") == 0
    tuned = load_checkpoint(out / "checkpoint")
    assert tuned.trainer_state["step"] == 1  # not 2 + 1: the schedule starts afresh
    assert tuned.vocab == trained.vocab
    assert tuned.config["model"] == complete_config(trained.config["model"])
    for name, weight in trained.model_state.items():  # one step at lr 1e-9 moves nothing
        torch.testing.assert_close(tuned.model_state[name], weight, atol=1e-6, rtol=0)


def test_without_init_the_same_run_starts_elsewhere(tsv, tmp_path, trained):
    assert _train(tsv, tmp_path / "fresh", "--steps", "1", "--lr", "1e-9", "--seed", "1") == 0
    fresh = load_checkpoint(tmp_path / "fresh" / "checkpoint")
    assert any(not torch.allclose(fresh.model_state[k], w) for k, w in trained.model_state.items())


def test_init_refuses_other_model_settings_by_name(tsv, tmp_path, trained, capsys):
    capsys.readouterr()
    assert (
        _train(
            tsv, tmp_path / "tuned", "--init", str(trained.path), "--steps", "1", "--hidden", "16"
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "saved with other model settings (--hidden 8 saved, 16 given)" in err
    assert "--init keeps the checkpoint's model and vocabulary" in err
    assert not (tmp_path / "tuned" / "checkpoint").exists()


def test_init_takes_the_dropout_given_as_the_weights_do_not_depend_on_it(tsv, tmp_path, trained):
    out = tmp_path / "tuned"
    saved = complete_config(trained.config["model"])
    assert saved["dropout"] != 0.3
    assert (
        _train(
            tsv,
            out,
            "--init",
            str(trained.path),
            "--steps",
            "1",
            "--lr",
            "1e-9",
            "--dropout",
            "0.3",
        )
        == 0
    )
    tuned = load_checkpoint(out / "checkpoint")
    assert tuned.config["model"] == {**saved, "dropout": 0.3}
    for name, weight in trained.model_state.items():
        torch.testing.assert_close(tuned.model_state[name], weight, atol=1e-6, rtol=0)


def test_init_refuses_another_tasks_checkpoint(tsv, tmp_path, capsys):
    assert _train(tsv, tmp_path / "tuned", "--init", "builtin:ocr-lines", "--steps", "1") == 2
    err = capsys.readouterr().err
    assert "builtin:ocr-lines: not a checkpoint of task translate (task 'ocr')" in err


def test_init_refuses_a_missing_checkpoint(tsv, tmp_path, capsys):
    assert _train(tsv, tmp_path / "tuned", "--init", str(tmp_path / "none"), "--steps", "1") == 2
    assert f"{tmp_path / 'none'}: no such checkpoint directory" in capsys.readouterr().err


def test_resume_of_a_fine_tuning_continues_it(tsv, tmp_path, trained):
    out = tmp_path / "tuned"
    assert _train(tsv, out, "--init", str(trained.path), "--steps", "2") == 0
    after_two = load_checkpoint(out / "checkpoint")
    assert _train(tsv, out, "--init", str(trained.path), "--steps", "3", "--resume") == 0
    resumed = load_checkpoint(out / "checkpoint")
    assert resumed.trainer_state["step"] == 3
    assert any(not torch.equal(resumed.model_state[k], w) for k, w in after_two.model_state.items())


def test_init_names_a_ctc_weight_that_does_not_fit_the_checkpoints_head(tmp_path, capsys):
    out = tmp_path / "tuned"  # builtin:asr-digits has a CTC head: --ctc-weight 0 has no use
    assert (
        main(
            [
                "train",
                "asr",
                "--recipe",
                "asr-digits",
                "--init",
                "builtin:asr-digits",
                "--ctc-weight",
                "0",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert (
        "asr-digits: its model has a CTC head; --ctc-weight above 0 trains it (got "
        "--ctc-weight 0)" in err
    )
    assert not (out / "checkpoint").exists()
