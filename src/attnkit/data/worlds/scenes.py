"""Built-in scenes for captioning and visual question answering, in the style of Sort-of-CLEVR
(Santoro et al. 2017) and CLEVR (Johnson et al. 2017).

A scene is a square RGB image (64-128 px; white background) of 3-8 flat objects, each a
:data:`SHAPES` x :data:`COLOURS` x :data:`SIZES` combination (no two alike in a scene), placed
at random without overlapping, rendered with Pillow. Every scene comes with

* **captions** from a small grammar, each one fact about the scene::

      caption  := np relation np | np "at the" region
      np       := "a" [size] colour shape
      relation := "left of" | "right of" | "above" | "below"
      region   := "top left" | "top" | "top right" | "left" | "centre" | "right" | ...

  ("a small red circle left of a blue square"). A relation is stated only along the axis on
  which the two centres differ most, and by at least an eighth of the image; a region is the
  cell of a 3 x 3 grid holding the object's centre. :func:`caption_is_true` checks any caption
  of the grammar against a scene (a relation holds when the centres are ordered that way).
* **questions** with their answers, one per :data:`QUESTION_TYPES` entry where the scene
  allows an unambiguous one: ``exist`` ("does the image contain a red circle ?"), ``count``
  ("how many squares are in the image ?"), ``where`` ("where is the red circle in the image
  ?"), ``colour`` / ``shape`` / ``size`` of an object, and the :data:`RELATIONAL` ones:
  ``closest`` / ``farthest`` ("what colour is the object closest to the blue square ?",
  asked only when no other object is within 2 px of the same distance), ``left_of`` and
  ``above`` ("is the red circle left of the small square ?": yes or no). Objects are named
  by the fewest attributes that single them out.

**Splits** (:data:`SPLITS`): ``train``, ``valid`` and ``test`` never show the colour-shape
pairs of :data:`HELD_OUT` (red triangles, green circles, blue squares); every ``heldout`` scene
shows at least one of them, and its captions and questions are about those objects where they
can be, so a model scored on it meets attribute combinations it never saw. Scene ``index`` of
``split`` draws everything from its own seed, derived from ``(seed, split, index)``: the same
arguments give the same scenes. ``attnkit eval --data scenes:test`` (or ``scenes:heldout``)
scores a checkpoint on the first :data:`SCORED_SCENES` scenes of that split with seed 0
(:func:`scored_scenes`).

Example:
    >>> scene = generate_scenes(1, seed=0)[0]
    >>> scene.image.shape, scene.image.dtype
    (torch.Size([3, 64, 64]), torch.uint8)
    >>> all(caption_is_true(scene.objects, c, size=64) for c in scene.captions)
    True
    >>> {q.type for q in scene.questions} <= set(QUESTION_TYPES)
    True
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from PIL import Image, ImageDraw

from attnkit.data.corpora.image_folders import CaptionedImage, ImageQuestion
from attnkit.errors import DataError

__all__ = [
    "ANSWERS",
    "COLOURS",
    "HELD_OUT",
    "QUESTION_TYPES",
    "REGIONS",
    "RELATIONAL",
    "SCORED",
    "SCORED_SCENES",
    "SCORED_SPLITS",
    "SHAPES",
    "SIZES",
    "SPLITS",
    "Fact",
    "NounPhrase",
    "Scene",
    "SceneObject",
    "SceneQuestion",
    "caption_is_true",
    "captioned_images",
    "generate_scenes",
    "matching_objects",
    "object_masks",
    "parse_caption",
    "question_set",
    "region_of",
    "render",
    "scored_scenes",
]

COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 160, 60),
    "blue": (40, 80, 220),
    "yellow": (230, 195, 20),
    "purple": (140, 60, 190),
    "grey": (120, 120, 120),
}
SHAPES = ("circle", "square", "triangle")
SIZES = ("small", "large")
HELD_OUT = (("red", "triangle"), ("green", "circle"), ("blue", "square"))
SPLITS = ("train", "valid", "test", "heldout")
SCORED, SCORED_SPLITS, SCORED_SCENES = "scenes:", ("test", "heldout"), 1000  # scenes:test
REGIONS = (
    ("top left", "top", "top right"),
    ("left", "centre", "right"),
    ("bottom left", "bottom", "bottom right"),
)
RELATIONS = ("left of", "right of", "above", "below")
QUESTION_TYPES = (
    "exist",
    "count",
    "where",
    "colour",
    "shape",
    "size",
    "closest",
    "farthest",
    "left_of",
    "above",
)
RELATIONAL = ("closest", "farthest", "left_of", "above")
MAX_OBJECTS = 8
ANSWERS = (
    "yes",
    "no",
    *(str(i) for i in range(MAX_OBJECTS + 1)),
    *itertools.chain(*REGIONS),
    *COLOURS,
    *SHAPES,
    *SIZES,
)

RADIUS = {"small": 0.07, "large": 0.11}  # of the image side
EXTENT = 1.2  # every shape lies within EXTENT * radius of its centre
GAP = 1.0  # px between objects, at least
CLEAR = 1 / 8  # a stated relation: the centres differ by this share of the image, at least
TIE = 2.0  # px: closest/farthest asked only when the runner-up is this much farther/closer


class SceneObject(NamedTuple):
    """One object: its attributes and its centre ``(x, y)`` in pixels (y down) and radius."""

    shape: str
    colour: str
    size: str
    x: float
    y: float
    radius: float


class SceneQuestion(NamedTuple):
    """A question about a scene, its answer (one of :data:`ANSWERS`) and its type."""

    question: str
    answer: str
    type: str


@dataclass(frozen=True)
class Scene:
    """A generated scene: its objects, image ``(3, S, S)`` uint8, captions and questions."""

    objects: tuple[SceneObject, ...]
    image: torch.Tensor
    captions: tuple[str, ...]
    questions: tuple[SceneQuestion, ...]

    @property
    def size(self) -> int:
        """``S``, the image side in pixels."""
        return int(self.image.shape[-1])


def region_of(obj: SceneObject, size: int) -> str:
    """The cell of a 3 x 3 grid over the image that holds the object's centre."""
    col, row = (min(2, int(v * 3 / size)) for v in (obj.x, obj.y))
    return REGIONS[row][col]


