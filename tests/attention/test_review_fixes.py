"""Edge cases found in review: low-precision chunked scores, position dtypes, empty keys,
dispatch limits, prepared memories."""

import pytest
import torch

from attnkit import SCORES, Attention, attention
from attnkit.attention import dispatch, kernels, native


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("score", ["dot", "general", "additive"])
def test_chunked_low_precision_scores_do_not_overflow(dtype, score):
    torch.manual_seed(0)
    q = (torch.randn(1, 8, 16) * 100).to(dtype)
    k = (torch.randn(1, 8, 16) * 100).to(dtype)
    attn = Attention(16, score=score, window=(1, 1), impl="chunked").to(dtype)
    out = attn(q, k).context
    assert torch.isfinite(out).all()
    attn.impl = "reference"
    torch.testing.assert_close(out, attn(q, k).context, atol=0.05 * 100, rtol=0.02)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.int32])
def test_positions_of_any_integer_dtype_give_the_same_mask(dtype):
    torch.manual_seed(0)
    q, k = torch.randn(1, 4, 8), torch.randn(1, 6, 8)
    pos = torch.tensor([[0, 1, 2, 3]])
    ref = attention(q, k, window=(2, 2), positions=pos, need_weights=True).weights
    got = attention(q, k, window=(2, 2), positions=pos.to(dtype), need_weights=True).weights
    torch.testing.assert_close(got, ref)
    assert (ref[0, 0, :3] > 0).all()


@pytest.mark.parametrize("impl", ["reference", "chunked", "auto"])
@pytest.mark.parametrize("score", SCORES)
def test_no_keys_at_all_gives_zeros(impl, score):
    attn = Attention(8, score=score, impl=impl)
    q = torch.randn(2, 3, 8, requires_grad=True)
    out = attn(q, torch.randn(2, 0, 8))
    assert out.context.shape == (2, 3, 8) and out.context.abs().max() == 0
    out.context.sum().backward()
    assert q.grad.abs().max() == 0


def test_eager_fallback_splits_blocks_sized_for_fused_kernels(monkeypatch):
    monkeypatch.setattr(kernels, "_EAGER_PAIR_BUDGET", 64)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 1, 9, 4, generator=g), torch.randn(2, 1, 5, 4, generator=g)
    v, grad = torch.randn(1, 4, generator=g), torch.randn(2, 1, 9, 5, generator=g)
    whole = kernels._scores(q, k, v, tanh=torch.tanh)
    torch.testing.assert_close(kernels._in_pieces(kernels._scores, q, k, v), whole)
    torch.testing.assert_close(kernels._in_pieces(kernels._row_grad, q, k, v, grad),
                               kernels._row_grad(q, k, v, grad, tanh=torch.tanh))


def test_causal_self_attention_uses_sdpas_own_causal_mask():
    torch.manual_seed(0)
    attn = Attention(8, causal=True)
    x = torch.randn(2, 6, 8)
    assert attn.plan(x, x).impl == "sdpa"
    ref = Attention(8, causal=True, impl="reference")(x, x).context
    torch.testing.assert_close(attn(x, x).context, ref)


def test_a_mask_too_big_for_sdpa_goes_to_chunked(monkeypatch):
    monkeypatch.setattr(dispatch, "SDPA_MASK_LIMIT", 10)
    attn = Attention(8, causal=True)
    x = torch.randn(2, 6, 8)
    lengths = torch.tensor([6, 4])
    plan = attn.plan(x, x, key_lengths=lengths)
    assert plan.impl == "chunked" and "mask" in plan.reason
    ref = Attention(8, causal=True, impl="reference")(x, x, key_lengths=lengths).context
    torch.testing.assert_close(attn(x, x, key_lengths=lengths).context, ref)


def test_compile_decision_counts_only_the_band(monkeypatch):
    """Without the C++ kernels (on GPU, or no compiler), torch.compile's kernels are used
    when the work pays for compiling: the band's work, not the full matrix's."""
    monkeypatch.setattr(kernels._COMPILER, "ready", False)
    monkeypatch.setattr(native, "available", lambda: False)
    x = torch.randn(1, 8192, 64)
    # 8192 * 8192 * 64 pairs would pay for compiling; the band's 8192 * 5 * 64 do not.
    assert (Attention(64, score="additive").plan(x, x).kernel == "compiled") == (
        kernels.compile_status() == "available")
    plan = Attention(64, score="additive", window=(2, 2)).plan(x, x)
    assert plan.impl == "chunked" and plan.kernel == "eager" and "too small" in plan.reason
    plan64 = Attention(64, score="additive").double().plan(x.double()[:, :2048], x.double())
    assert "float64 is not compiled" in plan64.reason


def test_prepare_validates_values_and_dtypes():
    attn = Attention(8, 8, 6, score="additive")
    key = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"^value: expected batch size B \(from key\) = 2"):
        attn.prepare(key, torch.randn(3, 5, 6))
    with pytest.raises(ValueError, match=r"^value: expected Tk \(from key\) = 5"):
        attn.prepare(key, torch.randn(2, 7, 6))
    with pytest.raises(ValueError, match=r"^value \(defaults to key\): expected feature size "
                                         r"value_dim = 6"):
        attn.prepare(key)
    with pytest.raises(TypeError, match=r"^key: dtype torch.float64 differs from the module's"):
        attn.prepare(key.double(), torch.randn(2, 5, 6).double())
    memory = attn.prepare(key, torch.randn(2, 5, 6))
    q = torch.randn(2, 8)
    assert attn.plan(q, memory).impl == ("step" if native.available() else "chunked")
    attn.double()
    with pytest.raises(ValueError, match="^key: the Memory was prepared for torch.float32.*"
                                         "prepare it again"):
        attn(q.double(), memory)
