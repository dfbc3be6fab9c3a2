"""The explorer page: the builder's data and errors, then the page in headless Chromium (loads
without console errors, hover shows a cell's weight, switching head changes the picture, the
screenshot is not blank; 800 steps and 200 examples stay quick to switch)."""

import base64
import io
import json
import re

import numpy as np
import pytest
from PIL import Image

from attnkit.diagnose.explorer import Example, Hypothesis, explorer_html, write_explorer
from tests.browser import chromium, hover_heatmap, page_errors


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _example(t=3, s=4, heads=2, seed=0, image=False, n_best=2):
    rng = np.random.default_rng(seed)
    hyps = [
        Hypothesis(
            [f"y{i}" for i in range(t)],
            {
                f"layer 1 / head {h + 1}": _softmax(rng.normal(size=(t, s)) * 3)
                for h in range(heads)
            },
            score=-1.0 - k,
        )
        for k in range(n_best)
    ]
    return Example(
        [f"x{j}" for j in range(s)],
        hyps,
        name=f"ex{seed}",
        text="x y z",
        reference="ref </script> <b>",
        image=rng.random((8, 2 * s)) if image else None,
    )


def _data(page: str) -> dict:
    raw = re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S)
    return json.loads(raw.group(1))


def test_the_page_holds_every_example_and_is_self_contained():
    page = explorer_html([_example(image=True), _example(seed=1)], title="t <1>")
    assert "<title>t &lt;1&gt;</title>" in page
    assert not re.search(r"(src|href)=\"(https?:)?//", page)  # nothing fetched
    data = _data(page)
    assert [e["name"] for e in data["examples"]] == ["ex0", "ex1"]
    assert data["examples"][0]["reference"] == "ref </script> <b>"
    assert data["examples"][0]["image"].startswith("data:image/png;base64,")
    assert data["examples"][1]["image"] is None
    hyps = data["examples"][0]["hyps"]
    assert [h["score"] for h in hyps] == [-1.0, -2.0]
    assert [m["name"] for m in hyps[0]["maps"]] == ["layer 1 / head 1", "layer 1 / head 2"]


def _unpack(packed: str, t: int, s: int) -> np.ndarray:
    """The page's weights: (first column, count) per row as uint32, then the values as uint16."""
    raw = base64.b64decode(packed)
    header = np.frombuffer(raw[: 8 * t], "<u4").reshape(t, 2)
    values = np.frombuffer(raw[8 * t :], "<u2")
    w, at = np.zeros((t, s)), 0
    for i, (first, count) in enumerate(header):
        w[i, first : first + count] = values[at : at + count] / 65535
        at += count
    assert at == len(values)
    return w


def test_weights_round_trip_within_fixed_point():
    ex = _example()
    packed = _data(explorer_html([ex]))["examples"][0]["hyps"][1]["maps"][1]["w"]
    want = np.asarray(ex.hypotheses[1].maps["layer 1 / head 2"])
    assert np.abs(_unpack(packed, 3, 4) - want).max() <= 0.5 / 65535 + 1e-7


def test_a_band_costs_its_width_and_rows_of_zeros_nothing():
    band = np.zeros((800, 800))
    for i in range(800):
        lo, hi = max(i - 32, 0), min(i + 33, 800)
        band[i, lo:hi] = 1.0 / (hi - lo)
    band[5] = 0.0  # a row with no weight (a query with no key)
    ex = Example(
        [str(j) for j in range(800)],
        [Hypothesis(["a"], {"m": np.ones((1, 800)) / 800})],
        input_maps={"encoder self-attention": band},
    )
    packed = _data(explorer_html([ex]))["examples"][0]["inputMaps"][0]["w"]
    assert len(base64.b64decode(packed)) == 8 * 800 + 2 * (int((band > 0).sum()))
    assert np.abs(_unpack(packed, 800, 800) - band).max() <= 0.5 / 65535 + 1e-7


def test_input_maps_follow_the_hypotheses_maps():
    rng = np.random.default_rng(0)
    own = _softmax(rng.normal(size=(4, 4)))
    ex = Example(
        list("abcd"),
        [Hypothesis(["y"], {"m": np.full((1, 4), 0.25)})],
        input_maps={"encoder self-attention": own},
    )
    [data] = _data(explorer_html([ex]))["examples"]
    assert [m["name"] for m in data["inputMaps"]] == ["encoder self-attention"]
    assert np.abs(_unpack(data["inputMaps"][0]["w"], 4, 4) - own).max() <= 0.5 / 65535 + 1e-7


