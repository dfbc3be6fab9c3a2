"""The memory planner: its predictions against the peak measured by the allocator's events,
for every path and score; the plan it returns against dispatch's; fitting a budget."""

from dataclasses import replace

import pytest
import torch

from attnkit import Attention
from attnkit.attention.planner import (
    CallShape,
    estimate,
    example_call,
    input_bytes,
    largest_fit,
    measure_peak,
)
from attnkit.ops import kernels, native

SCORES = ("dot", "scaled_dot", "general", "additive", "cosine", "location")
DOT = ("dot", "scaled_dot", "general", "cosine")

# (module arguments, call sizes): every path and score, with heads, padding, bands, weights,
# one-step queries, self-attention, three dtypes and dropout
CASES = (
    [(dict(score=s, impl=i), {}) for s in SCORES for i in ("reference", "chunked")]
    + [(dict(score=s, impl="sdpa"), {}) for s in DOT]
    + [
        (dict(score=s, impl=i, heads=4), dict(key_padding=True))
        for s in SCORES
        for i in ("reference", "chunked")
    ]
    + [(dict(score=s, impl="sdpa", heads=4), dict(key_padding=True)) for s in DOT]
    + [
        (dict(score="additive", impl="step"), dict(one_step=True, queries=1, keys=2000)),
        (
            dict(score="location", impl="step", heads=2),
            dict(one_step=True, queries=1, keys=2000, key_padding=True),
        ),
        (dict(score="additive", impl="chunked"), dict(one_step=True, queries=1, keys=2000)),
        (dict(score="location", impl="reference"), dict(one_step=True, queries=1, keys=2000)),
        (dict(score="scaled_dot", impl="auto", window=(16, 16)), dict(queries=400, keys=400)),
        (dict(score="additive", impl="auto", window=(16, 16)), dict(queries=400, keys=400)),
        (dict(score="scaled_dot", impl="sdpa", window=(16, 16)), {}),
        (dict(score="scaled_dot", impl="auto", causal=True), dict(queries=300, keys=300)),
        (dict(score="scaled_dot", impl="chunked", causal=True), dict(queries=300, keys=300)),
        (dict(score="additive", impl="auto"), dict(need_weights=True)),
        (dict(score="cosine", impl="chunked"), dict(need_weights=True, key_padding=True)),
        (dict(score="dot", impl="auto"), dict(query_is_key=True, value_is_key=True, keys=200)),
        (dict(score="scaled_dot", impl="chunked"), dict(batch=2, queries=1500, keys=2500)),
        (dict(score="additive", impl="chunked"), dict(batch=2, queries=1500, keys=1500)),
        (dict(score="additive", impl="chunked"), dict(dtype=torch.float64)),
        (dict(score="scaled_dot", impl="reference"), dict(dtype=torch.float64)),
        (dict(score="additive", impl="reference"), dict(dtype=torch.bfloat16)),
        (dict(score="scaled_dot", impl="sdpa"), dict(dtype=torch.bfloat16)),
        (dict(score="scaled_dot", impl="reference", dropout=0.1), dict(training=True)),
        (dict(score="scaled_dot", impl="auto", dropout=0.1), dict(training=True)),
        (dict(score="scaled_dot", impl="sdpa", dropout=0.1), dict(training=True)),
        (dict(score="additive", impl="chunked", dropout=0.1), dict(training=True)),
    ]
)


def _name(case) -> str:
    module, sizes = case
    return "-".join(f"{v}" for v in module.values()) + "".join(
        f"-{k}={v}" for k, v in sizes.items()
    )


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("case", CASES, ids=[_name(c) for c in CASES])
def test_prediction_is_within_30_percent_of_the_measured_peak(case):
    module, sizes = case
    torch.manual_seed(0)
    dtype = sizes.get("dtype", torch.float32)
    attn = Attention(64, **module).to(dtype)
    shape = CallShape(**{"batch": 4, "queries": 200, "keys": 300, **sizes})
    plan = estimate(attn, shape)
    assert module["impl"] in ("auto", plan.impl)
    for train, predicted in (
        (False, plan.predicted.forward_bytes),
        (True, plan.predicted.train_bytes),
    ):
        run = example_call(attn, shape, train=train)
        run()  # warm-up: kernels built, first-call allocations
        measured = measure_peak(run)
        assert measured > shape.batch * shape.queries * 64 * 2  # at least the output
        assert 0.7 * measured <= predicted <= 1.3 * measured, (train, predicted, measured)


