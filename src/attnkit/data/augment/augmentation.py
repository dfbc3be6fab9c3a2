"""Augmentation shared by every kind of data: the base class, composition, seeding, settings.

An augmentation is a small frozen dataclass: the probability ``p`` that it changes an example
and the ranges it draws from, checked when it is made (a ``ValueError`` naming the field, the
expected and the given value). Called with an example and a ``numpy.random.Generator``, it
draws ``u ~ U[0, 1)`` and, when ``u < p``, changes the example with further draws from the same
generator; otherwise it returns the example unchanged. :class:`Compose` applies several in
order, each from its own generator (seeded from the one it is given), so the draws of one do not
depend on how many values another drew.

Seeding: :func:`example_rng` is the generator of one example in one epoch, seeded by
``(seed, epoch, index)`` only. A task applies augmentation where it builds a batch (possibly in
a ``DataLoader`` worker process), never caching the result, so every epoch sees new draws, and a
run stopped and resumed builds exactly the batches an uninterrupted run builds, whatever
process builds them.

Settings: :meth:`Augmentation.config` is a JSON-able dict (``{"name": ..., "p": ...,
field: value}``, ranges as lists) and :func:`from_config` makes the objects again, so a
checkpoint's config holds the augmentation that trained it. The families of augmentations
(:mod:`attnkit.data.augment.audio_augment`, :mod:`attnkit.data.augment.line_augment`) register their
classes by name.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, ClassVar

import numpy as np

__all__ = ["AUGMENTATIONS", "Augmentation", "Compose", "check_range", "example_rng", "from_config"]

AUGMENTATIONS: dict[str, type[Augmentation]] = {}  # name -> class, filled by the families
_SALT = 0x617567  # "aug": keeps these streams apart from any other seeded by (seed, epoch, i)


def example_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The generator that augments example ``index`` in ``epoch`` of a run seeded with
    ``seed``: the same arguments give the same draws in any process.

    Example:
        >>> float(example_rng(0, 1, 2).random()) == float(example_rng(0, 1, 2).random())
        True
    """
    for name, value in (("seed", seed), ("epoch", epoch), ("index", index)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise TypeError(f"{name}: expected an int, got {value!r}")
    if epoch < 0 or index < 0:
        raise ValueError(f"epoch, index: expected non-negative ints, got {epoch}, {index}")
    return np.random.default_rng([_SALT, int(seed) % 2**64, int(epoch), int(index)])


def check_range(
    name: str, value, low: float, high: float, *, integer: bool = False, open_low: bool = False
) -> tuple:
    """``value`` as a ``(lo, hi)`` tuple when it is a pair with ``low <= lo <= hi <= high``
    (``open_low``: ``low < lo``), each finite (and an int with ``integer``).

    Raises:
        ValueError: naming ``name``, the expected and the given value.
    """
    kind = "ints" if integer else "numbers"
    sign = "<" if open_low else "<="
    expected = f"(low, high) {kind} with {low:g} {sign} low <= high <= {high:g}"
    try:
        lo, hi = value
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected {expected}, got {value!r}") from None
    for v in (lo, hi):
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float, np.integer, np.floating))
            or (integer and not float(v).is_integer())
        ):
            raise ValueError(f"{name}: expected {expected}, got {value!r}")
    if not (math.isfinite(lo) and math.isfinite(hi) and low <= lo <= hi <= high) or (
        open_low and lo == low
    ):
        raise ValueError(f"{name}: expected {expected}, got {value!r}")
    return (int(lo), int(hi)) if integer else (float(lo), float(hi))


def check_number(
    name: str, value, low: float, high: float, *, integer: bool = False, open_low: bool = False
) -> float | int:
    """``value`` when it is a finite number (an int with ``integer``) with ``low <= value <=
    high`` (``open_low``: ``low < value``).

    Raises:
        ValueError: naming ``name``, the expected and the given value.
    """
    kind = "an int" if integer else "a number"
    sign = "<" if open_low else "<="
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))
    ok = ok and math.isfinite(value) and low <= value <= high and not (open_low and value == low)
    if not ok or (integer and not float(value).is_integer()):
        raise ValueError(
            f"{name}: expected {kind} with {low:g} {sign} {name} <= {high:g}, got {value!r}"
        )
    return int(value) if integer else float(value)


def range_check(
    low: float, high: float, *, integer: bool = False, open_low: bool = False
) -> Callable[[str, Any], object]:
    """An entry of :attr:`Augmentation.checks`: the field is a ``(lo, hi)`` pair within
    ``[low, high]`` (:func:`check_range`, with its ``integer`` and ``open_low``)."""
    return partial(check_range, low=low, high=high, integer=integer, open_low=open_low)


def number_check(
    low: float, high: float, *, integer: bool = False, open_low: bool = False
) -> Callable[[str, Any], object]:
    """An entry of :attr:`Augmentation.checks`: the field is a number within ``[low, high]``
    (:func:`check_number`, with its ``integer`` and ``open_low``)."""
    return partial(check_number, low=low, high=high, integer=integer, open_low=open_low)