def test_the_image_keeps_its_orientation():
    image = np.zeros((4, 6))
    image[0] = 1.0  # top row bright
    uri = _data(explorer_html([Example(["a"], [Hypothesis(["b"], {"m": [[1.0]]})], image=image)]))[
        "examples"
    ][0]["image"]
    png = np.asarray(Image.open(io.BytesIO(base64.b64decode(uri.split(",")[1]))))
    assert png[0].min() == 255 and png[1:].max() == 0


def test_write_explorer_creates_folders(tmp_path):
    path = write_explorer([_example()], tmp_path / "a" / "page.html")
    assert path.read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(
    "examples, match",
    [
        ([], "examples: expected at least one example"),
        ([Example(["a"], [])], r"examples\[0\].hypotheses: expected at least one"),
        ([Example(["a"], [Hypothesis(["b"], {})])], r"maps: expected at least one map"),
        (
            [Example(["a", "b"], [Hypothesis(["c"], {"m": np.ones((1, 3))})])],
            r"examples\[0\].hypotheses\[0\].maps\['m'\]: "
            r"expected shape \(1, 2\), got shape \(1, 3\)",
        ),
        (
            [Example(["a"], [Hypothesis(["c"], {"m": [[float("nan")]]})])],
            "expected finite values, got 1 NaN",
        ),
        (
            [
                Example(
                    ["a", "b"],
                    [Hypothesis(["c"], {"m": np.ones((1, 2)) / 2})],
                    input_maps={"self": np.ones((1, 2))},
                )
            ],
            r"examples\[0\].input_maps\['self'\]: expected shape \(2, 2\), got shape \(1, 2\)",
        ),
    ],
)
def test_bad_examples_are_named(examples, match):
    with pytest.raises(ValueError, match=match):
        explorer_html(examples)


# --- in a real browser -------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    driver = chromium()
    yield driver
    driver.quit()


def _open(browser, tmp_path, examples):
    path = write_explorer(examples, tmp_path / "explore.html")
    browser.get(path.as_uri())
    return browser


def test_the_page_loads_hovers_switches_heads_and_is_not_blank(browser, tmp_path):
    ex = _example(t=5, s=6, heads=3, image=True)
    _open(browser, tmp_path, [ex, _example(seed=1)])
    assert page_errors(browser) == []
    cell = browser.execute_script("return [view.cell, view.rowH]")
    # the centre of output 2, input 3 (the plot's margins: 90 px left, 70 px top)
    tip = hover_heatmap(browser, 90 + int(3.5 * cell[0]), 70 + int(2.5 * cell[1]))
    want = float(np.asarray(ex.hypotheses[0].maps["layer 1 / head 1"])[2, 3])
    assert tip.startswith('output 2 "y2" · input 3 "x3" · weight ')
    assert abs(float(tip.rsplit(" ", 1)[1]) - want) < 1e-4

    picture = browser.execute_script("return document.getElementById('heatmap').toDataURL()")
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", "map")).select_by_visible_text("layer 1 / head 2")
    assert (
        browser.execute_script("return document.getElementById('heatmap').toDataURL()") != picture
    )
    tip = hover_heatmap(browser, 90 + int(3.5 * cell[0]), 70 + int(2.5 * cell[1]))
    want = float(np.asarray(ex.hypotheses[0].maps["layer 1 / head 2"])[2, 3])
    assert abs(float(tip.rsplit(" ", 1)[1]) - want) < 1e-4

    shot = np.asarray(Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("L"))
    assert shot.std() > 10 and len(np.unique(shot)) > 20
    assert page_errors(browser) == []


def test_the_nbest_the_step_and_the_examples_follow_the_controls(browser, tmp_path):
    _open(browser, tmp_path, [_example(t=4, s=5), _example(seed=1, t=2, s=3)])
    hyps = browser.find_elements("css selector", "#nbest .hyp")
    assert [h.text.splitlines()[0] for h in hyps] == ["#1 score -1.0000", "#2 score -2.0000"]
    hyps[1].click()
    assert browser.execute_script("return view.hyp") == 1
    browser.find_element("id", "step-next").click()
    browser.find_element("id", "step-next").click()
    assert browser.find_element("css selector", "#step-text b").text == "y2"
    browser.find_element("id", "next-example").click()
    assert browser.execute_script("return [view.ex, view.hyp, view.step, view.t, view.s]") == [
        1,
        0,
        0,
        2,
        3,
    ]
    assert page_errors(browser) == []


