"""Real print: OCR models on the text lines of real scanned pages (ALTO or PAGE-XML beside
their page images), CER and WER per document and per corpus. Prints a Markdown table and
writes JSON.

    python -m benchmarks.real_print --data build/corpora/fondue/data \\
        --json results/real_print.json
    python -m benchmarks.real_print --data build/corpora/fondue/data/Dracula \\
        --checkpoint builtin:ocr-lines build/runs/ocr-real/checkpoint-best

Reading. Each ``--data`` corpus is a folder of pages (or a page, or a ``.lst`` list, as
:mod:`attnkit.data.corpora.page_formats` reads them), or a folder of line images beside their
``.gt.txt`` transcriptions (ocropus's and Calamari's layout, read as ``--format gt-txt`` reads
it: :func:`attnkit.data.corpora.line_formats.read_gt_folder`, every transcription kept,
characters outside the alphabet too). A line corpus's documents are its folders of lines, or
in one folder the lines whose names differ only by trailing numbers (``book_1852_0018_022``:
``book``, as OCR-D names its lines: page and line). A document is a folder of pages; when
all the pages are in one folder, the pages whose names differ only by a trailing page number
(``LETTER_01.xml``, ``LETTER_02.xml``) are one document (and when that is every page, the
folder is, by its name). Every line of every page is cut out
of its page image as ``attnkit eval`` and ``attnkit train ocr`` cut it
(:func:`attnkit.data.corpora.page_formats.cut_page`). Nothing is left out of the score
silently: a page that cannot be read (no image, an unreadable image or XML) and a line that
cannot be scored (no text, an outline that cannot be cut out) are counted by kind per
document, with the lines on unusable pages, and the first few are named in the JSON.
``--max-unusable`` stops, as the readers do, past that share of a corpus's pages or lines
(default 1: report everything).

Scoring. Every line read is scored, by :mod:`attnkit.tasks.metrics` as ``attnkit eval``
scores (corpus CER and WER over the lines, exact lines; texts compared in Unicode NFC with
runs of white space one space), in two ways:

* as given: the references as the ground truth has them. Characters outside the model's
  alphabet (curly quotes, dashes, FoNDUE's line-end hyphen ``¬``) cannot be written by the
  model, so each costs at least one character edit; they are counted (``outside``: characters,
  and lines holding one) beside the figures.
* folded: the references with :data:`FOLD`'s typographic variants written as the alphabet
  writes them (``’`` as ``'``, ``“`` as ``"``, ``–`` and ``¬`` as ``-``, ...), the form the
  model is trained to give; ``outside_folded`` counts what is still outside (``£``, ``é``).

A model is a checkpoint folder or ``builtin:NAME`` (``--checkpoint``, several to compare; by
default ``builtin:ocr-lines``). ``--beam K`` decodes with beam search (a CTC head: the CTC
prefix beam); a model that refuses the decoding gets a row saying so.
"""

from __future__ import annotations

import collections
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import torch

from attnkit.data.corpora.line_formats import GT, read_gt_folder
from attnkit.data.corpora.page_formats import cut_page, page_files
from attnkit.data.corpora.page_xml import parse_page
from attnkit.data.corpora.unusable import FIRST_FEW, Unusable
from attnkit.decoding import Decoding
from attnkit.errors import DataError
from attnkit.tasks import metrics
from attnkit.tasks.loading import load_evaluator
from benchmarks import harness

# Typographic variants of characters the alphabet has, as the folded score writes them.
FOLD = {
    "\u2018": "'",  # ‘
    "\u2019": "'",  # ’
    "\u201a": "'",  # ‚
    "\u201c": '"',  # “
    "\u201d": '"',  # ”
    "\u201e": '"',  # „
    "\u2013": "-",  # – en dash
    "\u2014": "-",  # — em dash
    "\u2010": "-",  # ‐ hyphen
    "\u00ac": "-",  # ¬ the line-end hyphen of some transcriptions (FoNDUE)
    "\u00ad": "-",  # soft hyphen
    "\u2026": "...",  # …
    "\ufb01": "fi",  # ﬁ
    "\ufb02": "fl",  # ﬂ
    "\u00a0": " ",  # no-break space
    "\u017f": "s",  # ſ long s (early print, Fraktur)
    "\ua75b": "r",  # ꝛ r rotunda
}
PAGE_NUMBER = re.compile(r"[_-]?\d+$")  # LETTER_01 -> LETTER
LINE_NUMBERS = re.compile(r"(?:[_-]\d+)+$")  # book_1852_0018_022 -> book


