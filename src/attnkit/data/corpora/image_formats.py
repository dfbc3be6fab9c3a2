"""Captioning and VQA corpora, read into what attnkit's own folders give:
:class:`~attnkit.data.CaptionedImages` (task ``"caption"``), or the images
(:class:`~attnkit.data.ImageFiles`) and their :class:`~attnkit.data.ImageQuestion` (task
``"vqa"``).

============  ==========  ===============================================================
``captions``  caption     attnkit's own: a folder of images and ``captions.tsv``
                          (``filename<TAB>caption``, several lines per image), or that TSV
``karpathy``  caption     Karpathy's split file (``dataset_coco.json``, ``dataset_flickr8k.json``):
                          ``images`` with ``filepath``/``filename``, ``split`` and ``sentences``
``coco``      caption     COCO captions (``captions_train2017.json``): ``images`` (``id``,
                          ``file_name``) and ``annotations`` (``image_id``, ``caption``)
``questions`` vqa         attnkit's own: a folder of images and ``questions.tsv``
                          (``filename<TAB>question<TAB>answer``), or that TSV
``vqa2``      vqa         VQA v2: the questions JSON (``questions``: ``image_id``,
                          ``question``, ``question_id``) and its annotations JSON
                          (``annotations``: ``question_id``, ``answers``)
============  ==========  ===============================================================

Detection tries the formats of a task in this order: a folder or a file that does not start
with ``{`` is attnkit's own; a JSON file whose first bytes hold ``"sentences"`` is Karpathy's,
one holding ``"questions"`` is VQA v2's, any other JSON file COCO's. JSON files are read as
:mod:`attnkit.data.corpora.text_files` reads text (UTF-8 with or without a byte-order mark, gzip /
xz / bzip2); a file that is not JSON is named with the line and column where it stops being JSON.
Texts are NFC with their runs of white space as one space. Each image's header is checked
once when the corpus is read (missing, unidentified, a decompression bomb: named then), in the
order of its first caption or question; its pixels are read and resized to the model's size
when a batch needs them (:func:`attnkit.data.load_image`: any mode), so memory holds the
paths, not the images.

**A limit** (``limit``, ``eval --limit N``): the first N examples only, as they come without
one: COCO's images in the order of their first usable caption, Karpathy's images of the
splits, VQA v2's questions. Only their images are checked (an unusable one is counted and the
next taken) and only their captions kept; past them the annotations are skipped unread but for
the captions of those images. The JSON is still parsed whole (``json`` has no streaming
reader), and the ids are still checked for repeats.

**Images folder** (``images``): the folder the JSON's file names are relative to. By default,
COCO's is the folder named like the file's split (``train2017`` of
``captions_train2017.json``) beside the JSON or beside its folder (COCO's ``annotations/``),
else the JSON's folder; Karpathy's is the JSON's folder (its ``filepath`` names the
subfolder); VQA v2's is the folder named by the questions' ``data_subtype`` (``train2014``),
looked for in the same places, its files ``COCO_train2014_000000000009.jpg`` (or
``000000000009.jpg``). An absolute file name is read where it is; with ``confine``, only files
inside the images folder are (:func:`attnkit.data.paths.inside`).

**Karpathy's splits** (``split``): ``train`` and ``restval`` for training, ``val`` for
validation, ``test`` for eval (``role``), unless ``split`` names them (comma-separated).

**VQA v2's answer** is the most common of a question's ten answers (ties: the annotation's
``multiple_choice_answer`` when it is among them, else the first given); its annotations file
is ``annotations``, by default the questions file's name with ``questions`` read
``annotations`` and ``OpenEnded_`` / ``MultipleChoice_`` left out
(``v2_OpenEnded_mscoco_train2014_questions.json`` -> ``v2_mscoco_train2014_annotations.json``),
beside it.

The unit counted as unusable (:mod:`attnkit.data.corpora.reading`) is a caption or a question:
an annotation naming an image the file does not list, an image missing or unreadable (every
caption or question of it), an empty text, a question without an annotation.
"""