def test_an_input_map_is_a_choice_of_the_map_menu_with_the_input_as_rows(browser, tmp_path):
    rng = np.random.default_rng(1)
    own = _softmax(rng.normal(size=(6, 6)) * 3)
    ex = _example(t=3, s=6, heads=1)
    ex = Example(ex.source, ex.hypotheses, name="e", input_maps={"encoder self-attention": own})
    _open(browser, tmp_path, [ex])
    from selenium.webdriver.support.ui import Select

    menu = Select(browser.find_element("id", "map"))
    assert [o.text for o in menu.options] == ["layer 1 / head 1", "encoder self-attention"]
    browser.find_element("id", "step-next").click()
    browser.find_element("id", "step-next").click()  # the last of the 3 output tokens
    menu.select_by_visible_text("encoder self-attention")
    assert browser.execute_script("return [view.t, view.s, view.step]") == [6, 6, 2]
    cell = browser.execute_script("return [view.cell, view.rowH]")
    tip = hover_heatmap(browser, 90 + int(1.5 * cell[0]), 70 + int(4.5 * cell[1]))
    assert tip.startswith('query 4 "x4" · input 1 "x1" · weight ')
    assert abs(float(tip.rsplit(" ", 1)[1]) - own[4, 1]) < 1e-4
    for _ in range(5):
        browser.find_element("id", "step-next").click()
    assert browser.find_element("css selector", "#step-text b").text == "x5"  # input rows
    thumbs = browser.find_elements("css selector", "#nbest .hyp canvas")
    assert [t.get_attribute("height") for t in thumbs] == ["3", "3"]  # the hypotheses' own
    menu.select_by_visible_text("layer 1 / head 1")
    assert browser.execute_script("return [view.t, view.step]") == [3, 2]  # back in range
    assert page_errors(browser) == []


def test_800_steps_and_200_examples_stay_responsive(browser, tmp_path):
    rng = np.random.default_rng(0)
    big = Example(
        [str(j) for j in range(800)],
        [
            Hypothesis(
                [str(i) for i in range(60)], {"attention": _softmax(rng.normal(size=(60, 800)))}
            )
        ],
    )
    _open(browser, tmp_path, [big] + [_example(seed=i) for i in range(199)])
    # switching examples (decoding and drawing 800 x 60 cells) completes well inside the
    # script timeout; one canvas, not a DOM node per cell
    browser.set_script_timeout(10)
    assert browser.execute_script("showExample(199); showExample(0); return view.s") == 800
    assert len(browser.find_elements("css selector", "#plot *")) == 2
    assert page_errors(browser) == []


# --- a grid of cells over a picture (captioning, VQA) ------------------------------------


def _grid_example(rows=4, cols=4, peaks=((1, 2), (3, 0), (0, 0)), height=48, width=48):
    """Outputs each looking at one cell (``peaks``, row and column) of a rows x cols grid
    over a white picture, a little weight on every other cell."""
    maps = np.full((len(peaks), rows * cols), 0.2 / (rows * cols - 1))
    for t, (r, c) in enumerate(peaks):
        maps[t, r * cols + c] = 0.8
    picture = np.full((height, width, 3), 255, np.uint8)
    source = [f"({r},{c})" for r in range(rows) for c in range(cols)]
    hyp = Hypothesis(
        [f"w{t}" for t in range(len(peaks))], {"attention": maps}, score=-0.7, text="the answer"
    )
    return Example(
        source,
        [hyp],
        name="grid",
        text="a question ?",
        reference=("a", "b"),
        image=picture,
        grid=(rows, cols),
    )


def test_a_grid_example_carries_its_picture_in_colour():
    picture = np.zeros((6, 4, 3), np.uint8)
    picture[0, 0] = (255, 0, 0)  # the top left pixel red
    ex = _grid_example()
    data = _data(
        explorer_html(
            [Example(ex.source, ex.hypotheses, image=picture, grid=(4, 4), reference=["a", "b"])]
        )
    )["examples"][0]
    assert data["image"] is None and data["reference"] == ["a", "b"]
    assert data["hyps"][0]["text"] == "the answer"
    grid = data["grid"]
    assert (grid["rows"], grid["cols"], grid["aspect"]) == (4, 4, 1.5)
    png = np.asarray(Image.open(io.BytesIO(base64.b64decode(grid["image"].split(",")[1]))))
    assert png.shape == (6, 4, 3) and tuple(png[0, 0]) == (255, 0, 0) and png[1:].max() == 0
    floats = _data(
        explorer_html([Example(ex.source, ex.hypotheses, image=picture / 255.0, grid=(4, 4))])
    )["examples"][0]["grid"]["image"]
    assert floats == grid["image"]


