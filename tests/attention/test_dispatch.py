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


def test_a_dot_decoder_step_goes_to_sdpa_only_when_decoding_without_weights():
    """One query per row over a prepared Memory (a decoder step): under no_grad without
    weights SDPA's fused kernel; while autograd records, or with weights, the step path
    (its gradients summed per sequence; its weights)."""
    torch.manual_seed(0)
    attn = Attention(16, heads=2).double().eval()
    memory = attn.prepare(torch.randn(3, 7, 16, dtype=torch.float64))
    query, lengths = torch.randn(3, 16, dtype=torch.float64), torch.tensor([7, 4, 2])
    assert attn.plan(query, memory, key_lengths=lengths).impl == "step"
    with torch.no_grad():
        plan = attn.plan(query, memory, key_lengths=lengths)
        assert plan.impl == "sdpa" and "without weights or gradients" in plan.reason
        assert attn.plan(query, memory, key_lengths=lengths, need_weights=True).impl == "step"
        fast = attn(query, memory, key_lengths=lengths).context
        attn.impl = "step"
        slow = attn(query, memory, key_lengths=lengths).context
    # float64: the same products grouped otherwise differ by a few units of 2^-53 of terms of
    # order 10 (16-term dot products, softmax over 7, a 16-term output projection)
    torch.testing.assert_close(fast, slow, atol=1e-12, rtol=0)
