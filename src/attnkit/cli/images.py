"""What the image commands (``caption``, ``vqa``) share: the training parser with the image,
built-in scene and grid encoder options, the scenes they train on, and their pictures."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from attnkit.cli import argtypes, common
from attnkit.cli.corpus import add_format_args, read_splits
from attnkit.data import Scene, generate_scenes
from attnkit.data.worlds.scenes import MAX_OBJECTS

log = logging.getLogger("attnkit")


def channel_list(text: str) -> tuple[int, ...]:
    values = tuple(int(c) for c in text.split(","))
    if not values or min(values) < 1:
        raise ValueError(text)
    return values


channel_list.__name__ = "positive ints (e.g. 32,64,128)"


def add_train_parser(
    train_sub: common.SubParsers, name: str, *, help: str, description: str, tsv: str
) -> tuple[argparse.ArgumentParser, argparse._ArgumentGroup]:
    """The ``attnkit train NAME`` parser of an image task whose folders hold images and a
    ``tsv`` (``--captions`` / ``--questions`` names it), with ``--image-size``, the built-in
    scenes' options and the grid encoder's ``--channels``; returns it and its "model" group."""
    p, data = common.add_task_parser(
        train_sub,
        name,
        help=help,
        description=description,
        files=f"folder with images and a {tsv}, or a corpus of another format (--format)",
        valid="the same",
        n_train=10000,
        n_valid=300,
    )
    data.add_argument(
        f"--{Path(tsv).stem}",
        dest="tsv",
        default=tsv,
        help=f"{Path(tsv).stem}: the TSV's name in each folder (default {tsv})",
    )
    data.add_argument(
        "--image-size",
        type=argtypes.positive_int,
        default=64,
        help="images are resized to this square (built-in scenes are drawn at "
        "it); a multiple of 2 ** (number of --channels)",
    )
    data.add_argument(
        "--min-objects",
        type=argtypes.positive_int,
        default=3,
        help="built-in scenes: objects at least",
    )
    data.add_argument(
        "--max-objects",
        type=argtypes.positive_int,
        default=MAX_OBJECTS,
        help="built-in scenes: objects at most",
    )
    model = p.add_argument_group("model")
    model.add_argument(
        "--channels",
        type=channel_list,
        default=(32, 64, 128),
        help="the CNN's blocks, each halving the image (64 px, 3 blocks: an 8 x 8 grid)",
    )
    add_format_args(p, name)
    return p, model


def user_data(args: argparse.Namespace, size: int, default_tsv: str) -> tuple[Any, Any | None]:
    """The user's ``--train`` and ``--valid`` corpora of task ``args.task``, in the format
    ``--format`` names or the one detected, images resized to ``size`` (validation None
    without ``--valid``); ``--captions`` / ``--questions`` given only when not
    ``default_tsv``."""
    read = {"size": size, "tsv": None if args.tsv == default_tsv else args.tsv}
    return read_splits(args.task, args, **read)


def built_in_scenes(args: argparse.Namespace, size: int) -> tuple[list[Scene], list[Scene]]:
    """The built-in training and validation scenes the options ask for."""
    kw = dict(
        seed=common.data_seed(args),
        size=size,
        min_objects=args.min_objects,
        max_objects=args.max_objects,
    )
    log.info("drawing %d training and %d validation scenes", args.n_train, args.n_valid)
    return (
        generate_scenes(args.n_train, split="train", **kw),
        generate_scenes(args.n_valid, split="valid", **kw),
    )


def data_config(args: argparse.Namespace) -> dict:
    """The task config's ``data`` entry: the user's folders, or the built-in scenes' options."""
    if args.train:
        return {"train": str(args.train), "valid": str(args.valid), "tsv": args.tsv}
    return {
        "built_in": "scenes",
        "n_train": args.n_train,
        "n_valid": args.n_valid,
        "min_objects": args.min_objects,
        "max_objects": args.max_objects,
    }


def say_written(paths: Iterable[Path | None]) -> None:
    """Say where each picture went."""
    for path in paths:
        print(f"  wrote {path}")
