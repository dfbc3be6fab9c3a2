"""train ocr / train asr with an alignment, read / transcribe with joint CTC/attention
decoding; options of another alignment are refused by name."""

import argparse

import pytest

from attnkit.cli.decoder_options import add_alignment_args, alignment_config
from attnkit.cli.main import main
from attnkit.data import generate_lines, write_line_folder
from tests.cli.test_asr import train_tiny

TINY = [
    "--channels",
    "4,4,8,8,8",
    "--hidden",
    "8",
    "--dec-hidden",
    "8",
    "--batch-size",
    "4",
    "--no-progress",
    "--attention",
    "none",
    "--plot",
    "1",
]

pytestmark = pytest.mark.usefixtures("one_thread")


def test_ocr_attention_head_with_mocha_reads_with_joint_decoding(tmp_path, capsys):
    folder = write_line_folder(generate_lines(6, seed=2, max_chars=8), tmp_path / "lines").parent
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "ocr",
                "--train",
                str(folder),
                "--out",
                str(out),
                "--steps",
                "2",
                "--eval-every",
                "2",
                "--head",
                "attention",
                "--alignment",
                "mocha",
                "--chunk",
                "3",
                "--ctc-weight",
                "0.3",
                *TINY,
            ]
        )
        == 0
    )
    assert (out / "line_0.png").exists()
    capsys.readouterr()
    image = str(folder / "000000.png")
    assert (
        main(
            [
                "read",
                "--checkpoint",
                str(out / "checkpoint"),
                "--beam",
                "2",
                "--ctc-weight",
                "0.5",
                image,
            ]
        )
        == 0
    )
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_misplaced_options_are_usage_errors(tmp_path, capsys):
    folder = write_line_folder(generate_lines(4, seed=3, max_chars=8), tmp_path / "lines").parent
    base = ["train", "ocr", "--train", str(folder), "--out", str(tmp_path / "r"), *TINY]
    assert main(base + ["--head", "attention", "--alignment", "monotonic", "--chunk", "2"]) == 2
    assert (
        "--chunk: an option of --alignment mocha, got --alignment monotonic"
        in capsys.readouterr().err
    )
    assert main(base + ["--alignment", "gmm"]) == 2
    assert "--dec-score, --alignment: options of --head attention" in capsys.readouterr().err
    out = tmp_path / "plain"
    assert (
        main(
            [
                "train",
                "ocr",
                "--train",
                str(folder),
                "--out",
                str(out),
                "--steps",
                "1",
                "--head",
                "attention",
                *TINY,
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert (
        main(
            [
                "read",
                "--checkpoint",
                str(out / "checkpoint"),
                "--ctc-weight",
                "0.5",
                str(folder / "000000.png"),
            ]
        )
        == 2
    )
    assert "ctc_weight: CRNN has no CTC head to score with" in capsys.readouterr().err


def test_alignment_config_of_each_alignment():
    p = argparse.ArgumentParser()
    add_alignment_args(p)
    assert alignment_config(p.parse_args([])) == {"alignment": "softmax", "alignment_options": None}
    assert alignment_config(
        p.parse_args(["--alignment", "mocha", "--chunk", "3", "--energy-noise", "0.5"])
    ) == {"alignment": "mocha", "alignment_options": {"chunk": 3, "noise": 0.5}}
    assert alignment_config(p.parse_args(["--alignment", "local_p", "--half-width", "4"])) == {
        "alignment": "local_p",
        "alignment_options": {"half_width": 4},
    }
    assert alignment_config(p.parse_args(["--alignment", "monotonic", "--energy-offset", "0"])) == {
        "alignment": "monotonic",
        "alignment_options": {"r_init": 0.0},
    }
    with pytest.raises(
        ValueError,
        match="--energy-offset: an option of --alignment monotonic or mocha, got --alignment gmm",
    ):
        alignment_config(p.parse_args(["--alignment", "gmm", "--energy-offset", "-1"]))


def test_asr_with_monotonic_attention_transcribes_with_joint_decoding(tmp_path, capsys):
    out = train_tiny(
        tmp_path,
        "--steps",
        "2",
        "--eval-every",
        "2",
        "--plot",
        "1",
        "--alignment",
        "monotonic",
        "--ctc-weight",
        "0.3",
        start=0.25,
    )
    assert (out / "alignment_0.png").exists()
    capsys.readouterr()
    assert (
        main(
            [
                "transcribe",
                "--checkpoint",
                str(out / "checkpoint"),
                "--beam",
                "2",
                "--ctc-weight",
                "0.5",
                str(tmp_path / "w0.wav"),
            ]
        )
        == 0
    )
    assert len(capsys.readouterr().out.splitlines()) == 1
