"""``attnkit read PAGE.xml ...``: every text line of ALTO or PAGE-XML pages read, and each
page's text written into a copy of its XML (:func:`attnkit.data.corpora.page_xml.write_texts`),
as kraken and Calamari write their pages.

A copy goes beside its page as ``NAME.pred.xml`` (Calamari's name), or into ``--out DIR`` as
``NAME.xml``; an existing file is replaced only with ``--force``, and the page's own file never.
The output lists each line as ``PAGE.xml#LINE-ID<TAB>text``, or with ``--json`` one object a
line: the fields of every ``read --json`` line (``input`` is ``PAGE.xml#LINE-ID``) and ``page``,
``id`` and ``box`` (``[x0, y0, x1, y1]`` in the page's pixels); a line that cannot be cut out
(:mod:`attnkit.data.corpora.page_lines`) keeps its text in the copy, is named in a warning and,
with ``--json``, has ``"text": null`` and ``"unusable"``: why.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from attnkit.cli import jsonlines
from attnkit.data.corpora.page_formats import cut_page
from attnkit.data.corpora.page_xml import KINDS, PageFile, parse_page, write_texts
from attnkit.decoding import Decoding
from attnkit.errors import DataError
from attnkit.tasks import loading

__all__ = ["add_page_args", "is_pages", "read_pages_cli"]

log = logging.getLogger("attnkit")

SUFFIX = ".pred.xml"


def add_page_args(p: argparse.ArgumentParser) -> None:
    """``--out`` and ``--force`` of ``read``'s pages."""
    group = p.add_argument_group("pages (ALTO, PAGE-XML)")
    group.add_argument(
        "--out",
        type=Path,
        help=f"folder for the pages' copies with the text read (default: beside each page, "
        f"NAME{SUFFIX})",
    )
    group.add_argument(
        "--force", action="store_true", help="replace a copy already there (never the page)"
    )


def is_pages(args: argparse.Namespace) -> bool:
    """Whether ``read`` was given pages: ``--format alto|page`` without ``--corpus``, or
    inputs that are all ``.xml`` files."""
    if args.corpus:
        return False
    if args.format in KINDS:
        return True
    return bool(args.images) and all(str(p).lower().endswith(".xml") for p in args.images)


def _destination(page: Path, args: argparse.Namespace) -> Path:
    name = page.name[: -len(".xml")] if page.name.lower().endswith(".xml") else page.name
    out = (args.out / f"{name}.xml") if args.out else page.with_name(name + SUFFIX)
    if out.exists() and out.resolve() == page.resolve():
        raise ValueError(f"--out: {out} is the page {page} itself; expected another folder")
    if out.exists() and not args.force:
        raise ValueError(f"--out: {out} exists; pass --force to replace it")
    return out


def _parsed(path: Path, kind: str | None) -> PageFile:
    page = parse_page(path)
    if kind is not None and page.kind != kind:
        raise DataError(
            f"{path}: {page.kind}, not {kind} (--format); expected --format {page.kind}"
        )
    return page


def read_pages_cli(args: argparse.Namespace, decoding: Decoding) -> int:
    """Read the pages ``args.images`` with ``args.checkpoint`` as the module docstring says.
    Every page is parsed and every copy's place checked before the model is loaded.
    Returns 0, the exit status.

    Raises:
        ValueError: a copy's place is taken (without ``--force``) or is the page itself;
            ``--out`` is a file.
        DataError: a page that cannot be read, or whose image is missing or unreadable.
    """
    if not args.images:
        raise ValueError("read: expected ALTO or PAGE-XML pages (.xml), got none")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise ValueError(f"--out: expected a folder, got the file {args.out}")
    kind = args.format if args.format in KINDS else None
    pages = [_parsed(Path(p), kind) for p in args.images]
    places = [_destination(page.path, args) for page in pages]
    confine = bool(getattr(args, "corpus_confine", False))
    evaluator = loading.load_evaluator(args.checkpoint, args.device, "ocr")
    evaluator.lm = loading.load_lm(args.lm, evaluator.vocab, args.device)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    for page, out in zip(pages, places):
        cut = cut_page(page, max_width=args.max_width, confine=confine)
        kept = [i for i, image in enumerate(cut.images) if image is not None]
        start = time.perf_counter()
        outputs = evaluator.decode([cut.images[i] for i in kept], decoding) if kept else []
        seconds = time.perf_counter() - start
        found = dict(zip(kept, outputs))
        texts = [found[i].text if i in found else None for i in range(len(page.lines))]
        bad = [p for p in cut.problems if p is not None]
        if bad:
            log.warning(
                "%s: %d of %d lines could not be cut out, left as they were: %s",
                page.path,
                len(bad),
                len(page.lines),
                "; ".join(bad[:5]) + ("; ..." if len(bad) > 5 else ""),
            )
        for i, line in enumerate(page.lines):
            name = f"{page.path}#{line.id}"
            if args.json:
                record = jsonlines.record(name, found.get(i), decoding, seconds, len(kept))
                box = line.box
                record.update(page=str(page.path), id=line.id, box=box and [round(v) for v in box])
                if i not in found:
                    record.update(text=None, unusable=cut.problems[i])
                print(json.dumps(record, ensure_ascii=False))
            elif i in found:
                print(f"{name}\t{found[i].text}")
        write_texts(page, texts, out)
        log.info("%s: %d lines read, written to %s", page.path, len(kept), out)
    return 0
