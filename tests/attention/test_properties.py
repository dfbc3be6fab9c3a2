"""Properties every attention call must have, on random shapes (hypothesis)."""

import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from attnkit import SCORES, Attention, attend, lengths_to_mask
from attnkit.ops import export_mode
from tests.float32_bounds import assert_within_normwise

DOT_FAMILY = ("dot", "scaled_dot", "general", "cosine")


@st.composite
def cases(draw, scores=SCORES):
    b = draw(st.integers(1, 3))
    tq = draw(st.integers(1, 6))
    tk = draw(st.integers(1, 9))
    d = draw(st.integers(1, 6))
    score = draw(st.sampled_from(scores))
    heads = draw(st.sampled_from([1, 2]))
    lengths = draw(st.lists(st.integers(0, tk), min_size=b, max_size=b))
    seed = draw(st.integers(0, 2**16))
    return dict(b=b, tq=tq, tk=tk, d=d, score=score, heads=heads, lengths=lengths, seed=seed)


def _build(c, dtype=torch.float64, **kw):
    torch.manual_seed(c["seed"])
    d = c["d"] * c["heads"]
    attn = Attention(d, score=c["score"], heads=c["heads"], **kw).to(dtype)
    q = torch.randn(c["b"], c["tq"], d, dtype=dtype)
    k = torch.randn(c["b"], c["tk"], d, dtype=dtype)
    v = torch.randn(c["b"], c["tk"], d, dtype=dtype)
    return attn, q, k, v, torch.tensor(c["lengths"])


@given(cases())
def test_weights_sum_to_one_over_allowed_keys_and_zero_elsewhere(c):
    attn, q, k, v, lengths = _build(c)
    w = attn(q, k, v, key_lengths=lengths, need_weights=True).weights
    w = w if c["heads"] > 1 else w[:, None]  # (B, H, Tq, Tk)
    valid = lengths_to_mask(lengths, c["tk"])[:, None, None, :]
    assert (w.masked_fill(valid, 0) == 0).all()
    expected = (lengths > 0).to(w.dtype)[:, None, None].expand(w.shape[:-1])
    torch.testing.assert_close(w.sum(-1), expected)
    assert (w >= 0).all()


@given(cases())
def test_padding_beyond_the_length_changes_nothing(c):
    attn, q, k, v, lengths = _build(c)
    out = attn(q, k, v, key_lengths=lengths, need_weights=True)
    pad = 3
    k2 = torch.cat([k, 100 * torch.randn(c["b"], pad, k.shape[-1], dtype=k.dtype)], 1)
    v2 = torch.cat([v, 100 * torch.randn(c["b"], pad, v.shape[-1], dtype=v.dtype)], 1)
    # Garbage inside the padding of the original batch must not matter either.
    valid = lengths_to_mask(lengths, c["tk"])[..., None]
    k2[:, : c["tk"]] = torch.where(valid, k, 7.0)
    v2[:, : c["tk"]] = torch.where(valid, v, -7.0)
    out2 = attn(q, k2, v2, key_lengths=lengths, need_weights=True)
    torch.testing.assert_close(out2.context, out.context)
    torch.testing.assert_close(out2.weights[..., : c["tk"]], out.weights)


@given(cases(scores=("location",)), st.sampled_from(["reference", "chunked"]), st.booleans())
def test_previous_weights_on_padded_keys_change_nothing(c, impl, one_step):
    attn, q, k, v, lengths = _build(c, impl=impl)
    if one_step:
        q = q[:, 0]
    shape = (
        (c["b"],)
        + ((c["heads"],) if c["heads"] > 1 else ())
        + (() if one_step else (c["tq"],))
        + (c["tk"],)
    )
    prev = torch.rand(shape, dtype=q.dtype)
    out = attn(q, k, v, key_lengths=lengths, prev_weights=prev)
    padded = ~lengths_to_mask(lengths, c["tk"]).reshape(c["b"], *[1] * (prev.dim() - 2), -1)
    stale = torch.where(padded, 50 * torch.rand(shape, dtype=q.dtype), prev)
    torch.testing.assert_close(
        attn(q, k, v, key_lengths=lengths, prev_weights=stale).context, out.context
    )


