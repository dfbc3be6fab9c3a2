"""attnkit explore on the built-in checkpoints of every task, from INPUTs and from --data, and
its usage errors."""

import json
import re

import pytest

from attnkit.cli.main import main
from attnkit.data import generate_lines, write_line_folder
from tests.cli.test_asr import _write_wav


def _page(path) -> dict:
    raw = re.search(r'<script id="data" type="application/json">(.*?)</script>',
                    path.read_text(), re.S)
    return json.loads(raw.group(1))


@pytest.mark.usefixtures("one_thread")
def test_translation_inputs_with_their_nbest(tmp_path, capsys):
    out = tmp_path / "page.html"
    assert main(["explore", "--checkpoint", "builtin:translate-dates", "March 3, 2021",
                 "July 14, 1989", "--beam", "3", "--n-best", "3", "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out} (2 examples)\n"
    first = _page(out)["examples"][0]
    assert first["name"] == "March 3, 2021" and first["source"] == list("March 3, 2021")
    scores = [h["score"] for h in first["hyps"]]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True)
    assert "".join(first["hyps"][0]["tokens"]) == "2021-03-03<eos>"


@pytest.mark.usefixtures("one_thread")
def test_line_images_and_speech_show_their_input_under_the_keys(tmp_path, capsys):
    lines = write_line_folder(generate_lines(2, seed=3, max_chars=8), tmp_path / "lines")
    assert main(["explore", "--checkpoint", "builtin:ocr-lines", "--data", str(lines),
                 "--limit", "1", "--out", str(tmp_path / "ocr.html")]) == 0
    [line] = _page(tmp_path / "ocr.html")["examples"]
    assert line["image"].startswith("data:image/png;base64,") and line["reference"]
    _write_wav(tmp_path / "a.wav", 0.6, 300)
    assert main(["explore", "--checkpoint", "builtin:asr-digits", str(tmp_path / "a.wav"),
                 "--out", str(tmp_path / "asr.html")]) == 0
    [speech] = _page(tmp_path / "asr.html")["examples"]
    assert speech["image"].startswith("data:image/png;base64,")
    assert speech["source"][:2] == ["0-7", "8-15"]


@pytest.mark.parametrize("args, message", [
    ([], "INPUT: expected inputs or --data, got neither"),
    (["x", "--data", "y"], "INPUT: expected inputs or --data, got both"),
    (["x", "--limit", "2"], "--limit: applies to --data, got --limit 2 with INPUTs"),
])
def test_usage_errors_are_one_line(args, message, capsys):
    assert main(["explore", "--checkpoint", "builtin:translate-dates", *args]) == 2
    assert capsys.readouterr().err == f"attnkit: {message}\n"
