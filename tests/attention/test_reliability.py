"""What attention does with bad input that passes the shape and dtype checks.

* NaN or inf in a query row gives a NaN row of context (and weights), on every path;
* padded keys and values (``key_lengths`` / ``key_mask``) never reach the output or the
  gradients, whatever they hold (NaN, inf);
* query positions outside ``[0, Tk - 1]`` and non-finite ``prev_weights`` are refused;
* empty batches, queries or keys give empty or zero results of the right shapes;
* meta tensors give the output shapes;
* a reference call too big for the memory says how much it needs and which path fits.

Each case runs over every score and every path that can serve it.
"""

from __future__ import annotations

import pytest
import torch

from attnkit import Attention, attend
from attnkit.attention import reference
from attnkit.attention.masks import zero_padding
from attnkit.attention.validation import check_call
from attnkit.ops import export_mode, native

NAN, INF = float("nan"), float("inf")
B, TQ, TK, D = 2, 3, 5, 8

# (score, impl, one-step query): every path each score can take.
PATHS = [
    *[
        (s, i, False)
        for s in ("dot", "scaled_dot", "general", "cosine")
        for i in ("reference", "sdpa", "chunked")
    ],
    *[(s, i, False) for s in ("additive", "location") for i in ("reference", "chunked")],
    *[
        (s, i, True)
        for s in ("scaled_dot", "additive", "location")
        for i in ("reference", "chunked", "auto")
    ],
]
if native.available():
    PATHS += [("additive", "step", True), ("location", "step", True)]


def _module(score, impl, heads=1):
    torch.manual_seed(0)
    return Attention(D, score=score, impl=impl, heads=heads)


def _inputs(one_step):
    g = torch.Generator().manual_seed(1)
    query = torch.randn(B, 1 if one_step else TQ, D, generator=g)
    key, value = torch.randn(B, TK, D, generator=g), torch.randn(B, TK, D, generator=g)
    return (query[:, 0] if one_step else query), key, value


def _weights_wanted(attn):
    return attn.score.name != "location" and attn.impl != "sdpa"


# --------------------------------------------------------------------------------------------
# NaN or inf in the query
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("score, impl, one_step", PATHS)
def test_a_non_finite_query_gives_a_nan_row_on_every_path(
    score, impl, one_step, masked, heads, bad
):
    attn = _module(score, impl, heads)
    query, key, value = _inputs(one_step)
    lengths = torch.tensor([3, 5]) if masked else None
    poisoned = query.clone()
    poisoned[1, ..., 0] = bad  # batch row 1: every query of it
    need = _weights_wanted(attn)
    clean = attn(query, key, value, key_lengths=lengths, need_weights=need)
    out = attn(poisoned, key, value, key_lengths=lengths, need_weights=need)
    assert out.context[1].isnan().all()
    torch.testing.assert_close(out.context[0], clean.context[0])
    if out.weights is not None:
        assert out.weights[1].isnan().all()
        torch.testing.assert_close(out.weights[0], clean.weights[0])


def test_large_finite_float16_queries_stay_finite():
    query, key, value = (x.half() for x in _inputs(False))
    query = query.sign() * 60000.0  # each finite, their float16 sum is not
    assert query.isfinite().all() and not query.sum(-1).isfinite().all()
    for impl in ("reference", "sdpa", "chunked"):
        out = attend(query, key, value, impl=impl)
        assert out.context.dtype == torch.float16 and out.context.isfinite().all(), impl


def test_one_nan_query_leaves_the_other_queries_of_its_row_alone():
    query, key, value = _inputs(False)
    poisoned = query.clone()
    poisoned[0, 1, 3] = NAN
    for impl in ("reference", "sdpa", "chunked"):
        clean = attend(query, key, value, impl=impl).context
        out = attend(poisoned, key, value, impl=impl).context
        assert out[0, 1].isnan().all(), impl
        torch.testing.assert_close(out[0, [0, 2]], clean[0, [0, 2]])
        torch.testing.assert_close(out[1], clean[1])


# --------------------------------------------------------------------------------------------
# Padding holds garbage
# --------------------------------------------------------------------------------------------


def _padded(key, value, fill):
    """Keys and values with ``fill`` in batch row 0's padding (keys 3 and 4)."""
    key, value = key.clone(), value.clone()
    key[0, 3:] = fill
    value[0, 3:] = fill
    return key, value


