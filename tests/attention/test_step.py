"""The one-query additive step (C++ kernel and plain PyTorch): equal to the equation and the
reference, and its in-place gradient sums are right across decoder steps, partial backward
passes and repeated passes."""

import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit import Attention
from attnkit.attention import step
from attnkit.ops import bindings, native
from tests.float32_bounds import (
    TANH_ERR,
    assert_within_normwise,
    backward_term_scales,
    key_bias_scales,
    normwise_bound,
    tanh_relative_bound,
)

needs_native = pytest.mark.skipif(
    not native.available(), reason=f"no C++ step kernel: {native.status()}"
)
PATHS = [False, pytest.param(True, marks=needs_native)]


def _inputs(b=3, h=2, tk=7, a=5, d=4, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, 1, a, generator=g, dtype=dtype, requires_grad=True)
    kf = torch.randn(b, h, tk, a, generator=g, dtype=dtype, requires_grad=True)
    v = torch.randn(b, h, tk, d, generator=g, dtype=dtype, requires_grad=True)
    va = torch.randn(h, a, generator=g, dtype=dtype, requires_grad=True)
    return q, kf, v, va


def _equation(q, kf, v, va, mask, location=None):
    """The textbook formula with autograd, a row with no key -> zeros."""
    pre = q.unsqueeze(-2) + kf.unsqueeze(-3)  # (B, H, 1, Tk, A)
    if location is not None:
        f, lw = location
        pre = pre + torch.einsum("bhkf,hfa->bhka", f, lw).unsqueeze(2)
    s = torch.einsum("bhqka,ha->bhqk", torch.tanh(pre), va)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    p = torch.nan_to_num(torch.softmax(s, -1), nan=0.0)
    return p @ v, p


MASK = torch.tensor([[True] * 7, [True] * 4 + [False] * 3, [False] * 7]).view(3, 1, 1, 7)


def _location(b=3, h=2, tk=7, a=5, filters=3, dtype=torch.float64):
    g = torch.Generator().manual_seed(5)
    return (
        torch.randn(b, h, tk, filters, generator=g, dtype=dtype, requires_grad=True),
        torch.randn(h, filters, a, generator=g, dtype=dtype, requires_grad=True),
    )


@pytest.mark.parametrize("native_kernel", PATHS, ids=["torch", "native"])
@pytest.mark.parametrize("mask", [None, MASK], ids=["no-mask", "lengths-7-4-0"])
@pytest.mark.parametrize("use_weights", [False, True], ids=["context", "context+weights"])
@pytest.mark.parametrize("score", ["additive", "location"])
def test_step_equals_the_equation_with_gradients(mask, use_weights, score, native_kernel):
    q, kf, v, va = _inputs()
    location = _location() if score == "location" else None
    g = torch.Generator().manual_seed(1)
    w_out, w_p = torch.randn(3, 2, 1, 4, generator=g), torch.randn(3, 2, 1, 7, generator=g)

    def loss(out, p):
        return (out * w_out).sum() + ((p * w_p).sum() if use_weights else 0)

    out, p = step.additive_step(q, kf, v, va, mask, location=location, native=native_kernel)
    ref_out, ref_p = _equation(q, kf, v, va, mask, location)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(p, ref_p)
    with torch.no_grad():  # decoding: no autograd node, same numbers
        out_ng, p_ng = step.additive_step(
            q, kf, v, va, mask, location=location, native=native_kernel
        )
    assert out_ng.grad_fn is None and torch.equal(out_ng, out) and torch.equal(p_ng, p)
    inputs = [q, kf, v, va, *(location or ())]
    got = torch.autograd.grad(loss(out, p), inputs)
    want = torch.autograd.grad(loss(ref_out, ref_p), inputs)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    if mask is not None:  # the row with no key: zero output, zero and finite gradients
        assert torch.equal(out[2], torch.zeros_like(out[2])) and p[2].abs().sum() == 0
        assert got[0][2].abs().sum() == 0 and torch.isfinite(got[0]).all()


@pytest.mark.parametrize("native_kernel", PATHS, ids=["torch", "native"])
@pytest.mark.parametrize("use_sink", [False, True], ids=["autograd", "sink"])
@pytest.mark.parametrize("score", ["additive", "location"])
def test_gradcheck_step(use_sink, score, native_kernel):
    q, kf, v, va = _inputs(b=2, h=2, tk=4, a=3, d=2)
    mask = torch.tensor([[True] * 4, [True, True, False, False]]).view(2, 1, 1, 4)
    loc = _location(b=2, h=2, tk=4, a=3, filters=2) if score == "location" else ()

    def f(q, kf, v, va, *loc):
        sink = None
        if use_sink:
            kf, v, sink = step.collect(kf, v)
        location = tuple(loc) or None
        out1, p1 = step.additive_step(q, kf, v, va, mask, sink, location, native=native_kernel)
        out2, _ = step.additive_step(q * 0.5, kf, v, va, mask, sink, location, native=native_kernel)
        return out1 + 2 * out2, p1  # two steps over one memory, and the weights

    assert torch.autograd.gradcheck(f, (q, kf, v, va, *loc))