from __future__ import annotations

import collections
import json
import logging
import re
from pathlib import Path
from typing import Any

from attnkit.checks import quoted
from attnkit.data.corpora.format_registry import ROLES, Format, register
from attnkit.data.corpora.image_folders import (
    CAPTIONS,
    QUESTIONS,
    CaptionedImages,
    ImageFiles,
    ImageQuestion,
    read_caption_folder,
    read_question_folder,
)
from attnkit.data.corpora.text_files import json_value, nfc, open_bytes, read_text
from attnkit.data.corpora.unusable import MAX_UNUSABLE, Unusable, listed_twice
from attnkit.data.paths import inside, not_found
from attnkit.errors import DataError

__all__ = [
    "KARPATHY_SPLITS",
    "read_captions",
    "read_coco",
    "read_karpathy",
    "read_questions",
    "read_vqa2",
]

log = logging.getLogger("attnkit")

KARPATHY_SPLITS = {"train": ("train", "restval"), "valid": ("val",), "test": ("test",)}
HEAD = 1 << 16  # bytes of a JSON file detection reads


def _own_tsv(path: str | Path, tsv: str) -> tuple[Path, Path]:
    """(folder, TSV) of attnkit's own format: the folder ``path`` with its ``tsv``, or the TSV
    ``path`` in its folder."""
    path = Path(path)
    return (path, path / tsv) if path.is_dir() else (path.parent, path)


def read_captions(
    path: str | Path,
    *,
    size: int,
    tsv: str = CAPTIONS,
    confine: bool = False,
    max_unusable: float | None = None,
) -> CaptionedImages:
    """attnkit's own captions: the folder ``path`` with its ``tsv``, or the TSV ``path`` in its
    folder (:func:`attnkit.data.read_caption_folder`)."""
    folder, table = _own_tsv(path, tsv)
    return read_caption_folder(folder, table, size=size, confine=confine, max_unusable=max_unusable)


def read_questions(
    path: str | Path,
    *,
    size: int,
    tsv: str = QUESTIONS,
    confine: bool = False,
    max_unusable: float | None = None,
) -> tuple[ImageFiles, list[ImageQuestion]]:
    """attnkit's own questions: the folder ``path`` with its ``tsv``, or the TSV ``path`` in
    its folder (:func:`attnkit.data.read_question_folder`)."""
    folder, table = _own_tsv(path, tsv)
    return read_question_folder(
        folder, table, size=size, confine=confine, max_unusable=max_unusable
    )


def _json(path: str | Path, *keys: str) -> dict:
    """The JSON object of ``path``, with a list under each of ``keys``.

    Raises:
        DataError: naming the file (and the line and column where it stops being JSON), or
            the key it lacks.
    """
    try:
        data = json_value(read_text(path), str(path))
    except json.JSONDecodeError as exc:
        raise DataError(
            f"{path}:{exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})"
        ) from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a JSON object, found a {type(data).__name__}")
    for key in keys:
        if not isinstance(data.get(key), list):
            found = ", ".join(repr(k) for k in list(data)[:8]) or "none"
            raise DataError(f"{path}: expected a list under {key!r} (keys found: {found})")
    return data


def _text(value: Any) -> str | None:
    """A caption, question or answer as kept: NFC (a JSON string may escape characters as
    ``\\uXXXX``, which the file's own normalisation does not see), runs of white space as one
    space; None: not a string."""
    if not isinstance(value, str):
        return None
    return " ".join(nfc(value).split())


def _folder(path: Path, images: str | Path | None, subset: str | None) -> Path:
    """The images folder of a JSON file (see the module docstring)."""
    if images is not None:
        return Path(images)
    if subset:
        for candidate in (path.parent / subset, path.parent.parent / subset):
            if candidate.is_dir():
                log.info("%s: images read from %s", path, candidate)
                return candidate
    return path.parent


