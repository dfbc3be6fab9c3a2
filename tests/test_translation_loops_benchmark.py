"""``python -m benchmarks.translation_loops``: the outputs the loop detector stops, each scored
again by a teacher-forced forward pass; on a model made to repeat one piece, every output is a
loop of that piece, at high probability, and the incremental decoder agrees with the full
forward pass."""

import json

import pytest
import torch

from attnkit.tasks.translate import TranslateTask
from attnkit.train import save_checkpoint
from benchmarks import translation_loops

PAIRS = [(f"<en> {w}", str(n)) for n, w in enumerate(["zero", "one", "two", "three", "four"])]


@pytest.fixture
def repeating(tmp_path):
    """A checkpoint whose decoder writes the piece ``3`` whatever it reads."""
    torch.manual_seed(0)
    task = TranslateTask(PAIRS, PAIRS, model_config={"kind": "bahdanau", "emb": 8, "hidden": 8})
    model = task.build_model()
    with torch.no_grad():
        model.decoder.out.bias.zero_()
        model.decoder.out.bias[task.tgt_vocab.encode("3")[0]] = 30.0
    return save_checkpoint(tmp_path / "ck", model=model, config=task.config(), vocab=task.vocab())


def test_each_loop_is_found_and_scored(repeating, tmp_path, capsys):
    src = tmp_path / "src.txt"
    src.write_text("".join(s + "\n" for s, _ in PAIRS[:3]), encoding="utf-8")
    report = tmp_path / "loops.json"
    argv = ["--checkpoint", str(repeating), "--src", str(src), "--json", str(report)]
    assert translation_loops.main(argv) == 0
    assert "3 of 3 outputs stopped as loops" in capsys.readouterr().out
    rows = json.loads(report.read_text())["rows"]
    assert [row["line"] for row in rows] == [1, 2, 3]
    for row in rows:
        assert row["loop_starts_at"] == 0 and row["repeated"].startswith("3 x")
        assert row["agree"] == 1.0 and row["p_loop"] > 0.99
        assert row["free"].startswith("333") and len(row["stopped"]) < len(row["free"])


def test_the_loop_start_is_the_first_piece_three_times_in_a_row():
    assert translation_loops.loop_start([5, 6, 7, 7, 7, 7], stopped_at=6) == 2
    assert translation_loops.loop_start([5, 6, 5, 6, 5, 6], stopped_at=5) == 5


def test_bad_arguments_are_one_line_errors(repeating, tmp_path):
    src = tmp_path / "src.txt"
    src.write_text("<en> one\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="--beam, --limit: expected >= 1"):
        translation_loops.main(["--checkpoint", str(repeating), "--src", str(src), "--beam", "0"])
