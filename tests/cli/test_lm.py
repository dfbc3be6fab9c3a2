"""train lm on a recogniser's characters, then read with shallow fusion; bad use is refused."""

import pytest

from attnkit.cli.main import main
from attnkit.data import generate_lines, write_line_folder
from tests.cli.test_decoder_options import TINY

pytestmark = pytest.mark.usefixtures("one_thread")


def test_train_lm_and_read_with_it(tmp_path, capsys):
    folder = write_line_folder(generate_lines(4, seed=2, max_chars=8), tmp_path / "lines").parent
    ocr = tmp_path / "ocr"
    assert (
        main(
            [
                "train",
                "ocr",
                "--train",
                str(folder),
                "--out",
                str(ocr),
                "--steps",
                "1",
                "--head",
                "attention",
                "--ctc-weight",
                "0.3",
                *TINY,
            ]
        )
        == 0
    )
    text = tmp_path / "transcripts.txt"
    text.write_text(
        "".join(
            line.split("\t")[1] + "\n\n"
            for line in (folder / "labels.tsv").read_text().splitlines()
        )
    )
    lm = tmp_path / "lm"
    assert (
        main(
            [
                "train",
                "lm",
                "--text",
                str(text),
                "--vocab-from",
                str(ocr / "checkpoint"),
                "--out",
                str(lm),
                "--steps",
                "3",
                "--eval-every",
                "3",
                "--hidden",
                "8",
                "--emb",
                "4",
                "--batch-size",
                "2",
                "--no-progress",
            ]
        )
        == 0
    )
    assert "held-out: accuracy" in capsys.readouterr().out
    image = str(folder / "000000.png")
    read = ["read", "--checkpoint", str(ocr / "checkpoint"), image]
    assert (
        main(
            read
            + [
                "--beam",
                "2",
                "--ctc-weight",
                "0.5",
                "--lm",
                str(lm / "checkpoint"),
                "--lm-weight",
                "0.3",
            ]
        )
        == 0
    )
    assert len(capsys.readouterr().out.splitlines()) == 1
    assert main(read + ["--lm", str(lm / "checkpoint")]) == 2
    assert "--lm, --lm-weight: give both" in capsys.readouterr().err
    assert main(read + ["--lm", str(ocr / "checkpoint"), "--lm-weight", "0.3"]) == 2
    assert "not a checkpoint of task lm" in capsys.readouterr().err
    bad = tmp_path / "bad.txt"
    bad.write_text("fine\n\u2603 snow\n")
    assert (
        main(
            [
                "train",
                "lm",
                "--text",
                str(bad),
                "--vocab-from",
                str(ocr / "checkpoint"),
                "--out",
                str(tmp_path / "lm2"),
                "--no-progress",
            ]
        )
        == 2
    )
    assert "bad.txt:2: characters outside the recogniser's alphabet" in capsys.readouterr().err


def test_train_lm_validates_on_the_valid_file(tmp_path, capsys):
    """``--valid FILE`` (documented in docs/lm.md and --help) is read, not refused as a
    built-in-data option: a character outside the alphabet in it is reported by its line."""
    folder = write_line_folder(generate_lines(4, seed=2, max_chars=8), tmp_path / "lines").parent
    ocr = tmp_path / "ocr"
    assert (
        main(["train", "ocr", "--train", str(folder), "--out", str(ocr), "--steps", "1", *TINY])
        == 0
    )
    labels = [line.split("\t")[1] for line in (folder / "labels.tsv").read_text().splitlines()]
    text, valid, bad = tmp_path / "text.txt", tmp_path / "valid.txt", tmp_path / "bad.txt"
    text.write_text("".join(line + "\n" for line in labels[:3]))
    valid.write_text(labels[3] + "\n")
    bad.write_text(labels[3] + "\n\u2603\n")
    lm = [
        "train",
        "lm",
        "--text",
        str(text),
        "--vocab-from",
        str(ocr / "checkpoint"),
        "--steps",
        "2",
        "--eval-every",
        "2",
        "--hidden",
        "8",
        "--emb",
        "4",
        "--batch-size",
        "2",
        "--no-progress",
    ]
    assert main(lm + ["--valid", str(bad), "--out", str(tmp_path / "lm-bad")]) == 2
    assert "bad.txt:2: characters outside the recogniser's alphabet" in capsys.readouterr().err
    assert main(lm + ["--valid", str(valid), "--out", str(tmp_path / "lm")]) == 0
    assert "held-out: accuracy" in capsys.readouterr().out


def test_a_ctc_head_reads_with_a_prefix_beam_and_an_lm_of_its_own_characters(tmp_path, capsys):
    folder = write_line_folder(generate_lines(4, seed=2, max_chars=8), tmp_path / "lines").parent
    ocr = tmp_path / "ocr"
    assert (
        main(["train", "ocr", "--train", str(folder), "--out", str(ocr), "--steps", "1", *TINY])
        == 0
    )
    text = tmp_path / "text.txt"
    text.write_text(
        "".join(
            line.split("\t")[1] + "\n" for line in (folder / "labels.tsv").read_text().splitlines()
        )
    )
    small = [
        "--steps",
        "1",
        "--eval-every",
        "1",
        "--hidden",
        "8",
        "--emb",
        "4",
        "--batch-size",
        "2",
        "--no-progress",
    ]
    for name, vocab in (("lm", str(ocr / "checkpoint")), ("digits", "builtin:asr-digits")):
        if name == "digits":
            text.write_text("one two\nthree\nfour\n")
        assert (
            main(
                [
                    "train",
                    "lm",
                    "--text",
                    str(text),
                    "--vocab-from",
                    vocab,
                    "--out",
                    str(tmp_path / name),
                    *small,
                ]
            )
            == 0
        )
    capsys.readouterr()
    read = ["read", "--checkpoint", str(ocr / "checkpoint"), str(folder / "000000.png")]
    assert (
        main(
            read
            + ["--beam", "3", "--lm", str(tmp_path / "lm" / "checkpoint"), "--lm-weight", "0.3"]
        )
        == 0
    )
    assert len(capsys.readouterr().out.splitlines()) == 1
    assert (
        main(
            read
            + ["--beam", "3", "--lm", str(tmp_path / "digits" / "checkpoint"), "--lm-weight", "0.3"]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "--lm: " in err and str(tmp_path / "digits" / "checkpoint") in err
    assert f"--checkpoint {ocr / 'checkpoint'}" in err
