"""``python -m benchmarks.real_digits``'s code path on a tiny AN4 folder in CMU's layout: the
digit utterances of each split are decoded by two models, scored exactly and by CER, and the
table and JSON say how many each got right with Wilson's interval."""

import json

import pytest

from attnkit.data.corpora import an4_formats
from benchmarks import real_digits
from tests.data.test_formats_an4 import write_an4

TRAIN = [
    ("an251-fash-b", "<s> YES </s>"),
    ("cen6-fash-b", "<s> ONE FIVE OH FOUR </s>"),
    ("cen3-mbmg-b", "<s> TWENTY ONE </s>"),
    ("cen7-mbmg-b", "<s> TWO SIX EIGHT </s>"),
]


def test_scores_the_digit_utterances_of_each_split(tmp_path, capsys, monkeypatch):
    root = write_an4(tmp_path / "an4", train=TRAIN)
    monkeypatch.setattr(an4_formats, "DEV_UTTERANCES", 2)  # fash's two: speakers apart
    out = tmp_path / "digits.json"
    argv = ["--data", str(root), "--against", "builtin:asr-digits", "--words", "digits,numbers"]
    assert real_digits.main([*argv, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| builtin:asr-digits | test | digits | 1 | 1 |" in printed
    rows = json.loads(out.read_text())["rows"]
    assert [(r["split"], r["words"], r["n"]) for r in rows[::2]] == [
        ("test", "digits", 1),
        ("train_dev", "digits", 1),
        ("train_nodev", "digits", 1),
        ("test", "numbers", 1),
        ("train_dev", "numbers", 1),
        ("train_nodev", "numbers", 2),
    ]
    dev = rows[2]["utterances"][0]
    assert dev["id"] == "cen6-fash-b" and dev["reference"] == "one five zero four"
    for row in rows:
        assert row["exact"] == row["right"] / row["n"]
        assert row["exact_low"] <= row["exact"] <= row["exact_high"] and 0 <= row["cer"]
    assert real_digits.only_right(rows[0], rows[1]) == (0, 0)  # one model twice
    with pytest.raises(SystemExit):
        real_digits.main(["--data", str(root), "--splits", "dev"])


def test_wilsons_interval():
    assert real_digits.wilson(23, 23) == pytest.approx((0.8569, 1.0), abs=1e-4)
    assert real_digits.wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    low, high = real_digits.wilson(12, 23)
    assert low == pytest.approx(0.3296, abs=1e-4) and high == pytest.approx(0.7076, abs=1e-4)
    assert real_digits.wilson(0, 0) == (0.0, 1.0)
