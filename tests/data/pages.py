"""Tiny page ground truth written by the tests: a page image with drawn text lines and the ALTO
or PAGE-XML file naming it."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

ALTO = "http://www.loc.gov/standards/alto/ns-v{}#"
PAGE = "http://schema.primaresearch.org/PAGE/gts/pagecontent/{}"
TEXTS = ["Total 12", "net 4.50", "Invoice 7"]
WIDTH, HEIGHT = 240, 120


def line_boxes(n: int = len(TEXTS)) -> list[tuple[int, int, int, int]]:
    """``(x0, y0, x1, y1)`` of each drawn line."""
    return [(8, 8 + 36 * k, 200, 8 + 36 * k + 28) for k in range(n)]


def polygon(box: tuple[int, int, int, int]) -> list[tuple[int, int]]:
    x0, y0, x1, y1 = box
    return [(x0, y0), (x1, y0), (x1, y1), (x0, y1)]


def draw_page(path: Path, texts: list[str] = TEXTS) -> Path:
    """A white page with ``texts`` drawn in black, one per :func:`line_boxes` box."""
    image = Image.new("L", (WIDTH, HEIGHT), 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=18)
    for text, (x0, y0, _, _) in zip(texts, line_boxes(len(texts))):
        draw.text((x0 + 4, y0 + 3), text, fill=0, font=font)
    image.save(path)
    return path


def _points(points, sep: str) -> str:
    return " ".join(f"{x}{sep}{y}" for x, y in points)


def alto(image: str, lines: list[tuple], version: int = 4) -> str:
    """ALTO naming ``image``; ``lines``: ``(id, points or None, text)`` (None: the box alone;
    text None: no String)."""
    body = []
    for ident, points, text in lines:
        xs, ys = [x for x, _ in points or [(0, 0)]], [y for _, y in points or [(0, 0)]]
        box = (
            f'HPOS="{min(xs)}" VPOS="{min(ys)}" WIDTH="{max(xs) - min(xs)}" '
            f'HEIGHT="{max(ys) - min(ys)}"'
        )
        shape = (
            "" if points is None else f'<Shape><Polygon POINTS="{_points(points, " ")}"/></Shape>'
        )
        words = (
            ""
            if text is None
            else "<SP/>".join(f'<String CONTENT="{w}"/>' for w in text.split(" "))
        )
        body.append(f'<TextLine ID="{ident}" {box}>{shape}{words}</TextLine>')
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<alto xmlns="{ALTO.format(version)}">'
        f"<Description><MeasurementUnit>pixel</MeasurementUnit><sourceImageInformation>"
        f"<fileName>{image}</fileName></sourceImageInformation></Description>"
        f'<Layout><Page WIDTH="{WIDTH}" HEIGHT="{HEIGHT}"><PrintSpace><TextBlock ID="b1">'
        + "".join(body)
        + "</TextBlock></PrintSpace></Page></Layout></alto>\n"
    )


def page(image: str, lines: list[tuple], version: str = "2019-07-15") -> str:
    """PAGE-XML naming ``image``; ``lines`` as :func:`alto` takes them."""
    body = []
    for ident, points, text in lines:
        equiv = "" if text is None else f"<TextEquiv><Unicode>{text}</Unicode></TextEquiv>"
        body.append(
            f'<TextLine id="{ident}"><Coords points="{_points(points, ",")}"/>{equiv}'
            '<TextStyle fontSize="10"/></TextLine>'
        )
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<PcGts xmlns="{PAGE.format(version)}">'
        f'<Page imageFilename="{image}" imageWidth="{WIDTH}" imageHeight="{HEIGHT}">'
        f'<TextRegion id="r1"><Coords points="0,0 {WIDTH},0 {WIDTH},{HEIGHT}"/>'
        + "".join(body)
        + "</TextRegion></Page></PcGts>\n"
    )


def write_pages(folder: Path, kind: str = "alto", n: int = 2, **version) -> list[Path]:
    """``n`` pages ``p<i>.png`` + ``p<i>.xml`` of every line of :data:`TEXTS` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    made = []
    for i in range(n):
        draw_page(folder / f"p{i}.png")
        lines = [(f"l{i}_{k}", polygon(b), t) for k, (b, t) in enumerate(zip(line_boxes(), TEXTS))]
        xml = (alto if kind == "alto" else page)(f"p{i}.png", lines, **version)
        (folder / f"p{i}.xml").write_text(xml, encoding="utf-8")
        made.append(folder / f"p{i}.xml")
    return made
