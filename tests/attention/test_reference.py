"""The reference path against the papers' equations, and its gradients."""

import pytest
import torch

from attnkit import SCORES, Attention, lengths_to_mask
from tests.attention.paper import paper_attention


def _module(score, heads, dq=6, dk=5, dv=4, **kw):
    torch.manual_seed(0)
    if heads == 1 and score in ("dot", "scaled_dot", "cosine"):
        dk = dq
    attn = Attention(dq, dk, dv, score=score, heads=heads, impl="reference", **kw).double()
    if heads > 1:
        attn = Attention(
            dq, dk, dv, score=score, heads=heads, head_dim=3, impl="reference", **kw
        ).double()
    if score == "location":
        with torch.no_grad():
            attn.score.bias.normal_()
    return attn


def _inputs(attn, b=2, tq=3, tk=5):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(b, tq, attn.query_dim, generator=g, dtype=torch.float64)
    k = torch.randn(b, tk, attn.key_dim, generator=g, dtype=torch.float64)
    v = torch.randn(b, tk, attn.value_dim, generator=g, dtype=torch.float64)
    return q, k, v


def _prev(attn, b, tq, tk):
    g = torch.Generator().manual_seed(2)
    shape = (b, attn.heads, tq, tk) if attn.heads > 1 else (b, tq, tk)
    return torch.rand(shape, generator=g, dtype=torch.float64).softmax(-1)


@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("masking", ["none", "lengths", "causal", "window"])
def test_reference_equals_paper_loops(score, heads, masking):
    kw = {"causal": masking == "causal"}
    if masking == "window":
        kw["window"] = (1, 2)
    attn = _module(score, heads, **kw)
    q, k, v = _inputs(attn)
    b, tq, tk = q.shape[0], q.shape[1], k.shape[1]
    lengths = torch.tensor([tk, 2]) if masking == "lengths" else None
    prev = _prev(attn, b, tq, tk) if score == "location" else None
    out = attn(q, k, v, key_lengths=lengths, prev_weights=prev, need_weights=True)
    allowed = torch.ones(b, tq, tk, dtype=torch.bool)
    if lengths is not None:
        allowed &= lengths_to_mask(lengths, tk)[:, None, :]
    for i in range(tq):
        c = i * tk // tq  # Luong local-m centre, scaled for Tq != Tk
        for j in range(tk):
            if kw["causal"] and j > c:
                allowed[:, i, j] = False
            if "window" in kw and not c - kw["window"][0] <= j <= c + kw["window"][1]:
                allowed[:, i, j] = False
    for i in range(b):
        p = None if prev is None else prev[i].reshape(attn.heads, tq, tk)
        ctx, w = paper_attention(
            attn, q[i], k[i], v[i], allowed[i], p, None if lengths is None else int(lengths[i])
        )
        got_w = out.weights[i] if heads > 1 else out.weights[i][None]
        torch.testing.assert_close(got_w, w, atol=1e-10, rtol=1e-9)
        torch.testing.assert_close(out.context[i], ctx, atol=1e-10, rtol=1e-9)
    # Guard against a vacuous comparison: the weights are not uniform.
    assert out.weights.std() > 1e-3


@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("score", SCORES)
def test_gradcheck_float64(score, heads):
    attn = _module(score, heads)
    q, k, v = _inputs(attn, b=2, tq=2, tk=4)
    lengths = torch.tensor([4, 0])  # the second example has no key at all
    prev = _prev(attn, 2, 2, 4) if score == "location" else None
    inputs = [q.requires_grad_(), k.requires_grad_(), v.requires_grad_()]
    if prev is not None:
        inputs.append(prev.requires_grad_())

    def f(q, k, v, prev=None):
        return attn(q, k, v, key_lengths=lengths, prev_weights=prev, need_weights=True)

    assert torch.autograd.gradcheck(f, inputs)


@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("impl", ["reference", "auto"])
@pytest.mark.parametrize("score", SCORES)
def test_fully_masked_rows_are_zero_with_finite_gradients(score, heads, impl):
    torch.manual_seed(0)
    attn = Attention(8, score=score, heads=heads, impl=impl)
    q = torch.randn(3, 4, 8, requires_grad=True)
    k = torch.randn(3, 6, 8, requires_grad=True)
    out = attn(q, k, key_lengths=torch.tensor([6, 0, 2]), need_weights=impl == "reference")
    assert torch.isfinite(out.context).all()
    assert out.context[1].abs().max() == 0
    if out.weights is not None:
        assert out.weights[1].abs().max() == 0
    (out.context**2).sum().backward()
    for t in [q, k, *attn.parameters()]:
        assert torch.isfinite(t.grad).all()
    assert q.grad[1].abs().max() == 0
    assert q.grad[0].abs().max() > 0


def test_location_weights_chain_from_step_to_step():
    """The location score gets the previous weights explicitly and returns the new ones."""
    torch.manual_seed(0)
    attn = Attention(8, score="location", location_kernel=3)
    key = torch.randn(2, 7, 8)
    prev = None
    for _ in range(3):
        out = attn(torch.randn(2, 8), key, prev_weights=prev, key_lengths=torch.tensor([7, 5]))
        assert out.weights.shape == (2, 7)
        torch.testing.assert_close(out.weights.sum(-1), torch.ones(2))
        assert out.weights[1, 5:].abs().max() == 0
        prev = out.weights
    # The previous weights change the scores: different prev, different result.
    q = torch.randn(2, 8)
    a = attn(q, key, prev_weights=torch.eye(7)[[0, 6]]).weights
    b = attn(q, key, prev_weights=torch.eye(7)[[6, 0]]).weights
    assert (a - b).abs().max() > 1e-4


@pytest.mark.parametrize("impl", ["reference", "chunked", "auto"])
@pytest.mark.parametrize("score", SCORES)
def test_no_keys_at_all_gives_zeros(impl, score):
    attn = Attention(8, score=score, impl=impl)
    q = torch.randn(2, 3, 8, requires_grad=True)
    out = attn(q, torch.randn(2, 0, 8))
    assert out.context.shape == (2, 3, 8) and out.context.abs().max() == 0
    out.context.sum().backward()
    assert q.grad.abs().max() == 0