def _draw(draw: ImageDraw.ImageDraw, obj: SceneObject, fill) -> None:
    x, y, r = obj.x, obj.y, obj.radius
    if obj.shape == "circle":
        draw.ellipse((x - r, y - r, x + r, y + r), fill=fill)
    elif obj.shape == "square":
        a = 0.85 * r  # half side: the corners lie 1.2 r from the centre
        draw.rectangle((x - a, y - a, x + a, y + a), fill=fill)
    else:
        c = 1.15 * r  # an equilateral triangle, point up, its corners c from the centre
        draw.polygon(
            [(x, y - c), (x - c * 0.866, y + c / 2), (x + c * 0.866, y + c / 2)], fill=fill
        )


def render(objects: Sequence[SceneObject], size: int) -> torch.Tensor:
    """The scene's image: ``(3, size, size)`` uint8, objects on white."""
    image = Image.new("RGB", (size, size), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    for obj in objects:
        _draw(draw, obj, COLOURS[obj.colour])
    return torch.from_numpy(np.array(image, dtype=np.uint8)).permute(2, 0, 1).contiguous()


def object_masks(scene: Scene) -> np.ndarray:
    """``(N, S, S)`` bool: the pixels of each of the scene's ``N`` objects."""
    masks = []
    for obj in scene.objects:
        image = Image.new("L", (scene.size, scene.size), 0)
        _draw(ImageDraw.Draw(image), obj, 255)
        masks.append(np.array(image) > 0)
    return np.stack(masks)


# ------------------------------------------------------------------------------ the grammar


class NounPhrase(NamedTuple):
    """``a [size] colour shape`` at words ``[start, end)`` of its caption."""

    size: str | None
    colour: str
    shape: str
    start: int
    end: int


class Fact(NamedTuple):
    """A parsed caption: ``subject relation other``, or ``subject at the region``."""

    subject: NounPhrase
    relation: str | None
    other: NounPhrase | None
    region: str | None


def _noun_phrase(words: list[str], i: int) -> NounPhrase | None:
    if i >= len(words) or words[i] != "a":
        return None
    j = i + 1
    size = words[j] if j < len(words) and words[j] in SIZES else None
    j += size is not None
    if j + 1 < len(words) and words[j] in COLOURS and words[j + 1] in SHAPES:
        return NounPhrase(size, words[j], words[j + 1], i, j + 2)
    return None


def parse_caption(text: str) -> Fact | None:
    """The fact a caption of the grammar states, or None when it is not of the grammar.

    Example:
        >>> parse_caption("a red circle above a small blue square").relation
        'above'
        >>> parse_caption("a red circle near a tree") is None
        True
    """
    words = text.split()
    subject = _noun_phrase(words, 0)
    if subject is None:
        return None
    rest = words[subject.end :]
    if rest[:2] == ["at", "the"] and " ".join(rest[2:]) in itertools.chain(*REGIONS):
        return Fact(subject, None, None, " ".join(rest[2:]))
    for relation in RELATIONS:
        n = len(relation.split())
        if " ".join(rest[:n]) == relation:
            other = _noun_phrase(words, subject.end + n)
            if other is not None and other.end == len(words):
                return Fact(subject, relation, other, None)
    return None


def matching_objects(objects: Sequence[SceneObject], phrase: NounPhrase) -> list[int]:
    """Indices of the objects a noun phrase may name."""
    return [
        i
        for i, o in enumerate(objects)
        if o.colour == phrase.colour and o.shape == phrase.shape and phrase.size in (None, o.size)
    ]


def _holds(relation: str, a: SceneObject, b: SceneObject) -> bool:
    return {"left of": a.x < b.x, "right of": a.x > b.x, "above": a.y < b.y, "below": a.y > b.y}[
        relation
    ]


def caption_is_true(objects: Sequence[SceneObject], text: str, *, size: int) -> bool:
    """Whether every fact ``text`` states is true of a scene of ``objects`` (``size``: the
    image side, for regions): the objects it names exist, and for a relation some pair of
    them is placed that way (for a region, one of them is there); a caption outside the
    grammar is not true.

    Example:
        >>> a = SceneObject("circle", "red", "small", 10.0, 30.0, 4.0)
        >>> b = SceneObject("square", "blue", "large", 50.0, 30.0, 7.0)
        >>> caption_is_true([a, b], "a red circle left of a large blue square", size=64)
        True
        >>> caption_is_true([a, b], "a red circle right of a blue square", size=64)
        False
        >>> caption_is_true([a, b], "a red circle at the left", size=64)
        True
    """
    fact = parse_caption(text)
    if fact is None:
        return False
    subjects = matching_objects(objects, fact.subject)
    if fact.region is not None:
        return any(region_of(objects[i], size) == fact.region for i in subjects)
    # without a region, parse_caption gives both the relation and the other object
    assert fact.relation is not None and fact.other is not None
    others = matching_objects(objects, fact.other)
    return any(
        i != j and _holds(fact.relation, objects[i], objects[j]) for i in subjects for j in others
    )


# ------------------------------------------------------------------------------ generation


def _phrase(obj: SceneObject, attrs: Sequence[str], article: str = "the") -> str:
    words = [article] + [getattr(obj, a) for a in ("size", "colour") if a in attrs]
    return " ".join(words + [obj.shape if "shape" in attrs else "object"])


REFERENCES = (
    ("colour", "shape"),
    ("shape",),
    ("colour",),
    ("size", "colour", "shape"),
    ("size", "shape"),
    ("size", "colour"),
)


def _reference(
    objects: Sequence[SceneObject], obj: SceneObject, without: str | None = None
) -> str | None:
    """``the ...`` naming ``obj`` alone among ``objects`` with the fewest attributes, none of
    them ``without``; None when no such phrase exists."""
    for attrs in REFERENCES:
        if without in attrs:
            continue
        if sum(all(getattr(o, a) == getattr(obj, a) for a in attrs) for o in objects) == 1:
            return _phrase(obj, attrs)
    return None


def _caption_np(obj: SceneObject, rng: np.random.Generator) -> str:
    with_size = rng.random() < 0.5
    return _phrase(obj, ("size", "colour", "shape") if with_size else ("colour", "shape"), "a")


def _relation(a: SceneObject, b: SceneObject, size: int) -> str | None:
    """The relation of ``a`` to ``b`` along the axis where they differ most, if clear."""
    dx, dy = b.x - a.x, b.y - a.y
    if max(abs(dx), abs(dy)) < CLEAR * size:
        return None
    if abs(dx) >= abs(dy):
        return "left of" if dx > 0 else "right of"
    return "above" if dy > 0 else "below"


def _captions(
    objects: Sequence[SceneObject],
    focus: Sequence[int],
    size: int,
    n: int,
    rng: np.random.Generator,
) -> tuple[str, ...]:
    """``n`` different captions (fewer if the scene has fewer facts), about ``focus``
    objects: their relations to the others (seven in ten) or where they are."""
    pairs = [
        (i, j, rel)
        for i in focus
        for j in range(len(objects))
        if i != j and (rel := _relation(objects[i], objects[j], size)) is not None
    ]
    captions: list[str] = []
    for _ in range(20 * n):
        if len(captions) == n:
            break
        if pairs and rng.random() < 0.7:
            i, j, rel = pairs[rng.integers(len(pairs))]
            text = f"{_caption_np(objects[i], rng)} {rel} {_caption_np(objects[j], rng)}"
        else:
            obj = objects[focus[int(rng.integers(len(focus)))]]
            text = f"{_caption_np(obj, rng)} at the {region_of(obj, size)}"
        if text not in captions:
            captions.append(text)
    return tuple(captions)


def _questions(
    objects: Sequence[SceneObject],
    focus: Sequence[int],
    size: int,
    absent: Sequence[tuple[str, str]],
    rng: np.random.Generator,
) -> tuple[SceneQuestion, ...]:
    """One question of each type the scene allows, about ``focus`` objects where it can;
    ``absent``: the colour-shape pairs an ``exist`` question may ask about when it asks about
    an object that is not there."""
    out: list[SceneQuestion] = []

    def pick() -> SceneObject:
        return objects[focus[int(rng.integers(len(focus)))]]

    present = {(o.colour, o.shape) for o in objects}
    missing = [p for p in absent if p not in present]
    if rng.random() < 0.5 or not missing:
        obj = pick()
        colour, shape, answer = obj.colour, obj.shape, "yes"
    else:
        (colour, shape), answer = missing[rng.integers(len(missing))], "no"
    out.append(SceneQuestion(f"does the image contain a {colour} {shape} ?", answer, "exist"))
    if rng.random() < 0.5:
        shape = SHAPES[rng.integers(len(SHAPES))]
        out.append(
            SceneQuestion(
                f"how many {shape}s are in the image ?",
                str(sum(o.shape == shape for o in objects)),
                "count",
            )
        )
    else:
        colour = list(COLOURS)[rng.integers(len(COLOURS))]
        out.append(
            SceneQuestion(
                f"how many {colour} objects are in the image ?",
                str(sum(o.colour == colour for o in objects)),
                "count",
            )
        )
    obj = pick()
    out.append(
        SceneQuestion(
            f"where is {_reference(objects, obj)} in the image ?", region_of(obj, size), "where"
        )
    )
    for attr in ("colour", "shape", "size"):
        obj = pick()
        ref = _reference(objects, obj, without=attr)
        if ref is not None:
            out.append(SceneQuestion(f"what {attr} is {ref} ?", getattr(obj, attr), attr))
    for kind, word in (("closest", "closest to"), ("farthest", "farthest from")):
        obj = pick()
        others = sorted(
            (np.hypot(o.x - obj.x, o.y - obj.y), k) for k, o in enumerate(objects) if o is not obj
        )
        if kind == "farthest":
            others = [(-d, k) for d, k in reversed(others)]
        if len(others) > 1 and others[1][0] - others[0][0] >= TIE:
            attr = ("colour", "shape")[rng.integers(2)]
            out.append(
                SceneQuestion(
                    f"what {attr} is the object {word} {_reference(objects, obj)} ?",
                    getattr(objects[others[0][1]], attr),
                    kind,
                )
            )
    for kind, axis, word in (("left_of", "x", "left of"), ("above", "y", "above")):
        obj = pick()
        apart = [o for o in objects if abs(getattr(o, axis) - getattr(obj, axis)) >= TIE]
        if apart:
            other = apart[rng.integers(len(apart))]
            a, b = (obj, other) if rng.random() < 0.5 else (other, obj)
            answer = "yes" if getattr(a, axis) < getattr(b, axis) else "no"
            out.append(
                SceneQuestion(
                    f"is {_reference(objects, a)} {word} {_reference(objects, b)} ?", answer, kind
                )
            )
    return tuple(out)


def _place(
    kinds: Sequence[tuple[str, str, str]], size: int, rng: np.random.Generator
) -> list[SceneObject] | None:
    """Objects of ``kinds`` (shape, colour, size) at random non-overlapping places, or None
    when one finds no place in 200 tries."""
    placed: list[SceneObject] = []
    for shape, colour, kind in kinds:
        r = RADIUS[kind] * size
        lo, hi = EXTENT * r + 1, size - EXTENT * r - 1
        for _ in range(200):
            x, y = (float(v) for v in rng.uniform(lo, hi, size=2))
            if all(np.hypot(x - o.x, y - o.y) >= EXTENT * (r + o.radius) + GAP for o in placed):
                placed.append(SceneObject(shape, colour, kind, x, y, r))
                break
        else:
            return None
    return placed


def _kinds(rng: np.random.Generator, n: int, heldout: bool) -> list[tuple[str, str, str]]:
    """``n`` different (shape, colour, size) kinds: none of :data:`HELD_OUT`'s pairs, or with
    ``heldout`` the first one of them and the others anything."""
    kinds: list[tuple[str, str, str]] = []
    while len(kinds) < n:
        if heldout and not kinds:
            colour, shape = HELD_OUT[rng.integers(len(HELD_OUT))]
        else:
            colour = list(COLOURS)[rng.integers(len(COLOURS))]
            shape = SHAPES[rng.integers(len(SHAPES))]
            if not heldout and (colour, shape) in HELD_OUT:
                continue
        kind = (shape, colour, SIZES[rng.integers(len(SIZES))])
        if kind not in kinds:
            kinds.append(kind)
    return kinds


def generate_scenes(
    n: int,
    *,
    split: str = "train",
    seed: int = 0,
    size: int = 64,
    min_objects: int = 3,
    max_objects: int = MAX_OBJECTS,
    captions: int = 5,
) -> list[Scene]:
    """``n`` scenes of ``split`` (see the module docstring), the same for the same arguments.

    Args:
        size: ``S``, the image side in pixels (32 to 256).
        min_objects, max_objects: objects per scene, drawn uniformly (3 to 8 at most).
        captions: captions per scene (fewer where a scene has fewer facts).

    Shape:
        each scene's image is a uint8 tensor ``(3, S, S)``.
    """
    if split not in SPLITS:
        raise ValueError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n: expected a non-negative int, got {n!r}")
    if not isinstance(size, int) or not 32 <= size <= 256:
        raise ValueError(f"size: expected an int in [32, 256] (pixels), got {size!r}")
    if not (
        isinstance(min_objects, int)
        and isinstance(max_objects, int)
        and 2 <= min_objects <= max_objects <= MAX_OBJECTS
    ):
        raise ValueError(
            f"min_objects, max_objects: expected 2 <= min_objects <= max_objects "
            f"<= {MAX_OBJECTS}, got {min_objects} and {max_objects}"
        )
    if not isinstance(captions, int) or captions < 1:
        raise ValueError(f"captions: expected a positive int, got {captions!r}")
    heldout = split == "heldout"
    pairs = [(c, s) for c in COLOURS for s in SHAPES]
    absent = list(HELD_OUT) if heldout else [p for p in pairs if p not in HELD_OUT]
    scenes = []
    for index in range(n):
        rng = np.random.default_rng([seed, SPLITS.index(split), index])
        objects = None
        while objects is None:
            count = int(rng.integers(min_objects, max_objects + 1))
            objects = _place(_kinds(rng, count, heldout), size, rng)
        focus = [i for i, o in enumerate(objects) if (o.colour, o.shape) in HELD_OUT]
        focus = focus if heldout else list(range(len(objects)))
        scenes.append(
            Scene(
                tuple(objects),
                render(objects, size),
                _captions(objects, focus, size, captions, rng),
                _questions(objects, focus, size, absent, rng),
            )
        )
    return scenes


def captioned_images(scenes: Sequence[Scene], split: str = "scene") -> list[CaptionedImage]:
    """The scenes as the user's captioned images are read (origin ``split[index]``)."""
    return [CaptionedImage(s.image, s.captions, f"{split}[{i}]") for i, s in enumerate(scenes)]


def question_set(
    scenes: Sequence[Scene],
    split: str = "scene",
) -> tuple[list[torch.Tensor], list[ImageQuestion]]:
    """The scenes' images and every question about them, as the user's questions are read
    (origin ``split[scene].question``)."""
    questions = [
        ImageQuestion(i, q.question, q.answer, q.type, f"{split}[{i}].{k}")
        for i, s in enumerate(scenes)
        for k, q in enumerate(s.questions)
    ]
    return [s.image for s in scenes], questions


def scored_scenes(
    data,
    *,
    size: int,
    trained_on: Mapping | None = None,
) -> tuple[str, list[Scene]] | None:
    """The built-in data ``data`` names, as ``attnkit eval --data`` reads it: for
    ``scenes:test`` or ``scenes:heldout``, the split and its first :data:`SCORED_SCENES`
    scenes (seed 0) of ``size`` pixels, with as many objects as ``trained_on`` (a
    checkpoint's data settings) says its model saw (``min_objects``, ``max_objects``; by
    default 3 to 8); None for any other ``data`` (a path).

    Raises:
        DataError: ``scenes:`` followed by another split.
    """
    text = str(data)
    if not text.startswith(SCORED):
        return None
    split = text[len(SCORED) :]
    if split not in SCORED_SPLITS:
        raise DataError(
            f"{text}: expected built-in scenes {' or '.join(SCORED + s for s in SCORED_SPLITS)}"
        )
    counts = {k: v for k, v in (trained_on or {}).items() if k in ("min_objects", "max_objects")}
    return split, generate_scenes(SCORED_SCENES, split=split, size=size, **counts)