def fold(text: str) -> str:
    """``text`` with the characters of :data:`FOLD` written as the alphabet writes them."""
    return "".join(FOLD.get(c, c) for c in text)


def documents(corpus: Path) -> list[tuple[str, list[Path]]]:
    """The documents of ``corpus``: ``(name, pages)``, a folder of pages each (named by its
    path below ``corpus``), or when all pages share a folder, the pages whose names differ by
    a trailing page number (all of them: the folder, by its name); sorted by name."""
    files = list(page_files(corpus))
    folders = collections.defaultdict(list)
    for path in files:
        folders[path.parent].append(path)
    if len(folders) > 1:
        base = corpus if corpus.is_dir() else corpus.parent
        named = {
            (str(folder.relative_to(base)) if folder.is_relative_to(base) else str(folder)): pages
            for folder, pages in folders.items()
        }
    else:
        named = collections.defaultdict(list)
        for path in files:
            named[PAGE_NUMBER.sub("", path.stem) or path.stem].append(path)
        if len(named) == 1 and files:  # a folder that is one document: named by the folder
            named = {files[0].parent.name: files}
    return sorted(named.items())


@dataclass
class Document:
    """The lines of one document that can be scored: ``images[i]`` ``(32, W)`` uint8 with its
    reference ``texts[i]`` and ``ids[i]`` (``PAGE.xml#LINE``); what could not, counted by
    kind (``unusable_pages``, ``unusable_lines``: lines on usable pages) with the first few
    named, and ``lines_on_unusable_pages``."""

    name: str
    pages: int = 0
    images: list[torch.Tensor] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    unusable_pages: collections.Counter = field(default_factory=collections.Counter)
    unusable_lines: collections.Counter = field(default_factory=collections.Counter)
    lines_on_unusable_pages: int = 0
    first: list[str] = field(default_factory=list)
    gt_files: int = 0  # a line corpus's transcriptions (pages: 0)

    def drop(self, counter: collections.Counter, kind: str, message: str) -> None:
        counter[kind] += 1
        if len(self.first) < FIRST_FEW:
            self.first.append(message)


def read_document(name: str, pages: Sequence[Path]) -> Document:
    """Every line of ``pages`` cut out of its page image, or counted as unusable (see the
    module docstring)."""
    doc = Document(name, pages=len(pages))
    for xml in pages:
        try:
            page = parse_page(xml)
        except DataError as exc:
            doc.drop(doc.unusable_pages, "unreadable XML", str(exc))
            continue
        try:
            cut = cut_page(page)
        except DataError as exc:
            kind = "page image unreadable" if "unreadable" in str(exc) else "page image missing"
            doc.drop(doc.unusable_pages, kind, str(exc))
            doc.lines_on_unusable_pages += len(page.lines)
            continue
        for line, image, problem in zip(page.lines, cut.images, cut.problems):
            where = f"{xml}#{line.id}"
            if problem is not None or image is None:
                doc.drop(doc.unusable_lines, "cannot be cut out", problem or where)
            elif not line.text:
                kind = "no text" if line.text is None else "empty text"
                doc.drop(doc.unusable_lines, kind, f"{where}: {kind}")
            else:
                doc.images.append(image)
                doc.texts.append(line.text)
                doc.ids.append(where)
    return doc


def is_line_corpus(corpus: Path) -> bool:
    """Whether ``corpus`` is a folder of line images with ``.gt.txt`` transcriptions and no
    page XML."""
    return (
        corpus.is_dir()
        and next(corpus.rglob("*" + GT), None) is not None
        and next(page_files(corpus), None) is None
    )


