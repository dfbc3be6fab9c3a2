"""Input validation shared by every public entry point.

Errors name the argument, what was expected and what was given.
"""

from __future__ import annotations

import reprlib

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

QUOTED = 200
"""The most characters of a value that an error message quotes (a string from a file may
be 100 MB long)."""


class _Short(reprlib.Repr):
    """Containers: a few items, a few levels, never the whole value."""

    def __init__(self):
        super().__init__()
        self.maxlevel, self.maxstring, self.maxother, self.maxlong = 3, 60, 60, 60
        self.maxlist = self.maxtuple = self.maxdict = self.maxset = 8

    def repr_int(self, x, level):
        if x.bit_length() > 600:  # repr refuses ints of more than 4300 digits
            return f"<an int of {x.bit_length():,} bits>"
        return super().repr_int(x, level)


_SHORT = _Short()


def describe(t: torch.Tensor) -> str:
    """Short description of a tensor for error messages."""
    return f"tensor of shape {tuple(t.shape)} and dtype {t.dtype}"


def quoted(value) -> str:
    """``repr(value)`` for an error message, at most about :data:`QUOTED` characters: a
    longer string is cut and its length given, a container shows its first items."""
    if isinstance(value, str):
        if len(value) <= QUOTED:
            return repr(value)
        return f"{repr(value[:QUOTED])}... ({len(value):,} characters)"
    return clipped(_SHORT.repr(value))


MESSAGE = 1000
"""The most characters of an error message that :func:`clipped` keeps when it cuts a whole
message (one that may quote a value from a file without :func:`quoted`)."""


def clipped(text: str, limit: int = QUOTED) -> str:
    """The first line of ``text`` (an exception's message, which may quote a file), cut to
    ``limit`` characters."""
    lines = text.strip().splitlines()
    line = lines[0] if lines else ""
    return line if len(line) <= limit else f"{line[:limit]}... ({len(line):,} characters)"


def got(value) -> str:
    """What an error message says was given: the value, quoted (:func:`quoted`), and its
    type, as in ``expected int, got '128' (str)``."""
    return f"{quoted(value)} ({type(value).__name__})"


def check_tensor(name: str, x, *, ndim: int | tuple[int, ...], floating: bool = True) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    dims = (ndim,) if isinstance(ndim, int) else ndim
    if x.dim() not in dims:
        want = " or ".join(f"{d}-D" for d in dims)
        raise ValueError(f"{name}: expected a {want} tensor, got {describe(x)}")
    if floating and x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name}: expected a floating-point tensor, got {describe(x)}")


def first_parameter(module: torch.nn.Module) -> torch.nn.Parameter | None:
    """``next(module.parameters(), None)``, found without building the names that
    ``parameters()`` walks with (a per-call cost in a decoder step): the module's own first
    parameter, else its first submodule's, depth first in registration order."""
    for p in module._parameters.values():
        if p is not None:
            return p
    for child in module._modules.values():
        if child is not None and (p := first_parameter(child)) is not None:
            return p
    return None


def check_int_tensor(name: str, x, *, ndim: int) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected an integer torch.Tensor, got {type(x).__name__}")
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise TypeError(f"{name}: expected an integer tensor, got {describe(x)}")
    if x.dim() != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D tensor, got {describe(x)}")


def check_size(name: str, x: torch.Tensor, dim: int, expected: int, what: str) -> None:
    if x.shape[dim] != expected:
        raise ValueError(
            f"{name}: expected {what} = {expected} (size of dim {dim}), got {describe(x)}"
        )


def check_values(key: torch.Tensor, value, value_dim: int) -> tuple[torch.Tensor, str]:
    """Values ``(B, Tk, Dv)`` for the checked keys ``key`` ``(B, Tk, Dk)`` (``value`` None:
    the keys), and the name errors give them."""
    value_name = "value"
    if value is None:
        value, value_name = key, "value (defaults to key)"
    check_tensor(value_name, value, ndim=3)
    check_size(value_name, value, 0, key.shape[0], "batch size B (from key)")
    check_size(value_name, value, 1, key.shape[1], "Tk (from key)")
    check_size(value_name, value, 2, value_dim, "feature size value_dim")
    if value.dtype != key.dtype:
        raise TypeError(
            f"{value_name}: expected dtype {key.dtype} (the key's), got {describe(value)}"
        )
    return value, value_name


def check_window(window) -> tuple[int, int] | None:
    if window is None:
        return None
    if (
        not isinstance(window, (tuple, list))
        or len(window) != 2
        or not all(isinstance(w, int) and not isinstance(w, bool) for w in window)
    ):
        raise TypeError(f"window: expected a pair of ints (left, right), got {quoted(window)}")
    left, right = window
    if left < 0 or right < 0:
        raise ValueError(
            f"window: expected non-negative sizes (left, right), got {tuple(window)!r}"
        )
    return (left, right)


def check_probability(name: str, value) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name}: expected a probability in [0, 1), got {quoted(value)}")
    return float(value)


def check_fraction(name: str, value) -> float:
    """``value`` as a float when it is a number in ``[0, 1]`` (a weight between two losses;
    not a bool)."""
    if not (
        isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0
    ):
        raise ValueError(f"{name}: expected a number in [0, 1], got {quoted(value)}")
    return float(value)


def check_non_negative(name: str, value) -> float:
    """``value`` as a float when it is a finite number >= 0 (a loss weight, say; not a
    bool)."""
    if not (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and 0.0 <= value < float("inf")
    ):
        raise ValueError(f"{name}: expected a non-negative number, got {quoted(value)}")
    return float(value)


def check_non_negative_int(name: str, value, unit: str = "") -> int:
    """``value`` when it is an int >= 0 (not a bool); ``unit`` names what it counts in the
    message, e.g. "epochs"."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        what = f" ({unit})" if unit else ""
        raise ValueError(f"{name}: expected a non-negative int{what}, got {quoted(value)}")
    return value


def check_positive_int(name: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {quoted(value)}")
    return value