class _Images:
    """Images checked once each from their headers, by key: their index in :attr:`files`
    (:class:`~attnkit.data.corpora.image_folders.ImageFiles`, read when indexed), or why they cannot
    be used."""

    def __init__(self, folder: Path, size: int, confine: bool):
        self.folder, self.confine = folder, confine
        self.files = ImageFiles(size)
        self._found: dict[Any, int | str] = {}

    @property
    def seen(self) -> dict[Any, int | str]:
        """The images checked so far, by key: their index, or why they cannot be used."""
        return self._found

    def get(self, key: Any, names: list[str], where: str) -> int | str:
        """The index of the image ``key``, the first of ``names`` that exists (relative to
        the folder), or why there is none."""
        if key not in self._found:
            self._found[key] = self._read(names, where)
        return self._found[key]

    def _read(self, names: list[str], where: str) -> int | str:
        try:
            paths = [inside(self.folder, name, where, confine=self.confine) for name in names]
        except DataError as exc:
            return str(exc)
        path = next((p for p in paths if p.exists()), None)
        if path is None:
            return f"{where}: image {not_found(names[0], self.folder)}"
        try:
            return self.files.add(path)
        except DataError as exc:
            return f"{where}: {exc}"

    def captioned(self, items: list[tuple[int, tuple[str, ...]]]) -> CaptionedImages:
        """The :class:`CaptionedImages` of ``(image index, captions)`` items, each named by
        its image's path."""
        return CaptionedImages(
            self.files,
            [i for i, _ in items],
            [c for _, c in items],
            [str(self.files.paths[i]) for i, _ in items],
        )


def read_coco(
    path: str | Path,
    *,
    size: int,
    images: str | Path | None = None,
    max_unusable: float = MAX_UNUSABLE,
    confine: bool = False,
    references: bool = True,
    limit: int | None = None,
) -> CaptionedImages:
    """The captioned images of a COCO captions file (see the module docstring): one
    :class:`~attnkit.data.CaptionedImage` per image with a usable caption, its captions in
    the file's order. Without ``references`` (to caption the images) every image of the
    file is one, with or without captions: COCO's test image lists
    (``image_info_test2014.json``) have no ``annotations``. With ``limit``, the first
    ``limit`` of these only (see the module docstring).

    Raises:
        DataError: naming the file: not JSON, no ``images`` or ``annotations`` list; none of
            the captions usable, or more than ``max_unusable`` of them not.
    """
    path = Path(path)
    data = _json(path, "images", *(("annotations",) if references else ()))
    subset = re.sub(r"^(captions|image_info)_", "", path.name.split(".")[0])
    found = _Images(_folder(path, images, subset), size, confine)
    files = {
        entry["id"]: entry["file_name"]
        for entry in _once(path, "images", "id", data["images"])
        if isinstance(entry.get("file_name"), str)
    }
    unusable = Unusable(path, max_unusable=max_unusable, what="captions")
    kept: dict[Any, tuple[int, list[str]]] = {}  # by image id: its image and captions

    def image(image_id: Any) -> int | str | None:
        # the image's index (checked the first time), why it is unusable, or None: past the
        # first ``limit`` images, not read
        if image_id in kept:
            return kept[image_id][0]
        if limit is not None and len(kept) >= limit and image_id not in found.seen:
            return None
        index = found.get(image_id, [files[image_id]], f"{path}: image {image_id}")
        if not isinstance(index, str):
            kept[image_id] = (index, [])
        return index

    for image_id in () if references else files:
        image(image_id)
    for k, entry in enumerate(data.get("annotations") or []):
        entry = entry if isinstance(entry, dict) else {}
        image_id = entry.get("image_id")
        if (
            limit is not None
            and len(kept) >= limit
            and image_id not in kept
            and image_id not in found.seen
        ):
            continue  # past the first images: only their captions are read
        where = f"{path}: annotations[{k}]" + (f" (id {entry['id']})" if "id" in entry else "")
        caption = _text(entry.get("caption"))
        if caption is None or image_id is None:
            unusable.drop(f"{where}: expected an object with image_id and caption", "malformed")
        elif not caption:
            unusable.drop(f"{where}: empty caption", "empty")
        elif image_id not in files:
            unusable.drop(
                f"{where}: image_id {image_id!r} is not among the file's images", "unknown image_id"
            )
        elif isinstance(index := image(image_id), str):
            unusable.drop(index, "image missing or unreadable")
        elif index is not None:
            kept[image_id][1].append(caption)
    out = [(index, tuple(texts)) for index, texts in kept.values()]
    if references:
        unusable.check(sum(len(texts) for _, texts in out))
    elif not out:
        raise DataError(f"{path}: no image to caption")
    return found.captioned(out)


