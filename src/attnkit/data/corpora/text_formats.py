"""Translation corpora, read into the ``(source, target)`` pairs of attnkit's own TSV (a
:class:`~attnkit.data.corpora.text_pairs.TextPairs`, kept on disk): formats of task ``"translate"``.

=========  ==========================================================================
``tsv``    attnkit's own: ``source<TAB>target`` lines
``moses``  two aligned plain-text files, one sentence per line (Moses, OPUS, WMT):
           ``PREFIX.SRC`` + ``PREFIX.TGT`` (``--src-lang``, ``--tgt-lang``; each may be
           gzipped, ``PREFIX.de.gz``), or the two files named
=========  ==========================================================================

Detection tries them in this order: a path that exists is ``tsv``; a path that does not, but
is the prefix of files beside it (``corpus`` of ``corpus.de``), is ``moses``; two paths given
(``--train SOURCE TARGET``) are ``moses``. Both are read a line at a time as
:mod:`attnkit.data.corpora.text_files` reads text (UTF-8 with or without a byte-order mark, LF or
CRLF, gzip / xz / bzip2, NFC) and written to disk as they come, so memory does not grow with the
corpus.

**moses**: line ``n`` of one file translates line ``n`` of the other; files of different
line counts are refused, naming both counts. A line pair blank on both sides is no example
(left out, counted in the log); a pair with one side blank, with a NUL character, longer than
``max_chars`` characters, or not valid UTF-8 is unusable (:mod:`attnkit.data.corpora.reading`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

from attnkit.data.corpora.format_registry import Format, register
from attnkit.data.corpora.text_files import byte_lines, decode_line, undecodable
from attnkit.data.corpora.text_pairs import TextPairs
from attnkit.data.corpora.tsv import MAX_CHARS, field_problem, iter_tsv_rows
from attnkit.data.corpora.unusable import MAX_UNUSABLE, Unusable
from attnkit.errors import DataError

__all__ = ["COMPRESSED_SUFFIXES", "moses_files", "read_moses", "read_pairs"]

log = logging.getLogger("attnkit")

TASK = "translate"
COMPRESSED_SUFFIXES = ("", ".gz", ".xz", ".bz2")  # PREFIX.LANG is looked for with each


def read_pairs(
    path: str | Path,
    *,
    max_chars: int | None = MAX_CHARS,
    skip_bad_lines: bool = False,
    role: str = "train",
    max_unusable: float | None = None,
) -> TextPairs:
    """attnkit's own ``source<TAB>target`` TSV (:func:`attnkit.data.read_tsv`: the same
    pairs, the same errors), kept on disk; ``role`` ``"test"`` names the second column the
    reference in errors. With ``max_unusable``, bad lines are dropped and counted up to that
    share (:mod:`attnkit.data.corpora.unusable`) instead of stopping at the first."""
    columns = ("source", "reference" if role == "test" else "target")
    unusable = (
        None if max_unusable is None else Unusable(path, max_unusable=max_unusable, what="pairs")
    )
    rows = iter_tsv_rows(
        path, columns=columns, skip_bad_lines=skip_bad_lines, max_chars=max_chars, unusable=unusable
    )
    pairs = TextPairs.collect(rows, path)
    if unusable is not None:
        unusable.check(len(pairs))
    return pairs


def moses_files(
    path: str | Path,
    target: str | Path | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
) -> tuple[Path, Path]:
    """The source and target files of a Moses corpus: ``path`` and ``target``, or
    ``PREFIX.SRC`` and ``PREFIX.TGT`` of the prefix ``path`` (each also with ``.gz``,
    ``.xz`` or ``.bz2``).

    Raises:
        DataError: naming what is missing: a language file, or the languages of a prefix
            (with the files found beside it).
    """
    path = Path(path)
    if target is not None:  # the languages, when given, name a prefix's files only
        return path, Path(target)
    if not (src_lang and tgt_lang):
        found = sorted(p.name for p in path.parent.glob(f"{path.name}.*"))
        if path.is_file():
            raise DataError(
                f"{path}: one side of a Moses corpus; name the other file too "
                "(--train SOURCE TARGET) or give the prefix with --src-lang and "
                "--tgt-lang"
            )
        raise DataError(
            f"{path}: a Moses corpus prefix; name its languages with --src-lang "
            f"and --tgt-lang (found beside it: {', '.join(found[:6]) or 'nothing'})"
        )
    return _language_file(path, src_lang, "source"), _language_file(path, tgt_lang, "target")


def _language_file(prefix: Path, lang: str, side: str) -> Path:
    for suffix in COMPRESSED_SUFFIXES:
        candidate = prefix.parent / f"{prefix.name}.{lang}{suffix}"
        if candidate.is_file():
            return candidate
    raise DataError(
        f"{prefix}.{lang}: not found (the {side} side of the Moses corpus "
        f"{prefix}; also looked for {', '.join(COMPRESSED_SUFFIXES[1:])})"
    )


def read_moses(
    path: str | Path,
    *,
    target: str | Path | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    max_chars: int | None = MAX_CHARS,
    max_unusable: float = MAX_UNUSABLE,
    skip_bad_lines: bool = False,
) -> TextPairs:
    """The pairs of a Moses corpus (see the module docstring; the files as
    :func:`moses_files` finds them), kept on disk; origins name the source file's lines.
    A pair that cannot be used (not UTF-8, a side empty or longer than ``max_chars``) is
    dropped and counted, up to ``max_unusable`` of them, or every one with
    ``skip_bad_lines`` (a warning gives the counts and the first lines).

    Raises:
        DataError: files of different line counts (both named, with their counts); none of
            the pairs usable, or more than ``max_unusable`` of them not.
    """
    source, target = moses_files(path, target, src_lang, tgt_lang)
    limit = 1.0 if skip_bad_lines else max_unusable
    unusable = Unusable(f"{source} + {target}", max_unusable=limit, what="pairs")
    blank = [0]
    pairs = TextPairs.collect(_aligned(source, target, max_chars, unusable, blank), source)
    unusable.check(len(pairs))
    if blank[0]:
        log.info("%s + %s: %d lines blank on both sides left out", source, target, blank[0])
    return pairs


def _aligned(
    source: Path, target: Path, max_chars: int | None, unusable: Unusable, blank: list[int]
) -> Iterator[tuple[int, str, str]]:
    """``(line, source, target)`` of each usable line pair; files of different line counts
    refused when the shorter ends."""
    sources, targets = byte_lines(source), byte_lines(target)
    n = 0
    for n, src in sources:
        tgt = next(targets, (None, None))[1]
        if tgt is None:
            _refuse_counts(source, n + sum(1 for _ in sources), target, n - 1)
        if not src.strip() and not tgt.strip():
            blank[0] += 1
            continue
        texts = []
        for side, file, line in (("source", source, src), ("target", target, tgt)):
            try:
                text = decode_line(line)
            except UnicodeDecodeError as exc:
                unusable.drop(f"{file}:{n}: {undecodable(exc)}", "not UTF-8")
                break
            problem = field_problem(side, text, max_chars)
            if problem is not None:
                kind = problem if problem.startswith(("empty", "NUL")) else f"{side} too long"
                unusable.drop(f"{file}:{n}: {problem}", kind)
                break
            texts.append(text)
        else:
            yield n, texts[0], texts[1]
    extra = sum(1 for _ in targets)
    if extra:
        _refuse_counts(source, n, target, n + extra)


def _refuse_counts(source: Path, n_source: int, target: Path, n_target: int) -> NoReturn:
    raise DataError(
        f"{source} has {n_source:,} lines but {target} has {n_target:,}: a Moses "
        "corpus holds one sentence per line in each file, line n of one "
        "translating line n of the other"
    )


def _is_tsv(path: Path) -> bool:
    # any file or folder: one Moses file alone is no corpus, and the TSV reader names what
    # is wrong with the others
    return path.exists()


def _is_moses(path: Path) -> bool:
    return not path.exists() and path.parent.is_dir() and any(path.parent.glob(f"{path.name}.*"))


register(
    Format(
        "tsv",
        TASK,
        read_pairs,
        _is_tsv,
        "source<TAB>target lines",
        "pairs.tsv:  Guten Morgen.<TAB>Good morning.\n"
        "            Wie geht es dir?<TAB>How are you?",
    )
)
register(
    Format(
        "moses",
        TASK,
        read_moses,
        _is_moses,
        "two aligned plain-text files, one sentence per line (Moses, OPUS, WMT): "
        "PREFIX.SRC + PREFIX.TGT with --src-lang/--tgt-lang, or the two files named",
        "corpus.de:  Guten Morgen.        corpus.en:  Good morning.\n"
        "            Wie geht es dir?                 How are you?",
    )
)