@pytest.mark.parametrize(
    "change, match",
    [
        (
            dict(grid=(4, 3)),
            r"examples\[0\].grid: expected \(rows, cols\) of positive ints with rows "
            r"\* cols = len\(source\) = 16, got \(4, 3\)",
        ),
        (dict(image=None), r"examples\[0\].image: expected the picture the grid lies over"),
        (
            dict(image=np.zeros((8, 8))),
            r"examples\[0\].image: expected an RGB picture "
            r"\(height, width, 3\) for a grid, got shape \(8, 8\)",
        ),
    ],
)
def test_bad_grids_are_named(change, match):
    ex = _grid_example()
    fields = dict(source=ex.source, hypotheses=ex.hypotheses, image=ex.image, grid=ex.grid)
    with pytest.raises(ValueError, match=match):
        explorer_html([Example(**{**fields, **change})])


def _cell_centre(element, rows, cols, r, c):
    return (
        int((c + 0.5) * element.size["width"] / cols),
        int((r + 0.5) * element.size["height"] / rows),
    )


def _brightness(browser, element, rows, cols):
    """The grey level at each cell's centre in a screenshot of ``element``, (rows, cols)."""
    shot = np.asarray(Image.open(io.BytesIO(element.screenshot_as_png)).convert("L"))
    scale = shot.shape[1] / element.size["width"]  # device pixels per CSS pixel
    out = np.zeros((rows, cols))
    for r in range(rows):
        for c in range(cols):
            x, y = _cell_centre(element, rows, cols, r, c)
            out[r, c] = shot[int(y * scale), int(x * scale)]
    return out


def _hover_photo(browser, element, x, y):
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(browser).move_to_element_with_offset(
        element, x - element.size["width"] // 2, y - element.size["height"] // 2
    ).perform()
    return browser.find_element("id", "photo-tip").text


def test_the_picture_is_lit_where_each_output_looked_and_steps_with_it(browser, tmp_path):
    ex = _grid_example(height=48, width=72)
    _open(browser, tmp_path, [ex, _example(seed=1)])
    assert page_errors(browser) == []
    photo = browser.find_element("id", "photo")
    assert photo.is_displayed() and photo.size["height"] == round(photo.size["width"] * 48 / 72)
    assert not browser.find_element("id", "image").is_displayed()  # no strip under the keys
    lit = _brightness(browser, photo, 4, 4)
    assert np.unravel_index(lit.argmax(), lit.shape) == (1, 2) and lit.max() - lit.min() > 100
    tip = _hover_photo(browser, photo, *_cell_centre(photo, 4, 4, 1, 2))
    assert tip == 'output 0 "w0" · cell row 1 col 2 · weight 0.8000'
    tip = _hover_photo(browser, photo, *_cell_centre(photo, 4, 4, 2, 3))
    assert float(tip.rsplit(" ", 1)[1]) == pytest.approx(0.2 / 15, abs=1e-4)

    browser.find_element("id", "step-next").click()  # the next output looks elsewhere
    lit = _brightness(browser, photo, 4, 4)
    assert np.unravel_index(lit.argmax(), lit.shape) == (3, 0)
    assert _hover_photo(browser, photo, *_cell_centre(photo, 4, 4, 3, 0)).startswith(
        'output 1 "w1" · cell row 3 col 0 · weight 0.8000'
    )
    panels = browser.find_elements("css selector", "#panels .panel")
    assert [p.text for p in panels] == ["w0", "w1", "w2"]
    assert [p.get_attribute("class") for p in panels] == ["panel", "panel now", "panel"]
    panels[2].click()
    assert browser.execute_script("return view.step") == 2
    lit = _brightness(browser, panels[0].find_element("css selector", ".photo"), 4, 4)
    assert np.unravel_index(lit.argmax(), lit.shape) == (1, 2)  # each panel its own output's

    assert browser.find_element("css selector", "#nbest .hyp .text").text == "the answer"
    assert browser.find_element("id", "reference").text == "references:\na\nb"
    shot = np.asarray(Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("L"))
    assert shot.std() > 10 and len(np.unique(shot)) > 20
    browser.find_element("id", "next-example").click()  # an example without a grid
    assert not browser.find_element("id", "over").is_displayed()
    assert page_errors(browser) == []