def _decoder_run(attn, enc, queries, lengths, *, need_weights=False):
    """Steps over one prepared memory; the location score gets each step's previous weights
    (so gradients also run through the weights from step to step)."""
    memory = attn.prepare(enc)
    outs, prev = [], None
    for q in queries:
        outs.append(
            attn(q, memory, key_lengths=lengths, need_weights=need_weights, prev_weights=prev)
        )
        prev = outs[-1].weights if attn.score.needs_prev else None
    ctx = torch.stack([o.context for o in outs])
    weights = torch.stack([o.weights for o in outs]) if need_weights else None
    return ctx, weights


def _decoder_case(heads=1, b=4, tk=80, d=128, steps=5, seed=0, score="additive"):
    # Tk spans two of the kernel's 64-key blocks, the second one partly
    torch.manual_seed(seed)
    attn = Attention(d, score=score, heads=heads)
    ref = Attention(d, score=score, heads=heads, impl="reference")
    ref.load_state_dict(attn.state_dict())
    enc = torch.randn(b, tk, d, requires_grad=True)
    queries = torch.randn(steps, b, d, requires_grad=True)
    lengths = torch.tensor([tk, 1, tk - 3, 0][:b])
    return attn, ref, enc, queries, lengths


def _float64(module, *tensors):
    """A float64 copy of a module and of its inputs (new leaves): the same computation, whose
    own rounding is far below float32's, to judge the float32 paths against."""
    return (
        copy.deepcopy(module).double(),
        *(t.detach().double().requires_grad_(t.requires_grad) for t in tensors),
    )


def _step_operations(module, tk, b, steps, backward=1):
    """The longest chain of dependent roundings through ``steps`` decoder steps of ``module``
    over ``tk`` keys and ``b`` rows (an upper count, for :func:`normwise_bound`): a step's
    forward chain is the query's and keys' projections (their input width each), the score's
    sum (at most that width, or the location conv's ``kernel + filters``), the softmax's and
    the context's sums (Tk each) and the output projection; a gradient runs the chain back
    (``backward`` times: 3 for a second derivative, whose pass runs back through the first
    gradient's graph and the forward's), through every step for the location score
    (each step's weights feed the next) and once otherwise; and a parameter's gradient sums
    over every step, row and key."""
    width = max(module.query_dim, module.key_dim, module.value_dim)
    chain = 4 * width + 2 * tk
    if getattr(module.score, "needs_prev", False):
        chain = steps * (chain + module.score.w_loc.shape[1] + module.score.conv.kernel_size[0])
    return (1 + backward) * chain + backward * steps * b * tk


def _train_step(module, enc, queries, lengths, loss_fn, need_weights=False):
    """Context, weights and the gradients of enc, queries and the module's parameters."""
    for t in [enc, queries, *module.parameters()]:
        t.grad = None
    ctx, weights = _decoder_run(module, enc, queries, lengths, need_weights=need_weights)
    loss_fn(ctx, weights).backward()
    grads = [t.grad.clone() for t in [enc, queries, *module.parameters()]]
    return ctx.detach(), weights, grads


@needs_native
@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("score", ["additive", "location"])
def test_decoder_steps_take_the_fused_path_and_equal_the_reference(heads, need_weights, score):
    plan = _steps_match_the_reference(heads, need_weights, score)
    assert plan.impl == "step" and plan.kernel == "native" and "C++ step kernel" in plan.reason


