"""What every attention entry point shares: the validated call, its memory, and its end.

The public entry points (:class:`attnkit.Attention`, :func:`attnkit.attention.attend`,
:class:`attnkit.SelfAttention`) validate their inputs in
:mod:`attnkit.attention.validation`, which returns a :class:`Call`: the query, key and value
and which keys each query may see (a :class:`~attnkit.attention.masks.KeyLayout`; **True = may
attend**; the path that needs a mask builds it, whole or per block).
:mod:`~attnkit.attention.dispatch` chooses and runs a path on per-head tensors
``(B, H, T, D)``; :func:`finish` makes the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from attnkit.attention.masks import KeyLayout, non_finite_keys, zero_padding
from attnkit.attention.step import GradSink
from attnkit.checks import describe
from attnkit.ops.precision import upcast
from attnkit.ops.tracing import exporting


class AttentionOutput(NamedTuple):
    """Result of an attention call.

    Attributes:
        context: ``(B, Tq, Dv)``, or ``(B, Dv)`` for a one-step query.
        weights: ``(B, Tq, Tk)`` (``(B, H, Tq, Tk)`` with heads; ``(B, Tk)`` / ``(B, H, Tk)`` for a
            one-step query) when requested, else ``None``. Rows sum to 1 over allowed keys and are
            0 on masked keys; a row with no allowed key is all zeros.
    """

    context: torch.Tensor
    weights: torch.Tensor | None


class Memory(NamedTuple):
    """Keys and values prepared once, by :meth:`attnkit.Attention.prepare`, for many calls.

    An RNN decoder attends over the same encoder states at every step; preparing them once
    (key projections of the score, per-head splits) saves that work at each step.

    Attributes:
        key: ``(B, Tk, Dk)`` as given; value: ``(B, Tk, Dv)`` as given (in a cache extended
            with ``keep_inputs=False``, zeros of those shapes that store one element: see
            :func:`extend_memory`).
        key_features: ``(B, H, Tk, F)`` prepared keys; values: ``(B, H, Tk, Dv')`` per head.
        owner: the module that prepared them (only it can use them).
        sink: where one-query steps (every score) sum their key/value gradients, or None
            (:mod:`attnkit.attention.step`). With a sink, the steps' gradients reach ``key``,
            ``value`` and the parameters but are not seen as gradients of ``key_features`` and
            ``values`` themselves (``torch.autograd.grad`` of them, hooks or ``retain_grad``
            on them): ask for those of ``key`` / ``value`` instead.
        checked: ``prepare`` checked ``key`` and ``value`` for NaN and inf: by reading them,
            or while exporting in the graph (not on meta tensors). Keys whose key or value
            held NaN or inf were then zeroed before any projection (padding among them:
            neither outputs nor gradients see it); an unchecked Memory's padding is zeroed at
            each call instead.
        bad: ``(B, Tk)`` bool, those zeroed keys, or None when there was none (always a tensor
            while exporting): a query that may attend to one of them gets a NaN row, as if it
            had read the NaN.
    """

    key: torch.Tensor
    value: torch.Tensor
    key_features: torch.Tensor
    values: torch.Tensor
    owner: torch.nn.Module
    sink: GradSink | None = None
    checked: bool = False
    bad: torch.Tensor | None = None

    @property
    def finite(self) -> bool:
        """``prepare`` found no NaN or inf in the keys and values."""
        return self.checked and self.bad is None


def extend_memory(
    memory: Memory | None, new: Memory, owner: torch.nn.Module, *, keep_inputs: bool = True
) -> Memory:
    """``memory`` with the keys and values of ``new`` appended along ``Tk``; both prepared by
    ``owner`` (``memory=None``: ``new`` itself). Equals preparing the concatenated keys and
    values at once.

    ``keep_inputs=False``: where no call can read the keys and values as given (both memories
    checked by ``prepare``, no gradient to them), the result keeps only the prepared keys and
    values, its ``key`` and ``value`` zeros of their shapes that store one element (what an
    exported decoder's state holds too): an incremental decoder's cache then has a third less
    to copy at each step. Otherwise they are kept.

    Raises:
        ValueError: ``memory`` prepared by another module, or of another batch size.
    """
    if memory is None:
        return new
    if memory.owner is not owner:
        raise ValueError(
            f"memory: this Memory was prepared by another {type(owner).__name__} module"
        )
    if memory.key.shape[0] != new.key.shape[0]:
        raise ValueError(
            f"key: expected batch size {memory.key.shape[0]} (the memory's), "
            f"got {describe(new.key)}"
        )
    bad = None
    if memory.bad is not None or new.bad is not None:
        bad = torch.cat(
            [
                torch.zeros(x.key.shape[:2], dtype=torch.bool, device=x.key.device)
                if x.bad is None
                else x.bad
                for x in (memory, new)
            ],
            dim=1,
        )
    # Keys that are their values (self-attention) stay one tensor: one copy, and one for
    # beam search to reorder.
    same = memory.value is memory.key and new.value is new.key
    if not keep_inputs and _inputs_unread(memory) and _inputs_unread(new):
        tk = memory.key.shape[1] + new.key.shape[1]
        key = _placeholder(new.key, tk)
        value = key if same else _placeholder(new.value, tk)
    else:
        key = torch.cat([memory.key, new.key], dim=1)
        value = key if same else torch.cat([memory.value, new.value], dim=1)
    return Memory(
        key,
        value,
        torch.cat([memory.key_features, new.key_features], dim=2),
        torch.cat([memory.values, new.values], dim=2),
        owner,
        checked=memory.checked and new.checked,
        bad=bad,
    )


def _inputs_unread(memory: Memory) -> bool:
    """No call over ``memory`` reads its keys and values as given: ``prepare`` checked them
    (so padding needs no zeroing per call) and no gradient flows to them; not while exporting
    (a graph keeps the shapes it traces)."""
    return (
        not exporting()
        and memory.checked
        and memory.sink is None
        and not (memory.key.requires_grad or memory.value.requires_grad)
    )


def _placeholder(x: torch.Tensor, tk: int) -> torch.Tensor:
    """Zeros ``(B, tk, D)`` in the batch size, feature size, dtype and device of ``x``
    ``(B, T, D)``, one element stored (every stride 0)."""
    return x.new_zeros(()).expand(x.shape[0], tk, x.shape[2])


@dataclass
class Call:
    """A validated attention call: 3-D query, key and value, and what each query may see."""

    query: torch.Tensor  # (B, Tq, Dq)
    key: torch.Tensor  # (B, Tk, Dk)
    value: torch.Tensor  # (B, Tk, Dv)
    one_step: bool
    layout: KeyLayout

    @property
    def masked(self) -> bool:
        return self.layout.key_valid is not None or self.layout.q_pos is not None

    def inputs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``key (B, Tk, Dk)`` and ``value (B, Tk, Dv)`` to compute with, and the keys holding
        NaN or inf that :func:`finish` must pass on, ``(B, Tk)`` bool or None.

        Padded keys and values are zeros, so padding reaches no score, sum or gradient,
        whatever it holds. Under a causal or window band, keys holding NaN or inf are zeros
        too, so that they reach no query outside their band (``0 * NaN`` in the weighted sum,
        on every path), and they are returned for :func:`finish` to give the queries that may
        see them a NaN row. Without a band every query may see every valid key: its NaN
        reaches each of them as computed.
        """
        valid = self.layout.key_valid
        bad = None
        if self.layout.q_pos is not None:
            bad = non_finite_keys(self.key, self.value, valid)  # one pass when all are finite
        keep = valid if bad is None else ~bad if valid is None else valid & ~bad  # (B, Tk)
        if keep is None:
            return self.key, self.value, None
        key = zero_padding(self.key, keep[..., None])  # (B, Tk, Dk)
        value = key if self.value is self.key else zero_padding(self.value, keep[..., None])
        return key, value, bad

    def previous(self, prev: torch.Tensor) -> torch.Tensor:
        """The location score's previous weights ``(B, H, Tq, Tk)`` with zeros on padded keys:
        its conv reads each key's neighbours, so weight left on padding (a caller's stale or
        uniform state) would move the scores of the valid keys beside it."""
        valid = self.layout.key_valid
        return prev if valid is None else prev.masked_fill(~valid[:, None, None, :], 0)

    def mask(self) -> torch.Tensor | None:
        """The smallest broadcastable mask ``(B or 1, 1, Tq or 1, Tk)``, True = may attend."""
        tq = self.query.shape[1]
        return self.layout.block_mask(0, tq, 0, self.layout.tk) if self.masked else None

    def empty_queries(self) -> torch.Tensor | None:
        """``(B or 1, Tq)`` bool: queries with no key to attend to, in O(B * (Tq + Tk))."""
        return self.seen() <= 0 if self.masked else None

    def seen(self, keys: torch.Tensor | None = None) -> torch.Tensor:
        """``(B or 1, Tq)``: how many keys each query may attend to, of those that ``keys``
        ``(B, Tk)`` marks (default: all), in O(B * (Tq + Tk))."""
        lay, tq = self.layout, self.query.shape[1]
        valid = lay.key_valid
        if keys is not None:
            valid = keys if valid is None else valid & keys
        if valid is None:
            valid = torch.ones(1, lay.tk, dtype=torch.bool, device=self.key.device)
        if lay.q_pos is None:  # every query sees every valid key
            return valid.sum(-1, keepdim=True).expand(-1, tq)
        counts = torch.nn.functional.pad(valid.long().cumsum(-1), (1, 0))  # (B|1, Tk + 1)
        lo = torch.zeros_like(lay.q_pos)
        hi = torch.full_like(lay.q_pos, lay.tk)
        if lay.window is not None:
            lo = lay.q_pos - lay.window[0]
            hi = lay.q_pos + lay.window[1] + 1
        if lay.causal:
            hi = torch.minimum(hi, lay.q_pos + 1)
        n = max(counts.shape[0], lay.q_pos.shape[0])
        lo = lo.clamp(0, lay.tk).expand(n, tq)
        hi = hi.clamp(0, lay.tk).expand(n, tq)
        counts = counts.expand(n, -1)
        return counts.gather(1, hi) - counts.gather(1, lo)


def finish(
    call: Call, context: torch.Tensor, weights: torch.Tensor | None, bad: torch.Tensor | None = None
) -> AttentionOutput:
    """The call's result from ``context (B, Tq, Dv)`` and ``weights (B, [H,] Tq, Tk)`` or None.

    A query holding NaN or inf gets a NaN row of context and of weights, whatever the path
    (SDPA's fused kernels would give it zeros, the others NaN or, through a saturated score, a
    finite row), and so does a query that may attend to one of the ``bad`` keys ``(B, Tk)``
    (keys that held NaN or inf, zeroed before use: :meth:`Call.inputs`, :class:`Memory`).
    A one-step query loses its ``Tq``.
    """
    # s - s: 0 for a finite query, NaN for one holding NaN or inf (summed in the dtype scores
    # are computed in: a sum of finite values overflows only far beyond what any score
    # survives). Added: masked_fill is slower on CPU.
    # (detached: the poison is a constant to autograd)
    s = upcast(call.query.detach())[0].sum(-1, keepdim=True)  # (B, Tq, 1)
    poison = (s - s).to(context.dtype)
    if bad is not None:
        sees = call.seen(bad) > 0  # (B or 1, Tq)
        poison = poison + torch.where(sees, float("nan"), 0.0)[..., None].to(context.dtype)
    context = context + poison
    if weights is not None:
        weights = weights + (poison if weights.dim() == 3 else poison[:, None])
    if call.one_step:
        context = context[:, 0]  # (B, Dv)
        weights = None if weights is None else weights.select(-2, 0)  # (B, [H,] Tk)
    return AttentionOutput(context, weights)


def initial_weights(call: Call, heads: int) -> torch.Tensor:
    """Uniform weights over each row's allowed keys, ``(B, H, Tq, Tk)``: the location score's
    "previous weights" before the first step."""
    b, tq, _ = call.query.shape
    tk = call.key.shape[1]
    mask = call.mask()
    allowed = torch.ones(1, 1, 1, tk, device=call.key.device) if mask is None else mask
    allowed = allowed.to(call.key.dtype).expand(b, 1, tq, tk)
    w = allowed / allowed.sum(-1, keepdim=True).clamp(min=1)
    return w.expand(b, heads, tq, tk)
