"""The C++ additive block kernels (csrc/blocks.cpp) against the eager block code and the
reference path: float64 to rounding, gradcheck through the chunked functions, masks, bands,
fully masked rows, float32 error bounds, and the inputs they refuse."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit import Attention
from attnkit.attention.chunked import chunked_attention, recomputed_scores
from attnkit.attention.masks import KeyLayout
from attnkit.attention.scores import make_score
from attnkit.ops import kernels, native
from tests.float32_bounds import additive_block_bounds, normwise_bound

needs_native = pytest.mark.skipif(
    not native.available(), reason=f"no C++ kernels: {native.status()}"
)
pytestmark = needs_native


def _block(b, h, bq, bk, a, dtype, seed, zeros=0.0):
    g = torch.Generator().manual_seed(seed)
    # q is a slice of a longer tensor (a query block): strided, last dim contiguous
    q = torch.randn(b, h, bq + 3, a, generator=g, dtype=dtype)[:, :, 2 : bq + 2]
    k = torch.randn(b, h, bk, a, generator=g, dtype=dtype) * 2
    v = torch.randn(h, a, generator=g, dtype=dtype)
    grad = torch.randn(b, h, bq, bk, generator=g, dtype=dtype)
    grad[torch.rand(grad.shape, generator=g) < zeros] = 0  # masked pairs are skipped
    return q, k, v, grad


@settings(max_examples=40, deadline=None)
@given(
    b=st.integers(1, 3),
    h=st.integers(1, 3),
    bq=st.integers(1, 9),
    bk=st.integers(1, 70),
    a=st.integers(1, 40),
    zeros=st.sampled_from([0.0, 0.5, 1.0]),
    seed=st.integers(0, 999),
)
def test_native_blocks_equal_eager_in_float64(b, h, bq, bk, a, zeros, seed):
    """Random shapes, key counts across the 32-key tiles, grads with zeros (masked pairs)."""
    q, k, v, grad = _block(b, h, bq, bk, a, torch.float64, seed, zeros)
    torch.testing.assert_close(
        kernels.additive_scores(q, k, v, kernel="native"), kernels.additive_scores(q, k, v)
    )
    for got, want in zip(
        kernels.additive_backward(q, k, v, grad, kernel="native"),
        kernels.additive_backward(q, k, v, grad),
    ):
        torch.testing.assert_close(got, want)


def test_native_blocks_split_work_over_threads_like_one_thread():
    """Big enough to run in parallel: equal to the one-thread result (float64), and the same
    bits on every run (float32: the per-thread sums are added in a fixed order)."""
    before = torch.get_num_threads()
    try:
        for dtype in (torch.float64, torch.float32):
            q, k, v, grad = _block(2, 2, 40, 300, 64, dtype, 0)
            torch.set_num_threads(1)
            one = kernels.additive_backward(q, k, v, grad, kernel="native")
            torch.set_num_threads(max(2, before))
            many = kernels.additive_backward(q, k, v, grad, kernel="native")
            again = kernels.additive_backward(q, k, v, grad, kernel="native")
            for x, y, z in zip(one, many, again):
                assert torch.equal(y, z)
                if dtype == torch.float64:
                    torch.testing.assert_close(x, y)
    finally:
        torch.set_num_threads(before)


def test_native_float32_blocks_within_float32_error_of_the_equation():
    """float32 through the kernels against float64, every element within its a-priori float32
    error bound (:func:`additive_block_bounds`: operation count x unit roundoff, plus tanh's
    error), which holds on any CPU and build (AVX2 or AVX-512, FMA or not, any threads); the
    eager float32 code meets the same bound."""
    q, k, v, grad = _block(2, 2, 30, 100, 128, torch.float32, 1)
    want = [
        kernels.additive_scores(q.double(), k.double(), v.double()),
        *kernels.additive_backward(q.double(), k.double(), v.double(), grad.double()),
    ]
    bounds = additive_block_bounds(q, k, v, grad)
    native = [
        kernels.additive_scores(q, k, v, kernel="native"),
        *kernels.additive_backward(q, k, v, grad, kernel="native"),
    ]
    eager = [kernels.additive_scores(q, k, v), *kernels.additive_backward(q, k, v, grad)]
    for name, got, plain, w, bound in zip(["s", "dq", "dk", "dv"], native, eager, want, bounds):
        for kind, x in (("native", got), ("eager", plain)):
            over = (x.double() - w).abs() - bound
            assert over.max() <= 0, f"{kind} {name}: {over.max():.3g} over its bound"
        # not vacuous: an error of 5% of the outputs' scale would be caught (dv, 6,000 terms a
        # sum, has the loosest bound: about 1% here)
        assert bound.max() < 0.05 * w.abs().max(), name


def _layout(b, tq, tk, lengths=None, causal=False, window=None):
    key_valid = None if lengths is None else torch.arange(tk) < lengths[:, None]
    q_pos = (torch.arange(tq) * tk // tq)[None] if (causal or window) else None
    return KeyLayout(key_valid, q_pos, causal, window, tk)


@pytest.mark.parametrize(
    "band, lengths",
    [
        ({}, [6, 0]),
        ({"causal": True}, [6, 0]),
        ({"window": (1, 2)}, [6, 0]),
        ({"causal": True}, None),
        ({"window": (1, 2)}, None),
    ],
    ids=["full", "causal", "window", "causal-one-mask", "window-one-mask"],
)
def test_gradcheck_chunked_attention_through_the_fused_backward(band, lengths):
    """float64 gradcheck of the chunked function on the native kernels: more queries than
    features, so backward takes the one-pass kernel (scores not kept); a fully masked row;
    without key lengths, one band mask (1, 1, bq, bk) for every example of the batch."""
    torch.manual_seed(0)
    score = make_score("additive", heads=2, query_dim=3, key_dim=3, attn_dim=3).double()
    b, tq, tk = 3, 7, 6
    qf = torch.randn(b, 2, tq, 3, dtype=torch.float64, requires_grad=True)
    kf = torch.randn(b, 2, tk, 3, dtype=torch.float64, requires_grad=True)
    v = torch.randn(b, 2, tk, 2, dtype=torch.float64, requires_grad=True)
    layout = _layout(b, tq, tk, None if lengths is None else torch.tensor([*lengths, 4]), **band)
    calls = []
    fused = score.block_attention_backward
    score.block_attention_backward = lambda *a, **kw: calls.append(1) or fused(*a, **kw)

    def f(qf, kf, v, va):
        return chunked_attention(qf, kf, v, score, layout, kernel="native", blocks=(3, 4))

    assert torch.autograd.gradcheck(f, [qf, kf, v, score.v])
    assert calls  # the fused kernel ran


def test_gradcheck_recomputed_scores_on_native_kernels():
    torch.manual_seed(0)
    score = make_score("additive", heads=2, query_dim=3, key_dim=3, attn_dim=4).double()
    qf = torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    kf = torch.randn(1, 2, 5, 4, dtype=torch.float64, requires_grad=True)

    def f(qf, kf, va):
        return recomputed_scores(
            qf, kf, score, _layout(1, 3, 5, window=(1, 0)), kernel="native", blocks=(2, 3)
        )

    assert torch.autograd.gradcheck(f, [qf, kf, score.v])


@pytest.mark.parametrize("need_weights", [False, True])
def test_auto_uses_the_native_kernels_and_matches_the_reference(need_weights):
    """float32 through Attention on CPU: the plan names the kernels; outputs and gradients
    match the float64 reference within a normwise float32 bound (the native and the plain
    float32 paths alike)."""
    torch.manual_seed(0)
    fast = Attention(16, score="additive", attn_dim=32)
    ref = Attention(16, score="additive", attn_dim=32, impl="reference")
    ref.load_state_dict(fast.state_dict())
    x = torch.randn(3, 70, 16, requires_grad=True)
    lengths = torch.tensor([70, 33, 0])
    plan = fast.plan(x, x, key_lengths=lengths, need_weights=need_weights)
    assert plan.kernel == "native" and "C++ additive block kernels" in plan.reason

    def run(attn, inp):
        out = attn(inp, inp, key_lengths=lengths, need_weights=need_weights)
        loss = (out.context * torch.linspace(-1, 1, 16, dtype=inp.dtype)).sum()
        return [out.context, *torch.autograd.grad(loss, [inp, *attn.parameters()])]

    got, plain = run(fast, x), run(ref, x)
    want = run(ref.double(), x.detach().double().requires_grad_())
    # the longest chain: the projections (16), the score (32), the softmax and the weighted
    # sum (70 each), their gradients, and the parameters' sums over every (query, key) pair
    operations = 16 + 32 + 4 * 70 + 3 * 70 * 70
    for g, p, w in zip(got, plain, want):
        assert torch.isfinite(g).all()
        bound = normwise_bound(w, operations)
        assert (g.double() - w).abs().max() <= bound and (p.double() - w).abs().max() <= bound
    assert (got[0][2] == 0).all()  # no key: zero context


def test_float64_and_low_precision_plans():
    x = torch.randn(1, 20, 8)
    attn = Attention(8, score="additive")
    assert attn.double().plan(x.double(), x.double()).kernel == "eager"
    assert attn.float().plan(x.bfloat16(), x.bfloat16()).kernel == "native"


def test_native_kernels_refuse_what_they_cannot_read():
    q, k, v, grad = _block(1, 1, 3, 4, 5, torch.float32, 0)
    with pytest.raises(
        ValueError,
        match=r"kernel='native': k must be a CPU float32 or float64 "
        r"tensor like q \(torch.float32\), got torch.float64",
    ):
        kernels.additive_scores(q, k.double(), v, kernel="native")
    with pytest.raises(ValueError, match=r"kernel='native': q must have a contiguous last dim"):
        kernels.additive_scores(
            q.transpose(-1, -2).contiguous().transpose(-1, -2), k, v, kernel="native"
        )
    with pytest.raises(ValueError, match=r"kernel='native': v \(H, A\) must be contiguous"):
        kernels.additive_backward(q, k, torch.randn(5, 2).t(), grad, kernel="native")
    with pytest.raises(
        ValueError,
        match=r"kernel='native': grad must have shape \(1, 1, 3, 4\) "
        r"\(from q \(1, 1, 3, 5\) and k\), got \(1, 1, 4, 3\)",
    ):
        kernels.additive_backward(q, k, v, grad.transpose(-1, -2), kernel="native")
    with pytest.raises(ValueError, match=r"kernel='native': v must have shape \(1, 5\)"):
        kernels.additive_scores(q, k, torch.randn(2, 5), kernel="native")
