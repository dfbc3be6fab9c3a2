"""Every model by name: build one from its config, and read the config of a built one.

A model class joins the registry by subclassing :class:`Model` with a name::

    class CRNN(Model, name="crnn"):
        def __init__(self, vocab: int, *, hidden: int = 128, ...): ...

The arguments it is built with (defaults included) are recorded, so
``model_config(CRNN(40, hidden=64))`` is ``{"name": "crnn", "vocab": 40, "hidden": 64, ...}``
and ``build_model`` of that dict builds the same model again. A checkpoint keeps this config
under ``config["model"]``: the name is the one place a saved model says what it is.

Example:
    >>> from attnkit.models import Seq2Seq
    >>> config = model_config(Seq2Seq(10, 12, kind="luong", hidden=16))
    >>> config["name"], config["kind"], config["hidden"]
    ('seq2seq', 'luong', 16)
    >>> type(build_model(config)).__name__
    'Seq2Seq'
"""

from __future__ import annotations

import functools
import inspect
import math
import types
import typing
from typing import ClassVar

import torch
from torch import nn

from attnkit.attention.reference import available_memory
from attnkit.checks import MESSAGE, clipped, got, quoted

__all__ = [
    "MODELS",
    "Model",
    "build_model",
    "check_config",
    "check_fits",
    "complete_config",
    "model_config",
    "model_shapes",
]

MODELS: dict[str, type[Model]] = {}


def _jsonable(value):
    """Tuples as lists, as a JSON round trip gives them back."""
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


class Model(nn.Module):
    """Base class of the registered models: remembers the arguments it was built with.

    Subclass it as ``class M(Model, name="m")``; the name must be new. Constructor arguments
    must be JSON values (ints, floats, strings, None, lists of them).
    """

    model_name: ClassVar[str]

    def __init_subclass__(cls, *, name: str | None = None, **kwargs):
        super().__init_subclass__(**kwargs)
        if name is None:
            return
        if name in MODELS:
            raise ValueError(
                f"name: a model named {quoted(name)} is already registered "
                f"({MODELS[name].__qualname__})"
            )
        cls.model_name = name
        MODELS[name] = cls
        init, signature = cls.__init__, inspect.signature(cls.__init__)

        @functools.wraps(init)
        def recording_init(self, *args, **kw):
            init(self, *args, **kw)
            if type(self) is cls:  # a subclass records its own arguments
                bound = signature.bind(self, *args, **kw)
                bound.apply_defaults()
                arguments = dict(bound.arguments)
                arguments.pop(next(iter(signature.parameters)))  # self
                self.__dict__["_arguments"] = _jsonable(arguments)

        # replacing the constructor with its recording wrapper is the point here
        cls.__init__ = recording_init  # type: ignore[method-assign]


def model_config(model: nn.Module) -> dict:
    """``{"name": ..., **constructor arguments}`` of a registered model (JSON values)."""
    arguments = getattr(model, "_arguments", None)
    if not isinstance(model, Model) or arguments is None:
        raise TypeError(
            f"model: expected a model of the registry ({', '.join(sorted(MODELS))}),"
            f" got {type(model).__name__}"
        )
    return {"name": model.model_name, **arguments}


def _type_name(kind) -> str:
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(k) for k in typing.get_args(kind))
    if typing.get_origin(kind) is tuple:
        return f"a list of {_type_name(typing.get_args(kind)[0])}"
    return "null" if kind is type(None) else kind.__name__


