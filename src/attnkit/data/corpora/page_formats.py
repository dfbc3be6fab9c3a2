"""Page ground truth for OCR: formats ``alto`` and ``page`` of task ``"ocr"``, every text
line of a page cut out of its page image (:mod:`attnkit.data.corpora.page_lines`) with its
text (:mod:`attnkit.data.corpora.page_xml`).

========  ==================================================================================
``alto``  ALTO v2, v3, v4 pages (kraken, eScriptorium, ABBYY, Tesseract) beside their images
``page``  PAGE-XML 2013-07-15 and 2019-07-15 pages (Transkribus, OCR-D, Calamari)
========  ==================================================================================

A corpus is a page's ``.xml`` file, a folder of them (its subfolders too; linked folders are
not entered), or a list file (``.lst`` or ``.txt``: one ``.xml`` file or folder a line,
relative to the list's folder or absolute; blank lines and ``#`` comments skipped) — the way
to hold documents out whole: the documents (a folder of pages, or a page) of the test set
listed in one list, the others in the training list, so that no page gives lines to both
(:func:`split_documents` writes such lists). Detection: a ``.xml`` file, or a folder or list
whose first ``.xml`` file names the ALTO or PAGE namespace in its first 4 kB.

The page image is the one the XML names (ALTO ``sourceImageInformation/fileName``, PAGE
``Page@imageFilename``), relative to the XML's folder or absolute, with ``confine`` only inside
it (:func:`attnkit.data.paths.inside`); a name that is a URL (``https://.../p1.png``) is looked
up by its last part beside the XML. Pages are unusable, counted and named (as pages) when their
XML cannot be read, is not of the format (an ALTO file in a ``page`` corpus is named so), or
declares entities (an XML bomb), or their image is missing or unreadable; lines are unusable,
counted and named (as lines) when they have no text (or an empty one), characters outside
``alphabet``, or cannot be cut out (an outline of fewer than three points or outside the image,
a vertical baseline). Reading stops past ``max_unusable`` of the pages or of the lines
(:mod:`attnkit.data.corpora.unusable`). Without ``references`` (``attnkit read --corpus``), a
line without text is read too, its text ``""``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch

from attnkit.data.corpora.format_registry import Format, register
from attnkit.data.corpora.image_folders import read_pixels
from attnkit.data.corpora.line_folders import HEIGHT, MAX_WIDTH, LineFolder
from attnkit.data.corpora.page_lines import cut_line
from attnkit.data.corpora.page_xml import KINDS, PageFile, detect_kind, parse_page
from attnkit.data.corpora.unusable import MAX_UNUSABLE, Unusable
from attnkit.data.paths import inside, not_found
from attnkit.errors import DataError

__all__ = [
    "CutPage",
    "PageLines",
    "cut_page",
    "page_files",
    "page_kind",
    "read_pages",
    "split_documents",
]

TASK = "ocr"
LISTS = (".lst", ".txt")
NAMES = {"alto": "ALTO", "page": "PAGE-XML"}


class PageLines(LineFolder):
    """The lines cut out of pages, held in memory (``(32, W)`` uint8 each: about 32 bytes a
    pixel column): ``lines[i]`` is ``(image, text)``; ``path(i)`` names the line as
    ``PAGE.xml#LINE-ID``; ``documents[i]`` is the folder of its page's XML.

    Shape:
        ``lines[i][0]``: a uint8 tensor ``(32, widths[i])``.
    """

    def __init__(
        self,
        folder: Path,
        rows: Sequence[tuple[str, int, str]],
        images: Sequence[torch.Tensor],
        documents: Sequence[str],
    ):
        super().__init__(folder, rows, max_width=None)
        self.images, self.documents = list(images), list(documents)

    def path(self, i: int) -> str:
        return self.rows[i][0]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return PageLines(self.folder, self.rows[i], self.images[i], self.documents[i])
        return self.images[i], self.rows[i][2]


@dataclass(frozen=True)
class CutPage:
    """A page and its lines cut out: ``images[i]`` the ``(32, W)`` uint8 line ``i`` of
    ``page.lines``, or None with ``problems[i]`` saying why."""

    page: PageFile
    images: tuple[torch.Tensor | None, ...]
    problems: tuple[str | None, ...]


def _image_path(page: PageFile, confine: bool) -> Path:
    """The page image of ``page`` (see the module docstring).

    Raises:
        DataError: naming the XML: no image named, one outside the folder with ``confine``,
            or not found.
    """
    folder, name = page.path.parent, page.image
    if not name:
        what = "sourceImageInformation/fileName" if page.kind == "alto" else "Page@imageFilename"
        raise DataError(f"{page.path}: names no page image ({what} empty or missing)")
    url = urlparse(name)
    if url.scheme in ("http", "https", "file") and url.path:
        name = url.path if url.scheme == "file" else os.path.basename(url.path)
    path = inside(folder, name, f"{page.path}: page image", confine=confine)
    if not path.exists():
        raise DataError(
            f"{page.path}: page image {not_found(name, folder)} ({len(page.lines)} lines left out)"
        )
    return path


def cut_page(
    page: PageFile, *, max_width: int | None = MAX_WIDTH, confine: bool = False
) -> CutPage:
    """Every line of ``page`` cut out of its page image (:func:`attnkit.data.corpora.
    page_lines.cut_line`), or why not.

    Raises:
        DataError: naming the XML and the image: the page image is missing or unreadable.
    """
    path = _image_path(page, confine)
    try:
        pixels = read_pixels(path, colour=False)  # (H, W) in [0, 1]
    except DataError as exc:
        raise DataError(f"{page.path}: page image unreadable: {exc}") from None
    images: list[torch.Tensor | None] = []
    problems: list[str | None] = []
    for line in page.lines:
        problem, image = line.problem, None
        if problem is None:
            try:
                image = cut_line(pixels, line.outline, line.baseline, max_width=max_width)
            except DataError as exc:
                problem = str(exc)
        images.append(image)
        problems.append(None if problem is None else f"{page.path}#{line.id}: {problem}")
    return CutPage(page, tuple(images), tuple(problems))


def page_files(path: str | Path, *, confine: bool = False) -> Iterator[Path]:
    """The ``.xml`` files of the corpus ``path`` (a file, a folder, a list file), in order:
    a folder's sorted by path.

    Raises:
        DataError: ``path`` does not exist; a list names a file or folder that does not
            (the list and line named), or with ``confine`` one outside the list's folder.
    """
    path = Path(path)
    if path.is_dir():
        for root, dirs, files in os.walk(path):
            dirs.sort()
            yield from (Path(root) / n for n in sorted(files) if n.lower().endswith(".xml"))
    elif path.suffix.lower() in LISTS and path.is_file():
        for n, raw in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), 1):
            name = raw.strip()
            if not name or name.startswith("#"):
                continue
            listed = inside(path.parent, name, f"{path}:{n}", confine=confine)
            if not listed.exists():
                raise DataError(f"{path}:{n}: {not_found(name, path.parent)}")
            yield from page_files(listed, confine=confine)
    elif path.is_file():
        yield path
    else:
        raise DataError(f"{path}: not found")


def read_pages(
    path: str | Path,
    *,
    kind: str,
    alphabet: str | None = None,
    max_width: int | None = MAX_WIDTH,
    max_unusable: float = MAX_UNUSABLE,
    references: bool = True,
    confine: bool = False,
) -> PageLines:
    """The lines of the ``kind`` (``"alto"`` or ``"page"``) pages of ``path``, as the module
    docstring says: a :class:`PageLines` whose ``path(i)`` is ``PAGE.xml#LINE-ID``.

    Raises:
        DataError: no usable line or page, or more than ``max_unusable`` of either unusable
            (the first few named, with why).
    """
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    path = Path(path)
    pages = Unusable(path, max_unusable=max_unusable, what="pages")
    lines = Unusable(path, max_unusable=max_unusable, what="lines")
    allowed = None if alphabet is None else set(alphabet)
    rows: list[tuple[str, int, str]] = []
    images: list[torch.Tensor] = []
    documents: list[str] = []
    kept_pages = 0
    for xml in page_files(path, confine=confine):
        try:
            if confine and path.is_dir():  # a linked file leading out of the folder
                inside(path, os.path.relpath(xml, path), str(xml), confine=True)
            page = parse_page(xml)
            if page.kind != kind:
                raise DataError(
                    f"{xml}: {NAMES[page.kind]}, not {NAMES[kind]}; read it with "
                    f"--format {page.kind}"
                )
            cut = cut_page(page, max_width=max_width, confine=confine)
        except DataError as exc:
            pages.drop(str(exc), _kind(str(exc), PAGE_KINDS))
            continue
        kept_pages += 1
        for line, image, problem in zip(page.lines, cut.images, cut.problems):
            text = line.text or ""
            where = f"{xml}#{line.id}"
            if problem is None and references and not text:
                problem = f"{where}: {'no text' if line.text is None else 'empty text'}"
            if problem is None and allowed is not None and set(text) - allowed:
                problem = (
                    f"{where}: characters outside the alphabet: "
                    f"{''.join(sorted(set(text) - allowed))!r} in {text[:60]!r}"
                )
            if problem is not None or image is None:
                lines.drop(problem or where, _kind(problem or "", LINE_KINDS))
                continue
            rows.append((where, image.shape[1], text))
            images.append(image)
            documents.append(str(xml.parent))
    pages.check(kept_pages)
    lines.check(len(rows))
    return PageLines(path if path.is_dir() else path.parent, rows, images, documents)


# What a dropped page or line counts as: the first kind whose words its message holds.
PAGE_KINDS = (
    ("page image unreadable", "page images unreadable"),
    ("page image", "page images missing"),
    ("entities", "XML declaring entities"),
    ("neither ALTO nor PAGE", "not ALTO or PAGE-XML"),
    ("not well-formed", "not well-formed XML"),
    ("read it with --format", "of the other format"),
    ("", "unreadable pages"),
)
LINE_KINDS = (
    ("outside the page image", "coordinates outside the image"),
    ("point(s)", "outlines of fewer than three points"),
    ("no area", "outlines of no area"),
    ("no text", "no text"),
    ("empty text", "empty text"),
    ("alphabet", "characters outside the alphabet"),
    ("baseline at", "baselines too steep"),
    ("", "lines that cannot be cut out"),
)


def _kind(message: str, kinds: tuple[tuple[str, str], ...]) -> str:
    """The kind of the first of ``kinds`` (words, kind) whose words ``message`` holds (the
    last, with no words, holds for any)."""
    return next(kind for words, kind in kinds if words in message)


def split_documents(
    path: str | Path, *, test: float = 0.2, seed: int = 0
) -> tuple[list[Path], list[Path]]:
    """The documents of the corpus ``path`` split whole between training and test: a
    document is a folder of pages (each folder holding ``.xml`` files), or each page when
    all are in one folder. ``test``: the share of documents held out (at least one; seeded
    shuffle). Write each list to a ``.lst`` file to read it (see the module docstring).

    Raises:
        ValueError: ``test`` not in ``(0, 1)``, or fewer than two documents.
    """
    if not 0.0 < test < 1.0:
        raise ValueError(f"test: expected a share between 0 and 1, got {test!r}")
    files = list(page_files(path))
    folders = sorted({f.parent for f in files})
    documents = folders if len(folders) > 1 else files
    if len(documents) < 2:
        raise ValueError(f"path: {path} holds {len(documents)} document(s); expected two or more")
    order = sorted(documents)
    random.Random(seed).shuffle(order)
    n = min(len(order) - 1, max(1, round(test * len(order))))
    return sorted(order[n:]), sorted(order[:n])


def _detect(kind: str):
    def detect(path: Path) -> bool:
        return page_kind(path) == kind

    return detect


def page_kind(path: Path) -> str | None:
    """``"alto"`` or ``"page"``: the kind of the first page of the corpus ``path`` (a
    ``.xml`` file, a folder, a list file), from its namespace; None for anything else."""
    if path.is_file() and path.suffix.lower() not in (".xml", *LISTS):
        return None
    try:
        first = next(iter(page_files(path)), None)
    except (DataError, OSError, UnicodeDecodeError):
        return None
    return None if first is None else detect_kind(first)


def _reader(kind: str):
    def read(
        path: str | Path,
        *,
        alphabet: str | None = None,
        max_width: int | None = MAX_WIDTH,
        max_unusable: float = MAX_UNUSABLE,
        references: bool = True,
        confine: bool = False,
    ) -> PageLines:
        return read_pages(
            path,
            kind=kind,
            alphabet=alphabet,
            max_width=max_width,
            max_unusable=max_unusable,
            references=references,
            confine=confine,
        )

    read.__doc__ = f"The lines of the {NAMES[kind]} pages of ``path``: :func:`read_pages`."
    return read


assert HEIGHT == 32  # the lines are cut to the task's line height
register(
    Format(
        "alto",
        TASK,
        _reader("alto"),
        _detect("alto"),
        "ALTO v2-v4 pages (.xml) beside their page images, a folder of them or a .lst list: "
        "kraken, eScriptorium",
        'p1.xml:  <TextLine ...><Shape><Polygon POINTS="..."/></Shape>'
        '<String CONTENT="Total: 12.50"/></TextLine>   p1.png',
    )
)
register(
    Format(
        "page",
        TASK,
        _reader("page"),
        _detect("page"),
        "PAGE-XML 2013/2019 pages (.xml) beside their page images, a folder of them or a .lst "
        "list: Transkribus, OCR-D",
        'p1.xml:  <TextLine ...><Coords points="..."/><TextEquiv><Unicode>Total: 12.50'
        "</Unicode></TextEquiv></TextLine>   p1.png",
    )
)