def read_lines(corpus: Path) -> list[Document]:
    """The documents of the line corpus ``corpus`` (see the module docstring), sorted by name;
    a ``.gt.txt`` whose line could not be read (no image, an unreadable one: the reader logs
    why) is counted as unusable in its document."""
    lines = read_gt_folder(corpus, max_unusable=1.0)
    folders = {PurePosixPath(name).parent for name, _, _ in lines.rows}

    def document(name: str) -> str:
        path = PurePosixPath(name)
        if len(folders) > 1:
            return str(path.parent)
        stem = path.name.split(".", 1)[0]
        return LINE_NUMBERS.sub("", stem) or stem

    docs: dict[str, Document] = {}
    for i, (name, _, text) in enumerate(lines.rows):
        doc = docs.setdefault(document(name), Document(document(name)))
        doc.images.append(lines[i][0])
        doc.texts.append(text)
        doc.ids.append(name)
    for gt in sorted(corpus.rglob("*" + GT)):
        name = document(gt.relative_to(corpus).as_posix())
        docs.setdefault(name, Document(name)).gt_files += 1
    for doc in docs.values():
        if doc.gt_files > len(doc.texts):
            doc.unusable_lines["not read"] = doc.gt_files - len(doc.texts)
            doc.first.append(f"{doc.name}: {doc.unusable_lines['not read']} lines not read")
    return sorted(docs.values(), key=lambda d: d.name)


def read_corpus(corpus: Path) -> list[Document]:
    """The documents of ``corpus``: a line corpus's (:func:`read_lines`) or its pages'."""
    if is_line_corpus(corpus):
        return read_lines(corpus)
    return [read_document(name, pages) for name, pages in documents(corpus)]


def outside(texts: Sequence[str], alphabet: set[str]) -> tuple[int, int, str]:
    """The characters of ``texts`` outside ``alphabet`` (white space aside): ``(characters,
    lines holding one, the distinct ones)``."""
    found = [
        [c for c in metrics.normalize(t) if c not in alphabet and not c.isspace()] for t in texts
    ]
    distinct = "".join(sorted({c for chars in found for c in chars}))
    return sum(map(len, found)), sum(bool(chars) for chars in found), distinct


def score(hypotheses: Sequence[str], references: Sequence[str], alphabet: set[str]) -> dict:
    """CER, WER and exact lines of ``hypotheses`` against ``references`` as given and folded
    (:func:`fold`), with the characters outside ``alphabet`` counted in each."""
    if not references:
        return {"lines": 0}
    folded = [fold(r) for r in references]
    chars, lines, distinct = outside(references, alphabet)
    chars_folded, lines_folded, distinct_folded = outside(folded, alphabet)
    return {
        "lines": len(references),
        "chars": sum(len(metrics.normalize(r)) for r in references),
        "cer": metrics.cer(hypotheses, references),
        "wer": metrics.wer(hypotheses, references),
        "exact": metrics.exact_match(hypotheses, references),
        "outside_chars": chars,
        "outside_lines": lines,
        "outside": distinct,
        "cer_folded": metrics.cer(hypotheses, folded),
        "wer_folded": metrics.wer(hypotheses, folded),
        "exact_folded": metrics.exact_match(hypotheses, folded),
        "outside_chars_folded": chars_folded,
        "outside_folded": distinct_folded,
    }


def counts(docs: Sequence[Document]) -> dict:
    """The pages and lines of ``docs`` and what of them was unusable, by kind."""
    pages: collections.Counter = collections.Counter()
    lines: collections.Counter = collections.Counter()
    for doc in docs:
        pages.update(doc.unusable_pages)
        lines.update(doc.unusable_lines)
    return {
        "pages": sum(d.pages for d in docs),
        "unusable_pages": dict(pages),
        "unusable_lines": dict(lines),
        "lines_on_unusable_pages": sum(d.lines_on_unusable_pages for d in docs),
    }


def check_unusable(corpus: Path, docs: Sequence[Document], max_unusable: float) -> None:
    """Stop as the readers stop (:class:`attnkit.data.corpora.unusable.Unusable`) past
    ``max_unusable`` of the corpus's pages (a line corpus has none) or lines unusable."""
    for what, kept, found in (
        ("pages", [d.pages - d.unusable_pages.total() for d in docs], "unusable_pages"),
        ("lines", [len(d.texts) for d in docs], "unusable_lines"),
    ):
        if what == "pages" and not any(d.pages for d in docs):
            continue
        unusable = Unusable(corpus, max_unusable=max_unusable, what=what)
        for doc in docs:
            unusable.kinds.update(getattr(doc, found))
            unusable.first += doc.first[: FIRST_FEW - len(unusable.first)]
        unusable.check(sum(kept))


def decode(evaluator, images: Sequence[torch.Tensor], decoding: Decoding) -> list[str]:
    """The best text of each line image ``(32, W)``, as ``attnkit eval`` reads it."""
    return [out.texts[0] for out in evaluator.decode(list(images), decoding)] if images else []


