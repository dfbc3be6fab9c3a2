"""Dispatch: which path "auto" takes, and the reasons it gives."""

import torch

from attnkit import Attention
from attnkit.attention import sdpa
from attnkit.ops import kernels, native


def test_causal_self_attention_uses_sdpas_own_causal_mask():
    torch.manual_seed(0)
    attn = Attention(8, causal=True)
    x = torch.randn(2, 6, 8)
    assert attn.plan(x, x).impl == "sdpa"
    ref = Attention(8, causal=True, impl="reference")(x, x).context
    torch.testing.assert_close(attn(x, x).context, ref)


def test_a_mask_too_big_for_sdpa_goes_to_chunked(monkeypatch):
    monkeypatch.setattr(sdpa, "SDPA_MASK_LIMIT", 10)
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
        kernels.compile_status() == "available"
    )
    plan = Attention(64, score="additive", window=(2, 2)).plan(x, x)
    assert plan.impl == "chunked" and plan.kernel == "eager" and "too small" in plan.reason
    plan64 = Attention(64, score="additive").double().plan(x.double()[:, :2048], x.double())
    assert "float64 is not compiled" in plan64.reason