@pytest.mark.usefixtures("one_thread")
def test_eager_additive_blocks_without_the_cpp_kernels(monkeypatch):
    monkeypatch.setattr(native, "available", lambda: False)
    monkeypatch.setattr(kernels._COMPILER, "ready", False)  # compiled by an earlier test
    attn = Attention(64, score="additive", impl="chunked")
    shape = CallShape(4, 200, 300)
    plan = estimate(attn, shape)
    assert plan.kernel == "eager"
    for train in (False, True):
        run = example_call(attn, shape, train=train)
        run()
        predicted = plan.predicted.train_bytes if train else plan.predicted.forward_bytes
        assert 0.7 <= predicted / measure_peak(run) <= 1.3


def test_measure_peak_counts_what_is_alive_at_once():
    def fn():
        a = torch.empty(1000, 1000)  # 4 MB
        b = torch.empty(500, 1000)  # 2 MB
        del a
        c = torch.empty(1000, 1000)  # 4 MB: 6 MB alive with b
        del b, c

    assert measure_peak(fn) == 6_000_000


@pytest.mark.parametrize(
    "module, call",
    [
        (dict(score="additive"), dict()),
        (dict(score="additive"), dict(need_weights=True)),
        (dict(score="additive"), dict(one_step=True)),
        (dict(score="location"), dict(one_step=True)),
        (dict(score="scaled_dot", heads=4), dict()),
        (dict(score="scaled_dot", heads=4), dict(key_lengths=True)),
        (dict(score="dot"), dict(need_weights=True)),
        (dict(score="scaled_dot", window=(4, 4)), dict()),
        (dict(score="scaled_dot", causal=True), dict()),
        (dict(score="additive", impl="reference"), dict()),
    ],
)
def test_the_plan_with_estimates_is_dispatch_s_plan(module, call):
    attn = Attention(32, **module)
    query = torch.randn(3, 32) if call.pop("one_step", False) else torch.randn(3, 40, 32)
    key = torch.randn(3, 60, 32)
    if call.pop("key_lengths", False):
        call["key_lengths"] = torch.tensor([60, 20, 1])
    plain, estimated = attn.plan(query, key, **call), attn.plan(query, key, **call, estimate=True)
    assert (estimated.impl, estimated.reason, estimated.kernel) == (
        plain.impl,
        plain.reason,
        plain.kernel,
    )
    assert [e.impl for e in estimated.estimates] == ["reference", "sdpa", "chunked", "step"]
    assert estimated.predicted.impl == plain.impl
    assert estimated.predicted.train_bytes > estimated.predicted.forward_bytes > 0
    assert plain.estimates == () and plain.predicted is None


def test_paths_that_cannot_serve_a_call_say_why():
    plan = estimate(Attention(32, score="additive"), CallShape(2, 10, 10))
    sdpa, step = plan.estimates[1], plan.estimates[3]
    assert sdpa.forward_bytes is None and "not a dot product" in sdpa.blocker
    assert step.train_bytes is None and "10 queries per row" in step.blocker


def test_the_reference_path_grows_with_the_pair_tensor_and_chunked_does_not():
    attn = Attention(128, score="additive", attn_dim=128)
    small, big = (estimate(attn, CallShape(8, t, t)).estimates for t in (400, 800))
    ref = [e.train_bytes for e in (small[0], big[0])]
    chunked = [e.train_bytes for e in (small[2], big[2])]
    assert 3.8 < ref[1] / ref[0] < 4.2  # (Tq, Tk, A) tensors: T^2
    assert chunked[1] / chunked[0] < 2.5
    pair = 8 * 800 * 800 * 128 * 4
    assert 2.9 * pair < big[0].train_bytes < 3.1 * pair  # tanh, its gradient, and one more


def _need(attn, shape, train=True):
    predicted = estimate(attn, shape).predicted
    return input_bytes(attn, shape) + (predicted.train_bytes if train else predicted.forward_bytes)


def test_the_largest_batch_fits_and_one_more_does_not():
    attn = Attention(64, score="additive", impl="reference")
    shape = CallShape(1, 300, 300)
    limit = 500 * 2**20
    batch = largest_fit(attn, shape, limit)
    assert batch > 1
    assert _need(attn, replace(shape, batch=batch)) <= limit
    assert _need(attn, replace(shape, batch=batch + 1)) > limit
    assert largest_fit(attn, shape, _need(attn, shape) - 1) is None
    assert largest_fit(attn, shape, limit, train=False) > batch


