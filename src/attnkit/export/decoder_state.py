"""A decoder state as named tensors, and back.

An exported decoder step takes and returns plain tensors, where a model's ``step`` takes a
state made of tensors, lists of them and prepared attention memories
(:class:`attnkit.attention.Memory`). :func:`flatten` names each tensor by its path in the state
(``state.h``, ``state.h.0``, ``state.memory.key_features``); :func:`unflatten` rebuilds a state
of the same structure from such tensors.

A Memory is flattened to the tensors a step reads, ``key_features (B, H, S, F)``, ``values
(B, H, S, Dv')`` and, for a Memory prepared while exporting, ``bad (B, S)``: the keys that held
NaN or inf, zeroed by the encoder graph (so that the steps need not zero the padding). Its
``key`` and ``value`` (the encoder output as given to ``prepare``) are only checked for their
shapes at each step, so :func:`unflatten` stands in zero-stride views of the right shape for
them: the exported step does not take the encoder output as an input.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from attnkit.attention import Memory

__all__ = ["PREFIX", "flatten", "unflatten"]

PREFIX = "state"
MEMORY_FIELDS = ("key_features", "values")


def flatten(state, prefix: str = PREFIX) -> dict[str, torch.Tensor]:
    """``{path: tensor}`` of every tensor in ``state`` (dicts, lists, tuples, Memory, None).

    Example:
        >>> flat = flatten({"h": [torch.zeros(2, 3)], "t": torch.zeros(2), "w": None})
        >>> list(flat)
        ['state.h.0', 'state.t']
    """
    if isinstance(state, Memory):
        out = {f"{prefix}.{field}": getattr(state, field) for field in MEMORY_FIELDS}
        return out if state.bad is None else {**out, f"{prefix}.bad": state.bad}
    if isinstance(state, torch.Tensor):
        return {prefix: state}
    items: Iterable[tuple[Any, Any]]
    if isinstance(state, dict):
        items = state.items()
    elif isinstance(state, (list, tuple)):
        items = enumerate(state)
    elif state is None:
        return {}
    else:
        raise TypeError(
            f"state: expected tensors, Memory, dicts, lists or None, got "
            f"{type(state).__name__} at {prefix!r}"
        )
    out = {}
    for key, value in items:
        out.update(flatten(value, f"{prefix}.{key}"))
    return out


def unflatten(template, tensors: dict[str, torch.Tensor], prefix: str = PREFIX):
    """The state of ``template``'s structure with the tensors of ``tensors`` (named as by
    :func:`flatten`); a Memory keeps ``template``'s owner and feature sizes, and is checked
    when ``template`` carries its ``bad`` keys."""
    if isinstance(template, Memory):
        kf, values = (tensors[f"{prefix}.{field}"] for field in MEMORY_FIELDS)
        b, _, s, _ = kf.shape
        zero = kf.new_zeros(())
        key = zero.expand(b, s, template.key.shape[-1])  # (B, S, Dk): only its shape is read
        value = zero.expand(b, s, template.value.shape[-1])  # (B, S, Dv)
        if template.bad is None:
            return Memory(key, value, kf, values, template.owner)
        return Memory(
            key, value, kf, values, template.owner, checked=True, bad=tensors[f"{prefix}.bad"]
        )
    if isinstance(template, torch.Tensor):
        return tensors[prefix]
    if isinstance(template, dict):
        return {k: unflatten(v, tensors, f"{prefix}.{k}") for k, v in template.items()}
    if isinstance(template, (list, tuple)):
        return type(template)(
            unflatten(v, tensors, f"{prefix}.{i}") for i, v in enumerate(template)
        )
    return None
