"""``--format`` and the options of the corpus formats (:mod:`attnkit.data.formats`), for
``attnkit train TASK --train/--valid`` and ``attnkit eval --data``.

The format of each path is the one named, or the one detected from the path (logged). The
options of one format are refused with another (:func:`attnkit.data.formats.reading.read_corpus`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnkit.cli import common
from attnkit.data.formats import formats_of
from attnkit.data.formats.reading import MAX_UNUSABLE, read_corpus
from attnkit.data.utterances import TRANSCRIPTS

__all__ = ["OPTIONS", "add_format_args", "format_options", "named", "read_data"]

# The format options of each task: attribute -> (option, help). ``eval`` has them all.
OPTIONS = {
    "src_lang": ("--src-lang", "translate", "moses: the source language, PREFIX.SRC (e.g. de); "
                 "hf: the source key of a translation column"),
    "tgt_lang": ("--tgt-lang", "translate", "moses: the target language, PREFIX.TGT (e.g. en); "
                 "hf: the target key of a translation column"),
    "images": ("--images", "caption,vqa", "coco, karpathy, vqa2: the folder the JSON's image "
               "files are in (default: found beside the JSON, as docs/images.md says)"),
    "annotations": ("--annotations", "vqa", "vqa2: the annotations JSON of the questions "
                    "file (default: its name with questions -> annotations, beside it)"),
    "split": ("--split", "caption,vqa,translate,ocr", "karpathy: the splits to read, "
              "comma-separated (default: train,restval for --train, val for --valid, test for "
              "eval); hf: the split (default: the one after hf:PATH:, else the role's)"),
    "columns": ("--columns", "asr,translate,ocr,caption,vqa", "jsonl, commonvoice, hf: the "
                "key or column of each field, KEY=COLUMN,... (e.g. audio=path,text=sentence; "
                "source=de,target=en)"),
    "transcripts": ("--transcripts", "asr", "keep the transcripts as written, or normalize "
                    "them (lower case, numbers in words; the default of every speech format "
                    "but manifest)"),
    "alphabet": ("--alphabet", "asr", "the characters a transcript may hold (any: any)"),
    "anywhere": ("--anywhere", "asr", "audio files may be named by absolute paths or lie "
                 "outside the corpus's folder (Kaldi and NeMo often list absolute paths)"),
    "audio_folder": ("--audio-folder", "asr", "kaldi: where relative wav.scp paths start; "
                     "commonvoice: the folder of the clips"),
}
# argparse keywords of the options that are not plain strings
KINDS = {"images": {"type": Path}, "annotations": {"type": Path},
         "audio_folder": {"type": Path}, "transcripts": {"choices": TRANSCRIPTS},
         "anywhere": {"action": "store_true", "default": None}}


def add_format_args(p, task: str | None) -> None:
    """``--format``, ``--max-unusable`` and the format options of ``task`` (None: every
    task's, for eval) in their own group of the parser ``p``."""
    tasks = [task] if task else sorted({f.task for t in ("translate", "ocr", "caption", "vqa",
                                                         "asr") for f in formats_of(t)})
    names = {f.name: f for t in tasks for f in formats_of(t)}
    group = p.add_argument_group(
        "corpus format", "how --train/--valid (eval: --data) are read; see the format table "
        "of the task's guide")
    group.add_argument("--format", choices=sorted(names), metavar="NAME",
                       help="the corpus format (default: detected from the path, and logged): "
                       + "; ".join(f"{n}: {f.summary}" for n, f in sorted(names.items())))
    group.add_argument("--max-unusable", type=common.proportion,
                       metavar="SHARE", help="the share of a corpus's examples that may be "
                       "unusable (dropped, counted and named in a warning); more stops with an "
                       f"error naming the first few (default {MAX_UNUSABLE}; attnkit's own "
                       "TSV formats stop at their first bad line)")
    for dest, (option, used_by, help) in OPTIONS.items():
        if task is None or task in used_by.split(","):
            group.add_argument(option, dest=dest, help=help, **KINDS.get(dest, {"type": str}))


def format_options(args: argparse.Namespace, paths: Path | list[Path], role: str,
                   ) -> tuple[Path, dict]:
    """The path to read and the options of :func:`attnkit.data.formats.reading.read_corpus`
    (``format`` among them) for ``paths`` (one path, or the two files of a Moses corpus),
    from the parsed ``args``: those given, and ``role``.

    Raises:
        ValueError: three paths or more.
    """
    paths = paths if isinstance(paths, list) else [paths]
    options = {"role": role, **{dest: getattr(args, dest, None)
                                for dest in ("format", "max_unusable", *OPTIONS)}}
    if len(paths) > 2:
        raise ValueError(f"expected one path or two files (moses), got {len(paths)}: "
                         f"{' '.join(map(str, paths))}")
    if len(paths) == 2:
        options["format"] = options["format"] or "moses"
        options["target"] = paths[1]
    return paths[0], {k: v for k, v in options.items() if v is not None}


def read_data(task: str, paths: Path | list[Path], args: argparse.Namespace, role: str,
              **task_options):
    """The examples of ``paths`` for ``task``, read as ``args`` says
    (:func:`format_options`) with the task's own ``task_options``."""
    path, options = format_options(args, paths, role)
    return read_corpus(task, path, **options, **task_options)


def named(paths: Path | list[Path] | None) -> str:
    """How a run's config records ``--train`` / ``--valid``: the path, or the paths joined
    by a space."""
    return " ".join(map(str, paths)) if isinstance(paths, list) else str(paths)
