"""The front door's one validation step: every check of an attention call's inputs.

:func:`validate` is what :meth:`attnkit.Attention.forward` runs first: a prepared
:class:`~attnkit.attention.core.Memory` (its owner, its dtype and device), the inputs' shapes,
dtypes, lengths, masks and positions (:func:`check_call`, shared with :meth:`Attention.plan`,
:func:`attnkit.attention.attend` and the alignment modules), the parameters' dtype and the
location score's previous weights. :func:`check_impl` is the one check of ``impl``. What
comes out is checked: the paths (:mod:`attnkit.attention.dispatch`) check nothing but whether
they can serve the call.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from attnkit.attention.core import Call, Memory, initial_weights
from attnkit.attention.dispatch import IMPLS
from attnkit.attention.masks import KeyLayout, aligned_positions, lengths_to_mask
from attnkit.checks import (
    check_int_tensor,
    check_positive_int,
    check_size,
    check_tensor,
    describe,
    first_parameter,
)
from attnkit.ops.precision import autocast_enabled, upcast
from attnkit.ops.tracing import values_readable

__all__ = [
    "Checked",
    "autocast_inputs",
    "check_call",
    "check_dims",
    "check_impl",
    "check_params_dtype",
    "check_prev",
    "validate",
]


def check_impl(impl: str) -> str:
    """``impl`` is one of :data:`~attnkit.attention.dispatch.IMPLS`.

    Raises:
        ValueError: naming the values it may take.
    """
    if impl not in IMPLS:
        raise ValueError(f"impl: expected one of {', '.join(IMPLS)}, got {impl!r}")
    return impl


def check_dims(query_dim: int, key_dim: int | None, value_dim: int | None) -> tuple[int, int, int]:
    """A module's ``(query_dim, key_dim, value_dim)``, each a positive int: ``key_dim``
    ``query_dim`` when None, ``value_dim`` ``key_dim`` when None.

    Raises:
        ValueError: naming the first argument that is not a positive int.
    """
    check_positive_int("query_dim", query_dim)
    key_dim = query_dim if key_dim is None else check_positive_int("key_dim", key_dim)
    value_dim = key_dim if value_dim is None else check_positive_int("value_dim", value_dim)
    return query_dim, key_dim, value_dim


class Checked(NamedTuple):
    """A validated call of an :class:`~attnkit.attention.Attention` module.

    Attributes:
        call: the checked query, key and value (3-D) and which keys each query may see.
        memory: the prepared :class:`~attnkit.attention.core.Memory` the keys came from, or
            None.
        prev: the location score's previous weights ``(B, H, Tq, Tk)`` (the given ones, or
            uniform over the allowed keys), else None.
    """

    call: Call
    memory: Memory | None
    prev: torch.Tensor | None


def validate(
    attn,
    query,
    key,
    value=None,
    *,
    key_lengths=None,
    key_mask=None,
    prev_weights=None,
    positions=None,
) -> Checked:
    """Check every input of a call of ``attn`` (an :class:`~attnkit.attention.Attention`),
    in one place: a prepared ``key`` (:class:`Memory`), shapes, dtypes, masks, positions, the
    parameters' dtype and ``prev_weights``. Under ``torch.autocast`` the float16/bfloat16
    inputs come out in float32 (:func:`autocast_inputs`).

    Raises:
        ValueError, TypeError: naming the argument and its offending value.
    """
    memory = None
    p = first_parameter(attn)
    if isinstance(key, Memory):
        memory = key
        check_memory(memory, attn, value, p)
        key, value = memory.key, memory.value
    query, key, value = autocast_inputs(query, key, value)
    if prev_weights is not None and isinstance(query, torch.Tensor):
        prev_weights = autocast_inputs(query, prev_weights)[1]
    call = check_call(
        query,
        key,
        value,
        query_dim=attn.query_dim,
        key_dim=attn.key_dim,
        value_dim=attn.value_dim,
        key_lengths=key_lengths,
        key_mask=key_mask,
        positions=positions,
        causal=attn.causal,
        window=attn.window,
    )
    check_params_dtype(attn, query, p=p)
    return Checked(call, memory, check_prev(prev_weights, call, attn.score, attn.heads))


def check_memory(memory: Memory, owner: torch.nn.Module, value, p: torch.Tensor | None) -> None:
    """A :class:`Memory` passed as ``key``: prepared by ``owner``, with no ``value`` beside it,
    for the dtype and device of the parameter ``p`` (None: no parameters)."""
    if memory.owner is not owner:
        raise ValueError("key: this Memory was prepared by another Attention module")
    if value is not None:
        raise ValueError("value: the values are already in the prepared Memory")
    if p is not None and (memory.key_features.dtype, memory.key_features.device) != (
        p.dtype,
        p.device,
    ):
        raise ValueError(
            f"key: the Memory was prepared for {memory.key_features.dtype} on "
            f"{memory.key_features.device}, the module is now {p.dtype} on {p.device}; "
            "prepare it again"
        )


def check_params_dtype(
    module: torch.nn.Module, x: torch.Tensor, name: str = "query", p: torch.Tensor | None = None
) -> None:
    """``x`` has the dtype of ``module``'s parameters (``p``: one of them, else looked up)."""
    p = first_parameter(module) if p is None else p
    if p is not None and p.dtype != x.dtype:
        raise TypeError(
            f"{name}: dtype {x.dtype} differs from the module's parameters ({p.dtype}); "
            f"convert one of them, e.g. attn.to({x.dtype})"
        )