def _pct(row: dict, key: str) -> str:
    return f"{100 * row[key]:.2f}" if key in row else ""


def table_cells(row: dict) -> list:
    """One table row of a result ``row``."""
    unusable = sum(row["unusable_lines"].values()) + row["lines_on_unusable_pages"]
    return [
        row["model"],
        row["corpus"],
        row["document"],
        f"{row['pages'] - sum(row['unusable_pages'].values())}/{row['pages']}"
        if row["pages"]
        else "",
        row["lines"],
        unusable,
        row.get("chars", ""),
        f"{row.get('outside_chars', '')} {row.get('outside', '')}".strip(),
        _pct(row, "cer"),
        _pct(row, "wer"),
        _pct(row, "exact"),
        _pct(row, "cer_folded"),
        _pct(row, "wer_folded"),
        row.get("error", ""),
    ]


COLUMNS = [
    "model",
    "corpus",
    "document",
    "pages read",
    "lines",
    "unusable lines",
    "chars",
    "outside alphabet",
    "CER %",
    "WER %",
    "exact %",
    "CER folded %",
    "WER folded %",
    "note",
]


def main(argv=None) -> int:
    p = harness.parser(__doc__.splitlines()[0], time_budget=0.0, time_budget_help="unused")
    p.add_argument(
        "--data",
        type=Path,
        nargs="+",
        required=True,
        help="ALTO / PAGE-XML or .gt.txt line corpora",
    )
    p.add_argument(
        "--checkpoint",
        nargs="+",
        default=["builtin:ocr-lines"],
        help="OCR checkpoints or builtin:NAME (default builtin:ocr-lines)",
    )
    p.add_argument("--beam", type=int, default=1, help="beam width (default 1: greedy)")
    p.add_argument(
        "--max-unusable",
        type=float,
        default=1.0,
        metavar="SHARE",
        help="stop past this share of a corpus's pages or lines unusable (default 1)",
    )
    p.add_argument(
        "--lines",
        type=Path,
        help="write every line read here, JSON lines: model, document, id, reference, text",
    )
    args = p.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    decoding = Decoding(beam=args.beam)
    corpora = []
    for corpus in args.data:
        docs = read_corpus(corpus)
        if args.match:
            docs = [d for d in docs if args.match in d.name]
        check_unusable(corpus, docs, args.max_unusable)
        corpora.append((corpus, docs))
    rows, read = [], []
    print(harness.table_header(COLUMNS))
    for checkpoint in args.checkpoint:
        evaluator = load_evaluator(checkpoint)
        alphabet = {c for c in evaluator.chars.symbols if len(c) == 1}  # specials aside
        for corpus, docs in corpora:
            hypotheses: list[str] = []
            references: list[str] = []
            error = ""
            for doc in [*docs, None]:
                start = time.perf_counter()
                if doc is None:  # the corpus: every line of its documents
                    texts, refs, name, of = hypotheses, references, "all", docs
                else:
                    try:
                        texts = [] if error else decode(evaluator, doc.images, decoding)
                    except ValueError as exc:  # a decoding the model refuses
                        error, texts = str(exc), []
                    refs, name, of = doc.texts, doc.name, [doc]
                    hypotheses += texts
                    references += refs
                    read += [
                        {"model": checkpoint, "document": name, "id": i, "reference": r, "text": t}
                        for i, r, t in zip(doc.ids, refs, texts)
                    ]
                row = {
                    "model": checkpoint,
                    "corpus": str(corpus),
                    "document": name,
                    "decoding": decoding.describe(),
                    **counts(of),
                    **(
                        score(texts, refs, alphabet)
                        if len(texts) == len(refs)
                        else {"lines": len(refs)}  # not read: the row's error says why
                    ),
                    "s": round(time.perf_counter() - start, 1),
                    **({"error": error} if error else {}),
                    **({"first_unusable": doc.first} if doc is not None and doc.first else {}),
                }
                rows.append(row)
                print(harness.table_row(table_cells(row)), flush=True)
    if args.lines:
        args.lines.parent.mkdir(parents=True, exist_ok=True)
        args.lines.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in read))
    if args.json:
        harness.write_json(
            args.json,
            rows,
            beam=args.beam,
            normalisation="Unicode NFC, runs of white space as one space (attnkit.tasks.metrics)",
            fold=FOLD,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
