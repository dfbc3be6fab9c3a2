"""Hugging Face ``datasets`` on disk: format ``hf``, a path written ``hf:PATH[:SPLIT]``
(speech's reader is :func:`attnkit.data.corpora.speech_formats.read_hf_speech`, on these helpers).

``PATH`` is a dataset saved with ``save_to_disk`` (a ``Dataset`` or a ``DatasetDict``) or a
folder of Parquet files (``data/train-00000-of-00001.parquet``, ``train/0.parquet``,
``test.parquet``: a file's split is the folder or the first word of its name; files without
one are ``train``). Nothing is downloaded: the ``datasets`` package (``pip install
'attnkit[hf]'``) reads the files offline, memory-mapped (Parquet files are converted once to
Arrow in a temporary folder, removed at exit).

**Split**: the one named after ``PATH``, else the only one, else the one of the role
(``--train``: ``train``; ``--valid``: ``validation``, ``valid``, ``val`` or ``dev``; eval:
``test``); a missing split is an error listing the dataset's.

**Columns** (``columns``: ``KEY=COLUMN,...``; ``--columns``): the dataset column of each field,
by default the field's name:

=========  ==============================================================================
asr        ``audio`` (a ``datasets.Audio``: the file's bytes, or its path), ``text``
translate  ``source``, ``target`` (strings); or ``translation`` (a column of dicts, WMT's:
           ``{"de": ..., "en": ...}``) with ``src_lang`` and ``tgt_lang`` naming its keys,
           taken when the dataset has no ``source`` column
ocr        ``image``, ``text``
caption    ``image``, ``caption`` (a string or a list of strings: an image's captions)
vqa        ``image``, ``question``, ``answer`` (a string, or a list of answers, strings or
           VQA's ``{"answer": ...}``: the most common taken)
=========  ==============================================================================

An image is a ``datasets.Image`` value (its bytes, or a file ``path`` relative to the dataset's
folder or absolute) read as attnkit reads image files (any mode, a decompression bomb refused
from its header). Each row is an example: a pair, a line, an image with its captions, a
question (the images of VQA rows holding the same bytes read once). Texts are NFC (captions,
questions and answers with their runs of white space as one space, OCR texts stripped); a row
whose text is missing, empty, too long (translation: ``max_chars``), not one line (OCR) or
whose image cannot be read is unusable (:mod:`attnkit.data.corpora.reading`), named
``hf:PATH:SPLIT:ROW``.

Translation pairs stream to disk as they are read
(:class:`~attnkit.data.corpora.text_pairs.TextPairs`); OCR lines keep their row, width and text
(:class:`DatasetLines`) and captioning and VQA images their row (:class:`DatasetImages`), each image
decoded when its batch needs it.
"""

from __future__ import annotations

import atexit
import collections
import hashlib
import io
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from attnkit.checks import clipped
from attnkit.data.corpora.format_registry import ROLES, Format, register
from attnkit.data.corpora.image_folders import (
    CaptionedImages,
    ImageFiles,
    ImageQuestion,
    load_image,
)
from attnkit.data.corpora.line_folders import MAX_WIDTH, LineFolder, line_width, load_line_image
from attnkit.data.corpora.text_files import nfc
from attnkit.data.corpora.text_pairs import TextPairs
from attnkit.data.corpora.tsv import MAX_CHARS, field_problem
from attnkit.data.corpora.unusable import MAX_UNUSABLE, Unusable
from attnkit.data.paths import inside
from attnkit.errors import DataError

__all__ = [
    "PREFIX",
    "SUMMARY",
    "DatasetImages",
    "DatasetLines",
    "cache_dir",
    "dataset_columns",
    "dataset_rows",
    "is_hf",
    "open_dataset",
    "parse_path",
    "read_hf_captions",
    "read_hf_lines",
    "read_hf_pairs",
    "read_hf_questions",
]

log = logging.getLogger("attnkit")

PREFIX = "hf:"
ROLE_SPLITS = {
    "train": ("train",),
    "valid": ("validation", "valid", "val", "dev"),
    "test": ("test",),
}
FIELDS = {
    "asr": ("audio", "text"),
    "translate": ("source", "target"),
    "ocr": ("image", "text"),
    "caption": ("image", "caption"),
    "vqa": ("image", "question", "answer"),
}
BATCH = 1000  # rows read at a time


