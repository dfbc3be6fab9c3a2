"""The command line's argument types: each parses one option's string into a value within its
bounds, or raises ``argparse.ArgumentTypeError`` with the bounds in its message (argparse
names the option); the function's ``__name__`` is what argparse's error calls the type."""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = [
    "choice_list",
    "float_in",
    "int_at_least",
    "int_range",
    "learning_rate",
    "non_negative_float",
    "non_negative_int",
    "positive_float",
    "positive_int",
    "probability",
    "proportion",
]


def int_at_least(minimum: int, name: str, *, at_most: int | None = None) -> Callable[[str], int]:
    """An argparse type: an int >= ``minimum`` (and <= ``at_most``, when given); argparse
    names it ``name`` in its error."""

    def parse(text: str) -> int:
        value = int(text)
        if value < minimum or (at_most is not None and value > at_most):
            raise ValueError(text)
        return value

    parse.__name__ = name
    return parse


positive_int = int_at_least(1, "positive int")
non_negative_int = int_at_least(0, "non-negative int")


def float_in(
    low: float, high: float, name: str, *, low_included: bool = True, high_included: bool = True
) -> Callable[[str], float]:
    """An argparse type: a finite float between ``low`` and ``high`` (each included unless
    told; ``high`` may be infinite); argparse names it ``name`` in its error."""

    def parse(text: str) -> float:
        value = float(text)
        if (
            not (math.isfinite(value) and low <= value <= high)
            or (value == low and not low_included)
            or (value == high and not high_included)
        ):
            raise ValueError(text)
        return value

    parse.__name__ = name
    return parse


probability = float_in(0.0, 1.0, "probability in [0, 1]")
proportion = float_in(0.0, 1.0, "number in [0, 1)", high_included=False)  # dropout, smoothing
positive_float = float_in(0.0, math.inf, "positive number", low_included=False)
non_negative_float = float_in(0.0, math.inf, "non-negative number")
# Past 10 every optimiser attnkit uses diverges at the first step.
learning_rate = float_in(0.0, 10.0, "learning rate in (0, 10]", low_included=False)


def choice_list(choices: tuple[str, ...], what: str) -> Callable[[str], tuple[str, ...]]:
    """An argparse type: comma-separated names, each one of ``choices``."""

    def parse(text: str) -> tuple[str, ...]:
        values = tuple(v.strip() for v in text.split(",") if v.strip())
        if not values or any(v not in choices for v in values):
            raise ValueError(text)
        return values

    parse.__name__ = f"{what} ({','.join(choices)})"
    return parse


def int_range(low: int, high: int, what: str) -> Callable[[str], tuple[int, int]]:
    """An argparse type: ``LOW,HIGH``, two ints with ``low <= LOW <= HIGH <= high``."""

    def parse(text: str) -> tuple[int, int]:
        values = tuple(int(v) for v in text.split(","))
        if len(values) != 2 or not low <= values[0] <= values[1] <= high:
            raise ValueError(text)
        return values

    parse.__name__ = f"{what} (LOW,HIGH, ints with {low} <= LOW <= HIGH <= {high})"
    return parse
