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
from typing import ClassVar

from torch import nn

__all__ = ["MODELS", "Model", "build_model", "model_config"]

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
            raise ValueError(f"name: a model named {name!r} is already registered "
                             f"({MODELS[name].__qualname__})")
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

        cls.__init__ = recording_init


def model_config(model: nn.Module) -> dict:
    """``{"name": ..., **constructor arguments}`` of a registered model (JSON values)."""
    arguments = getattr(model, "_arguments", None)
    if not isinstance(model, Model) or arguments is None:
        raise TypeError(f"model: expected a model of the registry ({', '.join(sorted(MODELS))}),"
                        f" got {type(model).__name__}")
    return {"name": model.model_name, **arguments}


def build_model(config: dict) -> Model:
    """The model a config describes: ``{"name": <registered name>, **constructor arguments}``.

    Raises:
        ValueError: the config is not a dict, names no registered model, or holds an argument
            the model does not take (named in the message).
    """
    if not isinstance(config, dict):
        raise ValueError(f"model config: expected a dict, got {type(config).__name__}")
    name = config.get("name")
    if name not in MODELS:
        raise ValueError(f"model config: 'name' must be one of {', '.join(sorted(MODELS))}, "
                         f"got {name!r}")
    cls = MODELS[name]
    arguments = {k: v for k, v in config.items() if k != "name"}
    parameters = inspect.signature(cls).parameters
    unknown = sorted(set(arguments) - set(parameters))
    if unknown:
        raise ValueError(f"model config: {name} takes no argument {', '.join(unknown)}")
    return cls(**arguments)