@dataclasses.dataclass(frozen=True)
class Augmentation(abc.ABC):
    """The base of every augmentation: ``p``, the probability that it changes an example.

    A subclass is a frozen dataclass registered by name (``class Gain(Augmentation,
    name="gain")``) that writes :meth:`apply` (the change, drawing from the generator) and
    checks its fields: those within bounds in :attr:`checks`, any others in ``__post_init__``
    (calling this one's, which checks ``p`` and then :attr:`checks`).
    """

    p: float = 1.0
    name: ClassVar[str] = ""
    family: ClassVar[str] = ""  # what it augments: "audio" or "lines"
    # field -> its check, in order (range_check, number_check): {"db": number_check(0, 40)}
    checks: ClassVar[dict[str, Callable[[str, Any], object]]] = {}

    def __init_subclass__(cls, name: str | None = None, **kwargs):
        super().__init_subclass__(**kwargs)
        if name is not None:
            if name in AUGMENTATIONS:
                raise ValueError(
                    f"name: {name!r} is already the augmentation {AUGMENTATIONS[name].__name__}"
                )
            cls.name = name
            AUGMENTATIONS[name] = cls

    def __post_init__(self):
        if (
            isinstance(self.p, bool)
            or not isinstance(self.p, (int, float))
            or not 0.0 <= self.p <= 1.0
        ):
            raise ValueError(f"p: expected a probability in [0, 1] for {self.name}, got {self.p!r}")
        for field, check in self.checks.items():
            check(field, getattr(self, field))

    def __call__(self, x, rng: np.random.Generator):
        """``x`` changed with probability ``p`` (:meth:`applies`), else ``x`` itself."""
        return self.apply(x, rng) if self.applies(rng) else x

    def applies(self, rng: np.random.Generator) -> bool:
        """Whether to change this example: one draw ``u ~ U[0, 1)``, ``u < p``."""
        return bool(rng.random() < self.p)

    @abc.abstractmethod
    def apply(self, x, rng: np.random.Generator):
        """``x`` changed, with draws from ``rng``."""

    def config(self) -> dict[str, Any]:
        """The settings as JSON values: ``{"name": ..., "p": ..., field: value}``."""
        out: dict[str, Any] = {"name": self.name}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            out[field.name] = list(value) if isinstance(value, tuple) else value
        return out


class Compose:
    """Augmentations applied in order, each from its own generator.

    The generator handed to a call gives one seed per augmentation, in order, so adding an
    augmentation at the end leaves the draws of the others as they were.

    Example:
        >>> from attnkit.data.augment.audio_augment import Gain
        >>> import torch
        >>> chain = Compose([Gain(p=1.0, db=6.0)])
        >>> out = chain(torch.ones(4), example_rng(0, 0, 0))
        >>> bool((out == out[0]).all()) and 0.5 <= float(out[0]) <= 2.0
        True
    """

    # what a family's composition takes (its augmentations' base class), named in the error
    takes: ClassVar[type] = Augmentation
    takes_name: ClassVar[str] = "an Augmentation"
    augmentations: Sequence[Augmentation]  # a list; a subclass narrows the kind

    def __init__(self, augmentations: Sequence[Augmentation]):
        augmentations = list(augmentations)
        for kind, name in ((Augmentation, "an Augmentation"), (self.takes, self.takes_name)):
            for i, a in enumerate(augmentations):
                if not isinstance(a, kind):
                    raise TypeError(f"augmentations[{i}]: expected {name}, got {type(a).__name__}")
        self.augmentations = augmentations

    def __len__(self) -> int:
        return len(self.augmentations)

    def __iter__(self):
        return iter(self.augmentations)

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and self.augmentations == other.augmentations

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.augmentations!r})"

    def generators(self, rng: np.random.Generator) -> list[np.random.Generator]:
        """One generator per augmentation, seeded from ``rng``."""
        seeds = rng.integers(0, 2**63, size=len(self.augmentations))
        return [np.random.default_rng(int(s)) for s in seeds]

    def __call__(self, x, rng: np.random.Generator):
        for augmentation, own in zip(self.augmentations, self.generators(rng)):
            x = augmentation(x, own)
        return x

    def config(self) -> list[dict[str, Any]]:
        """Each augmentation's :meth:`Augmentation.config`, in order."""
        return [a.config() for a in self.augmentations]

    @classmethod
    def from_config(cls, config: Sequence[dict]):
        """The composition of the augmentations of ``config`` (:meth:`config`), each of this
        class's family (:func:`from_config`)."""
        return cls(from_config(config, getattr(cls, "family", None)))


def from_config(config: Sequence[dict], family: str | None = None) -> list[Augmentation]:
    """The augmentations of ``config`` (:meth:`Compose.config`) among the classes registered
    so far (those of the modules imported); ``family``: the family they must be of
    (``"audio"``, ``"lines"``; None: any).

    Raises:
        ValueError: naming the entry: an unknown name, one of another family, or a setting
            its class refuses.
    """
    out = []
    for i, entry in enumerate(config):
        if not isinstance(entry, dict) or entry.get("name") not in AUGMENTATIONS:
            known = ", ".join(sorted(AUGMENTATIONS))
            raise ValueError(
                f"augment[{i}]: expected a dict whose name is one of {known}, got {entry!r}"
            )
        cls = AUGMENTATIONS[entry["name"]]
        if family is not None and cls.family != family:
            raise ValueError(f"augment[{i}]: {entry['name']} augments {cls.family}, not {family}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(entry) - fields - {"name"})
        if unknown:
            raise ValueError(
                f"augment[{i}]: {entry['name']} has no setting "
                f"{', '.join(unknown)}; expected some of {', '.join(sorted(fields))}"
            )
        values: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in entry.items() if k != "name"
        }
        out.append(cls(**values))
    return out
