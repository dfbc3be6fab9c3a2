"""Teacher forcing by training step: scheduled sampling (Bengio et al. 2015).

A decoder trained only on reference prefixes never sees its own mistakes; scheduled sampling
feeds back its own prediction with a probability that grows during training. Every task takes
a :class:`TeacherForcing` and asks it for the ratio at the current optimizer step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnkit.checks import quoted

__all__ = ["TeacherForcing"]

SHAPES = ("linear", "inverse_sigmoid")


@dataclass(frozen=True)
class TeacherForcing:
    """Probability of feeding the reference token at a training step.

    Goes from ``start`` to ``end`` over ``steps`` optimizer steps, then stays at ``end``;
    ``end=None`` keeps ``start`` throughout (1.0: always teacher forcing). ``shape``:
    ``"linear"``, or ``"inverse_sigmoid"`` (slow at first and last, fast in the middle, as
    Bengio et al.'s ``k / (k + exp(i / k))``).

    Example:
        >>> tf = TeacherForcing(start=1.0, end=0.5, steps=100)
        >>> tf.ratio(0), tf.ratio(50), tf.ratio(1000)
        (1.0, 0.75, 0.5)
    """

    start: float = 1.0
    end: float | None = None
    steps: int = 10_000
    shape: str = "linear"

    def __post_init__(self):
        for name in ("start", "end"):
            value = getattr(self, name)
            if value is None and name == "end":
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (0.0 <= value <= 1.0)
            ):
                raise ValueError(
                    f"teacher forcing {name}: expected a probability in [0, 1], got {quoted(value)}"
                )
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(
                f"teacher forcing steps: expected a positive int, got {quoted(self.steps)}"
            )
        if self.shape not in SHAPES:
            raise ValueError(
                f"teacher forcing shape: expected one of {', '.join(SHAPES)}, "
                f"got {quoted(self.shape)}"
            )

    def ratio(self, step: int) -> float:
        """The probability of feeding the reference token at optimizer step ``step``."""
        if self.end is None or self.end == self.start:
            return float(self.start)
        done = min(1.0, max(0, step) / self.steps)
        if self.shape == "inverse_sigmoid":
            done = 1.0 / (1.0 + math.exp(-12.0 * (done - 0.5)))
            lo, hi = 1.0 / (1.0 + math.exp(6.0)), 1.0 / (1.0 + math.exp(-6.0))
            done = (done - lo) / (hi - lo)  # exactly 0 at the start, 1 at the end
        return float(self.start + (self.end - self.start) * done)
