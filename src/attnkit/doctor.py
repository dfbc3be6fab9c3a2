"""The attention doctor: probe any attention module, attnkit's or a user's, for the classic bugs.

:func:`doctor` calls the module on the example inputs and on variations of them, and returns a
:class:`Report` with one :class:`Finding` per check: its verdict (``"pass"``, ``"fail"`` or
``"skip"``), what was seen and, on failure, how to fix it. :func:`assert_healthy` is the
pytest helper: it raises ``AssertionError`` with the report when a check fails.

A module is called as ``call(module, query, key, value, key_mask) -> (context, weights)``:

- ``query (B, Tq, Dq)``, ``key (B, Tk, Dk)``, ``value (B, Tk, Dv)``;
- ``key_mask (B, Tk)`` bool, **True where a query may attend** (attnkit's one polarity);
- ``context (B, Tq, Dv)``, ``weights (B, Tq, Tk)`` or ``(B, H, Tq, Tk)``.

A location-aware module (``location=True``; attnkit's ``score="location"`` by default) also
takes its location state: ``call(module, query, key, value, key_mask, prev_weights)`` with
``prev_weights (B, Tq, Tk)``, the previous step's weights as a decoder passes them (each row
sums to 1 over its valid keys, 0 on padded ones), or a cumulative state built from them.

The default ``call`` serves :class:`attnkit.Attention` (``key_mask=``, ``prev_weights=``,
``need_weights=True``) and any module whose ``forward(query, key, value, key_mask)`` (location:
``forward(query, key, value, key_mask, prev_weights)``) returns ``(context, weights)``; pass
your own ``call`` to adapt another signature.

Example:
    >>> import torch, attnkit
    >>> q, k = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    >>> attnkit.doctor(attnkit.Attention(8, score="additive"), (q, k, k)).ok
    True
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch

from attnkit.attention import Attention

__all__ = ["CHECKS", "Finding", "Report", "assert_healthy", "doctor"]

CHECKS = ("sums_to_one_over_keys", "mask_polarity", "padding_invariance", "empty_rows",
          "query_dependence", "key_permutation", "low_precision", "location_state")


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


def default_call(module, query, key, value, key_mask, prev_weights=None):
    """``(context, weights)`` of ``module`` on one call (see the module docstring); an
    :class:`attnkit.Attention` with heads gets ``prev_weights`` repeated for every head."""
    if isinstance(module, Attention):
        if prev_weights is not None and module.heads > 1:
            prev_weights = prev_weights[:, None].expand(-1, module.heads, -1, -1)
        out = module(query, key, value, key_mask=key_mask, prev_weights=prev_weights,
                     need_weights=True)
        return out.context, out.weights
    extra = () if prev_weights is None else (prev_weights,)
    return tuple(module(query, key, value, key_mask, *extra))


def _check_inputs(example_inputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if not (isinstance(example_inputs, (tuple, list)) and len(example_inputs) == 3
            and all(isinstance(t, torch.Tensor) and t.dim() == 3 for t in example_inputs)):
        raise ValueError("example_inputs: expected (query (B, Tq, Dq), key (B, Tk, Dk), "
                         f"value (B, Tk, Dv)) tensors, got {_describe(example_inputs)}")
    query, key, value = example_inputs
    b, tk = key.shape[:2]
    if query.shape[0] != b or value.shape[:2] != key.shape[:2]:
        raise ValueError(f"example_inputs: expected matching B and Tk, got query "
                         f"{tuple(query.shape)}, key {tuple(key.shape)}, value "
                         f"{tuple(value.shape)}")
    if tk < 2 or query.shape[1] < 2:
        raise ValueError(f"example_inputs: expected Tq >= 2 and Tk >= 2 (the checks vary "
                         f"queries and keys), got Tq={query.shape[1]}, Tk={tk}")
    return tuple(t.detach().float() for t in example_inputs)


def _describe(value) -> str:
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    if isinstance(value, torch.Tensor):
        return f"tensor{tuple(value.shape)}"
    return type(value).__name__


def _weights(w: torch.Tensor) -> torch.Tensor:
    """``(B, Tq, Tk)`` or ``(B, H, Tq, Tk)`` -> ``(B, H, Tq, Tk)``."""
    return w[:, None] if w.dim() == 3 else w


def _close(a: torch.Tensor, b: torch.Tensor, tol: float) -> bool:
    return bool(torch.isfinite(a).all() and torch.isfinite(b).all()
                and (a - b).abs().max() <= tol * (1 + b.abs().max()))


class _Probe:
    """The module and the inputs every check varies: the last key of every example but the
    first (and half the keys of the last, when there are 4 or more) is padding. A location
    module gets previous weights that follow the mask of each call (:meth:`state`)."""

    def __init__(self, module, call, query, key, value, location: bool):
        self.module, self.call, self.location = module, call, location
        self.query, self.key, self.value = query, key, value
        b, tk = key.shape[:2]
        valid = torch.ones(b, tk, dtype=torch.bool)
        valid[1:, -1] = False
        if tk >= 4:
            valid[-1, tk // 2:] = False
        self.mask = valid  # (B, Tk)
        self.logits = torch.randn(b, query.shape[1], tk) * 2  # (B, Tq, Tk): of the state

    def state(self, mask: torch.Tensor, logits: torch.Tensor | None = None) -> torch.Tensor:
        """Previous weights ``(B, Tq, Tk)``: a softmax of ``logits`` over each row's valid keys
        in ``mask`` (B, Tk), 0 on the others and on rows with none."""
        logits = self.logits if logits is None else logits
        w = logits.masked_fill(~mask[:, None, :], torch.finfo(logits.dtype).min).softmax(-1)
        return w * mask.any(-1)[:, None, None]

    def invoke(self, module, query, key, value, mask, state=None):
        """One call of ``module``; a location module gets ``state`` (default: :meth:`state`
        of ``mask``) in the query's dtype."""
        if not self.location:
            return self.call(module, query, key, value, mask)
        state = self.state(mask) if state is None else state
        return self.call(module, query, key, value, mask, state.to(query.dtype))

    def run(self, query=None, key=None, value=None, mask=None, state=None):
        with torch.no_grad():
            return self.invoke(self.module, self.query if query is None else query,
                               self.key if key is None else key,
                               self.value if value is None else value,
                               self.mask if mask is None else mask, state)