def _fits(value, kind) -> bool:
    """Whether the JSON value ``value`` is one of annotation ``kind`` (int, float, str, bool,
    None, ``X | Y``, ``tuple[X, ...]`` as a JSON list); floats must be finite."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return any(_fits(value, k) for k in typing.get_args(kind))
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        return isinstance(value, (list, tuple)) and all(_fits(v, item) for v in value)
    if kind is type(None):
        return value is None
    if kind is float:
        return (
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        )
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def check_config(config: dict) -> tuple[type[Model], dict]:
    """The model class and constructor arguments of ``config``, checked without building
    anything: a registered name, no unknown argument, every required one, and each of the
    type its constructor declares (ints, finite floats, strings, booleans, None, lists).

    Raises:
        ValueError: naming the argument, what it should be and what it is.
    """
    if not isinstance(config, dict):
        raise ValueError(f"model config: expected a dict, got {type(config).__name__}")
    name = config.get("name")
    if not isinstance(name, str) or name not in MODELS:
        raise ValueError(
            f"model config: 'name' must be one of {', '.join(sorted(MODELS))}, got {quoted(name)}"
        )
    cls = MODELS[name]
    arguments = {k: v for k, v in config.items() if k != "name"}
    parameters = inspect.signature(cls).parameters
    unknown = sorted(set(arguments) - set(parameters), key=str)
    if unknown:
        raise ValueError(
            f"model config: {name} takes no argument {clipped(', '.join(map(str, unknown)))}"
        )
    missing = [k for k, p in parameters.items() if p.default is p.empty and k not in arguments]
    if missing:
        raise ValueError(f"model config: {name} needs {', '.join(missing)}")
    hints = typing.get_type_hints(cls.__init__)
    for key, value in arguments.items():
        if key in hints and not _fits(value, hints[key]):
            raise ValueError(
                f"model config: {key}: expected {_type_name(hints[key])}, got {got(value)}"
            )
    return cls, arguments


def complete_config(config: dict) -> dict:
    """``config`` with each constructor argument it leaves out at its default: the config
    the model it describes records (:func:`model_config`), without building it.

    Raises:
        ValueError: as :func:`check_config`.
    """
    cls, arguments = check_config(config)
    defaults = {
        k: p.default
        for k, p in inspect.signature(cls).parameters.items()
        if p.default is not p.empty
    }
    return {"name": config["name"], **_jsonable({**defaults, **arguments})}


def build_model(config: dict) -> Model:
    """The model a config describes: ``{"name": <registered name>, **constructor arguments}``.

    Raises:
        ValueError: the config is not a dict, names no registered model, or holds an argument
            the model does not take or of another type (named in the message), or describes
            a model whose weights alone would not fit in the memory available.
    """
    cls, arguments = check_config(config)
    check_fits(config)
    return cls(**arguments)


def check_fits(config: dict) -> None:
    """Refuse a config whose float32 weights alone exceed the memory available now, before
    anything is allocated (the sizes come from :func:`model_shapes`, on the ``meta`` device).

    Raises:
        ValueError: naming the model, its parameter count, the memory it needs and has, and
            the config's large sizes.
    """
    n = sum(math.prod(shape) for shape in model_shapes(config).values())
    available = available_memory(torch.device("cpu"))
    if available is None or 4 * n <= available:
        return
    sizes = ", ".join(
        f"{k}={v}"
        for k, v in config.items()
        if isinstance(v, int) and not isinstance(v, bool) and v > 1024
    )
    raise ValueError(
        f"model config: {config['name']} has {n:,} parameters ({4 * n / 2**30:.1f} "
        f"GiB in float32), more than the {available / 2**30:.1f} GiB of memory "
        f"available" + (f" ({sizes})" if sizes else "")
    )


def model_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """The shape of every tensor of the state dict of the model ``config`` describes, found
    by building it on the ``meta`` device: no memory is taken, whatever sizes it asks for, so
    a checkpoint's config can be checked against its weights before the model is built.

    Raises:
        ValueError: a config :func:`build_model` refuses, or that the model's constructor
            refuses (its error, first line).
    """
    cls, arguments = check_config(config)
    try:
        with torch.device("meta"):
            model = cls(**arguments)
    except (ValueError, TypeError, RuntimeError, OverflowError, RecursionError) as exc:
        reason = clipped(str(exc), MESSAGE) or type(exc).__name__  # values in it are quoted
        raise ValueError(
            f"model config: {cls.model_name} cannot be built from it: {reason}"
        ) from None
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}
