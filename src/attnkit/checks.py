"""Input validation shared by every public entry point.

Errors name the argument, what was expected and what was given.
"""

from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def describe(t: torch.Tensor) -> str:
    """Short description of a tensor for error messages."""
    return f"tensor of shape {tuple(t.shape)} and dtype {t.dtype}"


def check_tensor(name: str, x, *, ndim: int | tuple[int, ...], floating: bool = True) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    dims = (ndim,) if isinstance(ndim, int) else ndim
    if x.dim() not in dims:
        want = " or ".join(f"{d}-D" for d in dims)
        raise ValueError(f"{name}: expected a {want} tensor, got {describe(x)}")
    if floating and x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name}: expected a floating-point tensor, got {describe(x)}")


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
        raise TypeError(f"{value_name}: expected dtype {key.dtype} (the key's), "
                        f"got {describe(value)}")
    return value, value_name


def check_window(window) -> tuple[int, int] | None:
    if window is None:
        return None
    if (
        not isinstance(window, (tuple, list))
        or len(window) != 2
        or not all(isinstance(w, int) and not isinstance(w, bool) for w in window)
    ):
        raise TypeError(f"window: expected a pair of ints (left, right), got {window!r}")
    left, right = window
    if left < 0 or right < 0:
        raise ValueError(f"window: expected non-negative sizes (left, right), got {tuple(window)!r}")
    return (left, right)


def check_probability(name: str, value) -> float:
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not 0.0 <= value < 1.0
    ):
        raise ValueError(f"{name}: expected a probability in [0, 1), got {value!r}")
    return float(value)


def check_non_negative(name: str, value) -> float:
    """``value`` as a float when it is a finite number >= 0 (a loss weight, say; not a
    bool)."""
    if not (isinstance(value, (int, float)) and not isinstance(value, bool)
            and 0.0 <= value < float("inf")):
        raise ValueError(f"{name}: expected a non-negative number, got {value!r}")
    return float(value)


def check_non_negative_int(name: str, value, unit: str = "") -> int:
    """``value`` when it is an int >= 0 (not a bool); ``unit`` names what it counts in the
    message, e.g. "epochs"."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        what = f" ({unit})" if unit else ""
        raise ValueError(f"{name}: expected a non-negative int{what}, got {value!r}")
    return value


def check_positive_int(name: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return value