PADDING = [
    dict(key_lengths=torch.tensor([3, 5])),
    dict(key_mask=torch.tensor([[True, True, True, False, False]] + [[True] * 5])),
]


@pytest.mark.parametrize("fill", [NAN, INF, -INF])
@pytest.mark.parametrize(
    "padding, prepared",
    [(PADDING[0], False), (PADDING[1], False), (PADDING[0], True), (PADDING[0], "keys only")],
    ids=["key_lengths", "key_mask", "key_lengths-memory", "key_lengths-memory-of-keys"],
)
@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("score, impl, one_step", PATHS)
def test_padding_never_reaches_the_output_or_the_gradients(
    score, impl, one_step, heads, padding, prepared, fill
):
    """Given as tensors, or prepared as a Memory (whose projections are made before any call
    says which keys are padding; of keys alone, the values being the keys): the gradients of
    every parameter are those of zeros."""
    attn = _module(score, impl, heads)
    query, key, value = _inputs(one_step)
    need = _weights_wanted(attn)
    results = []
    for k, v in (_padded(key, value, 0.0), _padded(key, value, fill)):
        q = query.clone().requires_grad_()
        k, v = k.requires_grad_(), v.requires_grad_()
        attn.zero_grad()
        if prepared == "keys only":
            v = k
            out = attn(q, attn.prepare(k), need_weights=need, **padding)
        elif prepared:
            out = attn(q, attn.prepare(k, v), need_weights=need, **padding)
        else:
            out = attn(q, k, v, need_weights=need, **padding)
        loss = out.context.square().sum() + (0 if out.weights is None else out.weights.sum())
        loss.backward()
        grads = [q.grad, k.grad[1], v.grad[1], k.grad[0, :3], v.grad[0, :3]]
        grads += [p.grad for p in attn.parameters() if p.grad is not None]
        results.append((out, grads))
    (clean, clean_grads), (out, grads) = results
    assert out.context.isfinite().all()
    torch.testing.assert_close(out.context, clean.context)
    if out.weights is not None:
        torch.testing.assert_close(out.weights, clean.weights)
    assert len(grads) == len(clean_grads)
    for got, want in zip(grads, clean_grads):
        assert got.isfinite().all()
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_zero_padding_clears_padded_entries_and_keeps_the_others_bit_for_bit(dtype):
    x = torch.tensor([[[1.5, -0.0], [NAN, INF]], [[-INF, 2.0], [NAN, 3.0]]], dtype=dtype)
    keep = torch.tensor([[True, False], [False, True]])[..., None]  # (B, Tk, 1)
    x.requires_grad_()
    y = zero_padding(x, keep)
    assert y.dtype == dtype
    assert torch.equal(y[0, 0], x[0, 0]) and str(y[0, 0, 1].item()) == "-0.0"
    assert (y[0, 1] == 0).all() and (y[1, 0] == 0).all()
    assert y[1, 1, 0].isnan() and y[1, 1, 1] == 3.0  # a valid NaN stays NaN
    y.backward(torch.full_like(x, 2.0))
    assert torch.equal(x.grad, 2.0 * keep.to(dtype).expand_as(x))
    with export_mode():  # plain torch.where, which exporters record
        assert torch.equal(zero_padding(x, keep).isnan(), y.isnan())


def test_prepare_says_which_keys_held_nan_or_inf():
    attn = _module("additive", "auto", heads=2)
    _, key, value = _inputs(False)
    memory = attn.prepare(key, value)
    assert memory.checked and memory.bad is None and memory.finite
    for fill in (NAN, INF):
        memory = attn.prepare(*_padded(key, value, fill))
        assert memory.checked and not memory.finite
        assert memory.bad.tolist() == [[False] * 3 + [True] * 2, [False] * 5]
        assert memory.key_features.isfinite().all() and memory.values.isfinite().all()
        assert memory.key[0, 3:].isnan().all() or memory.key[0, 3:].isinf().all()  # as given
    cache = attn.extend(attn.prepare(key, value), key)
    assert cache.finite
    cache = attn.extend(cache, _padded(key, value, NAN)[0])
    assert cache.bad.tolist() == [[False] * 13 + [True] * 2, [False] * 15]
    meta = attn.to("meta").prepare(key.to("meta"))  # no values to check
    assert not meta.checked and meta.bad is None and not meta.finite


