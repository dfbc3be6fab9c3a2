"""``--format`` and the options of the corpus formats (:mod:`attnkit.data.corpora`), for
``attnkit train TASK --train/--valid``, ``attnkit eval --data`` and the ``--corpus`` of the
inference verbs (``transcribe``, ``read``, ``caption``, ``translate``, ``ask``: the corpus's
inputs decoded, its references ignored).

The format of each path is the one named, or the one detected from the path (logged). The
options of one format are refused with another (:func:`attnkit.data.corpora.reading.read_corpus`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from attnkit.cli import argtypes, common
from attnkit.data import MAX_CHARS, MAX_WIDTH
from attnkit.data.audio.files import MAX_SECONDS
from attnkit.data.corpora.an4_formats import AN4_WORDS, BYTE_ORDERS
from attnkit.data.corpora.reading import formats_of, read_corpus
from attnkit.data.corpora.unusable import MAX_UNUSABLE
from attnkit.data.corpora.utterances import TRANSCRIPTS
from attnkit.errors import DataError
from attnkit.tasks.evaluator import Evaluator

__all__ = [
    "LIMITS",
    "OPTIONS",
    "add_corpus_input_args",
    "add_format_args",
    "add_limit_arg",
    "corpus_inputs",
    "format_options",
    "named",
    "read_data",
    "read_splits",
]

# The format options of each task: attribute -> (option, help). ``eval`` has them all.
OPTIONS = {
    "src_lang": (
        "--src-lang",
        "translate",
        "moses: the source language, PREFIX.SRC (e.g. de); "
        "hf: the source key of a translation column",
    ),
    "tgt_lang": (
        "--tgt-lang",
        "translate",
        "moses: the target language, PREFIX.TGT (e.g. en); "
        "hf: the target key of a translation column",
    ),
    "images": (
        "--images",
        "caption,vqa",
        "coco, karpathy, vqa2: the folder the JSON's image "
        "files are in (default: found beside the JSON, as docs/images.md says)",
    ),
    "annotations": (
        "--annotations",
        "vqa",
        "vqa2: the annotations JSON of the questions "
        "file (default: its name with questions -> annotations, beside it)",
    ),
    "split": (
        "--split",
        "caption,vqa,translate,ocr,asr",
        "karpathy: the splits to read, "
        "comma-separated (default: train,restval for --train, val for --valid, test for "
        "eval); hf: the split (default: the one after hf:PATH:, else the role's); an4: "
        "train, test, train_nodev or train_dev (default: train_nodev for --train, "
        "train_dev for --valid, test for eval); mini-librispeech: train, valid, test or all "
        "(speakers held out: docs/speech.md; default: the role's)",
    ),
    "columns": (
        "--columns",
        "asr,translate,ocr,caption,vqa",
        "jsonl, commonvoice, hf: the "
        "key or column of each field, KEY=COLUMN,... (e.g. audio=path,text=sentence; "
        "source=de,target=en)",
    ),
    "transcripts": (
        "--transcripts",
        "asr",
        "keep the transcripts as written, or normalize "
        "them (lower case, numbers in words; the default of every speech format "
        "but manifest)",
    ),
    "alphabet": ("--alphabet", "asr", "the characters a transcript may hold (any: any)"),
    "confine": (
        "--confine",
        "asr,ocr,caption,vqa",
        "read only files inside the corpus's "
        "folder (absolute names inside it too), refusing any name or link that leads "
        "out of it: for a corpus that is not your own (default: files are read where "
        "the corpus names them, relative to its folder or absolute)",
    ),
    "audio_folder": (
        "--audio-folder",
        "asr",
        "kaldi: where relative wav.scp paths start; commonvoice: the folder of the clips",
    ),
    "byte_order": (
        "--byte-order",
        "asr",
        "an4: the byte order of the headerless .raw files (default auto: guessed from "
        "their samples, and logged)",
    ),
    "words": (
        "--words",
        "asr",
        "an4: only the utterances of these words: all (default), digits (digit strings, OH "
        "written ZERO) or numbers (digit strings and numbers in words: FIFTY ONE FIFTY SIX)",
    ),
}
# The largest input of each task read, for training and decoding alike: its option, type,
# default and help.
LIMITS = {
    "asr": (
        "--max-seconds",
        argtypes.positive_float,
        MAX_SECONDS,
        f"longest audio file, in seconds (default {MAX_SECONDS:g}): a longer one is refused",
    ),
    "ocr": (
        "--max-width",
        argtypes.positive_int,
        MAX_WIDTH,
        f"widest line, in pixels at height 32 (default {MAX_WIDTH}): a wider image is refused",
    ),
    "translate": (
        "--max-chars",
        argtypes.positive_int,
        MAX_CHARS,
        f"longest sentence, in characters (default {MAX_CHARS}): a longer line is a bad line",
    ),
}
# argparse keywords of the options that are not plain strings
KINDS: dict[str, dict[str, Any]] = {
    "images": {"type": Path},
    "annotations": {"type": Path},
    "audio_folder": {"type": Path},
    "transcripts": {"choices": TRANSCRIPTS},
    "byte_order": {"choices": BYTE_ORDERS},
    "words": {"choices": tuple(AN4_WORDS)},
    "confine": {"action": "store_true", "default": None},
}
# ``--anywhere`` allowed files outside the folder before that became the default: still taken
ANYWHERE = (
    "--anywhere",
    "what every speech format does now: files are read where the corpus "
    "names them (kept for older commands; refused with --confine)",
)


def add_format_args(
    p: common.Options,
    task: str | None,
    *,
    reads: str = "--train/--valid (eval: --data)",
) -> None:
    """``--format``, ``--max-unusable`` and the format options of ``task`` (None: every
    task's, for eval) in their own group of the parser ``p``; ``reads`` names the options
    whose paths they apply to."""
    tasks = (
        [task]
        if task
        else sorted(
            {f.task for t in ("translate", "ocr", "caption", "vqa", "asr") for f in formats_of(t)}
        )
    )
    names = {f.name: f for t in tasks for f in formats_of(t)}
    group = p.add_argument_group(
        "corpus format", f"how {reads} are read; see the format table of the task's guide"
    )
    group.add_argument(
        "--format",
        choices=sorted(names),
        metavar="NAME",
        help="the corpus format (default: detected from the path, and logged): "
        + "; ".join(f"{n}: {f.summary}" for n, f in sorted(names.items())),
    )
    group.add_argument(
        "--max-unusable",
        type=argtypes.proportion,
        metavar="SHARE",
        help="the share of a corpus's examples that may be "
        "unusable (dropped, counted and named in a warning); more stops with an "
        f"error naming the first few (default {MAX_UNUSABLE}; attnkit's own "
        "TSV formats stop at their first bad line unless it is given)",
    )
    for dest, (option, used_by, help) in OPTIONS.items():
        if task is None or task in used_by.split(","):
            # namespaced: a verb's own argument may have the name (read's and caption's images)
            group.add_argument(
                option, dest=f"corpus_{dest}", help=help, **KINDS.get(dest, {"type": str})
            )
    if task in (None, "asr"):
        group.add_argument(
            ANYWHERE[0], dest="corpus_anywhere", action="store_true", help=ANYWHERE[1]
        )


def format_options(
    args: argparse.Namespace,
    paths: Path | list[Path],
    role: str | None,
) -> tuple[Path, dict]:
    """The path to read and the options of :func:`attnkit.data.corpora.reading.read_corpus`
    (``format`` among them) for ``paths`` (one path, or the two files of a Moses corpus),
    from the parsed ``args``: those given, and ``role``.

    Raises:
        ValueError: three paths or more; ``--anywhere`` with ``--confine``.
    """
    if getattr(args, "corpus_anywhere", False) and getattr(args, "corpus_confine", False):
        raise ValueError(
            "--anywhere: reads files wherever the corpus names them, as --confine forbids; give one"
        )
    paths = paths if isinstance(paths, list) else [paths]
    options = {
        "role": role,
        "format": getattr(args, "format", None),
        "max_unusable": getattr(args, "max_unusable", None),
        **{dest: getattr(args, f"corpus_{dest}", None) for dest in OPTIONS},
    }
    if len(paths) > 2:
        raise ValueError(
            f"expected one path or two files (moses), got {len(paths)}: {' '.join(map(str, paths))}"
        )
    if len(paths) == 2:
        options["format"] = options["format"] or "moses"
        options["target"] = paths[1]
    return paths[0], {k: v for k, v in options.items() if v is not None}


def read_data(
    task: str, paths: Path | list[Path], args: argparse.Namespace, role: str, **task_options: Any
) -> Any:
    """The examples of ``paths`` for ``task``, read as ``args`` says
    (:func:`format_options`) with the task's own ``task_options``."""
    path, options = format_options(args, paths, role)
    return read_corpus(task, path, **options, **task_options)


def read_splits(task: str, args: argparse.Namespace, **task_options: Any) -> tuple[Any, Any | None]:
    """The examples of ``--train`` and of ``--valid`` (None without it), read by
    :func:`read_data`."""
    train = read_data(task, args.train, args, "train", **task_options)
    return train, read_data(task, args.valid, args, "valid", **task_options) if args.valid else None


def add_limit_arg(p: common.Options, task: str) -> None:
    """The option of ``task``'s largest input (:data:`LIMITS`): a larger one is refused."""
    option, kind, default, help = LIMITS[task]
    p.add_argument(option, type=kind, default=default, help=help)


def named(paths: Path | list[Path] | None) -> str:
    """How a run's config records ``--train`` / ``--valid``: the path, or the paths joined
    by a space."""
    return " ".join(map(str, paths)) if isinstance(paths, list) else str(paths)


def add_corpus_input_args(p: common.Options, task: str) -> None:
    """``--corpus PATH`` of an inference verb of ``task``, with ``--format`` and the task's
    format options."""
    p.add_argument(
        "--corpus",
        type=Path,
        nargs="+",
        metavar="PATH",
        help="decode the inputs of a corpus in any format train and eval read "
        "(--format; two files: a Moses pair) instead of files given one by one; "
        "its references are ignored, each output is named by its origin",
    )
    add_format_args(p, task, reads="--corpus")


def corpus_inputs(
    args: argparse.Namespace, evaluator: Evaluator, given: list
) -> tuple[list, list[str]]:
    """The inputs of ``--corpus`` (as ``evaluator.decode`` takes them) and their origins
    (``file:line``, a file, an utterance id).

    Raises:
        ValueError: ``--corpus`` with inputs ``given`` on the command line as well.
        DataError: the corpus cannot be read, or holds no example.
    """
    if given:
        raise ValueError(
            f"--corpus: give it or inputs on the command line, not both (got "
            f"{len(given)} inputs as well)"
        )
    path, options = format_options(args, args.corpus, "test")
    examples = evaluator.read(path, **options, references=False)
    if not examples:
        raise DataError(f"{path}: no examples to decode")
    return [e.input for e in examples], [e.origin for e in examples]