def _steps_match_the_reference(heads, need_weights, score):
    """Five decoder steps over one prepared memory, and the reference path, in float32:
    contexts, weights and every gradient within a normwise float32 bound of the reference in
    float64 (:func:`_step_operations`). Returns the plan of the steps."""
    attn, ref, enc, queries, lengths = _decoder_case(heads, score=score)
    ref64, enc64, queries64 = _float64(ref, enc, queries)
    assert attn.prepare(enc).sink is not None
    plan = attn.plan(queries[0], enc, key_lengths=lengths, need_weights=need_weights)
    w = torch.randn(5, 4, heads, 80).squeeze(2)  # (steps, B, [H,] Tk)

    def loss(ctx, weights):
        return ctx.square().sum() + ((weights * w).sum() if need_weights else 0)

    got_ctx, got_w, got = _train_step(attn, enc, queries, lengths, loss, need_weights)
    ctx, weights, plain = _train_step(ref, enc, queries, lengths, loss, need_weights)
    scales = key_bias_scales(ref64, ref64, 4)
    ctx64, weights64, want = _train_step(ref64, enc64, queries64, lengths, loss, need_weights)
    assert_within_normwise(
        [ctx64, weights64, *want],
        _step_operations(attn, 80, 4, 5),
        scales(),
        step=[got_ctx, got_w, *got],
        reference=[ctx, weights, *plain],
    )
    assert got_ctx[:, 3].abs().sum() == 0  # length 0: zero context
    return plan


def _squared_context_case():
    """A decoder case, the reference gradients of sum(context^2) (enc, queries, params) in
    float64, and their operation count; the float32 reference's are checked within the
    normwise bound here, and the gradients of enc and queries cleared."""
    attn, ref, enc, queries, lengths = _decoder_case()
    ref64, enc64, queries64 = _float64(ref, enc, queries)

    def loss(ctx, w):
        return ctx.square().sum()

    _, _, want = _train_step(ref64, enc64, queries64, lengths, loss)
    _, _, plain = _train_step(ref, enc, queries, lengths, loss)
    operations = _step_operations(attn, 80, 4, 5)
    assert_within_normwise(want, operations, reference=plain)
    enc.grad = queries.grad = None
    return attn, enc, queries, lengths, want, operations


@needs_native
def test_a_partial_backward_leaves_nothing_for_the_next_pass():
    attn, enc, queries, lengths, want, operations = _squared_context_case()
    memory = attn.prepare(enc)
    ctx = torch.stack([attn(q, memory, key_lengths=lengths).context for q in queries])
    # Gradient of the queries only: the steps run backward, the memory's node does not.
    (dq,) = torch.autograd.grad(ctx.square().sum(), [queries], retain_graph=True)
    assert_within_normwise(want[1:2], operations, step=[dq])
    assert enc.grad is None
    # A later full pass over the same graph sees only its own gradients, twice -> doubled
    # (the second pass adds one rounding).
    ctx.square().sum().backward(retain_graph=True)
    assert_within_normwise(want[:1], operations, step=[enc.grad])
    ctx.square().sum().backward()
    assert_within_normwise([2 * want[0]], operations + 1, step=[enc.grad])


@needs_native
def test_steps_on_both_paths_over_one_memory(monkeypatch):
    """Early steps on the general path (gradients through autograd), later ones on the C++
    step (gradients into the sink): the memory adds both."""
    attn, enc, queries, lengths, want, operations = _squared_context_case()
    memory = attn.prepare(enc)
    outs = []
    for i, q in enumerate(queries):
        monkeypatch.setattr(native, "available", lambda i=i: i >= 2)
        assert (attn.plan(q, enc, key_lengths=lengths).impl == "step") == (i >= 2)
        outs.append(attn(q, memory, key_lengths=lengths).context)
    torch.stack(outs).square().sum().backward()
    got = [enc.grad, queries.grad, *[p.grad for p in attn.parameters()]]
    assert_within_normwise(want, operations, both_paths=got)


def test_no_sink_without_gradients():
    enc = torch.randn(2, 9, 8, requires_grad=True)
    attn = Attention(8, score="additive")
    with torch.no_grad():
        assert attn.prepare(enc).sink is None
    assert attn.prepare(enc.detach()).sink is not None  # the key projection learns
    assert attn.requires_grad_(False).prepare(enc.detach()).sink is None
    assert Attention(8, score="general").prepare(enc).sink is not None
    assert Attention(8, score="dot").prepare(enc.detach()).sink is None  # nothing learns keys
    assert Attention(8, score="location").prepare(enc).sink is not None


# -- the dot family's one-query step ------------------------------------------------------

DOT_SCORES = ["dot", "scaled_dot", "general", "cosine"]


def _dot_equation(qf, kf, v, scale, mask):
    s = (qf.unsqueeze(-2) * kf.unsqueeze(-3)).sum(-1) * scale  # (B, H, 1, Tk)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    p = torch.nan_to_num(torch.softmax(s, -1), nan=0.0)
    return p @ v, p