def _once(path: str | Path | None, name: str, key: str, entries: list) -> list[dict]:
    """The objects of the list ``name`` of a JSON file that have ``key`` (``path``: the file,
    named in the error; None with no entries, no file).

    Raises:
        DataError: naming the file and both entries, for a ``key`` listed twice.
    """
    first: dict[Any, int] = {}
    out = []
    for k, entry in enumerate(entries):
        if isinstance(entry, dict) and key in entry:
            if entry[key] in first:
                raise listed_twice(
                    f"{path}: {name}[{k}]",
                    f"{key} {quoted(entry[key])}",
                    f"{name}[{first[entry[key]]}]",
                )
            first[entry[key]] = k
            out.append(entry)
    return out


def _splits(split: str | None, role: str) -> tuple[str, ...]:
    if split:
        return tuple(s.strip() for s in split.split(",") if s.strip())
    if role not in ROLES:
        raise ValueError(f"role: expected one of {', '.join(ROLES)}, got {role!r}")
    return KARPATHY_SPLITS[role]


def read_karpathy(
    path: str | Path,
    *,
    size: int,
    images: str | Path | None = None,
    split: str | None = None,
    role: str = "train",
    max_unusable: float = MAX_UNUSABLE,
    confine: bool = False,
    limit: int | None = None,
) -> CaptionedImages:
    """The captioned images of the splits ``split`` (default: those of ``role``) of a
    Karpathy split file (see the module docstring); each sentence's ``raw`` text, or its
    ``tokens`` joined by spaces. With ``limit``, the first ``limit`` of them only.

    Raises:
        DataError: naming the file: not JSON, no ``images`` list, no image of the splits
            (the file's splits and their sizes named); none of the captions usable, or more
            than ``max_unusable`` of them not.
    """
    path = Path(path)
    data = _json(path, "images")
    wanted = _splits(split, role)
    found = _Images(Path(images) if images is not None else path.parent, size, confine)
    unusable = Unusable(path, max_unusable=max_unusable, what="captions")
    splits: collections.Counter[str] = collections.Counter()
    out: list[tuple[int, tuple[str, ...]]] = []
    for k, entry in enumerate(data["images"]):
        entry = entry if isinstance(entry, dict) else {}
        splits[str(entry.get("split"))] += 1
        if entry.get("split") not in wanted or (limit is not None and len(out) >= limit):
            continue  # (past the first images of a limit: only the splits are counted)
        where = f"{path}: images[{k}]"
        sentences = entry.get("sentences")
        if not isinstance(entry.get("filename"), str) or not isinstance(sentences, list):
            unusable.drop(f"{where}: expected filename and a list of sentences", "malformed")
            continue
        texts = []
        for j, sentence in enumerate(sentences):
            sentence = sentence if isinstance(sentence, dict) else {}
            text = _text(sentence.get("raw"))
            if text is None and isinstance(sentence.get("tokens"), list):
                text = _text(" ".join(map(str, sentence["tokens"])))
            if not text:
                unusable.drop(f"{where}: sentences[{j}]: no raw text or tokens", "empty")
            else:
                texts.append(text)
        if not texts:
            continue
        name = "/".join(
            p for p in (entry.get("filepath"), entry["filename"]) if isinstance(p, str) and p
        )
        index = found.get(k, [name], where)
        if isinstance(index, str):
            for _ in texts:
                unusable.drop(index, "image missing or unreadable")
            continue
        out.append((index, tuple(texts)))
    if not any(splits[s] for s in wanted):
        sizes = ", ".join(f"{name} ({n})" for name, n in splits.most_common())
        raise DataError(
            f"{path}: no image of split {' or '.join(wanted)}; the file's splits: "
            f"{sizes or 'none'} (--split names others)"
        )
    unusable.check(sum(len(texts) for _, texts in out))
    return found.captioned(out)


