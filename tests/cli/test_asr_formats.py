"""``attnkit train asr`` and ``attnkit eval`` on a corpus of each speech format (the corpora of
tests/data/test_formats_speech.py): three training steps and an evaluation each, the format
detected or named, its options, and bad corpora named in one line."""

import json
import logging
import re

import pytest

from attnkit.cli.main import main
from tests.cli.test_asr import TINY
from tests.data.test_formats_speech import CORPORA, OPTIONS, UTTERANCES

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("name", list(CORPORA))
def test_train_three_steps_and_eval_on_each_format(tmp_path, name, capsys, caplog):
    caplog.set_level(logging.INFO, logger="attnkit")
    corpus, native = CORPORA[name][0](tmp_path)
    options = [a for k, v in OPTIONS.get(name, {}).items() for a in (f"--{k}", v)]
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "asr",
                "--train",
                str(corpus),
                "--valid",
                str(corpus),
                "--out",
                str(out),
                "--steps",
                "3",
                "--eval-every",
                "3",
                *TINY,
                *options,
            ]
        )
        == 0
    )
    assert "stopped after 3 steps" in capsys.readouterr().out
    assert f"read as {name}" in caplog.text
    config = json.loads((out / "checkpoint" / "config.json").read_text())["config"]
    assert config["data"]["train"] == str(corpus)
    ck = str(out / "checkpoint")
    scores = []
    for data, given in ((corpus, options), (native, [])):
        assert main(["eval", "--checkpoint", ck, "--data", str(data), "--json", *given]) == 0
        result = json.loads(capsys.readouterr().out)
        scores.append((result["examples"], result["metrics"]))
    assert scores[0] == scores[1]  # the same utterances: the same outputs and scores
    assert scores[0][0] == len(UTTERANCES)


def test_format_named_and_its_options(tmp_path, capsys):
    corpus, _ = CORPORA["commonvoice"][0](tmp_path)
    out = tmp_path / "run"
    args = [
        "train",
        "asr",
        "--train",
        str(corpus),
        "--out",
        str(out),
        "--steps",
        "3",
        "--format",
        "commonvoice",
        "--transcripts",
        "keep",
        "--alphabet",
        "any",
        *TINY,
    ]
    assert main(args) == 0
    capsys.readouterr()
    ck = str(out / "checkpoint")
    assert main(["eval", "--checkpoint", ck, "--data", str(corpus), "--format", "manifest"]) == 2
    assert re.search(
        r"attnkit: .*train.tsv:1: expected wav<TAB>transcript, found 3 tabs",
        capsys.readouterr().err,
    )
    assert main(["eval", "--checkpoint", ck, "--data", str(corpus), "--format", "kaldi"]) == 2
    assert "train.tsv: not a Kaldi data directory (no wav.scp)" in capsys.readouterr().err
    assert (
        main(["eval", "--checkpoint", ck, "--data", str(corpus), "--audio-folder", str(tmp_path)])
        == 2
    )  # the clips are not there
    err = capsys.readouterr().err
    assert re.search(r"train.tsv: 4 of 4 utterances are unusable|no usable utterances", err)
    assert main(["eval", "--checkpoint", ck, "--data", str(corpus), "--columns", "audio=x"]) == 2
    assert "expected a header line with the columns 'x' and 'sentence'" in capsys.readouterr().err


def test_bad_corpora_are_named_in_one_line(tmp_path, capsys):
    data, _ = CORPORA["kaldi"][0](tmp_path)
    (data / "wav.scp").write_text("rec0 sox wav/rec0.flac -t wav - |\nrec1 wav/rec1.wav\n")
    assert (
        main(
            [
                "train",
                "asr",
                "--train",
                str(data),
                "--out",
                str(tmp_path / "r"),
                "--steps",
                "1",
                *TINY,
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "wav.scp:1: the recording is a shell command" in err
    with pytest.raises(SystemExit) as exc:  # a translation corpus option: not one of asr
        main(
            [
                "train",
                "asr",
                "--train",
                str(data),
                "--out",
                str(tmp_path / "r"),
                "--src-lang",
                "de",
                *TINY,
            ]
        )
    assert exc.value.code == 2 and "unrecognized arguments: --src-lang" in capsys.readouterr().err
    assert (
        main(
            [
                "eval",
                "--checkpoint",
                str(tmp_path / "none"),
                "--data",
                str(data),
                "--anywhere",
                "--format",
                "kaldi",
            ]
        )
        == 2
    )