@pytest.mark.parametrize("use_sink", [False, True], ids=["autograd", "sink"])
@pytest.mark.parametrize("mask", [None, MASK], ids=["no-mask", "lengths-7-4-0"])
def test_dot_step_equals_the_equation_and_passes_gradcheck(mask, use_sink):
    q, kf, v, _ = _inputs()
    w = torch.randn(3, 2, 1, 7, dtype=torch.float64)

    def f(q, kf, v, step_fn):
        sink = None
        if use_sink and step_fn is step.dot_step:
            kf, v, sink = step.collect(kf, v)
        args = (sink,) if step_fn is step.dot_step else ()
        out1, p1 = step_fn(q, kf, v, 0.7, mask, *args)
        out2, p2 = step_fn(q * 0.5 + 1, kf, v, 0.7, mask, *args)
        return out1 + 2 * out2, p1 * w + p2  # two steps over one memory, and the weights

    got, want = f(q, kf, v, step.dot_step), f(q, kf, v, _dot_equation)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    grads = torch.autograd.grad(got[0].square().sum() + got[1].sum(), (q, kf, v))
    wants = torch.autograd.grad(want[0].square().sum() + want[1].sum(), (q, kf, v))
    for a, b in zip(grads, wants):
        torch.testing.assert_close(a, b)
    assert torch.autograd.gradcheck(lambda *x: f(*x, step.dot_step), (q, kf, v))
    assert torch.autograd.gradgradcheck(lambda *x: f(*x, step.dot_step)[0], (q, kf, v))


@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("score", DOT_SCORES)
def test_dot_decoder_steps_take_the_step_and_equal_the_reference(heads, need_weights, score):
    plan = _steps_match_the_reference(heads, need_weights, score)
    assert (plan.impl, plan.kernel) == ("step", "eager") and "once per sequence" in plan.reason


@settings(max_examples=25, deadline=None)
@given(
    b=st.integers(1, 3),
    heads=st.sampled_from([1, 2]),
    tk=st.integers(1, 20),
    steps=st.integers(1, 4),
    score=st.sampled_from(DOT_SCORES),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**16),
)
def test_dot_steps_over_a_memory_match_the_reference_on_random_shapes(
    b, heads, tk, steps, score, dtype, seed
):
    g = torch.Generator().manual_seed(seed)
    attn = Attention(8, score=score, heads=heads).to(dtype)
    ref = Attention(8, score=score, heads=heads, impl="reference").to(dtype)
    ref.load_state_dict(attn.state_dict())
    enc = torch.randn(b, tk, 8, generator=g, dtype=dtype, requires_grad=True)
    queries = torch.randn(steps, b, 8, generator=g, dtype=dtype, requires_grad=True)
    lengths = torch.randint(0, tk + 1, (b,), generator=g)
    assert attn.plan(queries[0], enc, key_lengths=lengths).impl == "step"

    def loss(ctx, weights):
        return (ctx * torch.linspace(-1, 1, ctx.numel(), dtype=dtype).view_as(ctx)).sum()

    got_ctx, _, got = _train_step(attn, enc, queries, lengths, loss)
    ctx, _, want = _train_step(ref, enc, queries, lengths, loss)
    if dtype == torch.float64:
        torch.testing.assert_close(got_ctx, ctx)
        for a, b_ in zip(got, want):
            torch.testing.assert_close(a, b_)
        return
    # float32: both paths within a normwise bound of the reference in float64
    ref64, enc64, queries64 = _float64(ref, enc, queries)
    scales = key_bias_scales(ref64, ref64, 3)
    ctx64, _, want64 = _train_step(ref64, enc64, queries64, lengths, loss)
    assert_within_normwise(
        [ctx64, *want64],
        _step_operations(attn, tk, b, steps),
        _term_scales(ref64, enc64, queries64, lengths, scales()),
        step=[got_ctx, *got],
        reference=[ctx, *want],
    )


def _term_scales(module64, enc64, queries64, lengths, scales):
    """The gradients' terms, for results that cancel far below them: the cosine score's
    normalisation (``(g - q^ (q^ . g)) / |q|``) and its learnt scale (``sum_ij s_ij ds_ij``,
    which the softmax's invariance sends towards zero) keep float32's rounding of terms much
    larger than themselves. Each result judged on the largest of its terms
    (:func:`backward_term_scales`, in float64), or on ``scales`` where that is larger; the
    context (result 0) on itself."""
    leaves = [enc64, queries64, *module64.parameters()]

    def context(enc, queries, *params):
        return _decoder_run(module64, enc, queries, lengths)[0]

    ctx = context(*leaves).detach()
    weights = torch.linspace(-1, 1, ctx.numel(), dtype=ctx.dtype).view_as(ctx)
    terms = backward_term_scales(context, leaves, [weights])
    out = {i + 1: float(t.max()) for i, t in enumerate(terms) if t is not None and t.numel()}
    for i, scale in (scales or {}).items():
        out[i] = max(out.get(i, 0.0), scale)
    return out