def test_the_largest_query_chunk_and_window_fit_and_one_more_do_not():
    shape = CallShape(1, 8000, 8000)
    limit = 200 * 2**20
    weights = CallShape(1, 8000, 8000, need_weights=True)
    attn = Attention(64, score="scaled_dot")
    assert largest_fit(attn, weights, limit) is None  # (Tq, Tk) weights of 256 MB
    chunk = largest_fit(attn, weights, limit, vary="queries")
    assert 0 < chunk < 8000
    assert _need(attn, replace(weights, queries=chunk)) <= limit
    assert _need(attn, replace(weights, queries=chunk + 1)) > limit

    reference = Attention(64, score="scaled_dot", impl="reference")
    assert largest_fit(reference, shape, limit, vary="window") is None  # builds (Tq, Tk)
    window = largest_fit(attn, shape, 100 * 2**20, vary="window", train=False)
    assert 0 < window < 8000

    def need(w):
        return _need(Attention(64, window=(w, w)), replace(shape, positions=True), train=False)

    assert need(window) <= 100 * 2**20 < need(window + 1)  # the band too wide for chunked
    with pytest.raises(
        ValueError, match="vary: expected one of batch, queries, window, got 'heads'"
    ):
        largest_fit(attn, shape, limit, vary="heads")


@pytest.mark.usefixtures("one_thread")
def test_timing_gives_each_serving_path_a_time():
    plan = estimate(Attention(16, score="additive"), CallShape(2, 20, 30), timing=True)
    for e in plan.estimates:
        served = e.blocker is None
        assert (e.forward_seconds is not None and e.forward_seconds > 0) == served
        assert (e.train_seconds is not None and e.train_seconds > 0) == served
    assert estimate(Attention(16), CallShape(2, 20, 30)).predicted.forward_seconds is None


@pytest.mark.usefixtures("one_thread")
def test_timing_a_call_too_large_to_run_runs_probes_that_fit(monkeypatch):
    # it ran an eighth of the call: 32 TB asked of the allocator, a traceback
    from attnkit.attention import planner

    sizes = []
    real = planner.example_call

    def recorded(module, shape, *, train):
        sizes.append(planner.input_bytes(module, shape))
        return real(module, shape, train=train)

    monkeypatch.setattr(planner, "example_call", recorded)
    plan = estimate(Attention(64), CallShape(1, 10**12, 10**12), timing=True)
    assert plan.predicted.forward_seconds > 1e6  # a trillion squared pairs: days at least
    assert sizes and max(sizes) <= planner.PROBE_BYTES


def test_timing_refuses_a_call_whose_smallest_probe_does_not_fit(monkeypatch):
    from attnkit.attention import planner

    monkeypatch.setattr(planner, "PROBE_BYTES", 1000)
    with pytest.raises(
        ValueError,
        match=r"^timing: the smallest run of the \w+ path \(B=1, "
        r"Tq=64, Tk=64\) needs [\d,]+ bytes, more than the "
        r"1,000 a timing run may take; plan memory without "
        r"--time",
    ):
        estimate(Attention(64), CallShape(8, 10**6, 10**6), timing=True)


@pytest.mark.parametrize(
    "tq, tk, window, causal",
    [
        (5000, 5000, None, False),
        (5000, 5000, None, True),
        (5000, 5000, (40, 0), True),
        (5000, 3001, (7, 7), False),
        (3001, 5000, (300, 20), False),
        (4097, 64, None, False),
    ],
)
def test_the_block_bound_holds_the_exact_blocks_and_is_within_twice(
    monkeypatch, tq, tk, window, causal
):
    """Past planner.EXACT_BLOCKS query blocks the chunked path's blocks are bounded in closed
    form: never below the exact walk, at most twice it."""
    from attnkit.attention import planner

    attn = Attention(16, score="additive", window=window, causal=causal)
    c = planner._Call.of(attn, CallShape(2, tq, tk))
    for bq, bk in ((8, 16), (16, 64), (32, 8)):
        exact = planner._block_elements(c, bq, bk)
        monkeypatch.setattr(planner, "EXACT_BLOCKS", 2)
        bound = planner._block_elements(c, bq, bk)
        monkeypatch.undo()
        assert all(e <= b <= 2 * e for e, b in zip(exact, bound)), (bq, bk, exact, bound)


def test_a_huge_call_is_planned_without_walking_its_blocks():
    plan = estimate(Attention(64, score="additive"), CallShape(1, 10**12, 10**12))
    chunked = next(e for e in plan.estimates if e.impl == "chunked")
    assert chunked.blocker is None and chunked.train_bytes > 10**12  # the inputs' gradients
