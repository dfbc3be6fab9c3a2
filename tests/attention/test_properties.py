"""Properties every attention call must have, on random shapes (hypothesis)."""

import copy
import math

import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from attnkit import SCORES, Attention, attend, lengths_to_mask
from attnkit.ops import export_mode
from tests.float32_bounds import assert_within_normwise, backward_term_scales

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


def _float32(attn, *tensors):
    """``attn`` and ``tensors`` in float32, and their float64 copies holding the same values
    (the same computation, whose own rounding is far below float32's, to judge against)."""
    attn32 = copy.deepcopy(attn).float()
    t32 = [None if t is None else t.detach().float() for t in tensors]
    return (
        attn32,
        t32,
        copy.deepcopy(attn32).double(),
        [None if t is None else t.double() for t in t32],
    )


def _score_size(attn64, run):
    """The size of the terms of the largest score of ``attn64`` in ``run()``: the prepared
    features are recorded as they are made and the score recomputed on absolute values, so
    nothing cancels: ``scale |qf| . |kf|`` for the dot family; ``sum_a |v_a| (1 + |qf_a| +
    |kf_a| + |loc_a|)`` for the additive and location scores (each tanh at most 1, and its
    argument's own error passed on by a slope of at most 1)."""
    score, kept = attn64.score, {}
    names = ("prepare_query", "prepare_key", "prepare_extra")
    for name in names:
        method = getattr(score, name)

        def keep(x, name=name, method=method):
            out = method(x)
            kept.setdefault(name, out)  # the first call's: one each in run()
            return out

        setattr(score, name, keep)
    try:
        run()
    finally:
        for name in names:
            delattr(score, name)
    qf, kf = kept["prepare_query"].detach().abs(), kept["prepare_key"].detach().abs()
    if qf.numel() == 0 or kf.numel() == 0:
        return 0.0
    if score.dot_family:
        return score.scale * float((qf @ kf.transpose(-1, -2)).max())
    pre = 1 + qf.unsqueeze(-2) + kf.unsqueeze(-3)  # (B, H, Tq, Tk, A)
    if kept.get("prepare_extra") is not None:
        pre = pre + torch.einsum(
            "bhqkf,hfa->bhqka", kept["prepare_extra"].detach().abs(), score.w_loc.detach().abs()
        )
    return float((pre * score.v.detach().abs()[:, None, None]).sum(-1).max())


def _operations(attn, tk, size, backward=False):
    """The longest chain of dependent roundings through ``attn`` over ``tk`` keys (an upper
    count, for :func:`normwise_bound`), counted from the widest input ``W``: the query's and
    key's projections and the score's sum (``3 W``, and the location conv's ``kernel +
    filters``), the softmax's and the context's sums (``Tk`` each), the value's and output
    projections (``2 W``). The softmax turns each score's absolute error (``gamma(n)`` times
    its terms' ``size``, :func:`_score_size`) into a relative error of the weights, twice
    over (``p_j (ds_j - sum_k p_k ds_k)``): ``2 size gamma(n) <= gamma(ceil(2 size) n)``, so
    the score's chain counts ``ceil(2 size)`` times where that is more than once. A gradient
    runs the chain back again (``backward``); the softmax gradient's growth is
    :func:`normwise_bound`'s factor 4."""
    width = max(attn.query_dim, attn.key_dim, attn.value_dim)
    score = 3 * width
    if getattr(attn.score, "needs_prev", False):
        score += sum(attn.score.conv.weight.shape)
    chain = score * max(1, math.ceil(2 * size)) + 2 * tk + 2 * width
    return (2 if backward else 1) * chain


@given(cases(), st.booleans(), st.booleans())
def test_one_step_query_equals_row_of_all_queries(c, causal, windowed):
    window = (1, 2) if windowed else None
    attn, q, k, v, lengths = _build(c, causal=causal, window=window)
    b, tq, tk = c["b"], c["tq"], c["tk"]
    prev = None
    if c["score"] == "location":
        shape = (b, c["heads"], tq, tk) if c["heads"] > 1 else (b, tq, tk)
        prev = torch.rand(shape, dtype=q.dtype)
    attn32, (q32, k32, v32, prev32), attn64, (q64, k64, v64, prev64) = _float32(attn, q, k, v, prev)

    def run(attn, q, k, v, prev, i=None):
        if i is None:
            return attn(q, k, v, key_lengths=lengths, prev_weights=prev, need_weights=True)
        return attn(
            q[:, i],
            k,
            v,
            key_lengths=lengths,
            prev_weights=None if prev is None else prev.select(-2, i),
            positions=torch.full((b,), i * tk // tq) if (causal or windowed) else None,
            need_weights=True,
        )

    want = run(attn64, q64, k64, v64, prev64)
    full = run(attn32, q32, k32, v32, prev32)
    size = _score_size(attn64, lambda: run(attn64, q64, k64, v64, prev64))
    for i in range(tq):
        # the step and the row of all queries in float32, and the step in float64, each
        # within a normwise bound of the row in float64
        assert_within_normwise(
            [want.context[:, i], want.weights.select(-2, i)],
            _operations(attn, tk, size),
            step=run(attn32, q32, k32, v32, prev32, i)[:2],
            full=[full.context[:, i], full.weights.select(-2, i)],
            step_float64=run(attn64, q64, k64, v64, prev64, i)[:2],
        )


@given(cases(scores=DOT_FAMILY), st.booleans(), st.sampled_from([None, (0, 1), (2, 0)]))
def test_sdpa_path_equals_reference(c, causal, window):
    attn, q, k, v, lengths = _build(c, causal=causal, window=window)
    attn32, (q32, k32, v32), attn64, (q64, k64, v64) = _float32(attn, q, k, v)
    q64.requires_grad_()

    def run(attn, q, k, v, impl):
        attn.impl = impl
        q = q.detach().requires_grad_()
        ctx = attn(q, k, v, key_lengths=lengths, need_weights=impl == "reference").context
        return [ctx.detach(), *torch.autograd.grad(ctx.square().sum(), q)]

    want = run(attn64, q64, k64, v64, "reference")
    size = _score_size(attn64, lambda: attn64(q64, k64, v64, key_lengths=lengths))
    (terms,) = backward_term_scales(
        lambda q: attn64(q, k64, v64, key_lengths=lengths).context, [q64], [2 * want[0]]
    )
    # The context and the gradient of sum(context^2) (through the softmax), by sdpa and the
    # reference in float32 and by sdpa in float64, within a normwise bound of the reference in
    # float64; the gradient, which may cancel far below its terms, judged on its terms' scale
    # (backward_term_scales, the softmax's included) where that is larger
    assert_within_normwise(
        want,
        _operations(attn, c["tk"], size, backward=True),
        {1: float(terms.max())},
        sdpa=run(attn32, q32, k32, v32, "sdpa"),
        reference=run(attn32, q32, k32, v32, "reference"),
        sdpa_float64=run(attn64, q64, k64, v64, "sdpa"),
    )


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
