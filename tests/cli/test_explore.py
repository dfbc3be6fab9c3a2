"""attnkit explore on the built-in checkpoints of every task and on tiny captioning and VQA
checkpoints, from INPUTs and from --data, and its usage errors; --html on translate, read,
transcribe and eval: the same page from the outputs they decode (in headless Chromium too)."""

import io
import json
import re

import numpy as np
import pytest
from PIL import Image

from attnkit.cli.main import main
from attnkit.data import (
    available_fonts,
    generate_lines,
    generate_scenes,
    write_caption_folder,
    write_line_folder,
)
from attnkit.tasks.ocr import OcrEvaluator
from attnkit.tasks.translate import TranslateEvaluator
from tests.browser import chromium, hover_heatmap, page_errors
from tests.cli.test_asr import _write_wav


def _page(path) -> dict:
    raw = re.search(
        r'<script id="data" type="application/json">(.*?)</script>', path.read_text(), re.S
    )
    return json.loads(raw.group(1))


@pytest.mark.usefixtures("one_thread")
def test_translation_inputs_with_their_nbest(tmp_path, capsys):
    out = tmp_path / "page.html"
    assert (
        main(
            [
                "explore",
                "--checkpoint",
                "builtin:translate-dates",
                "March 3, 2021",
                "July 14, 1989",
                "--beam",
                "3",
                "--n-best",
                "3",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert capsys.readouterr().out == f"wrote {out} (2 examples)\n"
    first = _page(out)["examples"][0]
    assert first["name"] == "March 3, 2021" and first["source"] == list("March 3, 2021")
    scores = [h["score"] for h in first["hyps"]]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True)
    assert "".join(first["hyps"][0]["tokens"]) == "2021-03-03<eos>"


@pytest.mark.usefixtures("one_thread")
def test_line_images_and_speech_show_their_input_under_the_keys(tmp_path, capsys):
    lines = write_line_folder(generate_lines(2, seed=3, max_chars=8), tmp_path / "lines")
    assert (
        main(
            [
                "explore",
                "--checkpoint",
                "builtin:ocr-lines",
                "--data",
                str(lines),
                "--limit",
                "1",
                "--out",
                str(tmp_path / "ocr.html"),
            ]
        )
        == 0
    )
    [line] = _page(tmp_path / "ocr.html")["examples"]
    assert line["image"].startswith("data:image/png;base64,") and line["reference"]
    _write_wav(tmp_path / "a.wav", 0.6, 300)
    assert (
        main(
            [
                "explore",
                "--checkpoint",
                "builtin:asr-digits",
                str(tmp_path / "a.wav"),
                "--out",
                str(tmp_path / "asr.html"),
            ]
        )
        == 0
    )
    [speech] = _page(tmp_path / "asr.html")["examples"]
    assert speech["image"].startswith("data:image/png;base64,")
    assert speech["source"][:2] == ["0-7", "8-15"]


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "INPUT: expected inputs or --data, got neither"),
        (["x", "--data", "y"], "INPUT: expected inputs or --data, got both"),
        (["x", "--limit", "2"], "--limit: applies to --data, got --limit 2 with INPUTs"),
    ],
)
def test_usage_errors_are_one_line(args, message, capsys):
    assert main(["explore", "--checkpoint", "builtin:translate-dates", *args]) == 2
    assert capsys.readouterr().err == f"attnkit: {message}\n"


def _same_page(capsys, verb: list[str], explore: list[str], tmp_path) -> dict:
    """Run ``verb`` with --html and ``explore`` with --out on the same inputs: the pages hold
    the same examples. Returns the verb's page data."""
    assert main([*verb, "--html", str(tmp_path / "verb.html")]) == 0
    printed = capsys.readouterr().out
    assert f"  wrote {tmp_path / 'verb.html'} (" in printed
    assert main(["explore", *explore, "--out", str(tmp_path / "explore.html")]) == 0
    capsys.readouterr()
    page = _page(tmp_path / "verb.html")
    assert page["examples"] == _page(tmp_path / "explore.html")["examples"]
    assert page["title"].startswith(f"attnkit {verb[0]}: ")
    return page