def test_garbage_padding_with_a_causal_window_and_positions():
    query, key, value = _inputs(False)
    lengths = torch.tensor([3, 5])
    positions = torch.tensor([[0, 1, 2], [2, 3, 4]])
    for impl in ("reference", "sdpa", "chunked"):
        got = [
            attend(
                query,
                *_padded(key, value, fill),
                key_lengths=lengths,
                causal=True,
                window=(1, 0),
                positions=positions,
                impl=impl,
            ).context
            for fill in (0.0, NAN)
        ]
        assert got[1].isfinite().all(), impl
        torch.testing.assert_close(got[1], got[0])


# --------------------------------------------------------------------------------------------
# NaN in a key that a causal or window band hides from some queries
# --------------------------------------------------------------------------------------------


# Full queries: (B, TQ) queries centred on keys 0, 1, 3 with a window of one key each side see
# keys 0-1, 0-2 and 2-4. One-step queries: at positions (1, 3) they see keys 0-2 and 2-4. (The
# C++ step kernel takes no band: "auto" serves these one-step calls on the other paths.)
def _banded(attn, query, key, value, prepared):
    positions = torch.tensor([1, 3]) if query.dim() == 2 else None
    if prepared:
        return attn(
            query, attn.prepare(key, value), positions=positions, need_weights=_weights_wanted(attn)
        )
    return attn(query, key, value, positions=positions, need_weights=_weights_wanted(attn))


@pytest.mark.parametrize("fill", [NAN, INF])
@pytest.mark.parametrize("prepared", [False, True], ids=["tensors", "memory"])
@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("score, impl, one_step", [p for p in PATHS if p[1] != "step"])
def test_a_key_a_query_cannot_see_never_reaches_it(score, impl, one_step, heads, prepared, fill):
    """Key 4 holds ``fill`` (key and value; in batch row 0, and for one-step queries in both
    rows): the queries whose window excludes it get what they get when it holds zeros,
    gradients too; those that may see it get NaN rows."""
    torch.manual_seed(0)
    attn = Attention(D, score=score, impl=impl, heads=heads, window=(1, 1))
    query, key, value = _inputs(one_step)
    rows = slice(0, 2) if one_step else 0
    hidden = (slice(0, 1),) if one_step else (slice(0, 1), slice(0, 2))  # cannot see key 4
    sees = 1 if one_step else (0, 2)  # may see it
    results = []
    for bad in (0.0, fill):
        q = query.clone().requires_grad_()
        k, v = key.clone(), value.clone()
        k[rows, 4], v[rows, 4] = bad, bad
        k.requires_grad_(), v.requires_grad_()
        attn.zero_grad()
        out = _banded(attn, q, k, v, prepared)
        out.context[hidden].square().sum().backward()  # the rows that cannot see key 4
        grads = [q.grad, k.grad[:, :4], v.grad[:, :4], k.grad[1], v.grad[1]]
        grads += [p.grad for p in attn.parameters() if p.grad is not None]
        results.append((out, grads))
    (clean, clean_grads), (out, grads) = results
    assert out.context[sees].isnan().all()
    if out.weights is not None:
        w, w_clean = (
            x if one_step or heads == 1 else x.movedim(1, 2)  # (B, Tq, H, Tk)
            for x in (out.weights, clean.weights)
        )
        assert w[sees].isnan().all()
        torch.testing.assert_close(w[hidden], w_clean[hidden])
    torch.testing.assert_close(out.context[hidden], clean.context[hidden])
    if not one_step:
        torch.testing.assert_close(out.context[1], clean.context[1])  # the other batch row
    for got, want in zip(grads, clean_grads):
        assert got.isfinite().all()
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("impl", ["reference", "sdpa", "chunked", "auto"])
def test_a_later_key_holding_nan_reaches_no_earlier_query_of_a_causal_call(impl):
    """Causal self-attention (``Tq == Tk``: SDPA's ``is_causal`` path): NaN at position 3
    reaches queries 3 and 4 only."""
    x = torch.randn(B, TK, D, generator=torch.Generator().manual_seed(2))
    bad = x.clone()
    bad[0, 3, 1] = NAN
    clean = attend(x, x, causal=True, impl=impl).context
    out = attend(bad, bad, causal=True, impl=impl).context
    torch.testing.assert_close(out[0, :3], clean[0, :3])
    torch.testing.assert_close(out[1], clean[1])
    assert out[0, 3:].isnan().all()


