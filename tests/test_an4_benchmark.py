"""``python -m benchmarks.an4``'s code path end to end on a tiny AN4 folder in CMU's layout:
the recipe trains two steps, the test utterances are beam-decoded and scored, and the table
and JSON hold ESPnet's published row beside this run's."""

import json

from attnkit.data.corpora import an4_formats
from benchmarks import an4
from tests.data.test_formats_an4 import write_an4


def test_the_benchmark_trains_decodes_and_scores_the_test_set(tmp_path, capsys, monkeypatch):
    root = write_an4(tmp_path / "an4")
    monkeypatch.setattr(an4_formats, "DEV_UTTERANCES", 2)  # of the fixture's 5, as 100 of 948
    out = tmp_path / "run"
    argv = ["--data", str(root), "--out", str(out), "--steps", "2", "--beam", "2"]
    assert an4.main([*argv, "--json", str(tmp_path / "an4.json")]) == 0
    printed = capsys.readouterr().out
    assert f"| {an4.ESPNET['system']} | 130 | 3.6 | 7.4 |" in printed
    data = json.loads((tmp_path / "an4.json").read_text())
    ours, espnet = data["rows"]
    assert ours["n"] == 2 and espnet == an4.ESPNET
    assert 0 <= ours["cer"] and 0 <= ours["wer"] and ours["beam"] == 2
    assert [u["reference"] for u in data["utterances"]] == ["RUBOUT G M E F THREE NINE", "ONE TWO"]
    assert (out / "checkpoint").is_dir()
    # a run already trained is scored again without training
    assert (
        an4.main(["--data", str(root), "--checkpoint", str(out / "checkpoint"), "--beam", "1"]) == 0
    )
    assert "attnkit LAS, --recipe an4" in capsys.readouterr().out
    # the validation set, to choose decoding settings on: train_dev, without ESPnet's row
    valid = tmp_path / "valid.json"
    argv = ["--data", str(root), "--checkpoint", str(out / "checkpoint"), "--role", "valid"]
    assert an4.main([*argv, "--json", str(valid)]) == 0
    rows = json.loads(valid.read_text())["rows"]
    assert [(r["role"], r["n"]) for r in rows] == [("valid", 2)]


def test_scores_are_jiwers_on_upper_case_words():
    assert an4.normalized("  one  Two\tb ") == "ONE TWO B"
