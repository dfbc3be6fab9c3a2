"""Alignment attention: weights from an alignment model that carries state from step to step.

:class:`attnkit.Attention` turns scores into weights with one softmax per query. The modules
built on :class:`Alignment` turn them into weights with a model of *where* each output step
reads, and carry that model's state from one output step to the next:

==============  ================================================  ========================
alignment       weights of output step i                          state carried
==============  ================================================  ========================
monotonic       stop at key j with p_ij = sigmoid(e_ij), moving   alpha_i (B, Tk)
                left to right only (Raffel et al. 2017)
mocha           softmax over the w keys ending at the monotonic   alpha_i (B, Tk)
                stop (Chiu & Raffel 2018)
local_p         softmax of a score within a window around a       none
                predicted centre, times a Gaussian (Luong 2015)
gmm             a mixture of Gaussians over key positions whose   kappa_i (B, K)
                means only move forward (Graves 2013)
==============  ================================================  ========================

Every alignment module is called like :class:`attnkit.Attention`::

    memory = attn.prepare(key, value)                       # once per input
    state = attn.initial_state(memory)                      # before the first output step
    out = attn(query, memory, key_lengths=..., prev_state=state)
    context, weights, state = out                           # state goes to the next step

with the same masks (**True = may attend**; ``key_lengths`` and ``key_mask`` ANDed), the same
rule that padding never contributes and a query with no allowed key gets zero context and zero
weights (never NaN), and a ``(B, Tq, Dq)`` query computing exactly what ``Tq`` one-step calls
threading the state would. ``impl="loop"`` runs a plain loop-by-loop transcription of the
paper's equations (slow; the reference the ``"fast"`` vectorised path is tested against).

Shapes: ``B`` batch, ``Tq`` queries (output steps), ``Tk`` keys, ``Dq``/``Dk``/``Dv`` features,
``A`` energy hidden size.
"""

from __future__ import annotations

import abc
from typing import Any, NamedTuple, TypeVar, overload

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.attention.core import Memory, extend_memory
from attnkit.attention.masks import non_finite_keys, zero_padding
from attnkit.attention.validation import check_call, check_dims
from attnkit.checks import check_size, check_tensor, check_values, describe
from attnkit.ops.precision import autocast_enabled, no_autocast, upcast
from attnkit.ops.tracing import values_readable

__all__ = [
    "ALIGNMENTS",
    "ALIGN_IMPLS",
    "WEIGHT_SUMS",
    "AlignedOutput",
    "Alignment",
    "make_alignment",
]

ALIGN_IMPLS = ("fast", "loop")
#: What each row of an alignment's weights sums to over the keys (``Alignment.weight_sums``):
#: ``"one"``; ``"at_most_one"`` (more than 0 and at most 1 where a key may be attended);
#: ``"non_increasing"`` (at most 1, and at most the previous output step's sum: the rest is
#: the chance of having read past the last key); ``"unnormalised"`` (any sum, weights >= 0).
WEIGHT_SUMS = ("one", "at_most_one", "non_increasing", "unnormalised")
ALIGNMENTS: dict[str, type[Alignment]] = {}


class AlignedOutput(NamedTuple):
    """Result of an alignment call.

    Attributes:
        context: ``(B, Tq, Dv)``, or ``(B, Dv)`` for a one-step query.
        weights: ``(B, Tq, Tk)`` (``(B, Tk)`` for a one-step query): the weights of the
            context, zero on keys that may not be attended; for a plot.
        state: the alignment state after the last query, for the next call's ``prev_state``
            (``None`` for an alignment without state).
    """

    context: torch.Tensor
    weights: torch.Tensor
    state: torch.Tensor | None