def test_dot_step_is_not_taken_where_it_does_not_apply():
    x, enc = torch.randn(4, 16), torch.randn(4, 30, 16)
    assert Attention(16, score="general").plan(x, enc).impl == "step"
    assert Attention(16, score="general", dropout=0.1).plan(x, enc).impl != "step"
    assert Attention(16, score="general").plan(x[:, None].expand(4, 2, 16), enc).impl != "step"
    assert Attention(16, score="general").half().plan(x.half(), enc.half()).impl != "step"
    with pytest.raises(ValueError, match="^impl='step' cannot serve this call: 2 queries per row"):
        Attention(16, score="dot", impl="step")(x[:, None].expand(4, 2, 16), enc)


@needs_native
def test_no_fused_step_where_it_does_not_apply():
    x = torch.randn(4, 128)
    enc = torch.randn(4, 80, 128)
    assert Attention(128, score="additive").plan(x, enc).impl == "step"
    assert Attention(128, score="additive", dropout=0.1).plan(x, enc).impl == "chunked"
    assert Attention(128, score="additive", impl="reference").plan(x, enc).impl == "reference"
    assert Attention(128, score="additive", impl="chunked").plan(x, enc).impl == "chunked"
    windowed = Attention(128, score="additive", window=(3, 3))
    assert windowed.plan(x, enc, positions=torch.zeros(4, dtype=torch.long)).impl == "chunked"
    two = x[:, None].expand(4, 2, 128)
    assert Attention(128, score="additive").plan(two, enc).impl == "chunked"
    assert Attention(128, score="additive").double().plan(x.double(), enc.double()).impl == (
        "chunked"
    )


@needs_native
def test_impl_step_forces_the_step_kernel_or_says_why_it_cannot():
    torch.manual_seed(0)
    x, enc = torch.randn(4, 16), torch.randn(4, 30, 16)
    attn = Attention(16, score="location", impl="step")
    plan = attn.plan(x, enc)
    assert (plan.impl, plan.kernel, plan.reason) == ("step", "native", "impl='step' was requested")
    ref = Attention(16, score="location", impl="reference")
    ref.load_state_dict(attn.state_dict())
    ref64, x64, enc64 = _float64(ref, x, enc)
    assert_within_normwise(
        [ref64(x64, enc64).context],
        _step_operations(attn, 30, 4, 1),
        step=[attn(x, enc).context],
        reference=[ref(x, enc).context],
    )
    cases = [
        (dict(), (x[:, None].expand(4, 2, 16), enc), {}, r"2 queries per row; the step takes one"),
        (dict(dropout=0.1), (x, enc), {}, r"dropout on the weights"),
        (
            dict(window=(2, 2)),
            (x, enc),
            dict(positions=torch.zeros(4, dtype=torch.long)),
            r"a causal mask or window; the step takes key padding only",
        ),
        (
            dict(),
            (x.double(), enc.double()),
            {},
            r"dtype torch.float64; the step takes torch.float32",
        ),
    ]
    for kwargs, args, call_kw, why in cases:
        module = Attention(16, score="additive", impl="step", **kwargs)
        module = module.double() if args[0].dtype == torch.float64 else module
        with pytest.raises(ValueError, match=rf"^impl='step' cannot serve this call: {why}"):
            module.plan(*args, **call_kw)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # inputs taken in float32
        assert Attention(16, score="additive", impl="step").plan(x.bfloat16(), enc).impl == "step"


