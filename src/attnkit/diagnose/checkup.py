"""The attention doctor: probe any attention module, attnkit's or a user's, for the classic bugs.

:func:`doctor` calls the module on the example inputs and on variations of them, and returns a
:class:`Report` with one :class:`Finding` per check: its verdict (``"pass"``, ``"fail"`` or
``"skip"``, saying why the check does not apply to this kind of module), what was seen and, on
failure, how to fix it. :func:`assert_healthy` is the pytest helper: it raises
``AssertionError`` with the report when a check fails.

A module is called as ``call(module, query, key, value, key_mask) -> (context, weights)``:

- ``query (B, Tq, Dq)``, ``key (B, Tk, Dk)``, ``value (B, Tk, Dv)``;
- ``key_mask (B, Tk)`` bool, **True where a query may attend** (attnkit's one polarity);
- ``context (B, Tq, Dv)``, ``weights (B, Tq, Tk)`` or ``(B, H, Tq, Tk)``.

Three kinds of module are probed, each with the checks that apply to it:

- **plain**: ``call(module, query, key, value, key_mask) -> (context, weights)``.
- **location** (``location=True``; attnkit's ``score="location"`` by default) also takes its
  location state, ``call(module, query, key, value, key_mask, prev_weights)`` with
  ``prev_weights (B, Tq, Tk)``, the previous step's weights as a decoder passes them (each row
  sums to 1 over its valid keys, 0 on padded ones), or a cumulative state built from them.
- **stateful** (``stateful=True``; attnkit's alignment modules, :class:`attnkit.attention.
  Alignment`, by default): a module that carries its own state from one output step to the
  next (monotonic, MoChA, GMM), ``call(module, query, key, value, key_mask, state) ->
  (context, weights, state)``, where ``state=None`` asks for the module's initial state and a
  ``(B, Tq, Dq)`` query runs ``Tq`` output steps in turn. Its weights need not sum to 1: the
  module declares what they sum to in ``weight_sums``, one of
  :data:`attnkit.attention.WEIGHT_SUMS` (``weight_sums`` checks it).

A module with ``prepare(key, value) -> memory`` is also called with that memory as the key and
``None`` as the value (``prepared_memory``, and the path of the one-step calls of
``state_threading``).

The default ``call`` serves :class:`attnkit.Attention` (``key_mask=``, ``prev_weights=``,
``need_weights=True``), attnkit's alignment modules (``key_mask=``, ``prev_state=``) and any
module whose ``forward(query, key, value, key_mask)`` returns ``(context, weights)`` (location:
``forward(query, key, value, key_mask, prev_weights)``; stateful: ``forward(query, key,
value, key_mask, state)`` returning ``(context, weights, state)``); pass your own ``call`` to
adapt another signature.

Example:
    >>> import torch, attnkit
    >>> q, k = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    >>> attnkit.doctor(attnkit.Attention(8, score="additive"), (q, k, k)).ok
    True
    >>> from attnkit.attention import MoChA
    >>> attnkit.doctor(MoChA(8, chunk=2, r_init=0.0).eval(), (q, k, k)).ok
    True

Why one file: the checks share one probe of the module (its calls, variations and
gradients); each check is a short function over it, and their order is the report's.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import torch

from attnkit.attention import WEIGHT_SUMS, Alignment, Attention

__all__ = ["CHECKS", "Finding", "Report", "assert_healthy", "doctor"]

CHECKS = (
    "sums_to_one_over_keys",
    "mask_polarity",
    "padding_invariance",
    "empty_rows",
    "query_dependence",
    "key_permutation",
    "low_precision",
    "location_state",
    "weight_sums",
    "nan_padding",
    "prepared_memory",
    "state_threading",
    "saturation",
)


@dataclass(frozen=True)
class Finding:
    """One check's ``verdict`` (``"pass"``, ``"fail"`` or ``"skip"``), ``detail`` (what was
    measured, or why the check was skipped) and ``fix`` (how to repair a failure, else "")."""

    check: str
    verdict: str
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Report:
    """The doctor's findings, in :data:`CHECKS` order."""

    findings: list[Finding]

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return all(f.verdict != "fail" for f in self.findings)

    def failed(self) -> list[str]:
        """The names of the failed checks."""
        return [f.check for f in self.findings if f.verdict == "fail"]

    def skipped(self) -> list[str]:
        """The names of the checks that do not apply to this module."""
        return [f.check for f in self.findings if f.verdict == "skip"]

    def __getitem__(self, check: str) -> Finding:
        for finding in self.findings:
            if finding.check == check:
                return finding
        raise KeyError(f"check: expected one of {', '.join(CHECKS)}, got {check!r}")

    def __str__(self) -> str:
        lines = []
        for f in self.findings:
            lines.append(f"{f.verdict.upper():4}  {f.check}: {f.detail}")
            if f.fix:
                lines.append(f"      fix: {f.fix}")
        return "\n".join(lines)


class Output(NamedTuple):
    """One call's ``context``, ``weights`` and ``state`` (``None`` for a module without one)."""

    context: torch.Tensor
    weights: torch.Tensor
    state: torch.Tensor | None


