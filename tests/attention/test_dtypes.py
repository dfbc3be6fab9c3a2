"""Low precision: float16 and bfloat16 inputs work, stay finite and match float64."""

import pytest
import torch

from attnkit import SCORES, Attention

# Error of one float16/bfloat16 rounding of O(1) values, with room for accumulation.
TOL = {torch.float16: 5e-3, torch.bfloat16: 4e-2}


@pytest.mark.parametrize("impl", ["reference", "auto"])
@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_matches_float64(dtype, score, heads, impl):
    torch.manual_seed(0)
    attn = Attention(16, score=score, heads=heads, impl=impl)
    q, k = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    lengths = torch.tensor([7, 0])
    exact = attn.double()(q.double(), k.double(), key_lengths=lengths).context
    low = attn.to(dtype)(q.to(dtype), k.to(dtype), key_lengths=lengths).context
    assert low.dtype == dtype
    assert torch.isfinite(low).all()
    assert low[1].abs().max() == 0
    err = (low.double() - exact).abs().max().item()
    # Reference error: rounding the exact answer itself to the low precision.
    rounding = (exact.to(dtype).double() - exact).abs().max().item()
    assert err <= 2 * rounding + TOL[dtype], (err, rounding)


@pytest.mark.parametrize("impl", ["reference", "auto"])
def test_float16_scores_beyond_float16_range_do_not_overflow(impl):
    # q . k = 40 * 40 * 64 = 102400 > 65504, the float16 maximum.
    q = torch.full((1, 3, 64), 40.0, dtype=torch.float16)
    k = torch.full((1, 5, 64), 40.0, dtype=torch.float16)
    v = torch.arange(5, dtype=torch.float16)[None, :, None].expand(1, 5, 2)
    attn = Attention(64, 64, 2, score="dot", impl=impl)
    out = attn(q, k, v, key_lengths=torch.tensor([4]))
    assert torch.isfinite(out.context).all()
    torch.testing.assert_close(out.context, torch.full((1, 3, 2), 1.5, dtype=torch.float16))


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


def _kernel_dtypes(monkeypatch) -> list:
    """The dtypes ``F.scaled_dot_product_attention`` is called with, recorded."""
    seen, sdpa = [], torch.nn.functional.scaled_dot_product_attention

    def recording(q, *args, **kwargs):
        seen.append(q.dtype)
        return sdpa(q, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    return seen


def _autocast_call(device: str, dtype: torch.dtype):
    torch.manual_seed(0)
    attn = Attention(32, score="scaled_dot", heads=2, impl="sdpa").to(device)
    q, k = torch.randn(3, 6, 32, device=device), torch.randn(3, 9, 32, device=device)
    lengths = torch.tensor([9, 4, 0], device=device)
    exact = attn(q, k, key_lengths=lengths).context
    with torch.autocast(device, dtype=dtype):
        low = attn(q, k, key_lengths=lengths).context
    return low, exact


def test_cpu_autocast_feeds_sdpa_float32(monkeypatch):
    seen = _kernel_dtypes(monkeypatch)
    low, exact = _autocast_call("cpu", torch.bfloat16)
    assert seen == [torch.float32, torch.float32]
    assert low[2].abs().max() == 0  # no key: zeros
    assert (low.float() - exact).abs().max() < TOL[torch.bfloat16]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_autocast_feeds_sdpa_the_autocast_dtype(monkeypatch, dtype):
    seen = _kernel_dtypes(monkeypatch)
    low, exact = _autocast_call("cuda", dtype)
    assert seen == [torch.float32, dtype]  # the float32 call, then the autocast one
    assert torch.isfinite(low).all() and low[2].abs().max() == 0
    assert (low.float() - exact).abs().max() < TOL[dtype]