def _sums(p: _Probe) -> Finding:
    full = torch.ones_like(p.mask)
    _, w = p.run(mask=full)
    w = _weights(w.float())  # (B, H, Tq, Tk)
    keys, queries = w.sum(-1), w.sum(-2)
    if torch.allclose(keys, torch.ones_like(keys), atol=1e-4):
        return Finding("sums_to_one_over_keys", "pass", "every row sums to 1 over the keys")
    if torch.allclose(queries, torch.ones_like(queries), atol=1e-4):
        return Finding("sums_to_one_over_keys", "fail",
                       "weights sum to 1 over the queries (dim -2), not over the keys",
                       "take the softmax over the key dim: softmax(scores, dim=-1) on "
                       "(B, Tq, Tk) scores")
    return Finding("sums_to_one_over_keys", "fail",
                   f"row sums over the keys range {float(keys.min()):.4g}.."
                   f"{float(keys.max()):.4g}", "normalise the scores with a softmax over the "
                   "key dim (dim=-1 of (B, Tq, Tk))")


def _polarity(p: _Probe) -> Finding:
    _, w = p.run()
    w = _weights(w.float())  # (B, H, Tq, Tk)
    masked = ~p.mask[:, None, None, :]
    on_masked = float(w.masked_fill(~masked, 0).sum(-1).max())
    padded = ~p.mask.all(-1)  # (B,) examples with a masked key
    on_valid = w.masked_fill(masked, 0).sum(-1)[padded]
    if on_masked <= 1e-5:
        return Finding("mask_polarity", "pass", "no weight on keys whose mask is False")
    if float(on_valid.max()) <= 1e-5:
        return Finding("mask_polarity", "fail",
                       "all weight went to the keys whose mask is False: the mask is read "
                       "the other way round",
                       "treat True as 'may attend': scores.masked_fill(~key_mask, min) "
                       "(torch.nn.MultiheadAttention's masks mean the opposite)")
    return Finding("mask_polarity", "fail",
                   f"up to {on_masked:.3g} of a row's weight on keys whose mask is False",
                   "mask the scores before the softmax: scores.masked_fill(~key_mask[:, None, "
                   ":], torch.finfo(scores.dtype).min)")