def check_prev(prev_weights, call: Call, score, heads: int) -> torch.Tensor | None:
    """Validate ``prev_weights`` for ``score`` and bring it to ``(B, H, Tq, Tk)``; uniform
    weights over the allowed keys when the location score gets none."""
    if not score.needs_prev:
        if prev_weights is not None:
            raise ValueError(
                f"prev_weights: only the 'location' score uses them, score is {score.name!r}"
            )
        return None
    if prev_weights is None:
        return initial_weights(call, heads)
    b, tq, _ = call.query.shape
    tk = call.key.shape[1]
    want = (b,) + ((heads,) if heads > 1 else ()) + (() if call.one_step else (tq,))
    want += (tk,)
    if not isinstance(prev_weights, torch.Tensor) or tuple(prev_weights.shape) != want:
        got = (
            describe(prev_weights)
            if isinstance(prev_weights, torch.Tensor)
            else type(prev_weights).__name__
        )
        raise ValueError(f"prev_weights: expected shape {want} (like the weights), got {got}")
    if prev_weights.dtype != call.query.dtype:
        raise TypeError(
            f"prev_weights: expected dtype {call.query.dtype}, got {describe(prev_weights)}"
        )
    if values_readable(prev_weights):
        bad = int((~torch.isfinite(prev_weights)).sum())
        if bad:
            raise ValueError(
                f"prev_weights: expected finite weights, got {bad} NaN or "
                f"infinite values ({describe(prev_weights)})"
            )
    return prev_weights.reshape(b, heads, tq, tk)


def autocast_inputs(first, *others):
    """Under ``torch.autocast`` for ``first``'s device, the float16/bfloat16 tensors among
    ``first, *others`` in float32 (autocast hands over mixed dtypes; attention computes in
    float32, :mod:`attnkit.ops.precision`); else all as given."""
    xs = (first, *others)
    if not isinstance(first, torch.Tensor) or not autocast_enabled(first.device):
        return xs
    return tuple(upcast(x)[0] if isinstance(x, torch.Tensor) else x for x in xs)


def check_call(
    query,
    key,
    value,
    *,
    query_dim: int | None,
    key_dim: int | None,
    value_dim: int | None,
    key_lengths,
    key_mask,
    positions,
    causal: bool,
    window: tuple[int, int] | None,
) -> Call:
    """Validate one call's inputs and build its mask. Dims given as ``None`` are not checked."""
    check_tensor("query", query, ndim=(2, 3))
    check_tensor("key", key, ndim=3)
    value_name = "value"
    if value is None:
        value, value_name = key, "value (defaults to key)"
    check_tensor(value_name, value, ndim=3)
    one_step = query.dim() == 2
    q = query.unsqueeze(1) if one_step else query  # (B, Tq, Dq)
    b, tq, _ = q.shape
    tk = key.shape[1]
    for name, t in (("key", key), (value_name, value)):
        check_size(name, t, 0, b, "batch size B (from query)")
        if t.dtype != query.dtype:
            raise TypeError(
                f"{name}: expected dtype {query.dtype} (the query's), got {describe(t)}"
            )
    check_size(value_name, value, 1, tk, "Tk (from key)")
    dims = (("query", query, query_dim), ("key", key, key_dim), (value_name, value, value_dim))
    for name, t, d in dims:
        if d is not None:
            check_size(name, t, t.dim() - 1, d, f"feature size {name.split()[0]}_dim")

    key_valid = None
    if key_lengths is not None:
        check_int_tensor("key_lengths", key_lengths, ndim=1)
        check_size("key_lengths", key_lengths, 0, b, "batch size B (from query)")
        key_valid = lengths_to_mask(key_lengths.to(key.device), tk, name="key_lengths")
    if key_mask is not None:
        if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool:
            got = (
                describe(key_mask)
                if isinstance(key_mask, torch.Tensor)
                else type(key_mask).__name__
            )
            raise TypeError(f"key_mask: expected a bool tensor (True = may attend), got {got}")
        if tuple(key_mask.shape) != (b, tk):
            raise ValueError(
                f"key_mask: expected shape (B, Tk) = ({b}, {tk}), got {describe(key_mask)}"
            )
        key_mask = key_mask.to(key.device)
        key_valid = key_mask if key_valid is None else key_valid & key_mask

    q_pos = None
    if positions is not None:
        if not causal and window is None:
            raise ValueError("positions: only used with causal=True or a window; got neither")
        check_int_tensor("positions", positions, ndim=1 if one_step else 2)
        want = (b,) if one_step else (b, tq)
        if tuple(positions.shape) != want:
            raise ValueError(f"positions: expected shape {want}, got {describe(positions)}")
        q_pos = positions.to(key.device, torch.long).reshape(b, tq)  # (B, Tq)
        if values_readable(positions) and positions.numel():
            lo, hi = (int(x) for x in torch.aminmax(positions))
            if lo < 0 or hi > max(tk - 1, 0):
                raise ValueError(
                    f"positions: expected key positions in [0, {max(tk - 1, 0)}] "
                    f"(Tk = {tk}), got min {lo} and max {hi}"
                )
            if window is None and lo == tk - 1:
                # Every query at the last key (a decoder step over its cache): the causal
                # band admits every key, so the call has none.
                q_pos = None
    elif causal or window is not None:
        if one_step:
            raise ValueError(
                "positions: a one-step query with causal=True or a window needs the aligned key "
                "position of each query, shape (B,), e.g. the decoder step index"
            )
        q_pos = aligned_positions(tq, tk, key.device)[None]  # (1, Tq)
    layout = KeyLayout(key_valid, q_pos, causal, window, tk)
    return Call(q, key, value, one_step, layout)