@needs_native
@settings(max_examples=40, deadline=None)
@given(
    b=st.integers(1, 4),
    heads=st.sampled_from([1, 2, 3]),
    tk=st.integers(1, 150),
    d=st.sampled_from([6, 24, 128]),
    seed=st.integers(0, 2**16),
)
def test_native_step_equals_reference_on_random_shapes(b, heads, tk, d, seed):
    """Key counts within, at and across the kernel's 64-key blocks; head splits hand the kernel
    strided keys and values; random lengths, 0 included."""
    torch.manual_seed(seed)
    attn = Attention(d, score="additive", heads=heads, head_dim=4 if heads > 1 else None)
    ref = Attention(
        d, score="additive", heads=heads, head_dim=4 if heads > 1 else None, impl="reference"
    )
    ref.load_state_dict(attn.state_dict())
    enc = torch.randn(b, tk, d, requires_grad=True)
    queries = torch.randn(3, b, d, requires_grad=True)
    lengths = torch.randint(0, tk + 1, (b,))

    def loss(ctx, weights):
        return (ctx * torch.linspace(-1, 1, d)).sum()

    got_ctx, _, got = _train_step(attn, enc, queries, lengths, loss)
    ctx, _, plain = _train_step(ref, enc, queries, lengths, loss)
    ref64, enc64, queries64 = _float64(ref, enc, queries)
    ctx64, _, want = _train_step(ref64, enc64, queries64, lengths, loss)
    assert attn.plan(queries[0], enc, key_lengths=lengths).impl == "step"
    assert_within_normwise(
        [ctx64, *want],
        _step_operations(attn, tk, b, 3),
        step=[got_ctx, *got],
        reference=[ctx, *plain],
    )


@needs_native
def test_a_reordered_memory_sends_its_gradients_through_autograd():
    """Beam search reorders a Memory's tensors (the sink object comes along); steps over the
    copy must not add into the original's sink."""
    from torch.utils._pytree import tree_map

    attn, ref, enc, queries, lengths = _decoder_case()
    ref64, enc64, queries64 = _float64(ref, enc, queries)
    index = torch.tensor([2, 0, 0, 1])
    grads = []
    for module, keys, steps in (
        (attn, enc, queries),
        (ref, enc, queries),
        (ref64, enc64, queries64),
    ):
        memory = tree_map(
            lambda x: x.index_select(0, index) if isinstance(x, torch.Tensor) else x,
            module.prepare(keys),
        )
        ctx = torch.stack([module(q, memory, key_lengths=lengths[index]).context for q in steps])
        keys.grad = None
        ctx.square().sum().backward()
        if module is attn:
            assert memory.sink is not None and not memory.sink.serves(
                memory.key_features, memory.values
            )
        grads.append(keys.grad.clone())
    assert_within_normwise(
        grads[2:], _step_operations(attn, 80, 4, 5), step=grads[:1], reference=grads[1:2]
    )


@needs_native
def test_native_tanh_is_accurate_and_saturates():
    """The kernels' float tanh (csrc/tanh.h) against tanh in float64: every value within the
    relative bound its arithmetic allows (tests/float32_bounds.py: about 20 float32
    ulps, whether the build contracts to FMA or not), down to tiny values; infinities saturate
    to exactly +-1, NaN stays NaN."""
    tiny = torch.logspace(-30, 0, 3001)
    x = torch.cat(
        [torch.linspace(-12, 12, 200_001), tiny, -tiny, torch.tensor([-1e30, 1e30, 88.0, -88.0])]
    )
    y = bindings.tanh(x)
    want = torch.tanh(x.double())
    err = (y.double() - want).abs()
    assert (err <= tanh_relative_bound(x) * want.abs()).all() and err.max() <= TANH_ERR
    special = torch.tensor([float("inf"), float("-inf"), 0.0, float("nan")])
    out = bindings.tanh(special)
    assert out[:3].tolist() == [1.0, -1.0, 0.0] and out[3].isnan()


@needs_native
@pytest.mark.parametrize("use_weights", [False, True], ids=["context", "context+weights"])
@pytest.mark.parametrize("score", ["additive", "location"])
def test_native_float32_step_within_float32_error_of_the_equation(use_weights, score):
    """float32 through the kernel and through plain PyTorch, judged against the equation in
    float64 within a normwise float32 bound derived from the operation count."""
    b, h, tk, a, d = 3, 2, 200, 32, 16
    q, kf, v, va = _inputs(b, h, tk, a, d, dtype=torch.float64, seed=3)
    loc = _location(b, h, tk, a) if score == "location" else None
    mask = (torch.arange(tk) < torch.tensor([tk, 130, 0])[:, None]).view(b, 1, 1, tk)
    g = torch.Generator().manual_seed(2)
    w_out, w_p = torch.randn(b, h, 1, d, generator=g), torch.randn(b, h, 1, tk, generator=g)
    leaves64 = [q, kf, v, va, *(loc or ())]

    def run(leaves, native_kernel):
        q, kf, v, va, *loc = leaves
        out, p = step.additive_step(
            q, kf, v, va, mask, location=tuple(loc) or None, native=native_kernel
        )
        loss = (out * w_out.to(out)).sum() + ((p * w_p.to(p)).sum() if use_weights else 0)
        return [out, p, *torch.autograd.grad(loss, leaves)]

    want = run(leaves64, False)
    leaves32 = [x.detach().float().requires_grad_() for x in leaves64]
    got, plain = run(leaves32, True), run(leaves32, False)
    # the longest chain: the score's sum (A), the softmax's, the context's and their
    # gradients' (Tk each), the output (D), and a parameter's sum over the batch's keys
    operations = a + 4 * tk + d + b * tk * 3
    for g_, p_, w_ in zip(got, plain, want):
        bound = normwise_bound(w_, operations)
        assert (g_.double() - w_).abs().max() <= bound
        assert (p_.double() - w_).abs().max() <= bound