def test_a_finite_banded_call_checks_its_keys_once_and_changes_nothing():
    query, key, value = _inputs(False)
    call = check_call(
        query,
        key,
        value,
        query_dim=None,
        key_dim=None,
        value_dim=None,
        key_lengths=None,
        key_mask=None,
        positions=None,
        causal=True,
        window=None,
    )
    k, v, bad = call.inputs()
    assert k is key and v is value and bad is None  # no copy when every key is finite


# --------------------------------------------------------------------------------------------
# positions and prev_weights
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "positions, one_step, message",
    [
        (torch.tensor([[0, 1, 5], [0, 1, 2]]), False, r"got min 0 and max 5"),
        (torch.tensor([[0, 1, 2], [-1, 1, 2]]), False, r"got min -1 and max 2"),
        (torch.tensor([7, 0]), True, r"got min 0 and max 7"),
        (torch.tensor([0, -3]), True, r"got min -3 and max 0"),
    ],
)
@pytest.mark.parametrize("impl", ["reference", "sdpa", "chunked", "auto"])
def test_positions_outside_the_keys_are_refused(positions, one_step, message, impl):
    query, key, value = _inputs(one_step)
    with pytest.raises(
        ValueError,
        match=r"^positions: expected key positions in \[0, 4\] "
        r"\(Tk = 5\), " + message,
    ):
        attend(query, key, value, window=(1, 1), positions=positions, impl=impl)
    ok = positions.clamp(0, TK - 1)  # the nearest valid call runs
    assert attend(query, key, value, window=(1, 1), positions=ok, impl=impl).context.shape


def test_positions_of_an_empty_key_sequence():
    query = torch.randn(B, D)
    key = torch.randn(B, 0, D)
    out = attend(query, key, causal=True, positions=torch.zeros(B, dtype=torch.long))
    assert out.context.shape == (B, D) and (out.context == 0).all()
    with pytest.raises(ValueError, match=r"^positions: expected key positions in \[0, 0\] "):
        attend(query, key, causal=True, positions=torch.ones(B, dtype=torch.long))


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
@pytest.mark.parametrize("heads", [1, 2])
def test_non_finite_prev_weights_are_refused(bad, heads):
    attn = _module("location", "auto", heads)
    query, key, value = _inputs(True)
    prev = attn(query, key, value).weights
    assert attn(query, key, value, prev_weights=prev).context.isfinite().all()
    prev = prev.clone()
    prev[1, ..., 2] = bad
    with pytest.raises(
        ValueError,
        match=r"^prev_weights: expected finite weights, got "
        rf"{1 if heads == 1 else 2} NaN or infinite values",
    ):
        attn(query, key, value, prev_weights=prev)


# --------------------------------------------------------------------------------------------
# Empty batches, queries and keys
# --------------------------------------------------------------------------------------------

EMPTY = [(0, TQ, TK), (B, 0, TK), (B, TQ, 0), (0, 0, 0)]


@pytest.mark.parametrize(
    "score, impl, one_step, b, tq, tk",
    [(*path, *sizes) for path in PATHS for sizes in EMPTY if not (path[2] and sizes[1] == 0)],
)  # a one-step query has one query
@pytest.mark.parametrize("heads", [1, 2])
def test_empty_inputs_give_results_of_the_right_shape(score, impl, one_step, heads, b, tq, tk):
    attn = _module(score, impl, heads)
    query = torch.randn(b, D) if one_step else torch.randn(b, tq, D)
    query.requires_grad_()
    key = torch.randn(b, tk, D, requires_grad=True)
    need = _weights_wanted(attn)
    out = attn(query, key, key_lengths=torch.full((b,), tk), need_weights=need)
    rows = (b,) if one_step else (b, tq)
    assert out.context.shape == (*rows, D)
    assert (out.context == 0).all()  # no key: zero context
    if out.weights is not None:
        assert out.weights.shape == (b, *((heads,) if heads > 1 else ()), *rows[1:], tk)
    out.context.sum().backward()
    assert query.grad.shape == query.shape and key.grad.shape == key.shape


@pytest.mark.parametrize("impl", ["reference", "sdpa", "chunked", "auto"])
def test_functional_attention_of_an_empty_batch(impl):
    out = attend(
        torch.randn(0, TQ, D),
        torch.randn(0, TK, D),
        impl=impl,
        key_lengths=torch.zeros(0, dtype=torch.long),
        causal=True,
    )
    assert out.context.shape == (0, TQ, D)


