"""Predicting an attention call's peak memory before running it, path by path.

:func:`estimate` takes an :class:`~attnkit.attention.Attention` module and the sizes of a call
(:class:`CallShape`: no tensors needed) and returns, for every path that
:mod:`~attnkit.attention.dispatch` knows (reference, sdpa, chunked, step), the peak *extra*
bytes of the forward pass alone and of forward + backward (:class:`PathEstimate`), or why the
path cannot serve the call.

The prediction replays, in order, the tensors each path allocates and frees: their shapes
times the size of their dtype, the chunked path's block sizes
(:func:`attnkit.attention.chunked.default_blocks`), what autograd keeps for backward and the
transients of each backward step (:class:`_Ledger`). Nothing is run. *Extra* is what the
call adds to what exists before it: the inputs, the parameters and the output's upstream
gradient are not counted; the output, the weights, the saved tensors and the gradients of the
inputs and parameters are.

Not modelled (docs/tools.md): tensors of ``O(B * T)`` elements (masks of key lengths, the
log-sum-exp, running maxima), the C++ kernels' own scratch (``std::vector``s of a few
``threads * block * A`` floats), the allocator's rounding and caching (CUDA rounds to 512
bytes and keeps freed blocks; glibc keeps freed memory in its heap, so a process's resident
memory can exceed the prediction), and on CUDA the fused SDPA kernels' workspaces.

:func:`measure_peak` measures the same quantity: on CPU from the allocator's events recorded by
``torch.profiler`` (every allocation and free of a tensor, exact to the byte), on CUDA from
``torch.cuda.max_memory_allocated``.

Why one file: each path's ledger mirrors that path's allocations step by step, and the
estimates of all paths must change together when one path's memory changes; split by path,
the replays would drift from each other and from :func:`estimate`'s comparison of them.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from attnkit.attention.chunked import default_blocks
from attnkit.attention.dispatch import IMPLS, Plan, choose
from attnkit.attention.path import Inputs
from attnkit.ops.precision import compute_dtype

__all__ = [
    "PATHS",
    "VARIES",
    "CallShape",
    "PathEstimate",
    "estimate",
    "example_call",
    "input_bytes",
    "largest_fit",
    "measure_peak",
]

# The paths an estimate covers, in the order they are listed.
PATHS = tuple(i for i in IMPLS if i != "auto")


@dataclass(frozen=True)
class CallShape:
    """The sizes of one attention call, as the planner needs them (no tensors).

    Attributes:
        batch: ``B``.
        queries: ``Tq`` (1 for a one-step query).
        keys: ``Tk``.
        dtype: the inputs' dtype.
        device: ``"cpu"``, ``"cuda"``, ...
        one_step: the query is ``(B, Dq)`` (a decoder step), not ``(B, Tq, Dq)``.
        key_padding: ``key_lengths`` or ``key_mask`` is given.
        positions: ``positions`` is given (with ``causal`` or a window).
        need_weights: the weights are asked for (always for the location score).
        value_is_key: the values are the keys tensor (``value`` omitted or the same tensor).
        query_is_key: the queries are that tensor too (self-attention, ``Tq == Tk``).
        training: dropout applies (the module's ``training`` flag).
    """

    batch: int
    queries: int
    keys: int
    dtype: torch.dtype = torch.float32
    device: str = "cpu"
    one_step: bool = False
    key_padding: bool = False
    positions: bool = False
    need_weights: bool = False
    value_is_key: bool = False
    query_is_key: bool = False
    training: bool = False


@dataclass(frozen=True)
class PathEstimate:
    """Predicted peak extra memory (and, when timed, the time) of one path for one call.

    Attributes:
        impl: the path (:data:`PATHS`).
        kernel: what computes the additive score there (:class:`~attnkit.attention.Plan`).
        forward_bytes: peak extra bytes of the forward pass (under ``torch.no_grad()``), or
            None when the path cannot serve the call.
        train_bytes: peak extra bytes of forward + backward (inputs and parameters requiring
            gradients), or None.
        blocker: why the path cannot serve the call, or None.
        forward_seconds, train_seconds: predicted time (:func:`estimate` with
            ``timing=True``), else None.
    """

    impl: str
    kernel: str
    forward_bytes: int | None
    train_bytes: int | None
    blocker: str | None = None
    forward_seconds: float | None = None
    train_seconds: float | None = None


def estimate(attn, shape: CallShape, *, timing: bool = False) -> Plan:
    """The path the module's ``impl`` (``"auto"``: the fastest that serves the call) takes
    for a call of ``shape``, with the predicted peak extra memory of every path.

    Args:
        attn: an :class:`~attnkit.attention.Attention` module (its sizes, score, heads,
            window, causal, dropout and ``impl`` are read).
        shape: the call's sizes.
        timing: also predict each path's time: it runs that path of a copy of ``attn`` on
            random inputs, at sizes that grow until a run takes 0.2 s or the call's own size
            is reached, and scales the time by the ratio of work (:func:`_work`). Memory is
            never measured: it comes from the model alone.

    Returns:
        The :class:`~attnkit.attention.Plan`, its ``estimates`` one :class:`PathEstimate` per
        path of :data:`PATHS` (``plan.predicted`` is the one taken).
    """
    call = _Call.of(attn, shape)
    estimates = []
    for impl in PATHS:
        try:
            plan = _choose(attn, call, impl)
        except ValueError as exc:
            estimates.append(PathEstimate(impl, "eager", None, None, str(exc)))
            continue
        forward, train = _run(call, plan, train=False), _run(call, plan, train=True)
        seconds = (
            (_seconds(attn, call, impl, train=False), _seconds(attn, call, impl, train=True))
            if timing
            else (None, None)
        )
        estimates.append(PathEstimate(impl, plan.kernel, forward, train, None, *seconds))
    return replace(_choose(attn, call, attn.impl), estimates=tuple(estimates))


def input_bytes(attn, shape: CallShape) -> int:
    """Bytes of a call's inputs (query, key, value) and the module's parameters: what a
    memory budget holds besides the call's extra memory."""
    call = _Call.of(attn, shape)
    n = call.b * (
        call.tq * call.dq
        + (0 if shape.query_is_key else call.tk * call.dk)
        + (0 if shape.value_is_key else call.tk * call.dv)
    )
    return n * call.io + call.param_bytes


VARIES = ("batch", "queries", "window")


def largest_fit(
    attn, shape: CallShape, limit: int, *, vary: str = "batch", train: bool = True
) -> int | None:
    """The largest value of one size for which a call fits in ``limit`` bytes with its inputs
    and parameters, on the path the module's ``impl`` takes there; None when even the
    smallest does not fit.

    Args:
        vary: ``"batch"`` (``B``, up to 2^20), ``"queries"`` (``Tq``, up to the call's: the
            queries of one example attend independently, so they can be split into chunks of
            that many calls) or ``"window"`` (``w`` of ``window=(w, w)``, up to ``Tk``: local
            attention, each query sees ``2w + 1`` keys around its position).
        train: fit forward + backward, else the forward pass alone.
    """
    if vary not in VARIES:
        raise ValueError(f"vary: expected one of {', '.join(VARIES)}, got {vary!r}")
    module = copy.copy(attn)  # shares the parameters; only a window is set on it

    def fits(n: int) -> bool:
        if vary == "batch":
            s = replace(shape, batch=n)
        elif vary == "queries":
            s = replace(shape, queries=n, query_is_key=shape.query_is_key and n == shape.keys)
        else:
            module.window = (n, n)
            s = replace(shape, positions=shape.positions or shape.one_step)
        predicted = estimate(module, s).predicted
        peak = predicted.train_bytes if train else predicted.forward_bytes
        return input_bytes(module, s) + peak <= limit

    low = 0 if vary == "window" else 1
    most = {"batch": 1 << 20, "queries": shape.queries, "window": shape.keys}[vary]
    if not fits(low):
        return None
    lo, hi = low, low + 1  # fits(lo); then grow hi until it does not fit
    while hi <= most and fits(hi):
        lo, hi = hi, 2 * hi
    hi = min(hi, most + 1)
    while hi - lo > 1:  # fits(lo), not fits(hi) (or hi past the most)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _choose(attn, call: _Call, impl: str) -> Plan:
    """:func:`dispatch.choose` for the call's sizes (as :func:`dispatch.call_inputs` gives
    them for its tensors, with queries aligned to keys by position)."""
    s = call.shape
    pure_causal = _pure_causal(call)
    mask_elements = 0 if pure_causal else call.mask
    return choose(
        impl,
        Inputs(
            score=attn.score,
            need_weights=call.need_weights,
            shape=(s.batch, attn.heads, s.queries, s.keys),
            window=attn.window,
            dropout_p=call.dropout,
            device_type=torch.device(s.device).type,
            dtype=s.dtype,
            sdpa_mask_elements=mask_elements,
            plain_keys=not call.band,
        ),
    )


# --------------------------------------------------------------------------- time


def _work(c: _Call, impl: str) -> float:
    """What a call's time is taken to be proportional to on a path: its (query, key) pairs
    times the features each involves (``F`` to score, ``Dv`` to sum; for additive scores,
    ``A`` tanh), plus the projections' multiply-adds. Causal calls on the fused paths and
    windows on the chunked path count only the keys they visit."""
    keys: float = c.tk
    if c.window is not None and impl == "chunked":
        keys = c.keys_per_query
    elif c.causal and impl in ("chunked", "sdpa"):
        keys = (c.tk + 1) / 2
    pairs = c.b * c.h * c.tq * keys * (c.f + c.hv)
    projections = c.b * (c.tq * c.dq + c.tk * c.dk) * c.h * c.f
    return pairs + projections


# Timing runs: the first of B=1 and Tq, Tk of at most PROBE_START, each next one twice as large
# in each (up to the call's sizes); none may take more than PROBE_BYTES (inputs and the path's
# predicted peak): a call too large to run is timed from the largest run that fits.
PROBE_START = 64
PROBE_BYTES = 1 << 30


def _seconds(attn, c: _Call, impl: str, *, train: bool, enough: float = 0.2) -> float:
    """Time of a call on ``impl``: a copy of ``attn`` run on that path at sizes growing (see
    :data:`PROBE_START`) until one run takes ``enough`` seconds, the sizes are the call's, or
    the next would need more than :data:`PROBE_BYTES`; scaled by the ratio of :func:`_work`.

    Raises:
        ValueError: even the smallest run would need more than :data:`PROBE_BYTES`.
    """
    module = copy.deepcopy(attn).train(c.shape.training)
    module.impl = impl
    s, grow = c.shape, 1
    last: tuple[float, CallShape] | None = None
    while True:
        tq = 1 if s.one_step else min(s.queries, PROBE_START * grow)
        tk = tq if s.query_is_key else min(s.keys, PROBE_START * grow)
        probe = replace(s, batch=min(s.batch, grow), queries=tq, keys=tk)
        need = _probe_bytes(module, probe, impl, train)
        if need > PROBE_BYTES and last is None:
            raise ValueError(
                f"timing: the smallest run of the {impl} path (B={probe.batch}, "
                f"Tq={tq}, Tk={tk}) needs {need:,} bytes, more than the "
                f"{PROBE_BYTES:,} a timing run may take; plan memory without "
                "--time"
            )
        if need > PROBE_BYTES:
            break
        run = example_call(module, probe, train=train)
        run()  # warm-up: kernels built or compiled, first allocations
        start = time.perf_counter()
        run()
        last = (time.perf_counter() - start, probe)
        if last[0] >= enough or probe == s:
            break
        grow *= 2
    assert last is not None  # the first run either raises or sets it
    took, probe = last
    return took * _work(c, impl) / _work(_Call.of(module, probe), impl)


def _probe_bytes(module, probe: CallShape, impl: str, train: bool) -> int:
    """Bytes a timing run of ``probe`` takes on ``impl``: its inputs and the path's peak."""
    call = _Call.of(module, probe)
    try:
        peak = _run(call, _choose(module, call, impl), train=train)
    except ValueError:  # the path does not serve the smaller run: its inputs alone
        peak = 0
    return input_bytes(module, probe) + (peak or 0)


def example_call(module, shape: CallShape, *, train: bool) -> Callable[[], None]:
    """A call of ``module`` of ``shape``'s sizes on random inputs (made here, not by the call):
    ``run()`` does the forward pass (under ``torch.no_grad()``), or with ``train`` forward and
    backward from a gradient of ones, then clears the gradients. For checking a prediction:
    ``measure_peak(example_call(attn, shape, train=True))`` (after one warm-up call)."""
    s, g = shape, torch.Generator().manual_seed(0)

    def rand(*size):
        return torch.randn(*size, generator=g).to(s.device, s.dtype).requires_grad_(train)

    rows = () if s.one_step else (s.queries,)
    query = rand(s.batch, *rows, module.query_dim)
    key = query if s.query_is_key else rand(s.batch, s.keys, module.key_dim)
    value = None if s.value_is_key else rand(s.batch, s.keys, module.value_dim)
    kwargs: dict[str, Any] = {"need_weights": s.need_weights}
    if s.key_padding:
        kwargs["key_lengths"] = torch.full((s.batch,), s.keys, device=s.device)
    if s.positions:
        aligned = torch.arange(s.queries, device=s.device) * s.keys // s.queries
        kwargs["positions"] = (
            aligned[0].expand(s.batch) if s.one_step else aligned.expand(s.batch, -1)
        )
    if module.score.needs_prev:
        heads = (module.heads,) if module.heads > 1 else ()
        kwargs["prev_weights"] = torch.full(
            (s.batch, *heads, *rows, s.keys), 1 / s.keys, device=s.device, dtype=s.dtype
        )
    leaves = [x for x in (query, key, value) if x is not None and x.requires_grad]
    upstream = torch.ones(s.batch, *rows, module.value_dim, device=s.device, dtype=s.dtype)

    def run():
        with torch.set_grad_enabled(train):
            out = module(query, key, value, **kwargs)
            if train:
                out.context.backward(upstream)
        if torch.device(s.device).type == "cuda":
            torch.cuda.synchronize(s.device)
        for x in (*leaves, *module.parameters()):
            x.grad = None

    return run


# --------------------------------------------------------------------------- the ledger


class _Ledger:
    """Bytes of live tensors over a replayed call, and their peak."""

    def __init__(self) -> None:
        self.live: dict[str, int] = {}
        self.now = 0
        self.peak = 0

    def new(self, name: str, nbytes: int) -> None:
        """A tensor ``name`` of ``nbytes`` comes to life (replacing one of that name)."""
        self.drop(name)
        self.live[name] = nbytes
        self.now += nbytes
        self.peak = max(self.peak, self.now)

    def drop(self, *names: str) -> None:
        """Tensors freed (names not alive are ignored)."""
        for name in names:
            self.now -= self.live.pop(name, 0)

    def rename(self, old: str, new: str) -> None:
        """The tensor ``old`` goes on as ``new`` (nothing allocated)."""
        if old in self.live:
            self.drop(new)
            self.live[new] = self.live.pop(old)

    def spike(self, *nbytes: int) -> None:
        """Tensors that live only during one operation, on top of what is alive."""
        self.peak = max(self.peak, self.now + sum(nbytes))


@dataclass(frozen=True)
class _Call:
    """The sizes the replay reads, in elements and bytes."""

    shape: CallShape
    b: int
    h: int
    tq: int
    tk: int
    dq: int  # the module's feature sizes
    dk: int
    dv: int
    hq: int  # per head: what the score is fed
    hk: int
    hv: int
    f: int  # prepared features F
    filters: int  # location conv filters
    io: int  # bytes per element of the inputs
    it: int  # bytes per element computed in
    score: str
    dot: bool
    scale: bool  # the dot-family score multiplies by a scale
    param_bytes: int
    need_weights: bool
    dropout: float
    window: tuple[int, int] | None
    causal: bool

    @classmethod
    def of(cls, attn, shape: CallShape) -> _Call:
        h = attn.heads
        score = attn.score
        multi = h > 1
        hq = attn.head_dim if multi else attn.query_dim
        hk = attn.head_dim if multi else attn.key_dim
        hv = attn.head_dim if multi else attn.value_dim
        f = hk
        if not score.dot_family:
            f = score.v.shape[-1]
        filters = score.conv.out_channels if score.name == "location" else 0
        io = torch.finfo(shape.dtype).bits // 8
        it = torch.finfo(compute_dtype(shape.dtype)).bits // 8
        return cls(
            shape=shape,
            b=shape.batch,
            h=h,
            tq=shape.queries,
            tk=shape.keys,
            dq=attn.query_dim,
            dk=attn.key_dim,
            dv=attn.value_dim,
            hq=hq,
            hk=hk,
            hv=hv,
            f=f,
            filters=filters,
            io=io,
            it=it,
            score=score.name,
            dot=score.dot_family,
            scale=score.dot_family and score.scale != 1.0,
            param_bytes=sum(p.numel() * p.element_size() for p in attn.parameters()),
            need_weights=shape.need_weights or score.needs_prev,
            dropout=attn.dropout if shape.training else 0.0,
            window=attn.window,
            causal=attn.causal,
        )

    # sizes in bytes
    def q(self, feat: int, it: bool = False) -> int:
        """Per-head queries ``(B, H, Tq, feat)``."""
        return self.b * self.h * self.tq * feat * (self.it if it else self.io)

    def k(self, feat: int, it: bool = False) -> int:
        """Per-head keys ``(B, H, Tk, feat)``."""
        return self.b * self.h * self.tk * feat * (self.it if it else self.io)

    @property
    def keys_per_query(self) -> int:
        """Keys a query's band spans (all of them without a window)."""
        if self.window is None:
            return self.tk
        return min(self.tk, self.window[0] + self.window[1] + 1)

    @property
    def scores(self) -> int:
        """``(B, H, Tq, Tk)`` in the compute dtype."""
        return self.b * self.h * self.tq * self.tk * self.it

    @property
    def band(self) -> bool:
        return self.causal or self.window is not None

    @property
    def masked(self) -> bool:
        return self.shape.key_padding or self.band

    @property
    def mask(self) -> int:
        """The smallest broadcastable bool mask ``(B|1, 1, Tq|1, Tk)``, bytes."""
        if not self.masked:
            return 0
        rows = self.b if (self.shape.key_padding or self.shape.positions) else 1
        return rows * (self.tq if self.band else 1) * self.tk


# --------------------------------------------------------------------------- one call
#
# The ledger's tensors are named after the code that allocates them: the module's (key_in,
# value_in: padded keys and values zeroed; q_proj, k_proj, v_proj: the heads' projections;
# merged, projected, output), the score's (qf, kf, extra) and each path's.


def _run(c: _Call, plan: Plan, *, train: bool) -> int:
    """Peak extra bytes of one call on ``plan``'s path (forward, or forward + backward)."""
    led = _Ledger()
    s = c.shape
    multi = c.h > 1
    if s.key_padding:  # Call.inputs: zero_padding(key), (value)
        led.new("key_in", c.b * c.tk * c.dk * c.io)
        if not s.value_is_key:
            led.new("value_in", c.b * c.tk * c.dv * c.io)
    if multi:  # q_proj(query) etc., viewed as (B, H, T, d)
        led.new("q_proj", c.q(c.hq))
        led.new("k_proj", c.k(c.hk))
        led.new("v_proj", c.k(c.hv))
        if not train:  # Attention._project returns the projections alone: no graph keeps
            led.drop("key_in", "value_in")  # the zeroed inputs
    prepare_backward = _prepare(led, c, train)
    paths = {"reference": _reference, "sdpa": _sdpa, "chunked": _chunked, "step": _step}
    path_backward = paths[plan.impl](led, c, plan, train)
    if not train or (plan.impl == "reference" and not c.dot):  # dispatch.run's features
        led.drop("qf", "kf", "q_unit", "extra")
    out = c.b * c.tq * c.dv * c.io
    if multi:  # context.transpose(1, 2).reshape(...), out_proj, zeroing rows with no key
        # (SDPA's context is laid out (B, Tq, H, d): the reshape is a view)
        led.new("merged", 0 if plan.impl == "sdpa" else c.q(c.hv))
        led.new("projected", out)
        if not train:
            led.drop("merged", "context")
        if c.masked:
            led.new("zeroed", out)
            led.drop("projected")
    if c.io < c.it:  # finish(): the query's sum in float32
        led.spike(c.b * c.tq * c.dq * c.it)
    led.new("output", out)  # finish(): context + poison
    if c.need_weights:
        led.new("weights_out", c.b * c.h * c.tq * c.tk * c.io)  # weights + poison
    if not train:
        return led.peak
    led.drop("projected", "zeroed")  # what no backward reads
    if not _saves_context(c, plan):
        led.drop("context")
    if multi and c.masked:  # backward of the zeroing
        led.spike(out)
    led.new("d_context", c.q(c.hv))  # backward of out_proj, or of context[:, 0]
    led.drop("merged")
    path_backward()
    led.drop("d_context", "context")
    prepare_backward()
    led.new("param_grads", c.param_bytes)
    return led.peak


def _saves_context(c: _Call, plan: Plan) -> bool:
    """Whether autograd keeps the path's context (the fused kernels' backward reads it)."""
    return plan.impl == "sdpa" or (plan.impl == "chunked" and not c.need_weights)


def _prepare(led: _Ledger, c: _Call, train: bool) -> Callable[[], None]:
    """``score.prepare_query`` / ``prepare_key`` / ``prepare_extra`` (:func:`dispatch.run`);
    returns the backward from the features' gradients (``d_qf``, ``d_kf``, ``d_v``) to the
    inputs'."""
    Q, K = c.q(c.f, it=True), c.k(c.f, it=True)
    if c.score == "cosine":
        led.new("q_unit", c.q(c.hq, it=True))  # F.normalize(q)
        led.new("qf", Q)  # * g
        if not train:
            led.drop("q_unit")
        led.new("kf", K)  # F.normalize(k)
    elif c.score == "general":
        led.new("qf", Q)  # project(q, W)
    elif not c.dot:
        if c.score == "location":
            led.spike(Q)  # W q, before + b
        led.new("qf", Q)  # project(q, W)
        led.new("kf", K)  # project(k, U)
    if c.score == "location":
        led.new("extra", c.scores * c.filters)  # the previous weights' conv (B, H, Tq, Tk, F)

    def backward():
        led.drop("qf", "kf", "extra")  # released with the path's saved tensors
        if c.score == "cosine":  # backward of * g and of normalize
            led.spike(*(c.q(c.hq, it=True),) * 3)
            led.new("d_q", c.q(c.hq))
            led.drop("d_qf", "q_unit")
            if "d_kf" in led.live:
                led.spike(*(c.k(c.hk, it=True),) * 3)
                led.new("d_k", c.k(c.hk))
                led.drop("d_kf")
        elif c.score == "general" or not c.dot:  # the projections' matrix products
            led.new("d_q", c.q(c.hq))
            led.drop("d_qf")
            if not c.dot and "d_kf" in led.live:
                led.new("d_k", c.k(c.hk))
                led.drop("d_kf")
        led.rename("d_qf", "d_q")
        led.rename("d_kf", "d_k")
        _input_grads(led, c)

    return backward


def _input_grads(led: _Ledger, c: _Call) -> None:
    """From the per-head gradients ``d_q``, ``d_k``, ``d_v`` to those of query, key and value
    (through the heads' projections and the zeroing of padding), kept as ``.grad``."""
    s = c.shape
    sizes = {
        "q": c.b * c.tq * c.dq * c.io,
        "k": c.b * c.tk * c.dk * c.io,
        "v": c.b * c.tk * c.dv * c.io,
    }
    for x in ("q", "k", "v"):
        if f"d_{x}" not in led.live:
            continue
        if c.h > 1:  # (B, H, T, d) -> (B, T, H * d) copy, then the projection's product
            led.new(f"d_{x}_merged", led.live[f"d_{x}"])
            led.drop(f"d_{x}")
            led.new(f"grad_{x}", sizes[x])
            led.drop(f"d_{x}_merged")
        else:
            led.rename(f"d_{x}", f"grad_{x}")
        led.drop({"k": "key_in", "v": "value_in"}.get(x, ""))  # released by its user's node
        if x != "q" and s.key_padding:  # zero_padding's backward: grad * keep
            led.new(f"grad_{x}_kept", sizes[x])
            led.drop(f"grad_{x}")
            led.rename(f"grad_{x}_kept", f"grad_{x}")
    led.drop("key_in", "value_in", "q_proj", "k_proj", "v_proj")
    # a tensor used twice gets the sum of its gradients
    if s.value_is_key and "grad_v" in led.live:
        led.spike(sizes["k"])
        led.drop("grad_v")
    if s.query_is_key and "grad_k" in led.live:
        led.spike(sizes["q"])
        led.drop("grad_k")


def _reference(led: _Ledger, c: _Call, plan: Plan, train: bool) -> Callable[[], None]:
    """:func:`reference.reference_attention`: the whole scores (and pair tensor), softmax,
    weighted sum."""
    S = c.scores
    P = S * c.f
    led.new("mask", c.mask)  # call.mask()
    if c.io < c.it:  # upcast(qf, kf): scores in float32
        led.new("q_up", c.q(c.f, it=True))
        led.new("k_up", c.k(c.f, it=True))
    if c.dot:  # scale * qf @ kf^T; with heads, matmul copies the (B, H, T, d) views first
        copies = (c.q(c.f, it=True), c.k(c.f, it=True)) if c.h > 1 and c.io == c.it else ()
        if train:
            for name, nbytes in zip(("q_copy", "k_copy"), copies):
                led.new(name, nbytes)
        else:
            led.spike(*copies, S)
        led.new("scores", S)
        if c.scale:
            led.spike(S)
    else:  # einsum(tanh(qf + kf [+ extra @ L]), v)
        if c.score == "location":
            led.new("extra_copy", c.scores * c.filters)  # einsum's contiguous copy of extra
            led.new("loc", P)  # extra @ L
            if not train:
                led.drop("extra_copy")
            led.new("pre0", P)  # qf + kf
            led.new("pre", P)  # + loc
            led.drop("pre0", "loc")
        else:
            led.new("pre", P)
        led.new("tanh", P)
        led.new("scores", S)
        led.drop("pre")
        if not train:
            led.drop("tanh")
    _softmax_and_sum(led, c, train)
    led.drop("scores", "mask")
    if not train or not c.dot:
        led.drop("q_up", "k_up")

    def backward():
        _softmax_and_sum_backward(led, c)
        if c.dot:
            if c.scale:
                led.spike(S)
            led.new("d_qf", c.q(c.f, it=True))
            led.new("d_kf", c.k(c.f, it=True))
            led.drop("d_scores", "q_copy", "k_copy", "q_up", "k_up")
        else:
            led.new("d_tanh", P)  # einsum's backward
            led.drop("d_scores")
            led.new("d_pre", P)  # tanh's backward
            led.drop("d_tanh", "tanh")
            led.new("d_qf", c.q(c.f, it=True))
            led.new("d_kf", c.k(c.f, it=True))
            if c.score == "location":
                led.spike(c.scores * c.filters)  # d extra
                led.drop("extra_copy")
            led.drop("d_pre")

    return backward


def _softmax_and_sum(led: _Ledger, c: _Call, train: bool) -> None:
    """:func:`reference.weigh` of the scores: masked softmax, dropout, ``weights @ v``."""
    S = c.scores
    if c.masked:  # masked_fill(~mask), softmax, masked_fill(~mask)
        led.new("not_mask", c.mask)
        led.new("filled", S)
        led.new("softmax", S)
        led.new("not_mask2", c.mask)
        led.new("weights", S)
        led.drop("filled")
        if not train:
            led.drop("softmax", "not_mask", "not_mask2")
    else:
        led.new("weights", S)
    if c.io < c.it:  # .to(value.dtype); the softmax's float output stays saved
        led.rename("weights", "weights_float" if c.masked else "softmax")
        led.new("weights", S // c.it * c.io)
        led.drop("weights_float")
        if not train:
            led.drop("softmax")
    low = S // c.it * c.io
    if c.dropout > 0:  # F.dropout: its mask drawn in float, kept as bool
        led.spike(S)
        led.new("drop_mask", S // c.it)
        led.new("dropped", low)
    if c.h > 1:
        led.new("v_copy", c.k(c.hv))  # matmul's contiguous copy of v
    led.new("context", c.q(c.hv))
    if not train:
        led.drop("dropped", "drop_mask", "v_copy")
        if not c.need_weights:
            led.drop("weights")


def _softmax_and_sum_backward(led: _Ledger, c: _Call) -> None:
    """Backward of :func:`_softmax_and_sum`, from ``d_context`` to ``d_scores`` and ``d_v``."""
    S = c.scores
    led.new("d_weights", S // c.it * c.io)
    led.new("d_v", c.k(c.hv))
    led.drop("v_copy", "d_context")  # released with the matrix product's backward node
    if c.masked or c.dropout > 0 or c.io < c.it:  # the matrix product's saved weights
        led.drop("dropped" if c.dropout > 0 else "weights")
    if c.dropout > 0:
        led.new("d_kept", S // c.it * c.io)
        led.drop("d_weights", "drop_mask")
        led.rename("d_kept", "d_weights")
    if c.io < c.it:  # .to(value.dtype) backward
        led.new("d_weights_float", S)
        led.drop("d_weights")
        led.rename("d_weights_float", "d_weights")
    if c.masked:
        led.new("d_softmax", S)
        led.drop("d_weights", "weights", "not_mask2")
        led.new("d_filled", S)
        led.drop("d_softmax", "softmax")
        led.new("d_scores", S)
        led.drop("d_filled", "not_mask")
    else:
        led.new("d_scores", S)
        led.drop("d_weights", "weights", "softmax")


def _sdpa(led: _Ledger, c: _Call, plan: Plan, train: bool) -> Callable[[], None]:
    """:func:`sdpa.sdpa_attention`: PyTorch's fused kernel (on CPU, its flash kernel with a
    per-thread buffer of a block of scores; with dropout, its full-matrix math path)."""
    if c.dropout > 0 and c.shape.device == "cpu":  # q and k scaled, then the reference's work
        led.new("q_scaled", c.q(c.hq, it=True))
        led.new("k_scaled", c.k(c.hk, it=True))
        reference_backward = _reference(led, c, plan, train)
        if not train:
            led.drop("q_scaled", "k_scaled")
        return reference_backward
    threads = torch.get_num_threads() if c.shape.device == "cpu" else 0
    q_split = min(c.tq, 256 if c.tq >= 768 else 64 if c.tq >= 192 else 32)
    kv_split = min(512, c.tk)
    masked = c.masked and not _pure_causal(c)
    low = c.io < c.it  # the kernel's blocks in the inputs' dtype too
    if masked:
        led.new("mask", c.mask)  # call.mask()
        led.new("sdpa_mask", c.mask)  # mask | empty
        led.new("float_mask", c.mask * c.it)  # SDPA's additive copy of a boolean mask
        led.drop("sdpa_mask")
    led.new("context", c.q(c.hv))
    # With AMX for the inputs' dtype, the CPU kernel packs the keys and values once per call
    # and computes each block's probabilities in that dtype for the packed product.
    packed = (
        c.k(c.hk) + c.k(c.hv) + threads * q_split * kv_split * c.io
        if threads and low and _amx_packs(c.shape.dtype)
        else 0
    )
    led.spike(
        threads
        * (
            (q_split * kv_split + 2 * q_split + q_split * c.hq) * c.it
            + (q_split * kv_split * c.io if low else 0)
        )
        + packed
    )
    if masked:  # masked_fill of rows with no key
        led.new("zeroed_rows", c.q(c.hv))
        led.drop("mask")
        if not train:
            led.drop("context", "float_mask")

    def backward():
        if masked:
            led.spike(c.q(c.hv))
        if c.h > 1:  # grad_out.contiguous() in its (B, Tq, H, d) layout
            led.spike(c.q(c.hv))
        led.new("d_qf", c.q(c.hq, it=True))
        led.new("d_kf", c.k(c.hk, it=True))
        led.new("d_v", c.k(c.hv))
        led.spike(threads * 2 * q_split * kv_split * (c.it + (c.io if low else 0)))
        led.drop("float_mask", "zeroed_rows")

    return backward


def _amx_packs(dtype: torch.dtype) -> bool:
    """Whether this CPU has AMX tiles for ``dtype`` (bf16 with AMX-BF16, fp16 with AMX-FP16),
    with which PyTorch's CPU flash kernel packs keys and values for its block products."""
    names = {torch.bfloat16: "_is_amx_tile_supported", torch.float16: "_is_amx_fp16_supported"}
    probe = getattr(torch.cpu, names.get(dtype, ""), None)
    return bool(probe()) if probe is not None else False


def _pure_causal(c: _Call) -> bool:
    s = c.shape
    return (
        c.causal
        and c.window is None
        and not s.key_padding
        and not s.positions
        and s.queries == s.keys
        and not s.one_step
    )


def _chunked(led: _Ledger, c: _Call, plan: Plan, train: bool) -> Callable[[], None]:
    """:mod:`chunked`: blocks of queries and keys with an online softmax, or with the weights
    asked for, the whole scores built block by block (then :func:`_softmax_and_sum`)."""
    bq, bk = default_blocks(
        c.b * c.h, c.tq, c.tk, c.f, dot_family=c.dot, kernel=plan.kernel, window=c.window
    )
    largest, pair = _block_elements(c, bq, bk)
    rows = c.b * c.h
    Sb, Sp = rows * largest * c.it, rows * (pair - largest) * c.it  # a block, the one before
    bk = min(bk, largest // min(bq, c.tq))
    multi = c.h > 1
    Qb, Kb = rows * bq * c.f * c.it, rows * bk * c.f * c.it
    Vb, Ob = rows * bk * c.hv * c.it, rows * bq * c.hv * c.it
    Pb = Sb * c.f  # a block's pair tensor, where one is built
    # score.block_scores besides its output, and score.block_backward
    scoring: tuple[int, ...]
    back: tuple[int, ...]
    if c.score == "location":  # extra @ L, q + k, + that; backward: extra's copy kept too
        scoring, back = (Pb, Pb, Pb), (Sb * c.filters, Pb, Pb, Pb)
    elif not c.dot and plan.kernel == "eager":  # q + k, then tanh of it
        scoring = back = (Pb, Pb)
    elif c.dot:  # copies of (B, H, T, d) views, the unscaled scores; backward: the same
        copies = (Qb, Kb) if multi else ()
        scoring = copies + ((Sb,) if c.scale else ())
        back = copies + (Sb,) + ((Sb,) if c.scale else ())  # s, (unscaled or d unscaled)
    elif plan.kernel == "compiled":  # kernels writing their outputs; backward: ds transposed
        scoring, back = (), (Sb,)
    else:  # the C++ kernels write their outputs only
        scoring = back = ()
    low = c.io < c.it
    if low:  # each block's q and k (and v) upcast to float32
        scoring += (Qb, Kb)
    if c.need_weights:
        led.new("scores", c.scores)  # recomputed_scores' output
        led.spike(Sb, *scoring)
        _softmax_and_sum(led, c, train)
        led.drop("scores")
        if not train:
            return _nothing

        def weights_backward():
            _softmax_and_sum_backward(led, c)
            led.new("d_qf", c.q(c.f, it=True))
            led.new("d_kf", c.k(c.f, it=True))
            if c.score == "location":
                led.new("d_extra", c.scores * c.filters)
            # a block: its ds copied (when it is not the whole of ds), the score's backward
            led.spike(Sb if Sp else 0, Qb, Kb, *back)
            led.drop("d_scores", "d_extra")

        return weights_backward

    led.new("out", c.q(c.hv, it=True))  # the context, accumulated block by block
    kept = c.tq <= c.f  # few queries: the scores are kept for backward
    if kept:
        led.new("kept", c.scores)
    led.new("acc", Ob)
    # a block: s (the previous block's s and p still alive), masked s, s - m and
    # p = exp(s - m) (the previous p still alive), then acc * corr + p @ v
    led.spike(Sp, Sp, Sb, *scoring)
    led.spike(Sp, Sb, Sb, Sb)
    dropping = (Sb, Sb // c.it) if c.dropout > 0 else ()  # the block's keep mask, p * keep
    led.spike(Sb, Sb, Ob, Ob, Ob, *dropping, *((Vb,) if multi or low else ()))
    led.drop("acc")
    if low:  # out.to(v.dtype)
        led.new("context", c.q(c.hv))
        led.drop("out")
    led.rename("out", "context")
    if not train:
        led.drop("kept")
        return _nothing

    def backward():
        if low:  # dout.to(float32)
            led.new("dout_float", c.q(c.hv, it=True))
        led.spike(c.q(c.hv, it=True))  # dout * out
        led.new("d_qf", c.q(c.f, it=True))
        led.new("d_kf", c.k(c.f, it=True))
        led.new("d_v", c.k(c.hv, it=True))
        if c.score == "location":
            led.new("d_extra", c.scores * c.filters)
        copies = (Ob, Vb) if multi else ()  # matmul's copies of dout's and v's blocks
        before = (Kb, Vb, Qb) if Sp else ()  # the previous block's gradients, still alive
        if plan.kernel == "native" and not kept and c.dropout == 0:
            # one pass: dp, dp - delta, the kernel's p and gradients (the previous p alive)
            led.spike(*before, Sp, Sb, Sb, Sb, Qb, Kb)
            led.spike(*before, Sb, Sb, Kb, Vb)  # p^T @ dout
        else:  # dp, s, p = exp(s - lse), ds = p * (dp - delta), the score's backward, each
            # made while the previous block's is alive
            led.spike(*copies, *before, Sp, Sp, Sp, Sp, Sb)
            led.spike(*copies, *before, Sp, Sp, Sp, Sb, Sb, *scoring)
            led.spike(*copies, *before, Sp, Sp, Sb, Sb, Sb, Sb)
            led.spike(*copies, *before, Sb, Sb, Sb, Sb, Vb, Qb, Kb, *back, *dropping)
        led.drop("kept", "d_extra", "dout_float")
        if low:  # the gradients back in the inputs' dtype
            for name, nbytes in (("d_qf", c.q(c.f)), ("d_kf", c.k(c.f)), ("d_v", c.k(c.hv))):
                led.new(name + "_low", nbytes)
                led.drop(name)
                led.rename(name + "_low", name)

    return backward


# Query blocks walked one by one by _block_elements; past this many, a bound is used.
EXACT_BLOCKS = 4096


def _block_elements(c: _Call, bq: int, bk: int) -> tuple[int, int]:
    """For the chunked path's blocks (``bq`` queries by ``bk`` keys, fewer at the ends and
    where a causal or window band ends): the queries x keys of the largest block, and the
    largest sum of two consecutive blocks' (``largest`` when each block is alone).

    Exact for up to :data:`EXACT_BLOCKS` query blocks. Past that, an upper bound in closed
    form: no block holds more than ``bq`` queries by the widest key range a query block
    sees (the band is widest at the first, a middle or the last full query block; one key
    more for the rounding of positions when ``Tq != Tk``), and two blocks twice that. The
    blocks are then a vanishing share of the call's memory.
    """
    n = -(-c.tq // bq)
    if n > EXACT_BLOCKS:
        widest = max(
            hi - lo
            for lo, hi in (_key_range(c, q0, q0 + bq) for q0 in (0, (n // 2) * bq, (n - 2) * bq))
        )
        largest = bq * min(bk, widest + 1, c.tk)
        return largest, 2 * largest
    largest = pair = 0
    last = 0
    for q0 in range(0, c.tq, bq):
        q1 = min(q0 + bq, c.tq)
        lo, hi = _key_range(c, q0, q1)
        full, tail = divmod(hi - lo, bk)
        sizes = [bk] * min(full, 2) + ([tail] if tail else [])
        for k in sizes:
            n = (q1 - q0) * k
            largest = max(largest, n)
            pair = max(pair, last + n)
            last = n
        if full > 2:  # more blocks of the same size
            pair = max(pair, 2 * (q1 - q0) * bk)
            last = (q1 - q0) * (tail or bk)
    return largest, max(pair, largest)


def _key_range(c: _Call, q0: int, q1: int) -> tuple[int, int]:
    """:meth:`masks.KeyLayout.key_range` for queries aligned to keys by position."""
    if not c.band:
        return 0, c.tk
    first, last = q0 * c.tk // max(c.tq, 1), (q1 - 1) * c.tk // max(c.tq, 1)
    lo, hi = 0, c.tk
    if c.window is not None:
        lo, hi = max(lo, first - c.window[0]), min(hi, last + c.window[1] + 1)
    if c.causal:
        hi = min(hi, last + 1)
    return lo, max(lo, hi)


def _nothing() -> None:
    """The backward of a forward-only replay."""


def _step(led: _Ledger, c: _Call, plan: Plan, train: bool) -> Callable[[], None]:
    """:func:`step.additive_step`: one query per row, the C++ kernel."""
    if c.score == "location":
        led.new("loc_term", c.k(c.f, it=True))  # (f @ L).contiguous()
    led.new("p", c.b * c.h * c.tk * c.it)
    led.new("context", c.q(c.hv))
    led.drop("loc_term")
    if not train:
        led.drop("p")

    def backward():
        if c.score == "location":
            led.new("loc_term", c.k(c.f, it=True))
        led.new("d_kf", c.k(c.f, it=True))
        led.new("d_v", c.k(c.hv))
        led.new("d_qf", c.q(c.f, it=True))
        if c.score == "location":  # d f and d L from d kf
            led.spike(c.k(c.filters, it=True))
        led.drop("loc_term", "p")

    return backward


# --------------------------------------------------------------------------- measuring


def measure_peak(fn: Callable[[], object], device: str | torch.device = "cpu") -> int:
    """Peak extra bytes of tensor memory while ``fn()`` runs: what it allocates beyond what
    was allocated before, at its highest.

    On CPU, from the allocations and frees ``torch.profiler`` records (``profile_memory``);
    on CUDA, ``torch.cuda.max_memory_allocated`` minus the memory allocated before.
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - start
    if device.type != "cpu":
        raise ValueError(f"device: expected cpu or cuda, got {device}")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    cpu = torch._C._autograd.DeviceType.CPU
    events = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == cpu
    )
    now = peak = 0
    for _, nbytes in events:
        now += nbytes
        peak = max(peak, now)
    return peak