def parse_path(path: str | Path) -> tuple[Path, str | None]:
    """``(folder, split)`` of ``hf:PATH[:SPLIT]``: the split is what follows the last colon
    when the rest names an existing folder."""
    text = str(path)
    if not text.startswith(PREFIX):
        raise DataError(f"{path}: expected hf:PATH[:SPLIT]")
    text = text[len(PREFIX) :]
    head, colon, tail = text.rpartition(":")
    if colon and re.fullmatch(r"[\w.\-]+", tail) and Path(head).is_dir():
        return Path(head), tail
    return Path(text), None


def _datasets():
    """The ``datasets`` package, offline."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import datasets
    except ImportError:
        raise DataError(
            "reading a Hugging Face dataset needs the datasets package: pip install 'attnkit[hf]'"
        ) from None
    datasets.disable_progress_bars()
    return datasets


_CACHE: list[str] = []  # temporary folders of Parquet files converted to Arrow


def cache_dir() -> str:
    """A temporary folder of this process (Parquet files converted to Arrow, a dataset's audio
    written out as files), removed at exit."""
    if not _CACHE:
        _CACHE.append(tempfile.mkdtemp(prefix="attnkit-hf-"))
        atexit.register(shutil.rmtree, _CACHE[0], ignore_errors=True)
    return _CACHE[0]


def _parquet_splits(folder: Path) -> dict[str, list[str]]:
    """The Parquet files under ``folder`` by split (see the module docstring)."""
    known = {s for names in ROLE_SPLITS.values() for s in names}
    splits: dict[str, list[str]] = {}
    for file in sorted(folder.rglob("*.parquet")):
        words = [re.split(r"[-_.]", file.name)[0], *file.relative_to(folder).parts[:-1]]
        split = next((w for w in words if w in known), "train")
        splits.setdefault(split, []).append(str(file))
    return splits


def _check_parquet(file: str) -> None:
    """Refuse, naming it, a file whose Parquet footer cannot be read (datasets would fail
    later with a DatasetGenerationError naming no file)."""
    import pyarrow
    import pyarrow.parquet

    try:
        pyarrow.parquet.ParquetFile(file).close()
    except (pyarrow.ArrowException, OSError) as exc:
        raise DataError(f"{file}: not a Parquet file ({clipped(str(exc))})") from None


def open_dataset(path: str | Path, role: str = "train", split: str | None = None):
    """The ``datasets.Dataset`` of ``hf:PATH[:SPLIT]`` (``split``, when given, as
    ``--split`` names it), of the split the module docstring says, and its name
    (``hf:PATH:SPLIT``).

    Raises:
        DataError: naming the path: no dataset there, no such split (the dataset's listed),
            the ``datasets`` package missing, a file of the split that is not Parquet.
    """
    folder, named = parse_path(path)
    named = named or split
    if not folder.is_dir():
        raise DataError(
            f"{folder}: not a folder (hf:PATH[:SPLIT] reads a dataset saved with "
            "save_to_disk or a folder of Parquet files)"
        )
    datasets = _datasets()
    if (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file():
        try:
            loaded = datasets.load_from_disk(str(folder))
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
            # datasets reads the JSON files as it finds them: {} is a KeyError
            raise DataError(
                f"{folder}: not a dataset that save_to_disk wrote (its state.json "
                "or dataset_info.json cannot be read: "
                f"{type(exc).__name__}: {clipped(str(exc))})"
            ) from None
        found = (
            dict(loaded)
            if isinstance(loaded, datasets.DatasetDict)
            else {str(loaded.split or "train"): loaded}
        )
    else:
        files = _parquet_splits(folder)
        if not files:
            raise DataError(
                f"{folder}: neither a dataset saved with save_to_disk (no "
                "dataset_dict.json or state.json) nor a folder of Parquet files"
            )
        found = {name: None for name in files}
    if role not in ROLES:
        raise ValueError(f"role: expected one of {', '.join(ROLES)}, got {role!r}")
    chosen = named or (
        next(iter(found))
        if len(found) == 1
        else next((s for s in ROLE_SPLITS[role] if s in found), None)
    )
    if chosen not in found:
        what = f"no split {chosen!r}" if chosen else f"no split for {role}"
        raise DataError(
            f"{folder}: {what}; its splits: {', '.join(found)} (name one: hf:{folder}:SPLIT)"
        )
    assert chosen is not None  # it is in found
    if found[chosen] is None:  # Parquet: converted once to memory-mapped Arrow
        for file in files[chosen]:
            _check_parquet(file)
        found[chosen] = datasets.load_dataset(
            "parquet", data_files={chosen: files[chosen]}, split=chosen, cache_dir=cache_dir()
        )
    return found[chosen], f"{PREFIX}{folder}:{chosen}"


def dataset_columns(columns: str | dict | None, task: str, names: list[str], source: str) -> dict:
    """The dataset column of each field of ``task`` (see the module docstring), of
    ``columns`` (``--columns``) and the dataset's column ``names``; ``source`` names the
    dataset in errors."""
    given = (
        columns
        if isinstance(columns, dict)
        else dict(part.split("=", 1) for part in (columns or "").split(",") if "=" in part)
    )
    unknown = set(given) - set(FIELDS[task]) - {"translation"}
    if unknown or (
        columns
        and not isinstance(columns, dict)
        and any("=" not in p for p in columns.split(",") if p)
    ):
        raise ValueError(
            f"--columns: expected KEY=COLUMN,... with keys among "
            f"{', '.join(FIELDS[task])}, got {columns!r}"
        )
    chosen = {field: given.get(field, field) for field in FIELDS[task]}
    if (
        task == "translate"
        and chosen["source"] not in names
        and ("translation" in given or "translation" in names)
    ):
        chosen = {"translation": given.get("translation", "translation")}
    missing = [c for c in chosen.values() if c not in names]
    if missing:
        raise DataError(
            f"{source}: no column {missing[0]!r} (its columns: {', '.join(names)});"
            f" name them with --columns {','.join(f'{k}=COLUMN' for k in chosen)}"
        )
    return chosen


def dataset_rows(dataset, columns: list[str]):
    """``(row, {column: value})`` of each row of ``dataset``'s ``columns``, :data:`BATCH`
    rows read at a time, images and audio undecoded (``{"bytes": ..., "path": ...}``)."""
    datasets = _datasets()
    for name, feature in dataset.features.items():
        if name in columns and isinstance(feature, datasets.Image):
            dataset = dataset.cast_column(name, datasets.Image(decode=False))
        elif name in columns and isinstance(feature, datasets.Audio):
            dataset = dataset.cast_column(name, datasets.Audio(decode=False))
    dataset = dataset.select_columns(columns)
    for start in range(0, len(dataset), BATCH):
        batch = dataset[start : start + BATCH]
        for k in range(len(batch[columns[0]])):
            yield start + k, {c: batch[c][k] for c in columns}


def _text(value: Any) -> str | None:
    return " ".join(nfc(value).split()) if isinstance(value, str) else None


class _Stored(io.BytesIO):
    """An image's bytes from a dataset, named in errors as ``hf:PATH:SPLIT:ROW``."""

    def __init__(self, data: bytes, name: str):
        super().__init__(data)
        self.label = name

    def __str__(self) -> str:
        return self.label


def _image(value: Any, where: str, folder: Path):
    """What the image readers take for a dataset's image value: its bytes, or its file."""
    if isinstance(value, dict) and value.get("bytes"):
        return _Stored(value["bytes"], where)
    if isinstance(value, (bytes, bytearray)):
        return _Stored(bytes(value), where)
    name = value.get("path") if isinstance(value, dict) else value
    if isinstance(name, str) and name:
        return inside(folder, name, where)
    raise DataError(f"{where}: no image (expected a datasets.Image: bytes or a path)")


def read_hf_pairs(
    path: str | Path,
    *,
    columns: str | dict | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    split: str | None = None,
    role: str = "train",
    max_chars: int | None = MAX_CHARS,
    max_unusable: float = MAX_UNUSABLE,
) -> TextPairs:
    """The translation pairs of a dataset (see the module docstring), kept on disk; origins
    ``hf:PATH:SPLIT:ROW``."""
    dataset, source = open_dataset(path, role, split)
    chosen = dataset_columns(columns, "translate", dataset.column_names, source)
    if "translation" in chosen and not (src_lang and tgt_lang):
        raise DataError(
            f"{source}: a translation column ({chosen['translation']!r}); name its "
            "keys with --src-lang and --tgt-lang"
        )
    unusable = Unusable(source, max_unusable=max_unusable, what="pairs")

    def pairs():
        for row, values in dataset_rows(dataset, list(chosen.values())):
            where = f"{source}:{row}"
            if "translation" in chosen:
                entry = values[chosen["translation"]] or {}
                texts = [entry.get(src_lang), entry.get(tgt_lang)]
            else:
                texts = [values[chosen["source"]], values[chosen["target"]]]
            texts = [nfc(t) if isinstance(t, str) else "" for t in texts]
            problem = next(
                (
                    p
                    for side, t in zip(("source", "target"), texts)
                    if (p := field_problem(side, t, max_chars))
                ),
                None,
            )
            if problem:
                unusable.drop(f"{where}: {problem}", problem.split(" of ")[0])
            else:
                yield row, texts[0], texts[1]

    found = TextPairs.collect(pairs(), source)
    unusable.check(len(found))
    return found


class DatasetLines(LineFolder):
    """The lines of a dataset: ``(row, width, text)`` each, an image decoded from the
    dataset when its line is indexed (as :class:`LineFolder` reads files); ``path(i)``
    names the line ``hf:PATH:SPLIT:ROW``."""

    def __init__(
        self, dataset, source: str, column: str, folder: Path, rows, *, max_width: int | None
    ):
        super().__init__(folder, rows, max_width=max_width)
        self.dataset, self.source, self.column = dataset, source, column

    def path(self, i: int) -> str:
        return f"{self.source}:{self.rows[i][0]}"

    def __getitem__(self, i):
        if isinstance(i, slice):
            return DatasetLines(
                self.dataset,
                self.source,
                self.column,
                self.folder,
                self.rows[i],
                max_width=self.max_width,
            )
        row, _, text = self.rows[i]
        value = self.dataset[row][self.column]
        image = _image(value, self.path(i), self.folder)
        return load_line_image(image, max_width=self.max_width), text


def read_hf_lines(
    path: str | Path,
    *,
    columns: str | dict | None = None,
    split: str | None = None,
    role: str = "train",
    alphabet: str | None = None,
    max_width: int | None = MAX_WIDTH,
    max_unusable: float = MAX_UNUSABLE,
) -> DatasetLines:
    """The text lines of a dataset (see the module docstring): each image's header read to
    learn its width, its pixels decoded when a batch reads it."""
    dataset, source = open_dataset(path, role, split)
    chosen = dataset_columns(columns, "ocr", dataset.column_names, source)
    folder = parse_path(path)[0]
    unusable = Unusable(source, max_unusable=max_unusable, what="lines")
    allowed = None if alphabet is None else set(alphabet)
    rows = []
    for row, values in dataset_rows(dataset, [chosen["image"], chosen["text"]]):
        where = f"{source}:{row}"
        value = values[chosen["text"]]
        text = nfc(value).strip() if isinstance(value, str) else ""
        if not text or "\n" in text or "\x00" in text:
            unusable.drop(
                f"{where}: {'no text' if not text else 'not one line of text'}",
                "empty" if not text else "not one line",
            )
            continue
        if allowed is not None and set(text) - allowed:
            unusable.drop(
                f"{where}: characters outside the alphabet: "
                f"{''.join(sorted(set(text) - allowed))!r}",
                "characters outside the alphabet",
            )
            continue
        try:
            width = line_width(_image(values[chosen["image"]], where, folder), max_width=max_width)
        except DataError as exc:
            unusable.drop(str(exc), "unreadable images")
            continue
        rows.append((row, width, text))
    unusable.check(len(rows))
    plain = _datasets().Image(decode=False)
    stored = (
        dataset.cast_column(chosen["image"], plain)
        if isinstance(dataset.features[chosen["image"]], _datasets().Image)
        else dataset
    )
    return DatasetLines(
        stored.select_columns([chosen["image"]]),
        source,
        chosen["image"],
        folder,
        rows,
        max_width=max_width,
    )


def _texts(value: Any) -> list[str]:
    """A caption or answer column's texts: one string, or a list of strings or of dicts
    with an ``answer``."""
    values = value if isinstance(value, list) else [value]
    found = [_text(v.get("answer") if isinstance(v, dict) else v) for v in values]
    return [t for t in found if t]


class DatasetImages(ImageFiles):
    """The images of a dataset's column, each decoded from its row when indexed (as
    :class:`~attnkit.data.ImageFiles` reads files): its "paths" are the rows."""

    def __init__(
        self,
        dataset,
        source: str,
        column: str,
        folder: Path,
        size: int,
        rows: list[int] | None = None,
    ):
        # the rows stand for ImageFiles' paths: read() finds the image by them
        super().__init__(size, rows or [])  # type: ignore[arg-type]
        self.dataset, self.source, self.column, self.folder = dataset, source, column, folder

    @classmethod
    def of(cls, dataset, source: str, column: str, folder: Path, size: int) -> DatasetImages:
        """Those of ``dataset``'s image ``column``, undecoded (none added yet)."""
        if isinstance(dataset.features[column], _datasets().Image):
            dataset = dataset.cast_column(column, _datasets().Image(decode=False))
        return cls(dataset.select_columns([column]), source, column, folder, size)

    def add_row(self, row: int, value: Any) -> int:
        """Check row ``row``'s image ``value`` from its header and keep the row; its index.

        Raises:
            DataError: naming the row.
        """
        image = _image(value, f"{self.source}:{row}", self.folder)
        return self.add(row, image)  # type: ignore[arg-type]  # a row for a path, as above

    def read(self, path) -> torch.Tensor:
        image = _image(self.dataset[path][self.column], f"{self.source}:{path}", self.folder)
        return load_image(image, self.size)

    def subset(self, paths: list) -> DatasetImages:
        return DatasetImages(self.dataset, self.source, self.column, self.folder, self.size, paths)


def read_hf_captions(
    path: str | Path,
    *,
    size: int,
    columns: str | dict | None = None,
    split: str | None = None,
    role: str = "train",
    max_unusable: float = MAX_UNUSABLE,
) -> CaptionedImages:
    """The captioned images of a dataset (see the module docstring), one per row, each
    image checked from its header here and decoded when indexed (:class:`DatasetImages`)."""
    dataset, source = open_dataset(path, role, split)
    chosen = dataset_columns(columns, "caption", dataset.column_names, source)
    images = DatasetImages.of(dataset, source, chosen["image"], parse_path(path)[0], size)
    unusable = Unusable(source, max_unusable=max_unusable, what="images")
    index, captions, origins = [], [], []
    for row, values in dataset_rows(dataset, [chosen["image"], chosen["caption"]]):
        where = f"{source}:{row}"
        texts = _texts(values[chosen["caption"]])
        if not texts:
            unusable.drop(f"{where}: no caption", "empty")
            continue
        try:
            index.append(images.add_row(row, values[chosen["image"]]))
        except DataError as exc:
            unusable.drop(str(exc), "unreadable images")
            continue
        captions.append(tuple(texts))
        origins.append(where)
    unusable.check(len(index))
    return CaptionedImages(images, index, captions, origins)


def read_hf_questions(
    path: str | Path,
    *,
    size: int,
    columns: str | dict | None = None,
    split: str | None = None,
    role: str = "train",
    max_unusable: float = MAX_UNUSABLE,
) -> tuple[DatasetImages, list[ImageQuestion]]:
    """The images and questions of a dataset (see the module docstring): one question per
    row, its answer the most common given, the images of equal bytes kept once (checked
    from their headers here, decoded when indexed)."""
    dataset, source = open_dataset(path, role, split)
    chosen = dataset_columns(columns, "vqa", dataset.column_names, source)
    folder = parse_path(path)[0]
    unusable = Unusable(source, max_unusable=max_unusable, what="questions")
    images = DatasetImages.of(dataset, source, chosen["image"], folder, size)
    seen: dict[Any, int] = {}
    questions = []
    fields = [chosen["image"], chosen["question"], chosen["answer"]]
    for row, values in dataset_rows(dataset, fields):
        where = f"{source}:{row}"
        question, answers = _text(values[chosen["question"]]), _texts(values[chosen["answer"]])
        if not question or not answers:
            unusable.drop(f"{where}: no {'question' if not question else 'answer'}", "empty")
            continue
        try:
            image = _image(values[chosen["image"]], where, folder)
            key = (
                hashlib.sha1(image.getvalue()).digest()
                if isinstance(image, io.BytesIO)
                else str(image)
            )
            if key not in seen:
                seen[key] = images.add_row(row, values[chosen["image"]])
        except DataError as exc:
            unusable.drop(str(exc), "unreadable images")
            continue
        answer = collections.Counter(answers).most_common(1)[0][0]
        questions.append(ImageQuestion(seen[key], question, answer, "user", where))
    unusable.check(len(questions))
    return images, questions


def is_hf(path: str | Path) -> bool:
    """Whether ``path`` names a Hugging Face dataset (``hf:PATH[:SPLIT]``)."""
    return str(path).startswith(PREFIX)


SUMMARY = (
    "a Hugging Face dataset on disk, hf:PATH[:SPLIT]: saved with save_to_disk, or a "
    "folder of Parquet files; --columns KEY=COLUMN,..."
)
register(
    Format(
        "hf",
        "translate",
        read_hf_pairs,
        is_hf,
        SUMMARY,
        "hf:wmt14-de-en:train  (columns source, target; or translation with "
        "--src-lang de --tgt-lang en)",
    )
)
register(
    Format("hf", "ocr", read_hf_lines, is_hf, SUMMARY, "hf:lines:train  (columns image, text)")
)
register(
    Format(
        "hf",
        "caption",
        read_hf_captions,
        is_hf,
        SUMMARY,
        "hf:coco-captions:validation  (columns image, caption: a string or a list)",
    )
)
register(
    Format(
        "hf",
        "vqa",
        read_hf_questions,
        is_hf,
        SUMMARY,
        "hf:vqa:train  (columns image, question, answer: a string or a list)",
    )
)