@given(cases(scores=("dot", "scaled_dot", "general", "additive", "cosine")))
def test_permuting_keys_permutes_weights(c):
    attn, q, k, v, _ = _build(c)
    perm = torch.randperm(c["tk"])
    out = attn(q, k, v, need_weights=True)
    out_p = attn(q, k[:, perm], v[:, perm], need_weights=True)
    torch.testing.assert_close(out_p.weights, out.weights[..., perm])
    torch.testing.assert_close(out_p.context, out.context)


@given(cases(), st.booleans(), st.booleans())
def test_one_step_query_equals_row_of_all_queries(c, causal, windowed):
    window = (1, 2) if windowed else None
    attn, q, k, v, lengths = _build(c, causal=causal, window=window)
    b, tq, tk = c["b"], c["tq"], c["tk"]
    prev = None
    if c["score"] == "location":
        shape = (b, c["heads"], tq, tk) if c["heads"] > 1 else (b, tq, tk)
        prev = torch.rand(shape, dtype=q.dtype)
    full = attn(q, k, v, key_lengths=lengths, prev_weights=prev, need_weights=True)
    for i in range(tq):
        pos = torch.full((b,), i * tk // tq)
        step = attn(
            q[:, i],
            k,
            v,
            key_lengths=lengths,
            prev_weights=None if prev is None else prev.select(-2, i),
            positions=pos if (causal or windowed) else None,
            need_weights=True,
        )
        torch.testing.assert_close(step.context, full.context[:, i])
        torch.testing.assert_close(step.weights, full.weights.select(-2, i))


@given(cases(scores=DOT_FAMILY), st.booleans(), st.sampled_from([None, (0, 1), (2, 0)]))
def test_sdpa_path_equals_reference(c, causal, window):
    attn, q, k, v, lengths = _build(c, causal=causal, window=window)
    q.requires_grad_()
    ref = attn(q, k, v, key_lengths=lengths, need_weights=True).context
    attn.impl = "sdpa"
    fast = attn(q, k, v, key_lengths=lengths).context
    torch.testing.assert_close(fast, ref)
    (g_ref,) = torch.autograd.grad(ref.square().sum(), q)
    (g_fast,) = torch.autograd.grad(fast.square().sum(), q)
    torch.testing.assert_close(g_fast, g_ref)


@given(st.integers(1, 3), st.integers(1, 7), st.integers(1, 7), st.integers(1, 8), st.booleans())
def test_scaled_dot_equals_torch_sdpa(b, tq, tk, d, causal):
    torch.manual_seed(b * 100 + tq * 10 + tk)
    q, k, v = torch.randn(b, tq, d), torch.randn(b, tk, d), torch.randn(b, tk, d + 1)
    lengths = torch.randint(1, tk + 1, (b,))
    allowed = lengths_to_mask(lengths, tk)[:, None, :]  # (B, 1, Tk)
    if causal:
        allowed = allowed & (torch.arange(tk) <= (torch.arange(tq) * tk // tq)[:, None])
    expected, want = (
        F.scaled_dot_product_attention(*x, attn_mask=allowed).masked_fill(
            ~allowed.any(-1, keepdim=True), 0.0
        )
        for x in ((q, k, v), (q.double(), k.double(), v.double()))
    )
    got = [
        attend(q, k, v, key_lengths=lengths, causal=causal, impl=impl).context
        for impl in ("reference", "sdpa")
    ]
    module = Attention(d, d, d + 1, score="scaled_dot", causal=causal, impl="reference")
    got.append(module(q, k, v, key_lengths=lengths).context)
    # every float32 path within a normwise bound of the float64 result; the longest chain: the
    # score's sum (D) and scale, the softmax's and the context's sums (Tk each)
    operations = d + 1 + 2 * tk
    assert_within_normwise([want] * 3, operations, attnkit=got, torch=[expected] * 3)


@given(cases(scores=("additive", "location")))
def test_the_exported_form_of_the_additive_scores_equals_the_eager_one(c):
    """Exported, the additive and location scores contract with matrix products (faster in
    onnxruntime than Einsum); the results equal PyTorch's einsum."""
    attn, q, k, v, lengths = _build(c, impl="reference")
    eager = attn(q, k, v, key_lengths=lengths, need_weights=True)
    with export_mode():
        exported = attn(q, k, v, key_lengths=lengths, need_weights=True)
    torch.testing.assert_close(exported.context, eager.context)
    torch.testing.assert_close(exported.weights, eager.weights)
