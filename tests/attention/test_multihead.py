"""Multi-head scaled-dot attention is torch.nn.MultiheadAttention given the same weights."""

import copy

import pytest
import torch
from torch import nn

from attnkit import Attention, lengths_to_mask
from tests.float32_bounds import assert_within_normwise


def _copy_mha_weights(attn: Attention, mha: nn.MultiheadAttention) -> None:
    e = mha.embed_dim
    with torch.no_grad():
        if mha._qkv_same_embed_dim:
            wq, wk, wv = mha.in_proj_weight.split(e)
        else:
            wq, wk, wv = mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight
        bq, bk, bv = mha.in_proj_bias.split(e)
        for proj, w, b in ((attn.q_proj, wq, bq), (attn.k_proj, wk, bk), (attn.v_proj, wv, bv)):
            proj.weight.copy_(w)
            proj.bias.copy_(b)
        attn.out_proj.weight.copy_(mha.out_proj.weight)
        attn.out_proj.bias.copy_(mha.out_proj.bias)


@pytest.mark.parametrize("impl", ["reference", "sdpa", "auto"])
@pytest.mark.parametrize("kdim,vdim", [(None, None), (12, None)])
@pytest.mark.parametrize("causal", [False, True])
def test_equals_nn_multihead_attention(impl, kdim, vdim, causal):
    torch.manual_seed(0)
    e, h, b, t = 16, 4, 3, 9
    mha = nn.MultiheadAttention(e, h, kdim=kdim, vdim=vdim, batch_first=True).eval()
    attn = Attention(
        e, kdim, vdim or e, score="scaled_dot", heads=h, causal=causal, impl=impl
    ).eval()
    _copy_mha_weights(attn, mha)
    q = torch.randn(b, t, e)
    k = torch.randn(b, t, kdim or e)
    lengths = torch.tensor([9, 5, 1])
    # MultiheadAttention masks are True where a query may NOT attend.
    key_padding_mask = ~lengths_to_mask(lengths, t)
    causal_mask = torch.ones(t, t, dtype=torch.bool).triu(1) if causal else None
    v = torch.randn(b, t, e)
    ref, ref_w = mha(
        q,
        k,
        v,
        key_padding_mask=key_padding_mask,
        attn_mask=causal_mask,
        average_attn_weights=False,
    )
    got = attn(q, k, v, key_lengths=lengths, need_weights=impl == "reference")
    # both float32 results within a normwise bound of MultiheadAttention in float64; the
    # longest chain: the input projection (E or kdim), the score (E / H), the softmax's and the
    # context's sums (T each), the output projection (E)
    want, want_w = copy.deepcopy(mha).double()(
        q.double(),
        k.double(),
        v.double(),
        key_padding_mask=key_padding_mask,
        attn_mask=causal_mask,
        average_attn_weights=False,
    )
    operations = max(e, kdim or e) + e // h + 2 * t + e
    want_w = want_w if got.weights is not None else None  # only the reference returns them
    assert_within_normwise(
        [want, want_w], operations, attnkit=[got.context, got.weights], torch=[ref, ref_w]
    )