class Alignment(nn.Module, abc.ABC):
    """Base class of the alignment modules (see the module docstring).

    Subclasses register with ``class M(Alignment, name="...")``, implement
    :meth:`prepare_key`, :meth:`initial_state`, :meth:`state_size` and :meth:`align` (both
    implementations, chosen by ``self.impl``) and declare :attr:`weight_sums`.

    Args:
        query_dim: ``Dq``; key_dim: ``Dk`` (default ``Dq``); value_dim: ``Dv`` (default
            ``Dk``).
        impl: ``"fast"`` (vectorised) or ``"loop"`` (the papers' equations loop by loop).
    """

    name = ""
    #: What each row of the weights sums to, one of :data:`WEIGHT_SUMS` (the doctor checks it).
    weight_sums = "one"

    @property
    def streaming(self) -> bool:
        """True when an output step reads no key after the one it stops at, so that keys may
        still be arriving while it decodes (:meth:`extend`); see :class:`MonotonicAttention`."""
        return False

    def __init_subclass__(cls, *, name: str | None = None, **kwargs):
        super().__init_subclass__(**kwargs)
        if name is not None:
            cls.name = name
            ALIGNMENTS[name] = cls

    def __init__(
        self,
        query_dim: int,
        key_dim: int | None = None,
        value_dim: int | None = None,
        *,
        impl: str = "fast",
    ):
        super().__init__()
        self.query_dim, self.key_dim, self.value_dim = check_dims(query_dim, key_dim, value_dim)
        if impl not in ALIGN_IMPLS:
            raise ValueError(f"impl: expected one of {', '.join(ALIGN_IMPLS)}, got {impl!r}")
        self.impl = impl

    def extra_repr(self) -> str:
        return (
            f"query_dim={self.query_dim}, key_dim={self.key_dim}, "
            f"value_dim={self.value_dim}, impl={self.impl!r}"
        )

    # ------------------------------------------------------------------ what subclasses write

    def prepare_key(self, key: torch.Tensor) -> torch.Tensor:
        """Per-key work done once: ``(B, Tk, Dk) -> (B, Tk, F)``."""
        return key[..., :0]

    def state_size(self, tk: int) -> int | None:
        """The last dim of the state (``None``: no state), for a memory of ``tk`` keys."""
        return None

    def initial_state(self, key: torch.Tensor | Memory) -> torch.Tensor | None:
        """The state before the first output step over ``key`` ``(B, Tk, Dk)`` or a
        :class:`Memory`: ``(B, state_size)``, or ``None``."""
        return None

    def align(
        self, query: torch.Tensor, kf: torch.Tensor, valid: torch.Tensor, state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Weights ``(B, Tq, Tk)`` of the queries ``(B, Tq, Dq)`` over the prepared keys
        ``(B, Tk, F)`` that ``valid`` ``(B, Tk)`` allows (``Tk >= 1``), and the state after
        the last query: :meth:`align_loop` with ``impl="loop"``, else :meth:`align_fast`."""
        if self.impl == "loop":
            return self.align_loop(query, kf, valid, state)
        return self.align_fast(query, kf, valid, state)

    @abc.abstractmethod
    def align_fast(self, query, kf, valid, state):
        """The vectorised path of :meth:`align`."""

    @abc.abstractmethod
    def align_loop(self, query, kf, valid, state):
        """The loop-by-loop reference of :meth:`align`."""

    # ------------------------------------------------------------------ the shared call

    def prepare(self, key: torch.Tensor, value: torch.Tensor | None = None) -> Memory:
        """Prepare keys ``(B, Tk, Dk)`` and values ``(B, Tk, Dv)`` once for every step; pass
        the result as ``key`` (and no ``value``)."""
        check_tensor("key", key, ndim=3)
        check_size("key", key, 2, self.key_dim, "feature size key_dim")
        key, value = _compute_inputs(key, value)
        value, _ = check_values(key, value, self.value_dim)
        # As Attention.prepare: keys holding NaN or inf are zeroed before the projection.
        checked, bad = values_readable(key), non_finite_keys(key, value)
        given = key, value
        if bad is not None:
            keep = ~bad[..., None]  # (B, Tk, 1)
            key, value = zero_padding(key, keep), zero_padding(value, keep)
        with no_autocast(key.device):
            kf = self.prepare_key(key)  # (B, Tk, F)
        return Memory(*given, kf.unsqueeze(1), value.unsqueeze(1), self, checked=checked, bad=bad)

    def extend(
        self, memory: Memory | None, key: torch.Tensor, value: torch.Tensor | None = None
    ) -> Memory:
        """Append keys ``(B, Tn, Dk)`` and values ``(B, Tn, Dv)`` to a prepared ``memory``
        (``None``: start one): equals :meth:`prepare` of the concatenated keys and values.
        The state of the steps so far follows with :meth:`extend_state`."""
        return extend_memory(memory, self.prepare(key, value), self)

    def extend_state(self, state: torch.Tensor | None, tk: int) -> torch.Tensor | None:
        """``state`` for a memory grown to ``tk`` keys: a state over the keys ``(B, Tk')``
        gets zeros for the new ones (no alignment mass on them); any other is unchanged."""
        size = self.state_size(tk)
        if state is None or size is None or state.shape[-1] == size:
            return state
        return F.pad(state, (0, size - state.shape[-1]))

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | Memory,
        value: torch.Tensor | None = None,
        *,
        key_lengths: torch.Tensor | None = None,
        key_mask: torch.Tensor | None = None,
        prev_state: torch.Tensor | None = None,
        need_weights: bool = True,
    ) -> AlignedOutput:
        """Attend ``query`` ``(B, Tq, Dq)`` or ``(B, Dq)`` over ``key`` (a tensor or a
        :class:`Memory` from :meth:`prepare`); ``prev_state`` defaults to
        :meth:`initial_state`. ``need_weights`` is accepted for the call of
        :class:`attnkit.Attention`; the weights are always returned."""
        memory = None
        if isinstance(key, Memory):
            if key.owner is not self:
                raise ValueError("key: this Memory was prepared by another module")
            if value is not None:
                raise ValueError("value: the values are already in the prepared Memory")
            memory = key
            key, value = memory.key, memory.value
        query, key, value = _compute_inputs(query, key, value)
        call = check_call(
            query,
            key,
            value,
            query_dim=self.query_dim,
            key_dim=self.key_dim,
            value_dim=self.value_dim,
            key_lengths=key_lengths,
            key_mask=key_mask,
            positions=None,
            causal=False,
            window=None,
        )
        b, tk = call.key.shape[:2]
        valid = call.layout.key_valid
        if valid is None:
            valid = torch.ones(b, tk, dtype=torch.bool, device=call.key.device)
        # Padding never contributes, even NaN or inf: zeroed (with zero gradients) before use,
        # here for keys given as tensors, by prepare() for the NaN or inf in a Memory.
        padding = ~valid[..., None]  # (B, Tk, 1)
        if memory is None:
            memory = self.prepare(
                call.key.masked_fill(padding, 0.0), call.value.masked_fill(padding, 0.0)
            )
        state = self._check_state(prev_state, memory)
        kf = memory.key_features[:, 0].masked_fill(padding, 0.0)  # (B, Tk, F)
        values = memory.values[:, 0].masked_fill(padding, 0.0)  # (B, Tk, Dv)
        with no_autocast(query.device):
            q = call.query.to(kf.dtype)  # (B, Tq, Dq)
            if tk == 0:  # no key: nothing to read, and nothing moves
                weights = q.new_zeros(b, q.shape[1], 0)
            else:
                weights, state = self.align(q, kf, valid, state)
            weights = weights.masked_fill(~valid[:, None, :], 0.0)  # (B, Tq, Tk)
            context = weights.to(values.dtype) @ values  # (B, Tq, Dv)
        if memory.bad is not None:  # a key that held NaN or inf reaches every query: NaN rows
            poison = torch.where((memory.bad & valid).any(-1), float("nan"), 0.0)  # (B,)
            poison = poison.to(context.dtype)[:, None, None]
            context, weights = context + poison, weights + poison
        if call.one_step:
            context, weights = context[:, 0], weights[:, 0]  # (B, Dv), (B, Tk)
        return AlignedOutput(context, weights, state)

    def _check_state(self, state, memory: Memory) -> torch.Tensor | None:
        b, tk = memory.key.shape[:2]
        size = self.state_size(tk)
        if size is None:
            if state is not None:
                raise ValueError(
                    f"prev_state: alignment {self.name!r} has no state, got "
                    f"{describe(state) if isinstance(state, torch.Tensor) else state!r}"
                )
            return None
        if state is None:
            return self.initial_state(memory)
        want = (b, size)
        if not isinstance(state, torch.Tensor) or tuple(state.shape) != want:
            got = describe(state) if isinstance(state, torch.Tensor) else type(state).__name__
            raise ValueError(
                f"prev_state: expected shape {want} (the state of alignment "
                f"{self.name!r}), got {got}"
            )
        if not state.dtype.is_floating_point:
            raise TypeError(f"prev_state: expected a floating-point tensor, got {describe(state)}")
        return state.to(memory.key_features.dtype)


_A = TypeVar("_A")
_B = TypeVar("_B")
_C = TypeVar("_C")


@overload
def _compute_inputs(a: _A, b: _B, /) -> tuple[_A, _B]: ...
@overload
def _compute_inputs(a: _A, b: _B, c: _C, /) -> tuple[_A, _B, _C]: ...
def _compute_inputs(*xs: Any) -> tuple[Any, ...]:
    """Under autocast, float16/bfloat16 tensors in float32 (alignments compute in float32);
    anything else as given (the checks name what is not a tensor)."""
    if (
        all(isinstance(x, torch.Tensor) or x is None for x in xs)
        and isinstance(xs[0], torch.Tensor)
        and autocast_enabled(xs[0].device)
    ):
        return tuple(upcast(*xs))
    return xs


def keys_of(key: torch.Tensor | Memory) -> torch.Tensor:
    """The keys ``(B, Tk, Dk)`` of a tensor or of a :class:`Memory` (for their batch size,
    count, dtype and device)."""
    return key.key if isinstance(key, Memory) else key


def make_alignment(
    name: str, query_dim: int, key_dim: int | None = None, value_dim: int | None = None, **options
) -> Alignment:
    """The alignment module ``name`` (one of :data:`ALIGNMENTS`) with its ``options``.

    Example:
        >>> attn = make_alignment("monotonic", 8, 6)
        >>> out = attn(torch.randn(2, 8), torch.randn(2, 5, 6))
        >>> out.context.shape, out.weights.shape, out.state.shape
        (torch.Size([2, 6]), torch.Size([2, 5]), torch.Size([2, 5]))
    """
    if name not in ALIGNMENTS:
        raise ValueError(f"alignment: expected one of {', '.join(ALIGNMENTS)}, got {name!r}")
    return ALIGNMENTS[name](query_dim, key_dim, value_dim, **options)
