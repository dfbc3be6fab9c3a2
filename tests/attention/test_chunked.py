"""The chunked path against the reference: outputs, gradients, masks, windows, dropout, dtypes."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnkit import SCORES, Attention
from attnkit.attention import chunked as chunked_mod
from attnkit.attention.chunked import chunked_attention, recomputed_scores
from attnkit.attention.masks import KeyLayout
from attnkit.attention.scores import make_score


@st.composite
def cases(draw):
    return dict(
        b=draw(st.integers(1, 3)),
        tq=draw(st.integers(1, 9)),
        tk=draw(st.integers(1, 11)),
        score=draw(st.sampled_from(SCORES)),
        heads=draw(st.sampled_from([1, 2])),
        causal=draw(st.booleans()),
        window=draw(st.sampled_from([None, (0, 0), (1, 2), (3, 0)])),
        blocks=(draw(st.integers(1, 4)), draw(st.integers(1, 5))),
        seed=draw(st.integers(0, 2**16)),
    )


def _pair(c, dtype=torch.float64):
    """Two modules with equal parameters: one reference, one chunked with tiny blocks."""
    torch.manual_seed(c["seed"])
    kw = dict(score=c["score"], heads=c["heads"], causal=c["causal"], window=c["window"])
    if c["score"] == "location":
        kw["location_kernel"] = 3
    ref = Attention(6, 6, 5, impl="reference", **kw).to(dtype)
    fast = Attention(6, 6, 5, impl="chunked", **kw).to(dtype)
    fast.load_state_dict(ref.state_dict())
    return ref, fast


def _grads(attn, q, k, v, lengths, prev):
    out = attn(q, k, v, key_lengths=lengths, prev_weights=prev)
    loss = (out.context * torch.linspace(-1, 1, out.context.shape[-1], dtype=q.dtype)).sum()
    inputs = [q, k, v] + ([prev] if prev is not None else [])
    grads = torch.autograd.grad(loss, inputs + list(attn.parameters()))
    return out, grads


@given(cases())
def test_chunked_equals_reference_with_gradients(c):
    ref, fast = _pair(c)
    g = torch.Generator().manual_seed(c["seed"])
    b, tq, tk = c["b"], c["tq"], c["tk"]
    q = torch.randn(b, tq, 6, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(b, tk, 6, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(b, tk, 5, generator=g, dtype=torch.float64, requires_grad=True)
    lengths = torch.randint(0, tk + 1, (b,), generator=g)
    prev = None
    if c["score"] == "location":
        shape = (b, c["heads"], tq, tk) if c["heads"] > 1 else (b, tq, tk)
        prev = torch.rand(shape, generator=g, dtype=torch.float64).requires_grad_()
    original = chunked_mod.block_sizes
    chunked_mod.block_sizes = lambda *a, **kw: c["blocks"]
    try:
        out_f, grads_f = _grads(fast, q, k, v, lengths, prev)
    finally:
        chunked_mod.block_sizes = original
    out_r, grads_r = _grads(ref, q, k, v, lengths, prev)
    torch.testing.assert_close(out_f.context, out_r.context)
    if out_r.weights is not None:
        torch.testing.assert_close(out_f.weights, out_r.weights)
    for gf, gr in zip(grads_f, grads_r):
        torch.testing.assert_close(gf, gr)


def _layout(b, tq, tk, lengths=None, causal=False, window=None):
    key_valid = None if lengths is None else torch.arange(tk) < lengths[:, None]
    q_pos = (torch.arange(tq) * tk // tq)[None] if (causal or window) else None
    return KeyLayout(key_valid, q_pos, causal, window, tk)


@pytest.mark.parametrize("tq", [2, 5])  # scores kept (Tq <= 3 features) / recomputed
@pytest.mark.parametrize("score_name", ["dot", "additive", "location"])
@pytest.mark.parametrize("dropout_p", [0.0, 0.3])
def test_gradcheck_chunked_function(score_name, dropout_p, tq):
    torch.manual_seed(0)
    score = make_score(
        score_name,
        heads=1,
        query_dim=3,
        key_dim=3,
        attn_dim=None,
        **({"location_kernel": 3} if score_name == "location" else {}),
    ).double()
    b, tk = 2, 5
    qf = torch.randn(b, 1, tq, 3, dtype=torch.float64, requires_grad=True)
    kf = torch.randn(b, 1, tk, 3, dtype=torch.float64, requires_grad=True)
    v = torch.randn(b, 1, tk, 2, dtype=torch.float64, requires_grad=True)
    extra = None
    if score_name == "location":
        extra = torch.randn(
            b, 1, tq, tk, score.conv.out_channels, dtype=torch.float64, requires_grad=True
        )
    layout = _layout(b, tq, tk, torch.tensor([5, 0]), causal=False, window=(1, 1))
    inputs = [qf, kf, v] + ([extra] if extra is not None else []) + list(score.pairwise_params())

    def f(qf, kf, v, *rest):
        e = rest[0] if extra is not None else None
        return chunked_attention(
            qf, kf, v, score, layout, extra=e, dropout_p=dropout_p, seed=1234, blocks=(2, 2)
        )

    assert torch.autograd.gradcheck(f, inputs)


@pytest.mark.parametrize("window", [None, (1, 0)])
@pytest.mark.parametrize("score_name", ["additive", "location"])
def test_gradcheck_recomputed_scores(score_name, window):
    torch.manual_seed(0)
    score = make_score(
        score_name,
        heads=2,
        query_dim=3,
        key_dim=3,
        attn_dim=4,
        **({"location_kernel": 3} if score_name == "location" else {}),
    ).double()
    qf = torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    kf = torch.randn(1, 2, 5, 4, dtype=torch.float64, requires_grad=True)
    extra = None
    if score_name == "location":
        extra = torch.randn(
            1, 2, 3, 5, score.conv.out_channels, dtype=torch.float64, requires_grad=True
        )
    inputs = [qf, kf] + ([extra] if extra is not None else []) + list(score.pairwise_params())

    def f(qf, kf, *rest):
        e = rest[0] if extra is not None else None
        return recomputed_scores(
            qf, kf, score, _layout(1, 3, 5, window=window), extra=e, blocks=(2, 3)
        )

    assert torch.autograd.gradcheck(f, inputs)


def test_window_skips_key_blocks_outside_the_band():
    """Local attention does O(T * window) work: only key blocks near the diagonal are scored."""
    torch.manual_seed(0)
    t, left, right, bq, bk = 256, 8, 4, 16, 16
    score = make_score("additive", heads=1, query_dim=4, key_dim=4, attn_dim=4)
    seen = []
    original = score.block_scores

    def spy(qf, kf, extra=None, *, kernel="eager"):
        seen.append(qf.shape[2] * kf.shape[2])
        return original(qf, kf, extra, kernel=kernel)

    score.block_scores = spy
    qf, kf, v = torch.randn(1, 1, t, 4), torch.randn(1, 1, t, 4), torch.randn(1, 1, t, 3)
    layout = _layout(1, t, t, window=(left, right))
    chunked_attention(qf, kf, v, score, layout, blocks=(bq, bk))
    scored = sum(seen)
    assert scored <= t * (bq + left + right + 2 * bk)  # per query block: the band's hull
    assert scored < t * t / 4


@pytest.mark.parametrize("score", SCORES)
def test_chunked_fully_masked_rows_are_zero_with_finite_gradients(score):
    torch.manual_seed(0)
    attn = Attention(8, score=score, impl="chunked", window=(1, 1))
    q = torch.randn(3, 6, 8, requires_grad=True)
    k = torch.randn(3, 6, 8, requires_grad=True)
    # Example 1 has no key; in example 2 (length 2) queries 4 and 5 see no valid key in
    # their window.
    out = attn(q, k, key_lengths=torch.tensor([6, 0, 2]))
    assert torch.isfinite(out.context).all()
    assert out.context[1].abs().max() == 0 and out.context[2, 4:].abs().max() == 0
    out.context.square().sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()
    assert q.grad[1].abs().max() == 0 and q.grad[2, 4:].abs().max() == 0


def test_dropout_is_reproducible_and_unbiased():
    torch.manual_seed(0)
    attn = Attention(8, score="additive", dropout=0.5, impl="chunked")
    q, k = torch.randn(2, 5, 8), torch.randn(2, 40, 8)
    torch.manual_seed(3)
    a = attn(q, k).context
    torch.manual_seed(3)
    torch.testing.assert_close(attn(q, k).context, a)
    assert (attn(q, k).context - a).abs().max() > 1e-3  # a new seed, new masks
    mean = torch.stack([attn(q, k).context for _ in range(400)]).mean(0)
    attn.eval()
    exact = attn(q, k).context
    assert (mean - exact).abs().max() < 0.1 * exact.abs().max()


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_chunked_low_precision_error_is_within_twice_the_reference_error(score, dtype):
    torch.manual_seed(0)
    attn = Attention(16, score=score, heads=2)
    q, k = torch.randn(2, 9, 16), torch.randn(2, 13, 16)
    lengths = torch.tensor([13, 4])
    exact = attn.double()(q.double(), k.double(), key_lengths=lengths).context
    attn = attn.to(dtype)
    errs = {}
    for impl in ("reference", "chunked"):
        attn.impl = impl
        out = attn(q.to(dtype), k.to(dtype), key_lengths=lengths).context
        assert out.dtype == dtype and torch.isfinite(out).all()
        errs[impl] = (out.double() - exact).abs().max().item()
    assert errs["chunked"] <= 2 * errs["reference"] + 1e-3, errs


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("heads", [1, 2])
def test_decoder_steps_over_prepared_memory_equal_plain_calls(score, heads):
    torch.manual_seed(0)
    attn = Attention(8, score=score, heads=heads)
    key = torch.randn(2, 12, 8, requires_grad=True)
    lengths = torch.tensor([12, 7])
    queries = torch.randn(4, 2, 8)
    memory = attn.prepare(key)
    prev_a = prev_b = None
    total_a = total_b = 0
    for q in queries:
        a = attn(q, memory, key_lengths=lengths, prev_weights=prev_a)
        b = attn(q, key, key_lengths=lengths, prev_weights=prev_b)
        torch.testing.assert_close(a.context, b.context)
        prev_a, prev_b = a.weights, b.weights
        total_a, total_b = total_a + a.context.sum(), total_b + b.context.sum()
    (ga,) = torch.autograd.grad(total_a, key)
    (gb,) = torch.autograd.grad(total_b, key)
    torch.testing.assert_close(ga, gb)
    with pytest.raises(ValueError, match="^key: this Memory was prepared by another"):
        Attention(8, score=score, heads=heads)(queries[0], memory)
    with pytest.raises(ValueError, match="^value: the values are already in the prepared"):
        attn(queries[0], memory, key)
