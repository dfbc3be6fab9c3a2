"""attnkit explore on the built-in checkpoints of every task and on tiny captioning and VQA
checkpoints, from INPUTs and from --data, and its usage errors."""

import json
import re

import pytest
from PIL import Image

from attnkit.cli.main import main
from attnkit.data import generate_lines, generate_scenes, write_caption_folder, write_line_folder
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


@pytest.mark.usefixtures("one_thread")
def test_captions_and_answers_show_their_picture_under_a_grid(tiny_captioner, tiny_vqa,
                                                               tmp_path, capsys):
    scenes = generate_scenes(2, seed=6, size=32, max_objects=4)
    pictures = write_caption_folder(scenes, tmp_path / "pics").parent
    out = tmp_path / "captions.html"
    assert main(["explore", "--checkpoint", str(tiny_captioner), str(pictures / "000000.png"),
                 "--beam", "2", "--n-best", "2", "--out", str(out)]) == 0
    [ex] = _page(out)["examples"]
    assert ex["name"] == str(pictures / "000000.png")
    assert ex["grid"]["rows"] == ex["grid"]["cols"] == 8 and ex["grid"]["aspect"] == 1.0
    assert ex["grid"]["image"].startswith("data:image/png;base64,") and ex["image"] is None
    assert ex["source"][:2] == ["(0,0)", "(0,1)"] and len(ex["source"]) == 64
    assert len(ex["hyps"]) == 2 and ex["hyps"][0]["score"] >= ex["hyps"][1]["score"]
    capsys.readouterr()
    assert main(["caption", "--checkpoint", str(tiny_captioner), str(pictures / "000000.png"),
                 "--beam", "2", "--n-best", "2"]) == 0  # the same captions, best first
    assert capsys.readouterr().out.splitlines() == [
        " ".join(t for t in hyp["tokens"] if t != "<eos>") for hyp in ex["hyps"]]
    assert main(["explore", "--checkpoint", str(tiny_captioner), "--data", str(pictures),
                 "--limit", "1", "--out", str(out)]) == 0
    [ex] = _page(out)["examples"]
    assert ex["reference"] == list(scenes[0].captions)
    image = tmp_path / "scene.jpg"
    Image.fromarray(scenes[1].image.permute(1, 2, 0).numpy()).save(image)
    assert main(["explore", "--checkpoint", str(tiny_vqa), str(image),
                 "how many circles are in the image ?", "is the red circle left of the blue "
                 "square ?", "--out", str(out)]) == 0
    assert capsys.readouterr().out.endswith("(2 examples)\n")
    first = _page(out)["examples"][0]
    assert first["name"] == first["text"] == "how many circles are in the image ?"
    [hyp] = first["hyps"]
    assert hyp["tokens"] == ["hop 1", "hop 2"] and hyp["text"] and hyp["score"] <= 0
    assert main(["explore", "--checkpoint", str(tiny_vqa), "--data", "scenes:test", "--limit",
                 "3", "--out", str(out)]) == 0
    assert [e["name"] for e in _page(out)["examples"]] == ["test[0].0", "test[0].1", "test[0].2"]
    assert main(["explore", "--checkpoint", str(tiny_vqa), str(image), "--out", str(out)]) == 2
    assert capsys.readouterr().err == ("attnkit: INPUT: a vqa checkpoint takes an image file, "
                                       "then questions about it, got 1 INPUT\n")
    assert main(["explore", "--checkpoint", str(tiny_vqa), str(image), "what ?", "--beam", "2",
                 "--out", str(out)]) == 2
    assert "decoding: a VQA model answers with its most probable class" in \
        capsys.readouterr().err
