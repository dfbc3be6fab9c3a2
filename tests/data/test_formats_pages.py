"""ALTO and PAGE-XML pages read as OCR lines: every namespace, the cut (mask, de-skew, height),
documents held out whole, the copy written back, and the bad input each named and counted."""

import logging
import math

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from attnkit.data import DataError
from attnkit.data.corpora.page_formats import read_pages, split_documents
from attnkit.data.corpora.page_lines import cut_line
from attnkit.data.corpora.page_xml import parse_page, write_texts
from attnkit.data.corpora.reading import choose_format, read_corpus
from tests.data.pages import TEXTS, alto, draw_page, line_boxes, page, polygon, write_pages

VERSIONS = [("alto", {"version": v}) for v in (2, 3, 4)] + [
    ("page", {"version": v}) for v in ("2013-07-15", "2019-07-15")
]


@pytest.mark.parametrize("kind,version", VERSIONS)
def test_every_namespace_gives_the_same_lines(tmp_path, kind, version):
    write_pages(tmp_path / "doc", kind, **version)
    assert choose_format("ocr", tmp_path / "doc").name == kind
    assert choose_format("ocr", tmp_path / "doc" / "p0.xml").name == kind
    lines = read_corpus("ocr", tmp_path / "doc")
    assert lines.texts == TEXTS * 2
    assert lines.path(0).endswith("p0.xml#l0_0")
    image, text = lines[1]
    assert image.dtype == torch.uint8 and image.shape[0] == 32 and text == "net 4.50"
    # the box 192 x 28 px, padded by a quarter of its height each side, at height 32
    assert image.shape[1] == round((192 + 2 * 7) * 32 / 28)
    reference = read_pages(tmp_path / "doc", kind=kind)
    assert all(torch.equal(a, b) for a, b in zip(lines.images, reference.images))


def test_alto_box_without_polygon_and_text_joined(tmp_path):
    draw_page(tmp_path / "p.png")
    boxes = [polygon(b) for b in line_boxes()]
    xml = alto("p.png", [("a", boxes[0], "Total 12"), ("b", boxes[1], "net 4.50")])
    xml = xml.replace('<Shape><Polygon POINTS="8 8 200 8 200 36 8 36"/></Shape>', "", 1)
    (tmp_path / "p.xml").write_text(xml.replace("<SP/>", '<HYP CONTENT="-"/><SP/>'))
    lines = read_pages(tmp_path / "p.xml", kind="alto")
    assert parse_page(tmp_path / "p.xml").lines[0].outline == tuple(boxes[0])  # from the box
    assert lines.texts == ["Total- 12", "net- 4.50"]
    assert lines[0][0].shape == lines[1][0].shape


def _dark_bar(angle: float) -> tuple[np.ndarray, list, list]:
    """A page with a dark bar turned ``angle`` degrees clockwise, its outline and baseline."""
    image = Image.new("L", (300, 200), 230)
    c, s = math.cos(math.radians(angle)), math.sin(math.radians(angle))

    def turned(x, y):  # about (150, 100), clockwise as the image shows it
        return 150 + c * (x - 150) - s * (y - 100), 100 + s * (x - 150) + c * (y - 100)

    ImageDraw.Draw(image).polygon([turned(x, y) for x, y in polygon((60, 96, 240, 104))], fill=20)
    outline = [turned(x, y) for x, y in polygon((50, 80, 250, 120))]
    baseline = [turned(50, 104), turned(250, 104)]
    return np.asarray(image, dtype=np.float32) / 255, outline, baseline


