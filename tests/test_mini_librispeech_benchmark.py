"""``python -m benchmarks.mini_librispeech``'s code path end to end on a tiny folder in
LibriSpeech's layout: the recipe trains two steps, the held-out test speakers' utterances are
beam-decoded and scored, and the table and JSON say that no peer's figure was found."""

import json

from benchmarks import mini_librispeech
from tests.data.test_formats_mini_librispeech import write_mini_librispeech


def test_the_benchmark_trains_decodes_and_scores_the_test_speakers(tmp_path, capsys):
    root = write_mini_librispeech(tmp_path / "LibriSpeech")
    out = tmp_path / "run"
    argv = ["--data", str(root), "--out", str(out), "--steps", "2", "--beam", "2"]
    assert mini_librispeech.main([*argv, "--json", str(tmp_path / "mini.json")]) == 0
    printed = capsys.readouterr().out
    assert "| attnkit LAS, --recipe mini-librispeech (" in printed
    assert f"peer's figure: {mini_librispeech.PEER}" in printed
    data = json.loads((tmp_path / "mini.json").read_text())
    (ours,) = data["rows"]
    assert ours["n"] == 5 and 0 <= ours["cer"] and 0 <= ours["wer"] and ours["beam"] == 2
    assert data["peer"].startswith("none found")
    assert [u["id"] for u in data["utterances"]] == [
        "118-100-0000",
        "163-100-0000",
        "19-100-0000",
        "19-100-0001",
        "32-100-0000",
    ]
    assert data["utterances"][0]["reference"] == "I'LL GO"
    assert (out / "checkpoint").is_dir()
    # a run already trained is scored again without training
    assert (
        mini_librispeech.main(
            ["--data", str(root), "--checkpoint", str(out / "checkpoint"), "--beam", "1"]
        )
        == 0
    )
    assert "attnkit LAS, --recipe mini-librispeech" in capsys.readouterr().out