def default_call(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: Any,
    value: torch.Tensor | None,
    key_mask: torch.Tensor,
    *state: Any,
) -> tuple[Any, ...]:
    """``(context, weights)`` of ``module`` on one call, ``(context, weights, state)`` for a
    module with state (see the module docstring): ``state``, when given, is a location
    module's previous weights (an :class:`attnkit.Attention` with heads gets them repeated for
    every head) or a stateful module's state (``None``: its initial state)."""
    prev = state[0] if state else None
    if isinstance(module, Attention):
        if prev is not None and module.heads > 1:
            prev = prev[:, None].expand(-1, module.heads, -1, -1)
        out = module(query, key, value, key_mask=key_mask, prev_weights=prev, need_weights=True)
        return out.context, out.weights
    if isinstance(module, Alignment):
        return tuple(module(query, key, value, key_mask=key_mask, prev_state=prev))
    return tuple(module(query, key, value, key_mask, *state))


def _check_inputs(example_inputs: object) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if not (
        isinstance(example_inputs, (tuple, list))
        and len(example_inputs) == 3
        and all(isinstance(t, torch.Tensor) and t.dim() == 3 for t in example_inputs)
    ):
        raise ValueError(
            "example_inputs: expected (query (B, Tq, Dq), key (B, Tk, Dk), "
            f"value (B, Tk, Dv)) tensors, got {_describe(example_inputs)}"
        )
    query, key, value = example_inputs
    b, tk = key.shape[:2]
    if query.shape[0] != b or value.shape[:2] != key.shape[:2]:
        raise ValueError(
            f"example_inputs: expected matching B and Tk, got query "
            f"{tuple(query.shape)}, key {tuple(key.shape)}, value "
            f"{tuple(value.shape)}"
        )
    if tk < 2 or query.shape[1] < 2:
        raise ValueError(
            f"example_inputs: expected Tq >= 2 and Tk >= 2 (the checks vary "
            f"queries and keys), got Tq={query.shape[1]}, Tk={tk}"
        )
    return query.detach().float(), key.detach().float(), value.detach().float()


def _describe(value: object) -> str:
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    if isinstance(value, torch.Tensor):
        return f"tensor{tuple(value.shape)}"
    return type(value).__name__


def _prepare(module: torch.nn.Module, key: torch.Tensor, value: torch.Tensor) -> Any:
    """``module.prepare(key, value)``: the memory of a module that prepares one."""
    return cast(Callable[..., Any], module.prepare)(key, value)


def _weights(w: torch.Tensor) -> torch.Tensor:
    """``(B, Tq, Tk)`` or ``(B, H, Tq, Tk)`` -> ``(B, H, Tq, Tk)``."""
    return w[:, None] if w.dim() == 3 else w


def _close(a: torch.Tensor, b: torch.Tensor, tol: float) -> bool:
    return bool(
        torch.isfinite(a).all()
        and torch.isfinite(b).all()
        and (a - b).abs().max() <= tol * (1 + b.abs().max())
    )


