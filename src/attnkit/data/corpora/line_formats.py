"""Text-line corpora for OCR, read into the :class:`~attnkit.data.LineFolder` of attnkit's
own ``labels.tsv`` folders: formats of task ``"ocr"``.

===========  ========================================================================
``labels``   attnkit's own: a folder of line images and ``labels.tsv``
             (``filename<TAB>text``), or that TSV
``gt-txt``   line images beside their transcriptions, ``NAME.png`` + ``NAME.gt.txt``, in
             a folder and its subfolders (kraken, Calamari, OCR-D, ocropus)
===========  ========================================================================

Detection tries them in this order: a folder holding ``labels.tsv`` or no ``.gt.txt`` file,
or a file, is ``labels``; a folder holding ``.gt.txt`` files is ``gt-txt``. Both give a
:class:`LineFolder`, which keeps names, widths and texts and decodes an image when a batch
needs it (:func:`~attnkit.data.load_line_image`: 8- or 16-bit grey, RGB, RGBA, palette, any
height, scaled to 32 px). ``labels`` decodes every image once when the corpus is read, to
check it; ``gt-txt``, made for large corpora, reads each image's header only (its width, a
decompression bomb or a width past ``max_width`` refused;
:func:`~attnkit.data.corpora.line_folders.line_width`), so training starts after a pass over the
headers, and an image whose pixels cannot be decoded stops training when its batch is read, naming
the file.

**gt-txt**: an image is a ``.png``, ``.jpg``, ``.jpeg``, ``.tif``, ``.tiff``, ``.bmp`` or
``.webp`` file; its transcription is the ``.gt.txt`` file of the same name less the image's
suffix, or less ocropus's ``.bin`` / ``.nrm`` too (``0001.bin.png`` + ``0001.gt.txt``). When
several images share one transcription, the one without ``.bin`` / ``.nrm`` is taken, then
``.bin``, and the others are left out (logged). A transcription is the file's text (as
:mod:`attnkit.data.corpora.text_files` reads it) without surrounding white space, one line. Lines
are in the order of their paths. An image without its ``.gt.txt``, a ``.gt.txt`` without its image,
an empty or several-line transcription, one with characters outside ``alphabet``, an image
that cannot be read, and, with ``confine``, an image or ``.gt.txt`` that is a link leading
out of the folder (nothing of it is read, as every reader's ``confine`` refuses such files:
:func:`attnkit.data.paths.inside`) are unusable
(:mod:`attnkit.data.corpora.reading`). Linked subfolders are not entered.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from attnkit.data.corpora.format_registry import Format, register
from attnkit.data.corpora.line_folders import MAX_WIDTH, LineFolder, line_width, read_line_folder
from attnkit.data.corpora.page_formats import page_kind
from attnkit.data.corpora.text_files import read_text
from attnkit.data.corpora.unusable import MAX_UNUSABLE, Unusable
from attnkit.data.paths import inside
from attnkit.errors import DataError

__all__ = ["GT", "IMAGE_SUFFIXES", "LABELS", "read_gt_folder", "read_labels"]

log = logging.getLogger("attnkit")

TASK = "ocr"
LABELS = "labels.tsv"  # a folder's labels, as attnkit train ocr --labels defaults
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp")
GT = ".gt.txt"  # a line's transcription, beside its image
VARIANTS = ("", ".bin", ".nrm")  # ocropus's renderings of one line, in the order taken


def read_labels(
    path: str | Path,
    *,
    labels: str = LABELS,
    alphabet: str | None = None,
    max_width: int | None = MAX_WIDTH,
    confine: bool = False,
    max_unusable: float | None = None,
) -> LineFolder:
    """attnkit's own lines: the folder ``path`` with its ``labels`` TSV, or the TSV ``path``
    in its folder (:func:`attnkit.data.read_line_folder`: file names relative to the folder
    or absolute; with ``confine``, only inside it)."""
    path = Path(path)
    folder, tsv = (path, path / labels) if path.is_dir() else (path.parent, path)
    if not tsv.is_file():
        raise DataError(f"{tsv}: not found")
    return read_line_folder(
        folder,
        tsv,
        alphabet=alphabet,
        max_width=max_width,
        confine=confine,
        max_unusable=max_unusable,
    )


def read_gt_folder(
    path: str | Path,
    *,
    alphabet: str | None = None,
    max_width: int | None = MAX_WIDTH,
    max_unusable: float = MAX_UNUSABLE,
    references: bool = True,
    confine: bool = False,
) -> LineFolder:
    """The line images and ``.gt.txt`` transcriptions in the folder ``path`` and its
    subfolders (see the module docstring), as a :class:`LineFolder` whose names are relative
    to ``path``. Without ``references`` (to read the lines), an image without its ``.gt.txt``
    is a line too, its text ``""``. ``confine``: leave out files that are links leading out
    of ``path`` (a folder not of the user's own).

    Raises:
        DataError: ``path`` is not a folder; none of its lines is usable, or more than
            ``max_unusable`` of them are not (the first few named, with why).
    """
    folder = Path(path)
    if not folder.is_dir():
        raise DataError(f"{folder}: not a folder of line images and .gt.txt files")
    unusable = Unusable(folder, max_unusable=max_unusable, what="lines")
    allowed = None if alphabet is None else set(alphabet)
    rows, others = [], []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        here = Path(root).relative_to(folder)
        prefix = "" if here == Path(".") else here.as_posix() + "/"  # names kept, posix
        for base, image, extra in _pairs(files, unusable, here, references):
            others += [prefix + name for name in extra]
            gt = os.path.join(root, base + GT)
            if confine and _links_out(folder, [prefix + image, prefix + base + GT], unusable):
                continue
            text = _transcription(gt, allowed, unusable) if references or os.path.exists(gt) else ""
            if text is None:
                continue
            try:
                width = line_width(os.path.join(root, image), max_width=max_width)
            except DataError as exc:
                unusable.drop(str(exc), "unreadable images")
                continue
            rows.append((prefix + image, width, text))
    unusable.check(len(rows))
    if others:
        log.info(
            "%s: %d images left out, another image of the same .gt.txt taken (first: %s)",
            folder,
            len(others),
            others[0],
        )
    return LineFolder(folder, rows, max_width=max_width)


def _pairs(files: list[str], unusable: Unusable, here: Path, references: bool = True):
    """``(base, image, other images)`` of each transcription in ``files`` (one folder's)
    with an image (without ``references``, of each image); the unpaired counted in
    ``unusable``."""
    gts = {name[: -len(GT)] for name in files if name.endswith(GT)}
    images: dict[str, list[str]] = {}
    for name in files:
        stem, suffix = os.path.splitext(name)
        if suffix.lower() not in IMAGE_SUFFIXES or name.endswith(GT):
            continue
        base = next(
            (
                stem[: len(stem) - len(v)]
                for v in VARIANTS[1:]
                if stem.endswith(v) and stem not in gts and stem[: -len(v)] in gts
            ),
            stem,
        )
        images.setdefault(base, []).append(name)
    for base in sorted(gts | set(images)):
        if base not in gts and references:
            unusable.drop(
                f"{here / images[base][0]}: no {base}{GT} beside it", "images without .gt.txt"
            )
        elif base not in images:
            unusable.drop(
                f"{here / (base + GT)}: no image beside it ({base}.png, ...)",
                ".gt.txt without an image",
            )
        else:
            found = sorted(images[base], key=lambda n: (_variant(n, base), n))
            yield base, found[0], found[1:]


def _links_out(folder: Path, names: list[str], unusable: Unusable) -> bool:
    """Whether one of the files ``names`` (relative to ``folder``) is a link leading out of
    it, counted in ``unusable`` without reading it. Only links are looked at: ``os.walk``
    enters no linked folder, so a file that is no link lies inside."""
    for name in names:
        if os.path.islink(folder / name):
            try:
                inside(folder, name, str(folder / name), confine=True)
            except DataError:
                unusable.drop(
                    f"{folder / name}: a link leading out of the data folder {folder}",
                    "links out of the folder",
                )
                return True
    return False


def _variant(name: str, base: str) -> int:
    """Which of :data:`VARIANTS` the image ``name`` of ``base`` is (its rank)."""
    rest = os.path.splitext(name)[0][len(base) :]
    return VARIANTS.index(rest) if rest in VARIANTS else len(VARIANTS)


def _transcription(gt: str, allowed: set[str] | None, unusable: Unusable) -> str | None:
    """The one line of text in ``gt``, or None after counting it unusable."""
    try:
        text = read_text(gt).strip()
    except DataError as exc:
        unusable.drop(str(exc), "unreadable .gt.txt")
        return None
    problem: str | None = None
    kind = ""  # set with problem
    if not text:
        problem, kind = "empty transcription", "empty"
    elif "\n" in text:
        problem = f"{text.count(chr(10)) + 1} lines; a line's transcription is one line"
        kind = "several lines"
    elif "\x00" in text:
        problem, kind = "NUL character in the transcription", "NUL characters"
    elif allowed is not None and set(text) - allowed:
        problem = (
            f"characters outside the alphabet: "
            f"{''.join(sorted(set(text) - allowed))!r} in {text[:60]!r}"
        )
        kind = "characters outside the alphabet"
    if problem is not None:
        unusable.drop(f"{gt}: {problem}", kind)
        return None
    return text


def _is_labels(path: Path) -> bool:
    # a folder without .gt.txt files or pages too: the labels reader says what it lacks
    if path.is_dir():
        return (path / LABELS).is_file() or not (_has_gt(path) or page_kind(path))
    return path.is_file() and page_kind(path) is None


def _has_gt(path: Path) -> bool:
    if not path.is_dir():
        return False
    return any(name.endswith(GT) for _, _, files in os.walk(path) for name in files)


register(
    Format(
        "labels",
        TASK,
        read_labels,
        _is_labels,
        "a folder of line images with labels.tsv (filename<TAB>text), or that TSV",
        "labels.tsv:  000000.png<TAB>Total: 12.50\n             000001.png<TAB>Invoice no. 4471",
    )
)
register(
    Format(
        "gt-txt",
        TASK,
        read_gt_folder,
        _has_gt,
        "line images beside their transcriptions (NAME.png + NAME.gt.txt) in a folder "
        "and its subfolders: kraken, Calamari, OCR-D",
        "page1/0001.png  page1/0001.gt.txt:  Total: 12.50\n"
        "page1/0002.png  page1/0002.gt.txt:  Invoice no. 4471",
    )
)