def _annotations_file(path: Path, *, needed: bool = True) -> Path | None:
    """The annotations JSON beside the questions file ``path``; None when it is not there
    and not ``needed``."""
    name = re.sub(r"(OpenEnded|MultipleChoice)_", "", path.name).replace("questions", "annotations")
    candidate = path.with_name(name)
    if name == path.name or not candidate.is_file():
        if not needed:
            return None
        raise DataError(
            f"{path}: its annotations file {candidate.name} is not beside it; name "
            "the annotations JSON with --annotations"
        )
    return candidate


def _answer(entry: dict) -> str | None:
    """The most common answer of a VQA annotation (see the module docstring), or None."""
    given = [_text(a.get("answer")) for a in entry.get("answers") or [] if isinstance(a, dict)]
    counts = collections.Counter(a for a in given if a)
    chosen = _text(entry.get("multiple_choice_answer"))
    if not counts:
        return chosen or None
    best = max(counts.values())
    tied = [a for a, n in counts.items() if n == best]
    return chosen if chosen in tied else tied[0]


def read_vqa2(
    path: str | Path,
    *,
    size: int,
    annotations: str | Path | None = None,
    images: str | Path | None = None,
    max_unusable: float = MAX_UNUSABLE,
    confine: bool = False,
    references: bool = True,
    limit: int | None = None,
) -> tuple[ImageFiles, list[ImageQuestion]]:
    """The images (read when indexed) and questions of a VQA v2 questions file and its
    annotations (see the module docstring): each question with its most common answer, type
    ``"user"`` and origin ``file: question ID``. Without ``references`` (to answer the
    questions, as for VQA v2's test-dev, which has no annotations) the annotations are not
    needed: a question without one has the answer ``""``. With ``limit``, the first
    ``limit`` questions only (and the images they ask about).

    Raises:
        DataError: naming the file: not JSON, no ``questions`` or ``annotations`` list, no
            annotations file; none of the questions usable, or more than ``max_unusable`` of
            them not.
    """
    path = Path(path)
    data = _json(path, "questions")
    if annotations is None and not references:
        annotations = _annotations_file(path, needed=False)
    elif annotations is None:
        annotations = _annotations_file(path)
    listed = _json(annotations, "annotations")["annotations"] if annotations else []
    annotated = {
        entry["question_id"]: entry
        for entry in _once(  # answered when read
            annotations, "annotations", "question_id", listed
        )
    }
    subset = data.get("data_subtype") if isinstance(data.get("data_subtype"), str) else None
    found = _Images(_folder(path, images, subset), size, confine)
    unusable = Unusable(path, max_unusable=max_unusable, what="questions")
    out: list[ImageQuestion] = []
    _once(path, "questions", "question_id", data["questions"])
    for k, entry in enumerate(data["questions"]):
        if limit is not None and len(out) >= limit:
            break
        entry = entry if isinstance(entry, dict) else {}
        qid, image_id = entry.get("question_id"), entry.get("image_id")
        where = f"{path}: questions[{k}]" + (f" (question_id {qid})" if qid is not None else "")
        question = _text(entry.get("question"))
        if question is None or qid is None or not isinstance(image_id, int):
            unusable.drop(f"{where}: expected question, question_id and image_id", "malformed")
            continue
        if not question:
            unusable.drop(f"{where}: empty question", "empty")
            continue
        if qid not in annotated and references:
            unusable.drop(f"{where}: no annotation in {annotations}", "no annotation")
            continue
        answer = _answer(annotated[qid]) if qid in annotated else ""
        if not answer and references:
            unusable.drop(f"{where}: its annotation in {annotations} has no answer", "no answer")
            continue
        names = ([f"COCO_{subset}_{image_id:012d}.jpg"] if subset else []) + [
            f"{image_id:012d}.jpg"
        ]
        index = found.get(image_id, names, where)
        if isinstance(index, str):
            unusable.drop(index, "image missing or unreadable")
            continue
        out.append(ImageQuestion(index, question, answer or "", "user", f"{path}: question {qid}"))
    unusable.check(len(out))
    return found.files, out