class _Probe:
    """The module and the inputs every check varies: the last key of every example but the
    first (and half the keys of the last, when there are 4 or more) is padding. ``kind`` is
    ``"plain"``, ``"location"`` (every call gets previous weights that follow its mask,
    :meth:`prev_weights`) or ``"stateful"`` (every call gets a state, ``None`` by default)."""

    def __init__(
        self,
        module: torch.nn.Module,
        call: Callable[..., Sequence[Any]],
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kind: str,
    ) -> None:
        self.module, self.call, self.kind = module, call, kind
        self.query, self.key, self.value = query, key, value
        b, tk = key.shape[:2]
        valid = torch.ones(b, tk, dtype=torch.bool)
        valid[1:, -1] = False
        if tk >= 4:
            valid[-1, tk // 2 :] = False
        self.mask = valid  # (B, Tk)
        self.logits = torch.randn(b, query.shape[1], tk) * 2  # (B, Tq, Tk): of the state

    @property
    def location(self) -> bool:
        return self.kind == "location"

    @property
    def stateful(self) -> bool:
        return self.kind == "stateful"

    def prev_weights(self, mask: torch.Tensor, logits: torch.Tensor | None = None) -> torch.Tensor:
        """Previous weights ``(B, Tq, Tk)``: a softmax of ``logits`` over each row's valid keys
        in ``mask`` (B, Tk), 0 on the others and on rows with none."""
        logits = self.logits[..., : mask.shape[1]] if logits is None else logits
        w = logits.masked_fill(~mask[:, None, :], torch.finfo(logits.dtype).min).softmax(-1)
        return w * mask.any(-1)[:, None, None]

    def invoke(
        self,
        module: torch.nn.Module,
        query: torch.Tensor,
        key: Any,
        value: torch.Tensor | None,
        mask: torch.Tensor,
        state: Any = None,
    ) -> Output:
        """One call of ``module``; a location module gets ``state`` (default:
        :meth:`prev_weights` of ``mask``) in the query's dtype, a stateful one ``state``."""
        if self.stateful:
            out = tuple(self.call(module, query, key, value, mask, state))
            if len(out) != 3:
                raise ValueError(
                    f"call: expected (context, weights, state) from a module "
                    f"with state, got {len(out)} values"
                )
            return Output(*out)
        if self.location:
            state = self.prev_weights(mask) if state is None else state
            out = tuple(self.call(module, query, key, value, mask, state.to(query.dtype)))
        else:
            out = tuple(self.call(module, query, key, value, mask))
        return Output(*(*out, None))

    def run(
        self,
        query: torch.Tensor | None = None,
        key: Any = None,
        value: Any = ...,
        mask: torch.Tensor | None = None,
        state: Any = None,
    ) -> Output:
        """One call without gradients; what is not given is the probe's own (``value=None``
        goes with a prepared memory as ``key``)."""
        with torch.no_grad():
            return self.invoke(
                self.module,
                self.query if query is None else query,
                self.key if key is None else key,
                self.value if value is ... else value,
                self.mask if mask is None else mask,
                state,
            )

    def prepares(self) -> bool:
        """True when the module has ``prepare(key, value) -> memory``."""
        return callable(getattr(self.module, "prepare", None))

    def backward(
        self,
        module: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        prepared: bool = False,
    ) -> tuple[Output, list[torch.Tensor]]:
        """One call with gradients: its :class:`Output` and the gradients of a fixed random
        loss (of the context and the state) with respect to the query, key, value and each
        parameter (zeros where it has none). ``prepared``: the keys and values go through
        ``module.prepare`` first."""
        mask = self.mask if mask is None else mask
        q, k, v = (t.clone().requires_grad_(True) for t in (query, key, value))
        if prepared:
            out = self.invoke(module, q, _prepare(module, k, v), None, mask)
        else:
            out = self.invoke(module, q, k, v, mask)
        g = torch.Generator().manual_seed(1)
        loss = (out.context.float() * torch.randn(out.context.shape, generator=g)).sum()
        if isinstance(out.state, torch.Tensor) and out.state.dtype.is_floating_point:
            loss = loss + (out.state.float() * torch.randn(out.state.shape, generator=g)).sum()
        inputs = [q, k, v] + [t for t in module.parameters() if t.requires_grad]
        grads = (
            torch.autograd.grad(loss, inputs, allow_unused=True)
            if loss.requires_grad
            else [None] * len(inputs)
        )
        return out, [torch.zeros_like(t) if d is None else d for t, d in zip(inputs, grads)]

    def differences(
        self,
        a: Output,
        b: Output,
        grads_a: list[torch.Tensor] | None = None,
        grads_b: list[torch.Tensor] | None = None,
        tol: float = 1e-4,
    ) -> list[str]:
        """What differs between two calls over the probe's keys (with :attr:`mask`): the
        context, the weights of valid keys, the state, and the gradients of the query, the
        valid keys and values, and the parameters."""
        valid = self.mask[:, None, None, :]  # (B, 1, 1, Tk)
        moved = []
        parts = [
            ("the context", a.context, b.context),
            (
                "the weights of valid keys",
                _weights(a.weights).masked_fill(~valid, 0),
                _weights(b.weights).masked_fill(~valid, 0),
            ),
        ]
        if isinstance(a.state, torch.Tensor) and isinstance(b.state, torch.Tensor):
            parts.append(("the state", a.state, b.state))
        if grads_a is not None and grads_b is not None:
            keep = self.mask[..., None]  # (B, Tk, 1)
            parts += [
                ("the query's gradient", grads_a[0], grads_b[0]),
                ("the valid keys' gradient", grads_a[1] * keep, grads_b[1] * keep),
                ("the valid values' gradient", grads_a[2] * keep, grads_b[2] * keep),
            ]
            parts += [("a parameter's gradient", x, y) for x, y in zip(grads_a[3:], grads_b[3:])]
        for name, x, y in parts:
            x, y = x.detach(), y.detach()
            if not _close(x.float(), y.float(), tol):
                gap = (x.float() - y.float()).abs().nan_to_num(float("inf")).max()
                moved.append(f"{name} (by up to {float(gap):.3g})")
        return list(dict.fromkeys(moved))


# The checks that do not apply to a kind of module (a _Probe's kind), and why: the
# doctor skips them, saying so, instead of running them.
_SKIPPED = {
    "sums_to_one_over_keys": {
        "stateful": "an alignment's weights need not sum to 1: weight_sums checks what the "
        "module declares they sum to"
    },
    "key_permutation": {
        "location": "a location-aware score reads the previous weights of each key's "
        "neighbours: key order matters by design",
        "stateful": "an alignment reads the keys in order (a monotonic scan, a window or "
        "Gaussians over key positions): key order matters by design",
    },
    "location_state": {
        "plain": "the module takes no location state (pass location=True for one that takes "
        "previous weights)",
        "stateful": "the module carries its own state from step to step: state_threading checks it",
    },
    "weight_sums": {
        "plain": "a softmax's weights: sums_to_one_over_keys checks them",
        "location": "a softmax's weights: sums_to_one_over_keys checks them",
    },
    "state_threading": {
        "plain": "the module carries no state: each query is computed on its own",
        "location": "the caller passes the previous weights (location_state checks them)",
    },
}


def _sums(p: _Probe) -> Finding:
    full = torch.ones_like(p.mask)
    w = _weights(p.run(mask=full).weights.float())  # (B, H, Tq, Tk)
    keys, queries = w.sum(-1), w.sum(-2)
    if torch.allclose(keys, torch.ones_like(keys), atol=1e-4):
        return Finding("sums_to_one_over_keys", "pass", "every row sums to 1 over the keys")
    if torch.allclose(queries, torch.ones_like(queries), atol=1e-4):
        return Finding(
            "sums_to_one_over_keys",
            "fail",
            "weights sum to 1 over the queries (dim -2), not over the keys",
            "take the softmax over the key dim: softmax(scores, dim=-1) on (B, Tq, Tk) scores",
        )
    return Finding(
        "sums_to_one_over_keys",
        "fail",
        f"row sums over the keys range {float(keys.min()):.4g}..{float(keys.max()):.4g}",
        "normalise the scores with a softmax over the key dim (dim=-1 of (B, Tq, Tk))",
    )


def _polarity(p: _Probe) -> Finding:
    w = _weights(p.run().weights.float())  # (B, H, Tq, Tk)
    masked = ~p.mask[:, None, None, :]
    on_masked = float(w.masked_fill(~masked, 0).abs().sum(-1).max())
    padded = ~p.mask.all(-1)  # (B,) examples with a masked key
    on_valid = w.masked_fill(masked, 0).abs().sum(-1)[padded]
    if on_masked <= 1e-5:
        return Finding("mask_polarity", "pass", "no weight on keys whose mask is False")
    if float(on_valid.max()) <= 1e-5:
        return Finding(
            "mask_polarity",
            "fail",
            "all weight went to the keys whose mask is False: the mask is read the other way round",
            "treat True as 'may attend': scores.masked_fill(~key_mask, min) "
            "(torch.nn.MultiheadAttention's masks mean the opposite)",
        )
    return Finding(
        "mask_polarity",
        "fail",
        f"up to {on_masked:.3g} of a row's weight on keys whose mask is False",
        "mask the scores before the softmax: scores.masked_fill(~key_mask[:, None, "
        ":], torch.finfo(scores.dtype).min); an alignment sets the probabilities "
        "of masked keys to 0 (p = sigmoid(e) * key_mask)",
    )


def _padding(p: _Probe) -> Finding:
    noise = torch.randn_like(p.key) * 10, torch.randn_like(p.value) * 10
    pad = ~p.mask[..., None]  # (B, Tk, 1)
    clean, grads = p.backward(p.module, p.query, p.key, p.value)
    other, other_grads = p.backward(
        p.module, p.query, torch.where(pad, noise[0], p.key), torch.where(pad, noise[1], p.value)
    )
    moved = p.differences(clean, other, grads, other_grads)
    if not moved:
        return Finding(
            "padding_invariance",
            "pass",
            "changing padded keys and values changes nothing: context, weights of "
            "valid keys, state and gradients",
        )
    return Finding(
        "padding_invariance",
        "fail",
        f"changing padded keys and values moved {', '.join(moved)}",
        "pass the key mask (or key lengths) to the attention and mask the scores "
        "of padded keys before the softmax (an alignment: their probabilities)",
    )


def _non_finite(out: Output, grads: Iterable[torch.Tensor]) -> list[str]:
    """Which of a call's outputs (context, weights, state) and ``grads`` hold NaN or inf."""
    bad = [
        name
        for name, t in (
            ("the context", out.context),
            ("the weights", out.weights),
            ("the state", out.state),
        )
        if isinstance(t, torch.Tensor) and t.dtype.is_floating_point and not torch.isfinite(t).all()
    ]
    if not all(torch.isfinite(g).all() for g in grads):
        bad.append("the gradients")
    return bad


def _empty(p: _Probe) -> Finding:
    mask = p.mask.clone()
    mask[-1] = False
    try:
        out, grads = p.backward(p.module, p.query, p.key, p.value, mask)
    except RuntimeError as exc:
        return Finding(
            "empty_rows",
            "fail",
            f"a row with no allowed key raised: {exc}",
            "fill masked scores with torch.finfo(dtype).min, not -inf, and give "
            "rows with no key zero weights",
        )
    bad = _non_finite(out, grads)
    if bad:
        return Finding(
            "empty_rows",
            "fail",
            f"an example whose keys are all masked gives NaN/inf in {' and '.join(bad)}",
            "fill masked scores with torch.finfo(dtype).min instead of -inf, and "
            "zero the weights and context of rows with no allowed key (never "
            "divide by a sum of weights that can be 0)",
        )
    b, tq = p.query.shape[:2]
    try:
        none = p.run(key=p.key[:, :0], value=p.value[:, :0], mask=p.mask[:, :0])
    except ValueError as exc:
        return Finding(
            "empty_rows",
            "pass",
            "an example with every key masked gives finite "
            f"outputs and gradients; no keys at all (Tk = 0) is refused: {exc}",
        )
    except Exception as exc:  # noqa: BLE001 - any other failure is what the check reports
        return Finding(
            "empty_rows",
            "fail",
            f"no keys at all (Tk = 0) raised {type(exc).__name__}: {exc}",
            "give zero context and zero weights when Tk = 0, or refuse it with a "
            "ValueError that names the key",
        )
    if not torch.isfinite(none.context).all() or tuple(none.context.shape[:2]) != (b, tq):
        return Finding(
            "empty_rows",
            "fail",
            f"no keys at all (Tk = 0) gives a context of shape "
            f"{tuple(none.context.shape)} that is not finite or not (B, Tq, Dv)",
            "give zero context and zero weights when Tk = 0",
        )
    return Finding(
        "empty_rows",
        "pass",
        "an example with every key masked, and a call with no "
        "keys at all (Tk = 0), give finite outputs and gradients",
    )


def _query(p: _Probe) -> Finding:
    w = p.run().weights.float()
    w2 = p.run(query=torch.randn_like(p.query) * 3).weights.float()
    if not _close(w2, w, 1e-5):
        return Finding("query_dependence", "pass", "the weights change with the query")
    if bool(((w == 0) | (w == 1)).all()):
        return Finding(
            "query_dependence",
            "skip",
            "the weights are hard stops (0 or 1, or none at all: a monotonic "
            "reader that never stops) that these queries do not move: query "
            "dependence not seen",
        )
    return Finding(
        "query_dependence",
        "fail",
        "the weights are the same for any query: the score's query term is a "
        "constant per row, which the softmax over keys cancels",
        "make the score couple query and key: v^T tanh(W q + U k) (additive) or "
        "q^T W k (general), not w^T [q; k]",
    )


def _permutation(p: _Probe) -> Finding:
    full = torch.ones_like(p.mask)
    ctx = p.run(mask=full).context
    perm = torch.randperm(p.key.shape[1], generator=torch.Generator().manual_seed(0))
    other = p.run(key=p.key[:, perm], value=p.value[:, perm], mask=full).context
    if _close(other.float(), ctx.float(), 1e-4):
        return Finding(
            "key_permutation",
            "pass",
            "permuting keys with their values leaves the context unchanged",
        )
    return Finding(
        "key_permutation",
        "fail",
        f"permuting keys with their values moved the context by up to "
        f"{float((other - ctx).abs().max()):.3g} (expected of position-aware "
        "scores: location, windows, causal, relative positions)",
        "a content-only score must not depend on key order: look for an index "
        "used where the key's content was meant",
    )


def _precision(p: _Probe, dtypes: Sequence[torch.dtype]) -> Finding:
    # Scores large enough that exp() without the max subtracted overflows in float16; not for
    # unnormalised weights (exp of the query's projection), whose answer itself would overflow.
    scale = 1.0 if _unnormalised(p) else 32.0
    q = p.query * scale
    ref, ref_weights = p.run(query=q)[:2]
    seen = []
    for dtype in (*dtypes, None):  # None: bfloat16 autocast
        name = "autocast" if dtype is None else str(dtype)
        try:
            with torch.no_grad():
                if dtype is None:  # the training set-up: float32 module, bf16 autocast
                    with torch.autocast(q.device.type, dtype=torch.bfloat16):
                        ctx, w = p.invoke(p.module, q, p.key, p.value, p.mask)[:2]
                    name = "bfloat16 autocast"
                else:
                    module = copy.deepcopy(p.module).to(dtype)
                    ctx, w = p.invoke(
                        module, q.to(dtype), p.key.to(dtype), p.value.to(dtype), p.mask
                    )[:2]
        except RuntimeError as exc:
            return Finding("low_precision", "skip", f"{name} is not served here: {exc}")
        err = float((ctx.float() - ref.float()).abs().max())
        finite = bool(torch.isfinite(ctx).all() and torch.isfinite(w).all())
        if finite and p.stateful and not torch.equal(w != 0, ref_weights != 0):
            seen.append(
                f"{name}: not compared, a discrete choice (a hard stop, the key "
                "nearest a centre) moved under rounding"
            )
            continue
        if not finite or err > 0.05 * (1 + float(ref.abs().max())):
            return Finding(
                "low_precision",
                "fail",
                f"in {name} (query times {scale:g}) the context is off by {err:.3g} "
                "(or not finite)",
                "subtract the row's max score before exp (torch.softmax does), or "
                "compute scores and softmax in float32 and cast the context back",
            )
        seen.append(f"{name}: max error {err:.2g}")
    large = "the example's scores (unnormalised weights)" if scale == 1 else "large scores"
    return Finding("low_precision", "pass", f"on {large}: " + "; ".join(seen))


def _location(p: _Probe) -> Finding:
    out = p.run()
    state = p.prev_weights(p.mask)
    padded = ~p.mask[:, None, :]  # (B, 1, Tk)
    stale = p.run(state=torch.where(padded, 1 + torch.rand_like(state), state)).context
    if not _close(stale.float(), out.context.float(), 1e-4):
        return Finding(
            "location_state",
            "fail",
            f"weight on padded keys in the previous weights moved the context by "
            f"up to {float((stale - out.context).abs().max()):.3g}: the location "
            "features read padding (a conv reads each key's neighbours)",
            "zero the previous weights of padded keys before the location conv: "
            "prev = prev.masked_fill(~key_mask[:, None, :], 0)",
        )
    other = p.run(state=p.prev_weights(p.mask, torch.randn_like(p.logits) * 4)).weights
    if _close(other.float(), out.weights.float(), 1e-5):
        return Finding(
            "location_state",
            "fail",
            "the weights are the same for any previous weights: the location "
            "state does not reach the score",
            "feed the previous weights to the score: f = conv(prev_weights), "
            "e_ij = v^T tanh(W q_i + U k_j + L f_ij + b) (Chorowski et al. 2015)",
        )
    return Finding(
        "location_state",
        "pass",
        "previous weights on padded keys change nothing, and the weights follow "
        "the previous weights (each row summing to 1 over its valid keys)",
    )


_LAWS = {
    "one": ("each row sums to 1 over its allowed keys", "normalise over the allowed keys"),
    "at_most_one": (
        "each row with an allowed key sums to more than 0 and at most 1",
        "normalise within the window before the Gaussian, and keep at least the "
        "key nearest the centre in it",
    ),
    "non_increasing": (
        "each row sums to at most 1 and to at most the previous step's sum "
        "(the rest: the chance of having read past the last key)",
        "alpha_ij = p_ij sum_{k<=j} alpha_{i-1,k} prod_{k<=l<j} (1 - p_il): "
        "the product of stay probabilities between k and j keeps each step's "
        "mass within the previous step's (Raffel et al. 2017)",
    ),
    "unnormalised": ("weights are not normalised (their sums are free); each is >= 0", ""),
}


def _weight_sums(p: _Probe) -> Finding:
    law = getattr(p.module, "weight_sums", None)
    if law is None:
        return Finding(
            "weight_sums",
            "skip",
            "the module declares no weight_sums (one of "
            f"{', '.join(WEIGHT_SUMS)}): nothing to check the sums against",
        )
    if law not in WEIGHT_SUMS:
        raise ValueError(
            f"module.weight_sums: expected one of {', '.join(WEIGHT_SUMS)}, got {law!r}"
        )
    w = _weights(p.run().weights.double())  # (B, H, Tq, Tk)
    sums = w.sum(-1)  # (B, H, Tq)
    keyed = p.mask.any(-1)  # (B,) examples with an allowed key
    rule, fix = _LAWS[law]
    if not torch.isfinite(w).all() or float(w.min()) < -1e-6:
        return Finding(
            "weight_sums",
            "fail",
            f"weights below 0 or not finite (min {float(w.min()):.3g}); expected: {rule}",
            "weights are probabilities or densities: never below 0",
        )
    tol = 1e-4
    wrong = []
    if law == "one" and not torch.allclose(sums[keyed], torch.ones_like(sums[keyed]), atol=tol):
        wrong.append("a row does not sum to 1")
    if law in ("at_most_one", "non_increasing") and float(sums.max()) > 1 + tol:
        wrong.append("a row sums to more than 1")
    if law == "at_most_one" and bool((sums[keyed] <= 0).any()):
        wrong.append("a query with allowed keys reads none of them (its row sums to 0)")
    if law == "non_increasing" and bool((sums[..., 1:] > sums[..., :-1] + tol).any()):
        wrong.append("a row sums to more than the previous step's")
    detail = f"row sums {float(sums.min()):.4g}..{float(sums.max()):.4g}"
    if wrong:
        return Finding(
            "weight_sums", "fail", f"{'; '.join(wrong)} ({detail}); declared {law!r}: {rule}", fix
        )
    return Finding("weight_sums", "pass", f"{rule} ({law!r}; {detail})")


def _nan_padding(p: _Probe) -> Finding:
    pad = ~p.mask[..., None]  # (B, Tk, 1)
    garbage = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e30])
    fill = garbage.repeat(p.key.shape[1] // 4 + 1)[: p.key.shape[1]][None, :, None]  # (1, Tk, 1)
    key, value = torch.where(pad, fill, p.key), torch.where(pad, fill, p.value)
    clean, grads = p.backward(p.module, p.query, p.key, p.value)
    routes = [("the call", False)] + ([("prepare()", True)] if p.prepares() else [])
    for route, prepared in routes:
        try:
            out, bad_grads = p.backward(p.module, p.query, key, value, prepared=prepared)
        except RuntimeError as exc:
            return Finding(
                "nan_padding",
                "fail",
                f"NaN/inf in padded keys and values made {route} raise: {exc}",
                "zero padded keys and values before using them: key = "
                "key.masked_fill(~key_mask[..., None], 0)",
            )
        moved = p.differences(clean, out, grads, bad_grads)
        if moved:
            return Finding(
                "nan_padding",
                "fail",
                f"NaN/inf in padded keys and values (through {route}) reached {', '.join(moved)}",
                "zero padded keys and values before any product (a masked weight "
                "of 0 times NaN is NaN, in the backward pass too): key = "
                "key.masked_fill(~key_mask[..., None], 0), the same for value",
            )
    through = " and through prepare()" if p.prepares() else ""
    return Finding(
        "nan_padding",
        "pass",
        f"NaN, inf and 1e30 in padded keys and values "
        f"(in the call{through}) reach no output and no gradient",
    )


def _memory(p: _Probe) -> Finding:
    if not p.prepares():
        return Finding("prepared_memory", "skip", "the module has no prepare(key, value)")
    tensors = p.run()
    with torch.no_grad():
        memory = _prepare(p.module, p.key, p.value)
    prepared = p.run(key=memory, value=None)
    moved = p.differences(tensors, prepared, tol=1e-5)
    if moved:
        return Finding(
            "prepared_memory",
            "fail",
            f"a call over prepare(key, value) differs from the call over the "
            f"tensors in {', '.join(moved)}",
            "prepare() must do exactly the per-key work of a call (the same "
            "projections, on the same keys), nothing else",
        )
    return Finding(
        "prepared_memory",
        "pass",
        "a call over prepare(key, value) equals the call over the tensors",
    )


def _state_threading(p: _Probe) -> Finding:
    full = p.run()
    if full.state is not None and not isinstance(full.state, torch.Tensor):
        return Finding(
            "state_threading",
            "skip",
            f"the state is a {type(full.state).__name__}: the doctor compares tensor states only",
        )
    key: Any = p.key
    value: torch.Tensor | None = p.value
    if p.prepares():
        with torch.no_grad():
            key, value = _prepare(p.module, p.key, p.value), None
    state: Any = None
    states: list[Any] = []
    steps: list[Output] = []
    for i in range(p.query.shape[1]):
        states.append(state)
        steps.append(p.run(query=p.query[:, i : i + 1], key=key, value=value, state=state))
        state = steps[-1].state
    stepped = Output(
        torch.cat([s.context for s in steps], 1), torch.cat([s.weights for s in steps], -2), state
    )
    moved = p.differences(full, stepped, tol=1e-5)
    if moved:
        return Finding(
            "state_threading",
            "fail",
            f"one output step at a time, each given the state the previous one "
            f"returned, differs from the whole query sequence at once in "
            f"{', '.join(moved)}",
            "start each call from prev_state (not the initial state) and return "
            "the state after its last query",
        )
    over = "over prepare()'s memory" if p.prepares() else "over the keys"
    if full.state is None:
        return Finding(
            "state_threading",
            "pass",
            f"one step at a time ({over}) equals the whole sequence; the module returns no state",
        )
    reached, seen = False, any(bool(s.weights.any()) for s in steps)
    for i in range(1, len(steps)):
        s = states[i]
        if not isinstance(s, torch.Tensor) or not s.dtype.is_floating_point:
            continue
        # Other states of the same shape and scale: the reversed state, and random ones (a
        # one-hot state nudged a little still starts a hard scan at the same key).
        scale = 1 + float(s.abs().max())
        for other_state in [s.flip(-1)] + [torch.rand_like(s) * scale for _ in range(3)]:
            other = p.run(query=p.query[:, i : i + 1], key=key, value=value, state=other_state)
            reached = reached or not _close(other.weights.float(), steps[i].weights.float(), 1e-5)
            seen = seen or bool(other.weights.any())
    if not seen:
        return Finding(
            "state_threading",
            "pass",
            f"one step at a time ({over}) equals the "
            "whole sequence; the module put no weight on any key (a hard monotonic "
            "reader that never stops), so whether the state reaches the weights "
            "was not seen",
        )
    if len(steps) > 1 and not reached:
        return Finding(
            "state_threading",
            "fail",
            "the weights are the same for any previous state: the state does not "
            "reach the alignment",
            "compute each step from the state passed in (monotonic: alpha_{i-1}; GMM: kappa_{i-1})",
        )
    return Finding(
        "state_threading",
        "pass",
        f"one step at a time ({over}), each given the previous step's state, equals "
        "the whole sequence, and another state changes the weights",
    )


def _unnormalised(p: _Probe) -> bool:
    """True for a module with state whose weights are not normalised (a mixture of Gaussians)."""
    return p.stateful and getattr(p.module, "weight_sums", None) == "unnormalised"


def _saturation(p: _Probe, scale: float = 50.0) -> Finding:
    if _unnormalised(p):
        return Finding(
            "saturation",
            "skip",
            "unnormalised weights (a mixture of Gaussians) come from no "
            "probability that could saturate",
        )
    for factor in (scale, -scale):
        module = copy.deepcopy(p.module)
        with torch.no_grad():
            for t in module.parameters():
                if t.dtype.is_floating_point:
                    t.mul_(factor)
        try:
            out, grads = p.backward(module, p.query, p.key, p.value)
        except RuntimeError as exc:
            return Finding(
                "saturation",
                "fail",
                f"with the parameters times {factor:g} the call raised: {exc}",
                "",
            )
        bad = _non_finite(out, grads)
        if bad:
            return Finding(
                "saturation",
                "fail",
                f"with the parameters times {factor:g} (scores and energies of tens "
                f"to hundreds: probabilities of exactly 0 and 1) NaN/inf reached "
                f"{' and '.join(bad)}",
                "work in log space: log p = logsigmoid(e), log(1 - p) = "
                "logsigmoid(-e), and no division by a cumulative product of "
                "(1 - p), which reaches 0 (Raffel et al. 2017's closed form); "
                "subtract the max before exp",
            )
    return Finding(
        "saturation",
        "pass",
        f"with the parameters times +-{scale:g} (probabilities of exactly 0 and 1) "
        "outputs and gradients stay finite",
    )


def doctor(
    module: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor],
    *,
    call: Callable[..., Sequence[Any]] | None = None,
    location: bool | None = None,
    stateful: bool | None = None,
    dtypes: Sequence[torch.dtype] = (torch.float16, torch.bfloat16),
    seed: int = 0,
) -> Report:
    """Probe ``module`` with ``example_inputs`` and report on every check of :data:`CHECKS`
    (a check that does not apply to this kind of module is skipped, saying why).

    Args:
        module: an attention module (kept as it is: checks that change dtype or parameters
            work on copies); put it in eval mode if it has dropout or training noise.
        example_inputs: ``(query (B, Tq, Dq), key (B, Tk, Dk), value (B, Tk, Dv))`` with
            ``B >= 2``, ``Tq >= 2``, ``Tk >= 2``; the doctor makes its own key masks.
        call: ``call(module, query, key, value, key_mask) -> (context, weights)``, with
            ``prev_weights`` after ``key_mask`` for a location module, and ``state`` after
            ``key_mask`` returning ``(context, weights, state)`` for a stateful one (default:
            see the module docstring).
        location: whether the module takes a location state (previous weights): then every
            call passes one, ``key_permutation`` is skipped and ``location_state`` checks it.
            Default: True for an :class:`attnkit.Attention` with ``score="location"``.
        stateful: whether the module carries its own state from one output step to the next
            (see the module docstring): ``weight_sums`` and ``state_threading`` check it.
            Default: True for attnkit's alignment modules.
        dtypes: the low-precision dtypes tried on large scores (bfloat16 autocast is tried
            too).
        seed: seeds the random variations.

    Shape:
        key_mask ``(B, Tk)`` True where a query may attend; prev_weights ``(B, Tq, Tk)``;
        weights ``(B, Tq, Tk)`` or ``(B, H, Tq, Tk)``.
    """
    query, key, value = _check_inputs(example_inputs)
    for name, flag in (("location", location), ("stateful", stateful)):
        if flag not in (None, True, False):
            raise ValueError(f"{name}: expected None, True or False, got {flag!r}")
    if location and stateful:
        raise ValueError(
            "location, stateful: expected at most one True (a module takes "
            "previous weights from its caller or carries its own state), got both"
        )
    if query.shape[0] < 2:
        raise ValueError(
            f"example_inputs: expected B >= 2 (one example is left unpadded), "
            f"got B={query.shape[0]}"
        )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        if stateful is None:
            stateful = isinstance(module, Alignment) and not location
        if location is None:
            location = isinstance(module, Attention) and module.score.needs_prev
        kind = "stateful" if stateful else "location" if location else "plain"
        p = _Probe(module, call or default_call, query, key, value, kind)
        checks = (
            _sums,
            _polarity,
            _padding,
            _empty,
            _query,
            _permutation,
            lambda probe: _precision(probe, dtypes),
            _location,
            _weight_sums,
            _nan_padding,
            _memory,
            _state_threading,
            _saturation,
        )  # in CHECKS order
        findings = [
            Finding(name, "skip", _SKIPPED[name][kind])
            if kind in _SKIPPED.get(name, {})
            else check(p)
            for name, check in zip(CHECKS, checks)
        ]
    finally:
        torch.random.set_rng_state(generator_state)
    return Report(findings)


def assert_healthy(
    module: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor],
    *,
    allow: tuple[str, ...] = (),
    **kwargs: Any,
) -> Report:
    """The pytest helper: :func:`doctor`, raising ``AssertionError`` with the report when a
    check other than those in ``allow`` fails (e.g. ``allow=("key_permutation",)`` for a
    position-aware score). Returns the report."""
    unknown = [c for c in allow if c not in CHECKS]
    if unknown:
        raise ValueError(f"allow: expected names among {', '.join(CHECKS)}, got {unknown}")
    report = doctor(module, example_inputs, **kwargs)
    failed = [c for c in report.failed() if c not in allow]
    if failed:
        raise AssertionError(f"attention doctor: {', '.join(failed)} failed\n{report}")
    return report
