"""Augmentation on the command line: out-of-range options are one-line errors naming the
option, the settings are saved in the checkpoint and kept by --resume, and a run stopped and
resumed with augmentation ends where an uninterrupted one does."""

import json

import pytest
import torch
from safetensors.torch import load_file

from attnkit.cli.main import main
from attnkit.data import generate_lines, write_line_folder

pytestmark = pytest.mark.usefixtures("one_thread")

OCR_TINY = ["--channels", "4,4,8,8,8", "--hidden", "8", "--batch-size", "4", "--no-progress",
            "--plot", "0", "--attention", "none", "--eval-every", "100"]


@pytest.fixture(scope="module")
def lines(tmp_path_factory):
    return write_line_folder(generate_lines(8, seed=1, max_chars=12),
                             tmp_path_factory.mktemp("lines") / "train").parent


def _weights(run):
    return load_file(str(run / "checkpoint" / "model.safetensors"))


def _config(run):
    return json.loads((run / "checkpoint" / "config.json").read_text())["config"]


def test_ocr_with_augmentation_resumes_to_the_state_of_an_uninterrupted_run(tmp_path, lines,
                                                                            capsys):
    augment = ["--augment", "strong", "--rotate", "3", "--augment-prob", "rotate=1,jpeg=0.5"]
    base = ["train", "ocr", "--train", str(lines), *OCR_TINY, *augment]
    assert main([*base, "--out", str(tmp_path / "straight"), "--steps", "6"]) == 0
    assert main([*base, "--out", str(tmp_path / "cut"), "--steps", "3",
                 "--checkpoint-every", "3"]) == 0
    # resumed without the augmentation options (the saved ones are used), in 2 data workers
    resume = ["train", "ocr", "--train", str(lines), *OCR_TINY, "--out", str(tmp_path / "cut"),
              "--steps", "6", "--resume", "--workers-data", "2"]
    assert main(resume) == 0
    straight, resumed = _weights(tmp_path / "straight"), _weights(tmp_path / "cut")
    for name, value in straight.items():
        assert torch.equal(value, resumed[name]), name
    saved = _config(tmp_path / "cut")["augment"]
    assert [a["name"] for a in saved][:3] == ["scale", "stretch", "rotate"]
    rotate = next(a for a in saved if a["name"] == "rotate")
    assert rotate == {"name": "rotate", "p": 1.0, "degrees": 3.0}
    # not vacuous: without augmentation the same run ends elsewhere
    assert main(["train", "ocr", "--train", str(lines), *OCR_TINY, "--out",
                 str(tmp_path / "plain"), "--steps", "6"]) == 0
    plain = _weights(tmp_path / "plain")
    assert any(not torch.equal(v, plain[k]) for k, v in straight.items())
    assert "augment" not in _config(tmp_path / "plain")  # off by default: nothing saved
    capsys.readouterr()
    assert main([*resume[:-2], "--steps", "7", "--augment", "light"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attnkit: --augment: the run in {tmp_path / 'cut'} was started with "
                          "augmentation scale, stretch, rotate") and err.count("\n") == 1


@pytest.mark.parametrize("task, option, value, message", [
    ("ocr", "--rotate", "90", "--rotate: expected the largest rotation in degrees, from 0 to "
                              "45"),
    ("ocr", "--jpeg", "0,50", "--jpeg: expected LOW,HIGH JPEG qualities with 1 <= LOW"),
    ("ocr", "--ink", "0.5,0.9", "--ink: expected LOW,HIGH ink gray levels"),
    ("ocr", "--augment-prob", "speed=0.5", "--augment-prob: expected NAME one of baseline"),
])
def test_augmentation_options_out_of_range_are_one_line_errors(tmp_path, capsys, task, option,
                                                               value, message):
    assert main(["train", task, "--out", str(tmp_path / "r"), f"{option}={value}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attnkit: {message}") and err.count("\n") == 1, err
    assert not (tmp_path / "r").exists()
