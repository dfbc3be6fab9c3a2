"""Masks: lengths, causal and windows, written as explicit rules."""

import pytest
import torch

from attnkit import Attention, attend, lengths_to_mask


def test_lengths_to_mask_marks_valid_positions():
    m = lengths_to_mask(torch.tensor([0, 2, 4]), 4)
    expected = torch.tensor([[0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(m, expected)
    assert lengths_to_mask(torch.tensor([3, 1])).shape == (2, 3)


@pytest.mark.parametrize("tq,tk", [(6, 6), (3, 9), (9, 4), (1, 5)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [None, (0, 0), (2, 1)])
def test_weights_are_zero_exactly_outside_the_band(tq, tk, causal, window):
    torch.manual_seed(0)
    q, k = torch.randn(2, tq, 4), torch.randn(2, tk, 4)
    w = attend(q, k, causal=causal, window=window, need_weights=True).weights
    for i in range(tq):
        c = i * tk // tq
        for j in range(tk):
            ok = (not causal or j <= c) and (window is None or c - window[0] <= j <= c + window[1])
            assert bool((w[:, i, j] > 0).all()) == ok, (i, j)


def test_key_mask_and_lengths_combine():
    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 4), torch.randn(1, 5, 4)
    key_mask = torch.tensor([[True, False, True, True, True]])
    w = attend(q, k, key_lengths=torch.tensor([4]), key_mask=key_mask, need_weights=True).weights
    assert torch.equal(w[0] > 0, torch.tensor([[1, 0, 1, 1, 0]] * 2, dtype=torch.bool))


def test_one_step_window_follows_given_positions():
    torch.manual_seed(0)
    attn = Attention(4, score="general", window=(1, 1))
    q, k = torch.randn(2, 4), torch.randn(2, 8, 4)
    w = attn(q, k, positions=torch.tensor([0, 5]), need_weights=True).weights
    assert torch.equal(
        w > 0, torch.tensor([[1, 1, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1, 1, 0]], dtype=torch.bool)
    )


def test_dropout_is_seeded_and_off_in_eval():
    attn = Attention(8, score="additive", dropout=0.5)
    q, k = torch.randn(2, 3, 8), torch.randn(2, 6, 8)
    torch.manual_seed(1)
    a = attn(q, k).context
    torch.manual_seed(1)
    b = attn(q, k).context
    torch.testing.assert_close(a, b)
    attn.eval()
    c = attn(q, k).context
    assert (a - c).abs().max() > 1e-3
    torch.testing.assert_close(c, attn(q, k).context)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.int32])
def test_positions_of_any_integer_dtype_give_the_same_mask(dtype):
    torch.manual_seed(0)
    q, k = torch.randn(1, 4, 8), torch.randn(1, 6, 8)
    pos = torch.tensor([[0, 1, 2, 3]])
    ref = attend(q, k, window=(2, 2), positions=pos, need_weights=True).weights
    got = attend(q, k, window=(2, 2), positions=pos.to(dtype), need_weights=True).weights
    torch.testing.assert_close(got, ref)
    assert (ref[0, 0, :3] > 0).all()


@pytest.mark.parametrize("score", ["scaled_dot", "additive"])
@pytest.mark.parametrize("heads", [1, 2])
def test_a_causal_step_at_the_last_key_needs_no_mask_and_equals_the_masked_rows(score, heads):
    torch.manual_seed(0)
    attn = Attention(8, score=score, heads=heads, causal=True).double().eval()
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    lengths = torch.tensor([5, 2, 4])
    full = attn(x, x, key_lengths=lengths, need_weights=True)  # (B, T, ...) teacher-forced
    for t in range(5):  # step t over the keys 0..t, as a decoder over its cache
        pos = torch.full((3,), t)
        step = attn(x[:, t], x[:, : t + 1], key_lengths=lengths.clamp(max=t + 1), positions=pos)
        torch.testing.assert_close(step.context, full.context[:, t])
        weighed = attn(
            x[:, t],
            x[:, : t + 1],
            key_lengths=lengths.clamp(max=t + 1),
            positions=pos,
            need_weights=True,
        ).weights
        torch.testing.assert_close(weighed, full.weights[..., t, : t + 1])
    # the band still applies to a query before the last key
    early = attn(x[:, 1], x, positions=torch.tensor([1, 1, 1]), need_weights=True).weights
    assert torch.equal(early[..., 2:], torch.zeros_like(early[..., 2:]))
    free = Attention(8, score=score, heads=heads).double().eval()  # no band at all
    assert attn.plan(x[:, 4], x, positions=torch.full((3,), 4)) == free.plan(x[:, 4], x)