def _padding(p: _Probe) -> Finding:
    ctx, _ = p.run()
    noise = torch.randn_like(p.key) * 10, torch.randn_like(p.value) * 10
    pad = ~p.mask[..., None]  # (B, Tk, 1)
    other, _ = p.run(key=torch.where(pad, noise[0], p.key),
                     value=torch.where(pad, noise[1], p.value))
    if _close(other.float(), ctx.float(), 1e-4):
        return Finding("padding_invariance", "pass",
                       "changing padded keys and values changes nothing")
    return Finding("padding_invariance", "fail",
                   f"changing padded keys and values moved the context by up to "
                   f"{float((other - ctx).abs().max()):.3g}",
                   "pass the key mask (or key lengths) to the attention and mask the scores "
                   "of padded keys before the softmax")


def _empty(p: _Probe) -> Finding:
    mask = p.mask.clone()
    mask[-1] = False
    module = copy.deepcopy(p.module)
    q, k, v = (t.clone().requires_grad_(True) for t in (p.query, p.key, p.value))
    try:
        ctx, _ = p.invoke(module, q, k, v, mask)
        ctx.float().sum().backward()
    except RuntimeError as exc:
        return Finding("empty_rows", "fail", f"a row with no allowed key raised: {exc}",
                       "fill masked scores with torch.finfo(dtype).min, not -inf, and give "
                       "rows with no key zero weights")
    grads = [t.grad for t in (q, k, v)] + [t.grad for t in module.parameters()]
    bad = [] if torch.isfinite(ctx).all() else ["the context"]
    if not all(g is None or torch.isfinite(g).all() for g in grads):
        bad.append("the gradients")
    if bad:
        return Finding("empty_rows", "fail",
                       f"an example whose keys are all masked gives NaN/inf in {' and '.join(bad)}",
                       "fill masked scores with torch.finfo(dtype).min instead of -inf, and "
                       "zero the weights and context of rows with no allowed key")
    return Finding("empty_rows", "pass",
                   "an example with every key masked gives finite outputs and gradients")


def _query(p: _Probe) -> Finding:
    ctx, w = p.run()
    other, w2 = p.run(query=torch.randn_like(p.query) * 3)
    if not _close(w2.float(), w.float(), 1e-5):
        return Finding("query_dependence", "pass", "the weights change with the query")
    return Finding("query_dependence", "fail",
                   "the weights are the same for any query: the score's query term is a "
                   "constant per row, which the softmax over keys cancels",
                   "make the score couple query and key: v^T tanh(W q + U k) (additive) or "
                   "q^T W k (general), not w^T [q; k]")


def _permutation(p: _Probe) -> Finding:
    if p.location:
        return Finding("key_permutation", "skip",
                       "a location-aware score reads the previous weights of each key's "
                       "neighbours: key order matters by design")
    full = torch.ones_like(p.mask)
    ctx, _ = p.run(mask=full)
    perm = torch.randperm(p.key.shape[1], generator=torch.Generator().manual_seed(0))
    other, _ = p.run(key=p.key[:, perm], value=p.value[:, perm], mask=full)
    if _close(other.float(), ctx.float(), 1e-4):
        return Finding("key_permutation", "pass",
                       "permuting keys with their values leaves the context unchanged")
    return Finding("key_permutation", "fail",
                   f"permuting keys with their values moved the context by up to "
                   f"{float((other - ctx).abs().max()):.3g} (expected of position-aware "
                   "scores: location, windows, causal, relative positions)",
                   "a content-only score must not depend on key order: look for an index "
                   "used where the key's content was meant")