def test_without_a_compiler_steps_run_in_plain_pytorch_and_say_why(tmp_path):
    """No C++ compiler: the plan names the reason and the results still equal the reference."""
    code = textwrap.dedent("""
        import torch
        from attnkit import Attention
        from attnkit.ops import native
        torch.manual_seed(0)
        attn = Attention(16, score="additive")
        ref = Attention(16, score="additive", impl="reference")
        ref.load_state_dict(attn.state_dict())
        enc, q = torch.randn(2, 9, 16), torch.randn(2, 16)
        plan = attn.plan(q, enc)
        assert plan.impl == "chunked" and "no C++ compiler found (CXX=" in plan.reason, plan.reason
        assert native.status().startswith("no C++ compiler found")
        torch.testing.assert_close(attn(q, attn.prepare(enc)).context, ref(q, enc).context)
        print("ok")
    """)
    env = dict(
        os.environ,
        CXX=str(tmp_path / "no-such-compiler"),
        ATTNKIT_CACHE_DIR=str(tmp_path / "cache"),
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    assert not (tmp_path / "cache").exists()


def test_a_compiler_without_march_native_gets_the_next_flags(tmp_path, monkeypatch):
    """The build drops flags the compiler rejects and still gives a working kernel."""
    import shutil

    real = shutil.which("g++") or shutil.which("c++")
    if real is None:
        pytest.skip("no C++ compiler")
    fussy = tmp_path / "fussy-c++"
    fussy.write_text(
        f'#!/bin/sh\nfor a in "$@"; do [ "$a" = -march=native ] && '
        f'{{ echo "unknown -march=native" >&2; exit 1; }}; done\nexec {real} "$@"\n'
    )
    fussy.chmod(0o755)
    monkeypatch.setenv("CXX", str(fussy))
    monkeypatch.setenv("ATTNKIT_CACHE_DIR", str(tmp_path / "cache"))
    x = torch.tensor([0.5, -2.0])
    torch.testing.assert_close(bindings.tanh(x, lib=native._load()), torch.tanh(x))
    assert len(list((tmp_path / "cache").glob("kernels-*.so"))) == 1


@needs_native
def test_under_cpu_autocast_steps_run_the_kernel_in_float32_and_equal_the_reference():
    """bfloat16 autocast hands over a bfloat16 query (a linear layer's output) and float32
    keys: attention takes both in float32, so the float32 kernel serves the step and its
    results equal the reference's outside autocast to float32 rounding."""
    torch.manual_seed(0)
    attn = Attention(16, score="additive")
    ref = Attention(16, score="additive", impl="reference")
    ref.load_state_dict(attn.state_dict())
    enc = torch.randn(2, 9, 16, requires_grad=True)
    q = torch.randn(2, 16).bfloat16()
    ref64, q64, enc64 = _float64(ref, q, enc)
    want = ref64(q64, enc64, need_weights=True)
    memory = attn.prepare(enc)  # prepared outside autocast, used inside
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plan = attn.plan(q, enc)
        assert (plan.impl, plan.kernel) == ("step", "native"), plan.reason
        got = attn(q, enc, need_weights=True)
        got_memory = attn(q, memory).context
        inside = attn(q, attn.prepare(enc)).context  # prepared inside autocast
    assert got.context.dtype == got.weights.dtype == got_memory.dtype == torch.float32
    operations = _step_operations(attn, 9, 2, 1)
    assert_within_normwise(
        [*[want.context] * 3, want.weights],
        operations,
        step=[got.context, got_memory, inside, got.weights],
    )
    (got_memory.sum() + inside.sum()).backward()
    (2 * want.context.sum()).backward()
    # the two passes' gradients add: one more rounding
    assert_within_normwise([enc64.grad], operations + 1, step=[enc.grad])


@needs_native
def test_the_kernel_refuses_inputs_it_cannot_read():
    q, kf, v, va = (x.detach() for x in _inputs(dtype=torch.float32))
    with pytest.raises(
        TypeError,
        match=r"^kf: expected torch.float32 on cpu \(the query's\), "
        r"got torch.bfloat16",
    ):
        step.additive_step(q, kf.bfloat16(), v, va)
    with pytest.raises(TypeError, match=r"^q: the C\+\+ step takes float32 or float64"):
        step.additive_step(q.half(), kf.half(), v.half(), va.half())
    with pytest.raises(ValueError, match=r"^q: expected shape \(3, 2, 1, 5\), got \(3, 2, 2, 5\)"):
        step.additive_step(q.expand(3, 2, 2, 5), kf, v, va)
    per_head = torch.ones(3, 2, 1, 7, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"^mask: expected a bool tensor \(3 or 1, 1, 1, 7\)"):
        step.additive_step(q, kf, v, va, per_head)


@pytest.mark.parametrize("native_kernel", PATHS, ids=["torch", "native"])
def test_nan_in_a_row_comes_out_as_nan_like_the_reference(native_kernel):
    """A diverged decoder state must show (NaN), not turn into a row with no keys (zeros)."""
    q, kf, v, va = (x.detach() for x in _inputs())
    q = q.clone()
    q[0, 0, 0, 0] = float("nan")  # every score of row (0, 0) is NaN
    kf = kf.clone()
    kf[1, 0, 3, 0] = float("nan")  # one score of row (1, 0) is NaN
    out, p = step.additive_step(q, kf, v, va, MASK, native=native_kernel)
    ref_out, ref_p = step._forward(q, kf, va, v, MASK, None, None)
    assert out[0, 0].isnan().all() and p[0, 0].isnan().all()
    assert out[1, 0].isnan().all() and p[1, 0].isnan().all()
    torch.testing.assert_close(out, ref_out, equal_nan=True)
    torch.testing.assert_close(p, ref_p, equal_nan=True)
    assert torch.equal(out[2], torch.zeros_like(out[2]))  # no key allowed: zeros, as before


@needs_native
@pytest.mark.parametrize("score", ["additive", "location"])
def test_second_derivatives_through_decoder_steps_equal_the_reference(score):
    """create_graph=True: the steps' gradients can be differentiated again (gradient penalty)."""
    attn, ref, enc, queries, lengths = _decoder_case(b=3, tk=70, d=16, steps=3, score=score)
    ref64, enc64, queries64 = _float64(ref, enc, queries)
    lengths = lengths[:3]
    got = []
    for module, keys, steps in (
        (attn, enc, queries),
        (ref, enc, queries),
        (ref64, enc64, queries64),
    ):
        keys.grad = None
        ctx, _ = _decoder_run(module, keys, steps[:, :3], lengths)
        (g,) = torch.autograd.grad(ctx.square().sum(), [keys], create_graph=True)
        (g.square().sum() + ctx.sum()).backward()
        got.append(keys.grad.clone())
    assert got[2].abs().sum() > 0
    assert_within_normwise(
        got[2:], _step_operations(attn, 70, 3, 3, backward=3), step=got[:1], reference=got[1:2]
    )


def test_an_unexpected_build_error_falls_back_to_plain_pytorch(monkeypatch):
    def boom():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(native, "_load", boom)
    fresh = native._Native()
    assert fresh.load() is None and fresh.load() is None
    assert fresh.failure == "RuntimeError: Could not determine home directory."


@needs_native
def test_a_damaged_cached_library_is_built_again(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNKIT_CACHE_DIR", str(tmp_path / "first"))
    native._load()
    (built,) = (tmp_path / "first").glob("kernels-*.so")
    damaged = tmp_path / "second" / built.name
    damaged.parent.mkdir(mode=0o700)
    damaged.write_bytes(b"")  # what a crash mid-write could have left
    monkeypatch.setenv("ATTNKIT_CACHE_DIR", str(tmp_path / "second"))
    lib = native._load()
    assert damaged.stat().st_size > 0
    x = torch.tensor([0.25])
    torch.testing.assert_close(bindings.tanh(x, lib=lib), torch.tanh(x))


@pytest.mark.parametrize("heads", [1, 3])
def test_the_location_term_is_the_broadcast_product(heads):
    g = torch.Generator().manual_seed(heads)
    f = torch.randn(4, heads, 7, 5, generator=g, dtype=torch.float64)
    lw = torch.randn(heads, 5, 6, generator=g, dtype=torch.float64)
    out = bindings.location_term(f, lw)
    assert out.shape == (4, heads, 7, 6) and out.is_contiguous()
    torch.testing.assert_close(out, f @ lw)
    torch.autograd.gradcheck(bindings.location_term, (f.requires_grad_(), lw.requires_grad_()))