@pytest.mark.usefixtures("one_thread")
def test_translate_html_is_the_explorers_page_of_the_one_decoding(tmp_path, capsys, monkeypatch):
    calls = []
    decode = TranslateEvaluator.decode
    monkeypatch.setattr(
        TranslateEvaluator,
        "decode",
        lambda self, *a, **kw: calls.append(kw["weights"]) or decode(self, *a, **kw),
    )
    inputs = ["March 3, 2021", "July 14, 1989"]
    assert main(["translate", "--checkpoint", "builtin:translate-dates", *inputs]) == 0
    assert calls == [False]  # weights only with --html or --plot
    calls.clear()
    capsys.readouterr()
    decoding = ["--beam", "3", "--n-best", "3"]
    page = _same_page(
        capsys,
        ["translate", "--checkpoint", "builtin:translate-dates", *inputs, *decoding],
        ["--checkpoint", "builtin:translate-dates", *inputs, *decoding],
        tmp_path,
    )
    assert calls == [True, True]  # translate, then explore: one decoding each
    assert [e["name"] for e in page["examples"]] == inputs
    assert [len(e["hyps"]) for e in page["examples"]] == [3, 3]


@pytest.mark.usefixtures("one_thread")
def test_read_transcribe_and_eval_write_the_same_page_as_explore(tmp_path, capsys):
    lines = write_line_folder(generate_lines(2, seed=4, max_chars=8), tmp_path / "lines")
    images = sorted(str(p) for p in lines.parent.glob("*.png"))
    page = _same_page(
        capsys,
        ["read", "--checkpoint", "builtin:ocr-lines", *images],
        ["--checkpoint", "builtin:ocr-lines", *images],
        tmp_path,
    )
    first = page["examples"][0]
    assert first["name"] == images[0] and first["image"].startswith("data:image/png")
    assert [m["name"] for m in first["inputMaps"]] == ["encoder self-attention"]
    assert [m["name"] for m in first["hyps"][0]["maps"]] == ["attention"]

    _write_wav(tmp_path / "a.wav", 0.6, 300)
    page = _same_page(
        capsys,
        [
            "transcribe",
            "--checkpoint",
            "builtin:asr-digits",
            str(tmp_path / "a.wav"),
            "--beam",
            "2",
            "--n-best",
            "2",
        ],
        [
            "--checkpoint",
            "builtin:asr-digits",
            str(tmp_path / "a.wav"),
            "--beam",
            "2",
            "--n-best",
            "2",
        ],
        tmp_path,
    )
    assert len(page["examples"][0]["hyps"]) == 2

    assert (
        main(
            [
                "eval",
                "--checkpoint",
                "builtin:ocr-lines",
                "--data",
                str(lines),
                "--json",
                "--html",
                str(tmp_path / "eval.html"),
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["html"] == str(tmp_path / "eval.html")
    assert (
        main(
            [
                "explore",
                "--checkpoint",
                "builtin:ocr-lines",
                "--data",
                str(lines),
                "--out",
                str(tmp_path / "explore.html"),
            ]
        )
        == 0
    )
    examples = _page(tmp_path / "eval.html")["examples"]
    assert examples == _page(tmp_path / "explore.html")["examples"]
    assert [e["reference"] for e in examples] == [
        t for _, t in generate_lines(2, seed=4, max_chars=8)
    ]
    capsys.readouterr()
    assert (
        main(
            [
                "eval",
                "--checkpoint",
                "builtin:ocr-lines",
                "--data",
                str(lines),
                "--html",
                str(tmp_path / "eval.html"),
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.endswith(
        f"explorer page of the 2 examples: {tmp_path / 'eval.html'}\n"
    )


@pytest.mark.usefixtures("one_thread")
def test_read_keeps_weights_only_with_html_or_plot(tmp_path, capsys, monkeypatch):
    [line] = write_line_folder(generate_lines(1, seed=5, max_chars=6), tmp_path / "l").parent.glob(
        "*.png"
    )
    calls = []
    decode = OcrEvaluator.decode
    monkeypatch.setattr(
        OcrEvaluator,
        "decode",
        lambda self, *a, **kw: calls.append(kw["weights"]) or decode(self, *a, **kw),
    )
    for extra in ([], ["--html", str(tmp_path / "p.html")], ["--plot", str(tmp_path / "pics")]):
        assert main(["read", "--checkpoint", "builtin:ocr-lines", str(line), *extra]) == 0
    assert calls == [False, True, True]


@pytest.mark.parametrize(
    "verb",
    [["translate", "x"], ["read", "x.png"], ["transcribe", "x.wav"], ["eval", "--data", "x"]],
)
def test_the_page_is_checked_before_any_work(verb, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    missing = str(tmp_path / "no-checkpoint")  # never read: the page is refused first
    assert main([verb[0], "--checkpoint", missing, *verb[1:], "--html", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"attnkit: --html: {tmp_path} is a folder, not a file\n"
    page = tmp_path / "file" / "page.html"
    assert main([verb[0], "--checkpoint", missing, *verb[1:], "--html", str(page)]) == 2
    assert capsys.readouterr().err == (
        f"attnkit: --html: {tmp_path / 'file'} is a file, not a folder\n"
    )


def test_explore_checks_its_page_before_any_work(tmp_path, capsys):
    assert (
        main(["explore", "--checkpoint", str(tmp_path / "none"), "x", "--out", str(tmp_path)]) == 2
    )
    assert capsys.readouterr().err == f"attnkit: --out: {tmp_path} is a folder, not a file\n"


@pytest.mark.usefixtures("one_thread")
def test_a_page_written_by_read_works_in_a_browser(tmp_path, capsys):
    dejavu = [f for f in available_fonts()["train"] if f.name == "DejaVuSans.ttf"]
    lines = write_line_folder(
        generate_lines(2, seed=6, max_chars=12, fonts=dejavu), tmp_path / "lines"
    )  # one font: the layout does not depend on
    images = sorted(str(p) for p in lines.parent.glob("*.png"))  # the fonts installed
    assert (
        main(
            [
                "read",
                "--checkpoint",
                "builtin:ocr-lines",
                *images,
                "--html",
                str(tmp_path / "page.html"),
            ]
        )
        == 0
    )
    browser = chromium()
    try:
        browser.get((tmp_path / "page.html").as_uri())
        assert page_errors(browser) == []
        from selenium.webdriver.support.ui import Select

        menu = Select(browser.find_element("id", "map"))
        assert [o.text for o in menu.options] == ["attention", "encoder self-attention"]
        picture = browser.execute_script("return document.getElementById('heatmap').toDataURL()")
        menu.select_by_visible_text("encoder self-attention")
        t, s, cell, row = browser.execute_script("return [view.t, view.s, view.cell, view.rowH]")
        assert t == s == len(_page(tmp_path / "page.html")["examples"][0]["source"])
        assert (
            browser.execute_script("return document.getElementById('heatmap').toDataURL()")
            != picture
        )
        # the diagonal: a step's own column, in the window's band
        tip = hover_heatmap(browser, 90 + int(3.5 * cell), 70 + int(3.5 * row))
        assert re.match(r'query 3 "\d+-\d+" · input 3 "\d+-\d+" · weight 0\.\d{4}$', tip)
        assert float(tip.rsplit(" ", 1)[1]) > 0
        browser.find_element("id", "next-example").click()
        assert browser.execute_script("return view.ex") == 1
        assert menu.first_selected_option.text == "encoder self-attention"  # kept by name
        shot = np.asarray(Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("L"))
        assert shot.std() > 10 and len(np.unique(shot)) > 20
        assert page_errors(browser) == []
    finally:
        browser.quit()


@pytest.mark.usefixtures("one_thread")
def test_captions_and_answers_show_their_picture_under_a_grid(
    tiny_captioner, tiny_vqa, tmp_path, capsys
):
    scenes = generate_scenes(2, seed=6, size=32, max_objects=4)
    pictures = write_caption_folder(scenes, tmp_path / "pics").parent
    out = tmp_path / "captions.html"
    assert (
        main(
            [
                "explore",
                "--checkpoint",
                str(tiny_captioner),
                str(pictures / "000000.png"),
                "--beam",
                "2",
                "--n-best",
                "2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    [ex] = _page(out)["examples"]
    assert ex["name"] == str(pictures / "000000.png")
    assert ex["grid"]["rows"] == ex["grid"]["cols"] == 8 and ex["grid"]["aspect"] == 1.0
    assert ex["grid"]["image"].startswith("data:image/png;base64,") and ex["image"] is None
    assert ex["source"][:2] == ["(0,0)", "(0,1)"] and len(ex["source"]) == 64
    assert len(ex["hyps"]) == 2 and ex["hyps"][0]["score"] >= ex["hyps"][1]["score"]
    capsys.readouterr()
    assert (
        main(
            [
                "caption",
                "--checkpoint",
                str(tiny_captioner),
                str(pictures / "000000.png"),
                "--beam",
                "2",
                "--n-best",
                "2",
            ]
        )
        == 0
    )  # the same captions, best first
    assert capsys.readouterr().out.splitlines() == [
        " ".join(t for t in hyp["tokens"] if t != "<eos>") for hyp in ex["hyps"]
    ]
    assert (
        main(
            [
                "explore",
                "--checkpoint",
                str(tiny_captioner),
                "--data",
                str(pictures),
                "--limit",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    [ex] = _page(out)["examples"]
    assert ex["reference"] == list(scenes[0].captions)
    image = tmp_path / "scene.jpg"
    Image.fromarray(scenes[1].image.permute(1, 2, 0).numpy()).save(image)
    assert (
        main(
            [
                "explore",
                "--checkpoint",
                str(tiny_vqa),
                str(image),
                "how many circles are in the image ?",
                "is the red circle left of the blue square ?",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.endswith("(2 examples)\n")
    first = _page(out)["examples"][0]
    assert first["name"] == first["text"] == "how many circles are in the image ?"
    [hyp] = first["hyps"]
    assert hyp["tokens"] == ["hop 1", "hop 2"] and hyp["text"] and hyp["score"] <= 0
    assert (
        main(
            [
                "explore",
                "--checkpoint",
                str(tiny_vqa),
                "--data",
                "scenes:test",
                "--limit",
                "3",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert [e["name"] for e in _page(out)["examples"]] == ["test[0].0", "test[0].1", "test[0].2"]
    assert main(["explore", "--checkpoint", str(tiny_vqa), str(image), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        "attnkit: INPUT: a vqa checkpoint takes an image file, "
        "then questions about it, got 1 INPUT\n"
    )
    assert (
        main(
            [
                "explore",
                "--checkpoint",
                str(tiny_vqa),
                str(image),
                "what ?",
                "--beam",
                "2",
                "--out",
                str(out),
            ]
        )
        == 2
    )
    assert "decoding: a VQA model answers with its most probable class" in capsys.readouterr().err


@pytest.mark.usefixtures("one_thread")
def test_eval_html_of_captions_and_answers_is_explores_page(
    tiny_captioner, tiny_vqa, tmp_path, capsys
):
    for checkpoint in (tiny_captioner, tiny_vqa):
        data = ["--data", "scenes:test", "--limit", "2"]
        assert (
            main(
                [
                    "eval",
                    "--checkpoint",
                    str(checkpoint),
                    *data,
                    "--html",
                    str(tmp_path / "eval.html"),
                ]
            )
            == 0
        )
        assert (
            main(
                [
                    "explore",
                    "--checkpoint",
                    str(checkpoint),
                    *data,
                    "--out",
                    str(tmp_path / "explore.html"),
                ]
            )
            == 0
        )
        examples = _page(tmp_path / "eval.html")["examples"]
        assert len(examples) == 2 and examples[0]["grid"]["rows"] == 8
        assert examples == _page(tmp_path / "explore.html")["examples"]
    capsys.readouterr()
