"""The :class:`Attention` module and the functional :func:`attention`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

import attnkit.attention.planner as planner
import attnkit.attention.step as step
from attnkit.attention.core import AttentionOutput, Call, Memory, extend_memory, finish
from attnkit.attention.dispatch import Plan, call_inputs, choose, run
from attnkit.attention.masks import non_finite_keys, non_finite_rows, zero_padding
from attnkit.attention.scores import SCORES, CosineScore, Score, make_score
from attnkit.attention.step import STEP_SCORES
from attnkit.attention.validation import (
    autocast_inputs,
    check_call,
    check_dims,
    check_impl,
    check_params_dtype,
    validate,
)
from attnkit.checks import (
    check_positive_int,
    check_probability,
    check_size,
    check_tensor,
    check_values,
    check_window,
)
from attnkit.ops.dense import Linear
from attnkit.ops.precision import autocast_enabled, no_autocast, upcast
from attnkit.ops.tracing import exporting, values_readable

__all__ = ["Attention", "attend"]


class Attention(nn.Module):
    """Attention of queries over keys and values, with every classic score.

    ``context_i = sum_j alpha_ij v_j`` with ``alpha_i = softmax_j(e_ij)`` over the keys query
    ``i`` may attend to, and ``e_ij`` given by ``score`` (see :mod:`attnkit.attention.scores`):
    ``"dot"``, ``"scaled_dot"``, ``"general"``, ``"additive"``, ``"cosine"`` or ``"location"``.

    Args:
        query_dim: ``Dq``, feature size of the queries.
        key_dim: ``Dk``, feature size of the keys (default ``Dq``).
        value_dim: ``Dv``, feature size of the values (default ``Dk``).
        score: the scoring function.
        attn_dim: ``A``, hidden size of the additive/location scores (default: the per-head key
            size). Not accepted by the other scores.
        heads: ``H``. With ``H > 1`` the queries, keys and values are projected (with bias) to
            ``H`` heads of ``head_dim`` features, each head scores with its own parameters, and
            the heads are concatenated and projected back to ``Dv`` — for every score. With
            ``score="scaled_dot"`` this is exactly :class:`torch.nn.MultiheadAttention`.
        head_dim: features per head (default ``Dq // H``; then ``H`` must divide ``Dq``).
        window: ``(left, right)``: query ``i`` sees keys ``c_i - left .. c_i + right`` where
            ``c_i = (i * Tk) // Tq`` (Luong local-m) or the call's ``positions``.
        causal: query ``i`` sees keys ``j <= c_i``.
        dropout: dropout probability on the weights (training only; returned weights are
            before dropout).
        impl: ``"auto"`` (fastest path that serves the call; see :meth:`plan`), ``"reference"``
            (plain full-matrix math), ``"sdpa"`` (fused dot-product kernel, dot family only),
            ``"chunked"`` (blocks with online softmax and scores recomputed in backward: no
            ``(Tq, Tk)`` or ``(Tq, Tk, A)`` tensor; banded for windows) or ``"step"`` (the C++
            decoder-step kernel: additive/location, one float32 CPU query per row, key padding
            only). See :mod:`attnkit.attention.dispatch`.
        location_filters: ``F``, conv filters of the location score (default 10).
        location_kernel: ``K``, odd conv width of the location score (default 31).

    Call arguments:
        query: ``(B, Tq, Dq)``, or ``(B, Dq)`` for one decoder step.
        key: ``(B, Tk, Dk)``, or a :class:`Memory` from :meth:`prepare` (then no ``value``).
        value: ``(B, Tk, Dv)``; defaults to ``key``.
        key_lengths: ``(B,)`` ints: keys ``>= key_lengths[b]`` are padding.
        key_mask: ``(B, Tk)`` bool, **True = may attend**. ANDed with ``key_lengths``.
        prev_weights: ``score="location"`` only: the previous step's weights, shaped like the
            returned weights (finite); default uniform over the allowed keys.
        positions: the aligned key position ``c_i`` of each query for ``causal``/``window``:
            ``(B,)`` for a one-step query (required there), ``(B, Tq)`` otherwise; each in
            ``[0, Tk - 1]``.
        need_weights: also return the weights. Always on for ``score="location"``, whose
            weights are the next step's ``prev_weights``.

    Shape:
        - context: ``(B, Tq, Dv)``, or ``(B, Dv)`` for a one-step query.
        - weights: ``(B, Tq, Tk)``; ``(B, H, Tq, Tk)`` when ``heads > 1``; without ``Tq`` for a
          one-step query.

    Masks never make NaN: a query with no allowed key gets zero context (after the output
    projection too), zero weights and zero gradients. Padded keys and values (``key_lengths``,
    ``key_mask``) reach no output and no gradient, whatever they hold (NaN, inf); a query
    holding NaN or inf gets a NaN row of context and weights, on every path.

    Example:
        >>> attn = Attention(16, score="additive", attn_dim=32)
        >>> query, key = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
        >>> out = attn(query, key, key_lengths=torch.tensor([7, 3]), need_weights=True)
        >>> out.context.shape, out.weights.shape
        (torch.Size([2, 5, 16]), torch.Size([2, 5, 7]))
        >>> bool(out.weights[1, :, 3:].eq(0).all())
        True
    """

    def __init__(
        self,
        query_dim: int,
        key_dim: int | None = None,
        value_dim: int | None = None,
        *,
        score: str = "scaled_dot",
        attn_dim: int | None = None,
        heads: int = 1,
        head_dim: int | None = None,
        window: tuple[int, int] | None = None,
        causal: bool = False,
        dropout: float = 0.0,
        impl: str = "auto",
        location_filters: int | None = None,
        location_kernel: int | None = None,
    ):
        super().__init__()
        self.query_dim, self.key_dim, self.value_dim = check_dims(query_dim, key_dim, value_dim)
        self.heads = check_positive_int("heads", heads)
        if attn_dim is not None:
            check_positive_int("attn_dim", attn_dim)
        if head_dim is not None:
            check_positive_int("head_dim", head_dim)
        if heads > 1 and head_dim is None:
            if query_dim % heads:
                raise ValueError(
                    f"heads: {heads} does not divide query_dim={query_dim}; pass head_dim"
                )
            head_dim = query_dim // heads
        if heads == 1 and head_dim is not None:
            raise ValueError(f"head_dim: only used with heads > 1, got head_dim={head_dim}")
        self.head_dim = head_dim
        check_probability("dropout", dropout)
        check_impl(impl)
        self.window = check_window(window)
        self.causal = bool(causal)
        self.dropout = dropout
        self.impl = impl

        if heads > 1:
            assert head_dim is not None  # set above from query_dim when not given
            inner = heads * head_dim
            self.q_proj = Linear(self.query_dim, inner)
            self.k_proj = Linear(self.key_dim, inner)
            self.v_proj = Linear(self.value_dim, inner)
            self.out_proj = Linear(inner, self.value_dim)
            dq = dk = head_dim
        else:
            dq, dk = self.query_dim, self.key_dim
        self.score = make_score(
            score,
            heads=heads,
            query_dim=dq,
            key_dim=dk,
            attn_dim=attn_dim,
            location_filters=location_filters,
            location_kernel=location_kernel,
        )
        if impl == "sdpa" and not self.score.dot_family:
            raise ValueError(
                f"impl: 'sdpa' computes dot-product scores only, not score={score!r}; "
                "use impl='auto'"
            )

    def extra_repr(self) -> str:
        return (
            f"query_dim={self.query_dim}, key_dim={self.key_dim}, value_dim={self.value_dim}, "
            f"score={self.score.name!r}, heads={self.heads}, window={self.window}, "
            f"causal={self.causal}, dropout={self.dropout}, impl={self.impl!r}"
        )

    def plan(
        self,
        query: torch.Tensor,
        key: torch.Tensor | Memory,
        value: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
        key_lengths: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        estimate: bool = False,
    ) -> Plan:
        """The path a call with these inputs would take, and why (no attention is computed).

        ``query``, ``key`` (a tensor ``(B, Tk, Dk)`` or a :class:`Memory`), ``value`` and the
        keyword arguments are those of the call. With ``estimate=True`` the plan's
        ``estimates`` predict the peak extra memory of the forward pass and of forward +
        backward on every path, from the tensors each allocates (``plan.predicted``: the
        path taken; :mod:`attnkit.attention.planner`, docs/tools.md). Over a
        :class:`Memory` the estimate counts preparing its keys and values too.

        Example:
            >>> attn = Attention(128, score="additive")
            >>> q = torch.randn(8, 800, 128)
            >>> plan = attn.plan(q, q, estimate=True)
            >>> plan.impl, plan.predicted.train_bytes < 2**26
            ('chunked', True)
        """
        memory = key if isinstance(key, Memory) else None
        if memory is not None:
            key, value = memory.key, memory.value
        query, key, value = autocast_inputs(query, key, value)
        call = check_call(
            query,
            key,
            value,
            query_dim=self.query_dim,
            key_dim=self.key_dim,
            value_dim=self.value_dim,
            key_lengths=key_lengths,
            key_mask=None,
            positions=positions,
            causal=self.causal,
            window=self.window,
        )
        if estimate:
            return planner.estimate(
                self,
                planner.CallShape(
                    batch=call.query.shape[0],
                    queries=call.query.shape[1],
                    keys=call.key.shape[1],
                    dtype=call.query.dtype,
                    device=str(call.query.device),
                    one_step=call.one_step,
                    key_padding=key_lengths is not None,
                    positions=positions is not None,
                    need_weights=need_weights,
                    value_is_key=value is None or value is key,
                    query_is_key=query is key,
                    training=self.training,
                ),
            )
        return self._choose(call, need_weights or self.score.needs_prev)

    def _split_heads(self, x: torch.Tensor, proj: nn.Module | None) -> torch.Tensor:
        if proj is None:
            return x.unsqueeze(1)  # (B, 1, T, D)
        b, t, _ = x.shape
        return proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)  # (B, H, T, d)

    def prepare(self, key: torch.Tensor, value: torch.Tensor | None = None) -> Memory:
        """Prepare keys ``(B, Tk, Dk)`` and values ``(B, Tk, Dv)`` once for many calls.

        Pass the result as ``key`` (and no ``value``) to every later call, e.g. every decoder
        step. Gradients flow back to ``key``, ``value`` and the parameters as usual.

        Example:
            >>> attn = Attention(8, score="additive")
            >>> memory = attn.prepare(torch.randn(2, 30, 8))
            >>> steps = [attn(torch.randn(2, 8), memory).context for _ in range(3)]
            >>> steps[0].shape
            torch.Size([2, 8])
        """
        check_tensor("key", key, ndim=3)
        check_size("key", key, 2, self.key_dim, "feature size key_dim")
        key, value = autocast_inputs(key, value)
        value, _ = check_values(key, value, self.value_dim)
        check_params_dtype(self, key, "key")
        memory_key, memory_value = key, value  # as given
        # Keys holding NaN or inf (padding, often) are zeroed before any projection, so that
        # no gradient sees them (0 * NaN in a projection's backward); calls pass them on. An
        # exported graph checks them itself, once, so that its steps need not zero the padding.
        bad: torch.Tensor | None
        if exporting():
            checked, bad = True, non_finite_rows(key, value)  # (B, Tk)
        else:
            checked, bad = values_readable(key), non_finite_keys(key, value)
        if bad is not None:
            keep = ~bad[..., None]  # (B, Tk, 1)
            zeroed = zero_padding(key, keep)
            value = zeroed if value is key else zero_padding(value, keep)
            key = zeroed
        multi = self.heads > 1
        k = self._split_heads(key, self.k_proj if multi else None)  # (B, H, Tk, dk)
        v = self._split_heads(value, self.v_proj if multi else None)  # (B, H, Tk, dv)
        if autocast_enabled(k.device):  # projected under autocast; the rest in float32
            k, v = upcast(k, v)
        with no_autocast(k.device):
            kf = self.score.prepare_key(k)  # (B, H, Tk, F)
        sink = None
        if (
            (self.score.name in STEP_SCORES or self.score.dot_family)
            and kf.device.type == "cpu"
            and step.sink_supported()
            and torch.is_grad_enabled()
            and (kf.requires_grad or v.requires_grad)
            and not exporting()
        ):
            kf, v, sink = step.collect(kf, v)  # one-query steps sum their gradients there
        return Memory(memory_key, memory_value, kf, v, self, sink, checked, bad)

    def extend(
        self,
        memory: Memory | None,
        key: torch.Tensor,
        value: torch.Tensor | None = None,
        *,
        keep_inputs: bool = True,
    ) -> Memory:
        """Append keys ``(B, Tn, Dk)`` and values ``(B, Tn, Dv)`` to a prepared ``memory``.

        The key/value cache of incremental decoding: a decoder's self-attention prepares only
        the new step's keys and values and attends over everything so far. ``memory=None``
        starts a new one. Equals :meth:`prepare` on the concatenated keys and values.
        ``keep_inputs=False`` drops the keys and values as given where no call needs them
        (:func:`attnkit.attention.core.extend_memory`): decoding reads only the prepared ones.

        Example:
            >>> attn = Attention(8, heads=2)
            >>> keys = torch.randn(2, 3, 8)
            >>> cache = None
            >>> for t in range(3):
            ...     cache = attn.extend(cache, keys[:, t : t + 1])
            >>> cache.key_features.shape  # (B, H, Tk, F)
            torch.Size([2, 2, 3, 4])
        """
        return extend_memory(memory, self.prepare(key, value), self, keep_inputs=keep_inputs)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | Memory,
        value: torch.Tensor | None = None,
        *,
        key_lengths: torch.Tensor | None = None,
        key_mask: torch.Tensor | None = None,
        prev_weights: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> AttentionOutput:
        call, memory, prev = validate(
            self,
            query,
            key,
            value,
            key_lengths=key_lengths,
            key_mask=key_mask,
            prev_weights=prev_weights,
            positions=positions,
        )
        q, k, v, kf, sink, bad = self._project(call, memory)  # (B, H, T, d); k None: kf
        need_weights = need_weights or self.score.needs_prev
        plan = self._choose(call, need_weights)
        context, weights = run(
            plan,
            q,
            k,
            v,
            self.score,
            call,
            prev=prev,
            dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights,
            kf=kf,
            sink=sink,
        )
        return self._finish(call, context, weights, bad)

    def _project(
        self, call: Call, memory: Memory | None
    ) -> tuple[
        torch.Tensor,
        torch.Tensor | None,
        torch.Tensor,
        torch.Tensor | None,
        step.GradSink | None,
        torch.Tensor | None,
    ]:
        """The per-head queries ``q (B, H, Tq, dq)``, keys ``k (B, H, Tk, dk)`` and values
        ``v (B, H, Tk, dv)`` (heads > 1: projected; else ``H = 1``); over a :class:`Memory`,
        its prepared keys ``kf (B, H, Tk, F)`` and values instead of ``k`` (None) and its
        gradient sink. Also the keys holding NaN or inf, ``(B, Tk)`` or None
        (:meth:`Call.inputs`)."""
        multi = self.heads > 1
        q = self._split_heads(call.query, self.q_proj if multi else None)  # (B, H, Tq, dq)
        if memory is None:
            key, value, bad = call.inputs()
            k = self._split_heads(key, self.k_proj if multi else None)  # (B, H, Tk, dk)
            v = self._split_heads(value, self.v_proj if multi else None)  # (B, H, Tk, dv)
            return q, k, v, None, None, bad
        v, kf, bad = memory.values, memory.key_features, memory.bad
        if call.layout.key_valid is not None and not memory.checked:  # a traced state
            keep = call.layout.key_valid[:, None, :, None]  # (B, 1, Tk, 1)
            kf, v = zero_padding(kf, keep), zero_padding(v, keep)
        sink = memory.sink
        if sink is not None and not sink.serves(kf, v):
            sink = None  # the memory's tensors were replaced (reordered by beam search, zeroed)
        return q, None, v, kf, sink, bad

    def _choose(self, call: Call, need_weights: bool) -> Plan:
        """The path :attr:`impl` takes for ``call``, and why (:func:`dispatch.choose`)."""
        return choose(
            self.impl,
            call_inputs(
                call,
                self.score,
                heads=self.heads,
                need_weights=need_weights,
                dropout_p=self.dropout if self.training else 0.0,
            ),
        )

    def _finish(
        self,
        call: Call,
        context: torch.Tensor,
        weights: torch.Tensor | None,
        bad: torch.Tensor | None,
    ) -> AttentionOutput:
        """Heads joined (``out_proj``) or squeezed, then :func:`core.finish`:
        ``context (B, H, Tq, dv) -> (B, Tq, Dv)``, ``weights (B, H, Tq, Tk)`` kept with
        heads, ``(B, Tq, Tk)`` without."""
        b, h, tq, dv = context.shape
        if self.heads > 1:
            context = self.out_proj(context.transpose(1, 2).reshape(b, tq, h * dv))  # (B, Tq, Dv)
            empty = call.empty_queries()  # (B or 1, Tq)
            if empty is not None:  # a query with no key gets zero context, not the bias
                context = context.masked_fill(empty[..., None], 0.0)
        else:
            context = context[:, 0]  # (B, Tq, Dv)
            weights = None if weights is None else weights[:, 0]  # (B, Tq, Tk)
        return finish(call, context, weights, bad)

    @contextmanager
    def recording_weights(self) -> Iterator[list[torch.Tensor]]:
        """A context in which every call of this module computes its weights (as with
        ``need_weights=True``) and appends them to the list it yields, in call order: the
        weights of a layer inside a model, with no change to the model's code. Outside it
        nothing is kept, and calls without ``need_weights`` take the paths that keep no
        ``(Tq, Tk)`` tensor.

        Shape:
            each entry: as :attr:`AttentionOutput.weights`, ``(B, Tq, Tk)`` or
            ``(B, H, Tq, Tk)`` (no ``Tq`` for a one-step query).

        Example:
            >>> layer = Attention(8)
            >>> with layer.recording_weights() as found:
            ...     context = layer(torch.randn(2, 3, 8), torch.randn(2, 5, 8)).context
            >>> [tuple(w.shape) for w in found]
            [(2, 3, 5)]
        """
        found: list[torch.Tensor] = []

        def ask(
            module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> tuple[tuple[Any, ...], dict[str, Any]]:
            return args, {**kwargs, "need_weights": True}

        def keep(
            module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
        ) -> None:
            found.append(out.weights)

        hooks = (
            self.register_forward_pre_hook(ask, with_kwargs=True),
            self.register_forward_hook(keep, with_kwargs=True),
        )
        try:
            yield found
        finally:
            for hook in hooks:
                hook.remove()


_FUNCTIONAL_SCORES = ("dot", "scaled_dot", "cosine")


def attend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor | None = None,
    *,
    score: str = "scaled_dot",
    key_lengths: torch.Tensor | None = None,
    key_mask: torch.Tensor | None = None,
    causal: bool = False,
    window: tuple[int, int] | None = None,
    positions: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    impl: str = "auto",
) -> AttentionOutput:
    """Functional attention for the parameter-free scores ``"dot"``, ``"scaled_dot"`` and
    ``"cosine"`` (``10 * cos(q_i, k_j)``: the fixed value of the module's initial scale).

    Arguments, masks and shapes are those of :class:`Attention` (one head, ``Dq == Dk``);
    ``dropout_p`` is applied whenever it is non-zero.

    Example:
        >>> q, k = torch.randn(2, 4, 8), torch.randn(2, 6, 8)
        >>> ctx, w = attend(q, k, causal=True, need_weights=True)
        >>> ctx.shape, w.shape, bool(torch.allclose(w.sum(-1), torch.ones(2, 4)))
        (torch.Size([2, 4, 8]), torch.Size([2, 4, 6]), True)
    """
    if score not in _FUNCTIONAL_SCORES:
        hint = " (it has parameters: use attnkit.Attention)" if score in SCORES else ""
        raise ValueError(
            f"score: expected one of {', '.join(_FUNCTIONAL_SCORES)}, got {score!r}{hint}"
        )
    check_probability("dropout_p", dropout_p)
    window = check_window(window)
    query, key, value = autocast_inputs(query, key, value)
    key_dim = query.shape[-1] if isinstance(query, torch.Tensor) else None
    call = check_call(
        query,
        key,
        value,
        query_dim=None,
        key_dim=key_dim,
        value_dim=None,
        key_lengths=key_lengths,
        key_mask=key_mask,
        positions=positions,
        causal=causal,
        window=window,
    )
    check_impl(impl)
    sc: Score
    if score == "cosine":
        sc = CosineScore(1, learnable=False).to(query.device)
    else:
        sc = make_score(
            score, heads=1, query_dim=query.shape[-1], key_dim=key.shape[-1], attn_dim=None
        )
    key, value, bad = call.inputs()
    plan = choose(
        impl, call_inputs(call, sc, heads=1, need_weights=need_weights, dropout_p=dropout_p)
    )
    context, weights = run(
        plan,
        call.query.unsqueeze(1),
        key.unsqueeze(1),
        value.unsqueeze(1),
        sc,
        call,
        prev=None,
        dropout_p=dropout_p,
        need_weights=need_weights,
    )
    context = context[:, 0]  # (B, Tq, Dv)
    weights = None if weights is None else weights[:, 0]  # (B, Tq, Tk)
    return finish(call, context, weights, bad)