def _head(path: Path) -> str | None:
    """The first bytes of a file as text (None: not a file, or not readable)."""
    if not path.is_file():
        return None
    try:
        with open_bytes(path) as f:
            return f.read(HEAD).decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    except (DataError, OSError, EOFError):
        return None


def _is_own(path: Path) -> bool:
    # a folder (its reader says what it lacks), or a file that is not JSON
    head = _head(path)
    return path.is_dir() or (head is not None and not head.startswith("{"))


def _is_karpathy(path: Path) -> bool:
    head = _head(path)
    return head is not None and head.startswith("{") and '"sentences"' in head


def _is_coco(path: Path) -> bool:
    head = _head(path)
    return head is not None and head.startswith("{") and '"questions"' not in head


def _is_vqa2(path: Path) -> bool:
    head = _head(path)
    return head is not None and head.startswith("{") and '"questions"' in head


register(
    Format(
        "captions",
        "caption",
        read_captions,
        _is_own,
        f"a folder of images with {CAPTIONS} (filename<TAB>caption, several lines per "
        "image), or that TSV",
        "captions.tsv:  beach.jpg<TAB>Two dogs run on the beach.\n"
        "               beach.jpg<TAB>Dogs playing by the sea.",
    )
)
register(
    Format(
        "karpathy",
        "caption",
        read_karpathy,
        _is_karpathy,
        "Karpathy's split file (dataset_coco.json): images with filepath, filename, "
        "split and sentences; --split, --images",
        '{"images": [{"filepath": "val2014", "filename": "COCO_val2014_...42.jpg",\n'
        '  "split": "train", "sentences": [{"raw": "Two dogs run on the beach."}]}]}',
    )
)
register(
    Format(
        "coco",
        "caption",
        read_coco,
        _is_coco,
        "COCO captions JSON (images: id, file_name; annotations: image_id, caption) "
        "and its images folder (--images)",
        '{"images": [{"id": 42, "file_name": "000000000042.jpg"}],\n'
        ' "annotations": [{"id": 1, "image_id": 42, "caption": "Two dogs run."}]}',
    )
)
register(
    Format(
        "questions",
        "vqa",
        read_questions,
        _is_own,
        f"a folder of images with {QUESTIONS} (filename<TAB>question<TAB>answer), or that TSV",
        "questions.tsv:  beach.jpg<TAB>How many dogs are there?<TAB>2\n"
        "                beach.jpg<TAB>Is it sunny?<TAB>yes",
    )
)
register(
    Format(
        "vqa2",
        "vqa",
        read_vqa2,
        _is_vqa2,
        "VQA v2 questions JSON with its annotations JSON (the most common answer) and "
        "images folder (--annotations, --images)",
        '{"data_subtype": "val2014", "questions": [{"image_id": 42, "question_id": 7,\n'
        '  "question": "How many dogs are there?"}]}  + annotations: answers of 7',
    )
)
