"""``attnkit train asr --synthetic-share``: a corpus (a tiny AN4 folder in CMU's layout, its
digit utterances) mixed with built-in synthesised speech (zeros said "oh" at --say-oh), the
share kept, the audio of both augmented; refused without --train."""

import json
import shutil

import pytest

from attnkit.cli.main import main
from attnkit.data.corpora import an4_formats
from tests.cli.test_asr import TINY
from tests.data.test_formats_an4 import write_an4

pytestmark = pytest.mark.usefixtures("one_thread")

TRAIN = [
    ("cen6-fash-b", "<s> ONE FIVE OH </s>"),
    ("an251-fash-b", "<s> YES </s>"),
    ("cen7-mbmg-b", "<s> TWO SIX </s>"),
    ("cen3-mbmg-b", "<s> TWENTY ONE </s>"),
    ("cen8-mbmg-b", "<s> NINE NINE </s>"),
]


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng")
def test_synthetic_share_mixes_built_in_speech_with_an4s_digits(tmp_path, capsys, monkeypatch):
    root = write_an4(tmp_path / "an4", train=TRAIN)
    monkeypatch.setattr(an4_formats, "DEV_UTTERANCES", 2)  # fash's: train_dev
    out = tmp_path / "run"
    corpus = ["--train", str(root), "--valid", str(root), "--format", "an4", "--words", "digits"]
    mix = ["--synthetic-share", "0.5", "--kinds", "digits", "--cache-dir", str(tmp_path / "cache")]
    says = ["--say-oh", "0.5"]
    steps = [
        "--steps",
        "2",
        "--eval-every",
        "2",
        "--augment",
        "light",
        "--transcripts",
        "normalize",
    ]
    assert main(["train", "asr", *corpus, *mix, *says, *steps, "--out", str(out), *TINY]) == 0
    config = json.loads((out / "checkpoint" / "config.json").read_text())["config"]
    data = config["data"]
    # train_nodev's digit strings: "two six", "nine nine"; as many built-in ones
    assert data["n_synthetic"] == 2 and data["synthetic_share"] == 0.5 and data["say_oh"] == 0.5
    assert data["engines"] == ["espeak-ng"] and data["built_in"] == ["digits"]
    (cache,) = (tmp_path / "cache").iterdir()
    assert cache.name.startswith("train-2-") and (cache / "audio.safetensors").exists()
    assert "stopped after 2 steps" in capsys.readouterr().out
    assert main(["train", "asr", *mix, "--out", str(tmp_path / "r2"), *TINY]) == 2
    assert "--synthetic-share: mixes built-in utterances with --train's" in capsys.readouterr().err


def test_the_digits_real_recipe_needs_its_corpus(tmp_path, capsys):
    assert main(["train", "asr", "--recipe", "asr-digits-real", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "attnkit: --recipe asr-digits-real: give the corpus: --train the AN4 folder "
        "(etc/ and wav/) (and --valid: docs/speech.md)\n"
    )
