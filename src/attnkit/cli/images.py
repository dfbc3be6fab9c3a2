"""What the image commands (``caption``, ``vqa``) share: the image and built-in scene options,
the grid encoder's options, and the images and scenes they read."""

from __future__ import annotations

import logging

from attnkit.cli import common
from attnkit.data import Scene, generate_scenes
from attnkit.data.scenes import MAX_OBJECTS

log = logging.getLogger("attnkit")


def channel_list(text: str) -> tuple[int, ...]:
    values = tuple(int(c) for c in text.split(","))
    if not values or min(values) < 1:
        raise ValueError(text)
    return values


channel_list.__name__ = "positive ints (e.g. 32,64,128)"


def add_image_args(data, model) -> None:
    """``--image-size`` and the built-in scenes' options in the ``data`` group, the grid
    encoder's ``--channels`` in the ``model`` group."""
    data.add_argument("--image-size", type=common.positive_int, default=64,
                      help="images are resized to this square (built-in scenes are drawn at "
                      "it); a multiple of 2 ** (number of --channels)")
    data.add_argument("--min-objects", type=common.positive_int, default=3,
                      help="built-in scenes: objects at least")
    data.add_argument("--max-objects", type=common.positive_int, default=MAX_OBJECTS,
                      help="built-in scenes: objects at most")
    model.add_argument("--channels", type=channel_list, default=(32, 64, 128),
                       help="the CNN's blocks, each halving the image (64 px, 3 blocks: an "
                       "8 x 8 grid)")


def built_in_scenes(args, size: int) -> tuple[list[Scene], list[Scene]]:
    """The built-in training and validation scenes the options ask for."""
    kw = dict(seed=args.seed, size=size, min_objects=args.min_objects,
              max_objects=args.max_objects)
    log.info("drawing %d training and %d validation scenes", args.n_train, args.n_valid)
    return (generate_scenes(args.n_train, split="train", **kw),
            generate_scenes(args.n_valid, split="valid", **kw))


def scene_data(args) -> dict:
    """The task config's ``data`` entry of a run on built-in scenes."""
    return {"built_in": "scenes", "n_train": args.n_train, "n_valid": args.n_valid,
            "min_objects": args.min_objects, "max_objects": args.max_objects}