def _rows_of_ink(line: torch.Tensor) -> np.ndarray:
    """The mean row of the dark pixels in each column that has some, but the tenth of those
    columns at each end (where the bar's own corners lie)."""
    dark = line.numpy() < 128
    cols = dark.any(0)
    rows = np.arange(line.shape[0])[:, None]
    found = (dark * rows).sum(0)[cols] / dark.sum(0)[cols]
    return found[len(found) // 10 : len(found) - len(found) // 10]


def test_baseline_makes_a_skewed_line_level():
    pixels, outline, baseline = _dark_bar(6.0)
    level = _rows_of_ink(cut_line(pixels, outline, baseline))
    skewed = _rows_of_ink(cut_line(pixels, outline, None))
    assert np.ptp(level) <= 1.5  # the bar lies along one row band
    assert np.ptp(skewed) > 4 * max(np.ptp(level), 1.0)  # not vacuous: without, it slopes
    reversed_baseline = cut_line(pixels, outline, baseline[::-1])  # drawn right to left
    assert np.ptp(_rows_of_ink(reversed_baseline)) <= 1.5


def test_outside_the_outline_is_paper():
    image = Image.new("L", (200, 60), 240)
    draw = ImageDraw.Draw(image)
    draw.rectangle((20, 20, 60, 40), fill=10)  # inside the triangle
    draw.rectangle((150, 5, 190, 15), fill=10)  # inside its box, outside the triangle
    pixels = np.asarray(image, dtype=np.float32) / 255
    line = cut_line(pixels, [(10, 10), (10, 50), (195, 50)], None)
    dark = line.numpy() < 128
    assert dark.any()
    assert not dark[:, line.shape[1] * 3 // 4 :].any()  # the second rectangle masked out
    assert int(np.median(line.numpy())) == 240


@pytest.mark.parametrize(
    "outline,match",
    [
        ([(10, 10), (100, 10)], "2 point.s.; a line's polygon needs at least three"),
        ([(10, 10), (50, 10), (90, 10)], "encloses no area"),
        ([(10, 10), (400, 10), (400, 40), (10, 40)], r"outside the page image \(300 x 200"),
        ([(-20, 10), (100, 10), (100, 40)], r"point \(-20, 10\)"),
    ],
)
def test_cut_line_refuses_bad_outlines(outline, match):
    pixels = np.ones((200, 300), dtype=np.float32)
    with pytest.raises(DataError, match=match):
        cut_line(pixels, outline, None)


def test_bad_lines_are_named_and_counted(tmp_path, caplog):
    draw_page(tmp_path / "p.png")
    boxes = [polygon(b) for b in line_boxes()]
    lines = [
        ("good", boxes[0], TEXTS[0]),
        ("outside", [(8, 80), (400, 80), (400, 108), (8, 108)], TEXTS[1]),
        ("two", [(8, 44), (200, 44)], TEXTS[1]),
        ("empty", boxes[2], None),
        ("blank", boxes[2], " "),
    ]
    (tmp_path / "p.xml").write_text(page("p.png", lines))
    with pytest.raises(DataError, match="4 of 5 lines are unusable") as err:
        read_pages(tmp_path / "p.xml", kind="page")
    message = str(err.value)
    for ident in ("outside", "two", "empty", "blank"):
        assert f"p.xml#{ident}" in message
    assert "1 coordinates outside the image" in message and "1 no text" in message
    with caplog.at_level(logging.WARNING, "attnkit"):
        found = read_pages(tmp_path / "p.xml", kind="page", max_unusable=0.9)
    assert found.texts == [TEXTS[0]]
    assert "dropped 4 of 5 lines" in caplog.text
    unread = read_pages(tmp_path / "p.xml", kind="page", max_unusable=0.9, references=False)
    assert unread.texts == [TEXTS[0], "", ""]  # lines to read need no text


BOMB = (
    '<?xml version="1.0"?>\n<!DOCTYPE alto [\n <!ENTITY a "aaaaaaaaaa">\n'
    ' <!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">\n'
    ' <!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">\n]>\n'
)


def test_bad_pages_are_named_and_counted(tmp_path, caplog):
    folder = tmp_path / "doc"
    write_pages(folder, "alto", n=6)
    (folder / "p1.png").unlink()  # image missing
    (folder / "p2.png").write_bytes(b"not a png")  # unreadable
    (folder / "p3.xml").write_text('<?xml version="1.0"?><html><body/></html>')
    bomb = (folder / "p4.xml").read_text().split("\n", 1)[1].replace("Total", "&c;")
    (folder / "p4.xml").write_text(BOMB + bomb)
    (folder / "p5.xml").write_text(page("p5.png", [("x", polygon(line_boxes()[0]), "a")]))
    with pytest.raises(DataError, match="5 of 6 pages are unusable") as err:
        read_pages(folder, kind="alto")
    message = str(err.value)
    assert "p1.xml: page image 'p1.png' not found" in message and "3 lines left out" in message
    assert "p2.xml: page image unreadable" in message
    assert "p3.xml: neither ALTO nor PAGE-XML: its root is 'html'" in message
    assert "p4.xml: declares XML entities" in message
    assert "p5.xml: PAGE-XML, not ALTO; read it with --format page" in message
    with caplog.at_level(logging.WARNING, "attnkit"):
        lines = read_pages(folder, kind="alto", max_unusable=0.9)
    assert lines.texts == TEXTS
    with pytest.raises(DataError, match="declares XML entities"):
        parse_page(folder / "p4.xml")


def test_documents_held_out_whole(tmp_path):
    for doc in ("a", "b", "c", "d"):
        write_pages(tmp_path / "corpus" / doc, "alto", n=2)
    train, test = split_documents(tmp_path / "corpus", test=0.25, seed=1)
    assert len(train) == 3 and len(test) == 1 and not set(train) & set(test)
    lists = {}
    for name, docs in (("train", train), ("test", test)):
        lists[name] = tmp_path / f"{name}.lst"
        lists[name].write_text("# documents\n" + "".join(f"{d}\n" for d in docs))
    assert choose_format("ocr", lists["train"]).name == "alto"
    read = {name: read_corpus("ocr", path) for name, path in lists.items()}
    assert len(read["train"]) == 18 and len(read["test"]) == 6
    assert not set(read["train"].documents) & set(read["test"].documents)
    (tmp_path / "bad.lst").write_text("corpus/a\nnowhere\n")
    with pytest.raises(DataError, match=r"bad.lst:2: 'nowhere' not found"):
        read_pages(tmp_path / "bad.lst", kind="alto")
    (tmp_path / "corpus" / "in.lst").write_text("a\n../../elsewhere\n")
    with pytest.raises(DataError, match="in.lst:2: '../../elsewhere' is outside the data folder"):
        read_pages(tmp_path / "corpus" / "in.lst", kind="alto", confine=True)


@pytest.mark.parametrize("kind", ["alto", "page"])
def test_write_texts_makes_a_copy_with_the_new_text(tmp_path, kind):
    (xml,) = write_pages(tmp_path, kind, n=1)
    before = xml.read_bytes()
    parsed = parse_page(xml)
    out = write_texts(parsed, ["One two", None, "three"], tmp_path / "copy.xml")
    assert xml.read_bytes() == before
    assert [line.text for line in parse_page(out).lines] == ["One two", TEXTS[1], "three"]
    if kind == "page":  # TextEquiv before TextStyle, as the schema orders them
        assert "</TextEquiv><TextStyle" in out.read_text()
    else:
        assert '<String CONTENT="One" ID="l0_0_w0"/><SP/><String CONTENT="two"' in out.read_text()
    with pytest.raises(ValueError, match="is the page being read"):
        write_texts(parsed, [None] * 3, xml)
