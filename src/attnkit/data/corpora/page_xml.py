"""ALTO (v2, v3, v4) and PAGE-XML (2013-07-15, 2019-07-15) page files: their text lines read
(:func:`parse_page`), and a copy of a page written with new texts (:func:`write_texts`).

The XML is parsed by lxml with entity expansion off, no network and no huge trees
(:data:`PARSER`). libxml2 still expands the internal entities of an attribute value (up to its
amplification limit), so a file that declares entities (``<!ENTITY``: the "billion laughs" XML
bomb and its smaller cousins) is refused before it is parsed, and once more after parsing if
its declaration was hidden from the byte scan (an encoding other than UTF-8).

A page's lines, in document order (every ``TextLine``, usable or not, so that the index of a
line is its place in the file):

============  ==================================================  ==========================
              ALTO                                                PAGE
============  ==================================================  ==========================
outline       ``Shape/Polygon@POINTS``, else the                  ``Coords@points``
              ``HPOS/VPOS/WIDTH/HEIGHT`` box
baseline      ``@BASELINE``: points (ALTO 4.2+); one number (the   ``Baseline@points``
              y of a level baseline) is no skew
text          ``String@CONTENT`` joined, ``SP`` a space, ``HYP``  ``TextEquiv/Unicode`` with
              its ``CONTENT``; else ``TextLine@CONTENT``           the lowest ``@index`` (or
                                                                  the first); else the
                                                                  ``Word``\\ s' joined
page image    ``sourceImageInformation/fileName``                 ``Page@imageFilename``
============  ==================================================  ==========================

A text is stripped and its runs of white space made one space. Coordinates are pixels: an
ALTO ``MeasurementUnit`` other than ``pixel`` (``mm10``, ``inch1200``) is refused.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from lxml import etree

from attnkit.data.paths import regular_file
from attnkit.errors import DataError

__all__ = ["KINDS", "PARSER", "PageFile", "PageLine", "detect_kind", "parse_page", "write_texts"]

KINDS = ("alto", "page")
ALTO_NS = tuple(f"http://www.loc.gov/standards/alto/ns-v{v}#" for v in (2, 3, 4))
PAGE_NS = tuple(
    f"http://schema.primaresearch.org/PAGE/gts/pagecontent/{v}"
    for v in ("2013-07-15", "2019-07-15")
)
MAX_XML_BYTES = 64 << 20  # a page's XML; lxml's own limits (huge_tree off) hold inside it
PARSER = etree.XMLParser(
    resolve_entities=False, no_network=True, huge_tree=False, load_dtd=False, remove_comments=True
)
_NUMBERS = re.compile(r"[\s,]+")
# PAGE's TextLine children after TextEquiv (the schema's order): a new TextEquiv goes before
_AFTER_TEXT = ("TextStyle", "UserDefined", "Labels")


@dataclass(frozen=True)
class PageLine:
    """One ``TextLine``: its ``id`` (the file's, else ``line<i>``), ``text`` (None: none
    given), ``outline`` (polygon or box corners, ``(x, y)`` pixels), ``baseline`` (points,
    or None), ``box`` ``(x0, y0, x1, y1)`` of the outline, and ``problem``: why it cannot be
    cut out (None: it can)."""

    id: str
    text: str | None
    outline: tuple[tuple[float, float], ...]
    baseline: tuple[tuple[float, float], ...] | None
    problem: str | None = None

    @property
    def box(self) -> tuple[float, float, float, float] | None:
        if not self.outline:
            return None
        xs, ys = [x for x, _ in self.outline], [y for _, y in self.outline]
        return min(xs), min(ys), max(xs), max(ys)


@dataclass(frozen=True)
class PageFile:
    """A parsed page: its XML ``path``, ``kind`` (``"alto"`` or ``"page"``), ``namespace``,
    ``image`` (the page image's name as the file writes it, ``""``: none) and ``lines``."""

    path: Path
    kind: str
    namespace: str
    image: str
    lines: tuple[PageLine, ...]


def detect_kind(path: Path) -> str | None:
    """``"alto"`` or ``"page"`` from the namespace in the first 4 kB of the XML file
    ``path``; None when neither is there or the file cannot be read."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    if any(ns.encode() in head for ns in ALTO_NS):
        return "alto"
    if any(ns.encode() in head for ns in PAGE_NS):
        return "page"
    return None


def _tree(path: Path) -> etree._ElementTree:
    """The parsed XML of ``path``, safely (see the module docstring).

    Raises:
        DataError: naming ``path``: unreadable, too large, not well-formed, or declaring
            entities.
    """
    regular_file(path)
    size = path.stat().st_size
    if size > MAX_XML_BYTES:
        raise DataError(f"{path}: {size} bytes; a page's XML is read up to {MAX_XML_BYTES} bytes")
    data = path.read_bytes()
    if b"<!ENTITY" in data:
        raise DataError(f"{path}: declares XML entities (<!ENTITY); refused, as an XML bomb may")
    try:
        tree = etree.ElementTree(etree.fromstring(data, PARSER))
    except etree.XMLSyntaxError as exc:
        raise DataError(f"{path}: not well-formed XML: {exc}") from None
    dtd = tree.docinfo.internalDTD
    if dtd is not None and any(True for _ in dtd.iterentities()):
        raise DataError(f"{path}: declares XML entities (<!ENTITY); refused, as an XML bomb may")
    return tree


def _kind_of(root: etree._Element, path: Path) -> tuple[str, str]:
    namespace = etree.QName(root).namespace or ""
    if namespace in ALTO_NS:
        return "alto", namespace
    if namespace in PAGE_NS:
        return "page", namespace
    raise DataError(
        f"{path}: neither ALTO nor PAGE-XML: its root is {etree.QName(root).localname!r} in "
        f"namespace {namespace or 'none'!r}; expected alto in {ALTO_NS[-1]} (v2, v3, v4) or "
        f"PcGts in {PAGE_NS[-1]} (2013, 2019)"
    )


def _points(text: str, what: str) -> tuple[tuple[float, float], ...]:
    """``x y x y ...`` or ``x,y x,y ...`` as points.

    Raises:
        DataError: a value that is no finite number, or an odd count (without the file:
            the caller names it).
    """
    values = [v for v in _NUMBERS.split(text.strip()) if v]
    try:
        numbers = [float(v) for v in values]
    except ValueError:
        raise DataError(f"{what} {text[:80]!r}: expected numbers") from None
    if len(numbers) % 2 or not all(math.isfinite(v) for v in numbers):
        raise DataError(f"{what} {text[:80]!r}: expected x y pairs of finite numbers")
    return tuple(zip(numbers[::2], numbers[1::2]))


def _clean(text: str | None) -> str | None:
    return None if text is None else " ".join(text.split())


def _child(element: etree._Element, name: str) -> etree._Element | None:
    return next((c for c in element if etree.QName(c).localname == name), None)


def _children(element: etree._Element, name: str) -> list[etree._Element]:
    return [c for c in element if isinstance(c.tag, str) and etree.QName(c).localname == name]


def _alto_text(line: etree._Element) -> str | None:
    parts, seen = [], False
    for child in line:
        if not isinstance(child.tag, str):
            continue
        name = etree.QName(child).localname
        if name in ("String", "HYP"):
            seen = True
            parts.append(child.get("CONTENT", ""))
        elif name == "SP":
            parts.append(" ")
    return _clean("".join(parts)) if seen else _clean(line.get("CONTENT"))


def _alto_line(line: etree._Element, i: int) -> PageLine:
    ident = line.get("ID") or f"line{i}"
    text, problem = _alto_text(line), None
    outline: tuple[tuple[float, float], ...] = ()
    baseline = None
    try:
        shape = _child(line, "Shape")
        polygon = None if shape is None else _child(shape, "Polygon")
        if polygon is not None:
            outline = _points(polygon.get("POINTS", ""), "Shape/Polygon POINTS")
        else:
            box = [line.get(a) for a in ("HPOS", "VPOS", "WIDTH", "HEIGHT")]
            if None in box:
                raise DataError("no Shape/Polygon and no HPOS/VPOS/WIDTH/HEIGHT box")
            (x, y), (w, h) = _points(" ".join(box), "HPOS/VPOS/WIDTH/HEIGHT")
            outline = ((x, y), (x + w, y), (x + w, y + h), (x, y + h))
        found = line.get("BASELINE")
        if found and len(_NUMBERS.split(found.strip())) >= 4:
            baseline = _points(found, "BASELINE")
    except DataError as exc:
        problem = str(exc)
    return PageLine(ident, text, outline, baseline, problem)


def _page_text(line: etree._Element) -> str | None:
    equivs = _children(line, "TextEquiv")
    if equivs:
        first = min(equivs, key=lambda e: int(e.get("index", "0") or 0))
        unicode = _child(first, "Unicode")
        return _clean("" if unicode is None else unicode.text or "")
    words = [_page_text(w) for w in _children(line, "Word")]
    return _clean(" ".join(w for w in words if w)) if any(w is not None for w in words) else None


def _page_line(line: etree._Element, i: int) -> PageLine:
    ident = line.get("id") or f"line{i}"
    problem: str | None = None
    outline: tuple[tuple[float, float], ...] = ()
    baseline = None
    try:
        coords = _child(line, "Coords")
        if coords is None or coords.get("points") is None:
            raise DataError("no Coords points")
        outline = _points(coords.get("points", ""), "Coords points")
        found = _child(line, "Baseline")
        if found is not None and found.get("points"):
            baseline = _points(found.get("points", ""), "Baseline points")
    except DataError as exc:
        problem = str(exc)
    return PageLine(ident, _page_text(line), outline, baseline, problem)


def _text_lines(root: etree._Element) -> list[etree._Element]:
    return [
        e for e in root.iter() if isinstance(e.tag, str) and etree.QName(e).localname == "TextLine"
    ]


def parse_page(path: str | Path) -> PageFile:
    """The page of the ALTO or PAGE-XML file ``path`` (see the module docstring).

    Raises:
        DataError: naming ``path``: unreadable, not well-formed, declaring entities, neither
            ALTO nor PAGE-XML, or coordinates in other units than pixels.
    """
    path = Path(path)
    root = _tree(path).getroot()
    kind, namespace = _kind_of(root, path)
    lines = _text_lines(root)
    if kind == "alto":
        unit = next((e for e in root.iter("{*}MeasurementUnit")), None)
        if unit is not None and (unit.text or "").strip() not in ("", "pixel"):
            raise DataError(
                f"{path}: MeasurementUnit {unit.text.strip()!r}; expected pixel (coordinates "
                "in other units need the scan's resolution)"
            )
        name = next((e.text or "" for e in root.iter("{*}fileName")), "")
        parsed = [_alto_line(line, i) for i, line in enumerate(lines)]
    else:
        page = next((e for e in root.iter("{*}Page")), None)
        name = "" if page is None else page.get("imageFilename", "")
        parsed = [_page_line(line, i) for i, line in enumerate(lines)]
    return PageFile(path, kind, namespace, name.strip(), tuple(parsed))


def write_texts(page: PageFile, texts: list[str | None], out: str | Path) -> Path:
    """A copy of ``page``'s XML at ``out`` with ``texts[i]`` as the text of its line ``i``
    (None: the line left as it was). ALTO: the line's ``String``, ``SP`` and ``HYP`` elements
    replaced by one ``String`` per word (``CONTENT``; no word boxes) with an ``SP`` between
    words, as kraken writes a line; PAGE: the line's ``TextEquiv`` and ``Word`` elements
    replaced by one ``TextEquiv/Unicode`` in the schema's place. ``out`` must not be the page's
    own file.

    Raises:
        ValueError: ``out`` is the page's file, or ``texts`` is not one per line.
        DataError: the page's file no longer parses.
    """
    out = Path(out)
    if out.exists() and out.resolve() == page.path.resolve():
        raise ValueError(f"out: {out} is the page being read; expected another file")
    if len(texts) != len(page.lines):
        raise ValueError(f"texts: expected {len(page.lines)} (one per line), got {len(texts)}")
    tree = _tree(page.path)
    for element, text in zip(_text_lines(tree.getroot()), texts):
        if text is None:
            continue
        ns = etree.QName(element).namespace
        if page.kind == "alto":
            _set_alto(element, text, ns)
        else:
            _set_page(element, text, ns)
    tree.write(str(out), xml_declaration=True, encoding="UTF-8")
    return out


def _set_alto(line: etree._Element, text: str, ns: str | None) -> None:
    for child in _children(line, "String") + _children(line, "SP") + _children(line, "HYP"):
        line.remove(child)
    ident = line.get("ID")
    for k, word in enumerate(text.split() or [""]):
        if k:
            etree.SubElement(line, f"{{{ns}}}SP")
        string = etree.SubElement(line, f"{{{ns}}}String", CONTENT=word)
        if ident:
            string.set("ID", f"{ident}_w{k}")


def _set_page(line: etree._Element, text: str, ns: str | None) -> None:
    for child in _children(line, "TextEquiv") + _children(line, "Word"):
        line.remove(child)
    equiv = etree.Element(f"{{{ns}}}TextEquiv")
    etree.SubElement(equiv, f"{{{ns}}}Unicode").text = text
    after = next(
        (
            i
            for i, c in enumerate(line)
            if isinstance(c.tag, str) and etree.QName(c).localname in _AFTER_TEXT
        ),
        None,
    )
    if after is None:
        line.append(equiv)
    else:
        line.insert(after, equiv)
