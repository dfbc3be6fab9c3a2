"""``python -m benchmarks.an4``'s code path end to end on a tiny AN4 folder in CMU's layout:
the recipe trains two steps, the test utterances are beam-decoded and scored, and the table
and JSON hold ESPnet's published row beside this run's."""

import json

import pytest

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


def test_a_character_lm_is_fused_as_its_weight_says(tmp_path, capsys, monkeypatch):
    from attnkit.cli.main import main as attnkit
    from attnkit.train import load_checkpoint

    root = write_an4(tmp_path / "an4")
    monkeypatch.setattr(an4_formats, "DEV_UTTERANCES", 2)
    out = tmp_path / "run"
    assert an4.main(["--data", str(root), "--out", str(out), "--steps", "1", "--beam", "1"]) == 0
    text = tmp_path / "transcripts.txt"
    chars = [c for c in load_checkpoint(out / "checkpoint").vocab["symbols"] if len(c) == 1]
    text.write_text("".join(" ".join(chars[i:]) + "\n" for i in range(3)), encoding="utf-8")
    lm = tmp_path / "lm"
    argv = ["train", "lm", "--text", str(text), "--vocab-from", str(out / "checkpoint")]
    argv += ["--out", str(lm), "--steps", "2", "--hidden", "8", "--emb", "4", "--no-progress"]
    assert attnkit(argv) == 0
    report = tmp_path / "lm.json"
    argv = ["--data", str(root), "--checkpoint", str(out / "checkpoint"), "--beam", "2"]
    argv += ["--lm", str(lm / "checkpoint"), "--lm-weight", "0.3", "--json", str(report)]
    assert an4.main(argv) == 0
    ours = json.loads(report.read_text())["rows"][0]
    assert ours["lm_weight"] == 0.3 and ours["lm"] == str(lm / "checkpoint") and ours["n"] == 2
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit:
        an4.main(["--data", str(root), "--checkpoint", str(out / "checkpoint"), "--lm", str(lm)])
    assert exit.value.code == 2
    assert "--lm, --lm-weight: give both" in capsys.readouterr().err


def test_scores_are_jiwers_on_upper_case_words():
    assert an4.normalized("  one  Two\tb ") == "ONE TWO B"
