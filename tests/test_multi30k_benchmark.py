"""``python -m benchmarks.multi30k``'s code path end to end on a tiny corpus in the layout of
multi30k/dataset (``data/task1/raw/*.gz``): the recipe trains two steps, each test set present
is beam-decoded and scored, and the JSON names the run and sacreBLEU's signature."""

import gzip
import json

import pytest

from attnkit.train import load_checkpoint
from benchmarks import multi30k

EN = ["A dog runs.", "Two men sit.", "A girl sings.", "A cat sleeps."]
DE = ["Ein Hund rennt.", "Zwei Männer sitzen.", "Ein Mädchen singt.", "Eine Katze schläft."]


def write_raw(folder, name, lines):
    with gzip.open(folder / name, "wt", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def test_the_benchmark_trains_and_scores_each_test_set(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("train", "val", "test_2016_flickr", "test_2017_mscoco"):
        write_raw(raw, f"{split}.en.gz", EN)
        write_raw(raw, f"{split}.de.gz", DE)
    out, report = tmp_path / "run", tmp_path / "multi30k.json"
    argv = ["--data", str(raw), "--out", str(out), "--steps", "2", "--beam", "2"]
    extra = ["--unlikelihood", "0.5", "--eval-every", "1"]
    assert multi30k.main([*argv, *extra, "--json", str(report)]) == 0
    printed = capsys.readouterr().out
    assert "sacreBLEU: nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in printed
    data = json.loads(report.read_text())
    assert [row["test set"] for row in data["rows"]] == ["test_2016_flickr", "test_2017_mscoco"]
    assert all(row["sentences"] == 4 and 0 <= row["bleu"] <= 100 for row in data["rows"])
    assert data["run"]["steps"] == 2 and data["beam"] == 2 and "train_s" in data
    assert data["unlikelihood"] == 0.5 and data["eval_every"] == 1
    validated = json.loads((out / "history.json").read_text())
    assert [row["step"] for row in validated][:2] == [1, 2]
    assert load_checkpoint(out / "checkpoint").config["batching"]["unlikelihood"] == 0.5
    # a run already trained is scored again without training
    assert multi30k.main(argv) == 0
    assert json.loads((out / "checkpoint" / "trainer.json").read_text())["step"] == 2


def test_the_rnn_recipe_takes_an_encoder_of_its_own_size(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("train", "val", "test_2016_flickr"):
        write_raw(raw, f"{split}.en.gz", EN)
        write_raw(raw, f"{split}.de.gz", DE)
    out, report = tmp_path / "run", tmp_path / "rnn.json"
    argv = ["--data", str(raw), "--out", str(out), "--steps", "1", "--beam", "1"]
    assert multi30k.main([*argv, "--model", "rnn", "--enc-hidden", "8", "--json", str(report)]) == 0
    assert json.loads(report.read_text())["enc_hidden"] == 8
    assert load_checkpoint(out / "checkpoint").config["model"]["enc_hidden"] == 8
    with pytest.raises(SystemExit) as stopped:
        multi30k.main([*argv, "--enc-hidden", "8"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "--enc-hidden: sizes the RNN's encoder; --model is transformer" in err