# --------------------------------------------------------------------------------------------
# Meta tensors: shapes only
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("score, impl, one_step", PATHS)
def test_meta_tensors_give_the_output_shapes(score, impl, one_step, heads):
    attn = _module(score, impl, heads).to("meta")
    query, key, value = (x.to("meta") for x in _inputs(one_step))
    lengths = torch.tensor([3, 5], device="meta")
    need = _weights_wanted(attn)
    out = attn(query, key, value, key_lengths=lengths, need_weights=need)
    assert out.context.device.type == "meta"
    assert out.context.shape == (*query.shape[:-1], D)
    memory = attn.prepare(key, value)
    assert attn(query, memory, key_lengths=lengths).context.shape == out.context.shape
    plan = attn.plan(query, key, key_lengths=lengths)
    assert plan.impl == "reference" and "meta" in plan.reason


def test_meta_tensors_with_a_window_and_positions():
    query, key, value = (x.to("meta") for x in _inputs(False))
    positions = torch.zeros(B, TQ, dtype=torch.long, device="meta")
    mask = torch.ones(B, TK, dtype=torch.bool, device="meta")
    for impl in ("reference", "sdpa", "chunked", "auto"):
        out = attend(
            query,
            key,
            value,
            window=(1, 1),
            positions=positions,
            key_mask=mask,
            causal=True,
            impl=impl,
            need_weights=impl != "sdpa",
        )
        assert out.context.shape == (B, TQ, D)
    attn = Attention(D, score="location").to("meta")
    prev = torch.zeros(B, TK, device="meta")
    assert attn(query[:, 0], key, prev_weights=prev).weights.shape == (B, TK)


# --------------------------------------------------------------------------------------------
# A reference call too big for the memory
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "score, need_weights, message",
    [
        (
            "scaled_dot",
            False,
            r"two \(B, H, Tq, Tk\) = \(2, 1, 3000, 4000\) .*; "
            r"impl='sdpa' or 'chunked' never build them",
        ),
        (
            "scaled_dot",
            True,
            r"two \(B, H, Tq, Tk\) = \(2, 1, 3000, 4000\) .*; the weights "
            r"alone take 91\.6 MiB: pass need_weights=False",
        ),
        (
            "additive",
            False,
            r"two \(B, H, Tq, Tk, A\) = \(2, 1, 3000, 4000, 8\) .*; "
            r"impl='chunked' works in blocks of a few MiB",
        ),
        (
            "additive",
            True,
            r"two \(B, H, Tq, Tk, A\) = \(2, 1, 3000, 4000, 8\) .*; "
            r"impl='chunked' keeps only the \(B, H, Tq, Tk\) scores, about "
            r"183\.1 MiB",
        ),
    ],
)
def test_a_reference_call_too_big_for_the_memory_says_what_fits(
    monkeypatch, score, need_weights, message
):
    monkeypatch.setattr(reference, "available_memory", lambda device: 50 << 20)
    attn = Attention(D, score=score, impl="reference")
    query, key = torch.randn(2, 3000, D), torch.randn(2, 4000, D)
    with pytest.raises(
        MemoryError,
        match=r"^impl='reference': this call needs at least "
        r"[0-9.]+ [MG]iB for " + message,
    ):
        attn(query, key, need_weights=need_weights)
    monkeypatch.setattr(reference, "available_memory", lambda device: 1 << 40)
    small = attn(query[:, :5], key[:, :7], need_weights=need_weights)  # nothing changed here
    assert small.context.shape == (2, 5, D)


def test_an_allocation_failure_on_the_reference_path_says_what_fits(monkeypatch):
    def no_memory(*args, **kwargs):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
            "can't allocate memory: you tried to allocate 96000000000 bytes."
        )

    attn = Attention(D, score="additive", impl="reference")
    monkeypatch.setattr(type(attn.score), "pairwise", no_memory)
    with pytest.raises(
        MemoryError,
        match=r"^impl='reference': allocating .* failed \(.*"
        r"can't allocate memory.*\); impl='chunked'",
    ):
        attn(torch.randn(2, 3, D), torch.randn(2, 4, D))


def test_other_errors_on_the_reference_path_pass_through(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("something else")

    attn = Attention(D, score="additive", impl="reference")
    monkeypatch.setattr(type(attn.score), "pairwise", broken)
    with pytest.raises(RuntimeError, match="^something else$"):
        attn(torch.randn(2, 3, D), torch.randn(2, 4, D))


def test_available_memory_on_cpu():
    free = reference.available_memory(torch.device("cpu"))
    assert free is None or free > 0