def _precision(p: _Probe, dtypes) -> Finding:
    scale = 32.0  # scores large enough that exp() without the max subtracted overflows in fp16
    q = p.query * scale
    ref, _ = p.run(query=q)
    seen = []
    for dtype in dtypes:
        module = copy.deepcopy(p.module).to(dtype)
        try:
            with torch.no_grad():
                ctx, _ = p.invoke(module, q.to(dtype), p.key.to(dtype), p.value.to(dtype),
                                  p.mask)
        except RuntimeError as exc:
            return Finding("low_precision", "skip", f"{dtype} is not served here: {exc}")
        err = float((ctx.float() - ref.float()).abs().max())
        if not torch.isfinite(ctx).all() or err > 0.05 * (1 + float(ref.abs().max())):
            return Finding("low_precision", "fail",
                           f"in {dtype} with large scores the context is off by {err:.3g} "
                           "(or not finite)",
                           "subtract the row's max score before exp (torch.softmax does), or "
                           "compute scores and softmax in float32 and cast the context back")
        seen.append(f"{dtype}: max error {err:.2g}")
    return Finding("low_precision", "pass", "; ".join(seen))


def _location(p: _Probe) -> Finding:
    if not p.location:
        return Finding("location_state", "skip", "the module takes no location state (pass "
                       "location=True for one that takes previous weights)")
    ctx, w = p.run()
    state = p.state(p.mask)
    padded = ~p.mask[:, None, :]  # (B, 1, Tk)
    stale, _ = p.run(state=torch.where(padded, 1 + torch.rand_like(state), state))
    if not _close(stale.float(), ctx.float(), 1e-4):
        return Finding("location_state", "fail",
                       f"weight on padded keys in the previous weights moved the context by "
                       f"up to {float((stale - ctx).abs().max()):.3g}: the location features "
                       "read padding (a conv reads each key's neighbours)",
                       "zero the previous weights of padded keys before the location conv: "
                       "prev = prev.masked_fill(~key_mask[:, None, :], 0)")
    _, other = p.run(state=p.state(p.mask, torch.randn_like(p.logits) * 4))
    if _close(other.float(), w.float(), 1e-5):
        return Finding("location_state", "fail",
                       "the weights are the same for any previous weights: the location "
                       "state does not reach the score",
                       "feed the previous weights to the score: f = conv(prev_weights), "
                       "e_ij = v^T tanh(W q_i + U k_j + L f_ij + b) (Chorowski et al. 2015)")
    return Finding("location_state", "pass",
                   "previous weights on padded keys change nothing, and the weights follow "
                   "the previous weights (each row summing to 1 over its valid keys)")


def doctor(module, example_inputs, *, call: Callable | None = None,
           location: bool | None = None, dtypes=(torch.float16, torch.bfloat16),
           seed: int = 0) -> Report:
    """Probe ``module`` with ``example_inputs`` and report on every check of :data:`CHECKS`.

    Args:
        module: an attention module (kept as it is: checks that run backward or change dtype
            work on copies); put it in eval mode if it has dropout.
        example_inputs: ``(query (B, Tq, Dq), key (B, Tk, Dk), value (B, Tk, Dv))`` with
            ``B >= 2``, ``Tq >= 2``, ``Tk >= 2``; the doctor makes its own key masks.
        call: ``call(module, query, key, value, key_mask) -> (context, weights)``, with
            ``prev_weights`` after ``key_mask`` for a location module (default: see the module
            docstring).
        location: whether the module takes a location state (previous weights): then every
            call passes one, ``key_permutation`` is skipped and ``location_state`` checks it.
            Default: True for an :class:`attnkit.Attention` with ``score="location"``.
        dtypes: the low-precision dtypes tried on large scores.
        seed: seeds the random variations.

    Shape:
        key_mask ``(B, Tk)`` True where a query may attend; prev_weights ``(B, Tq, Tk)``;
        weights ``(B, Tq, Tk)`` or ``(B, H, Tq, Tk)``.
    """
    query, key, value = _check_inputs(example_inputs)
    if location not in (None, True, False):
        raise ValueError(f"location: expected None, True or False, got {location!r}")
    if query.shape[0] < 2:
        raise ValueError(f"example_inputs: expected B >= 2 (one example is left unpadded), "
                         f"got B={query.shape[0]}")
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        if location is None:
            location = isinstance(module, Attention) and module.score.needs_prev
        p = _Probe(module, call or default_call, query, key, value, bool(location))
        findings = [_sums(p), _polarity(p), _padding(p), _empty(p), _query(p),
                    _permutation(p), _precision(p, dtypes), _location(p)]
    finally:
        torch.random.set_rng_state(generator_state)
    return Report(findings)


def assert_healthy(module, example_inputs, *, allow: tuple[str, ...] = (), **kwargs) -> Report:
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
