"""SelfAttention between two RNN layers."""

import pytest
import torch
from torch import nn

from attnkit import SelfAttention


@pytest.mark.parametrize("combine", ["concat", "residual"])
@pytest.mark.parametrize("window", [None, (3, 3)])
def test_padding_is_ignored_and_zeroed(combine, window):
    torch.manual_seed(0)
    layer = SelfAttention(8, combine=combine, window=window)
    x = torch.randn(3, 10, 8)
    lengths = torch.tensor([10, 6, 1])
    y = layer(x, lengths)
    assert y.shape == (3, 10, 8)
    assert y[1, 6:].abs().max() == 0 and y[2, 1:].abs().max() == 0
    # What lies in the padding does not change the valid outputs.
    x2 = x.clone()
    x2[1, 6:] = 1e3 * torch.randn(4, 8)
    torch.testing.assert_close(layer(x2, lengths), y)
    # Each example alone gives the same result as in the padded batch.
    for b in range(3):
        n = int(lengths[b])
        torch.testing.assert_close(layer(x[b : b + 1, :n])[0], y[b, :n], atol=1e-6, rtol=1e-5)


def test_time_major_layout_matches_batch_first():
    torch.manual_seed(0)
    layer = SelfAttention(6, 5, heads=2)
    tm = SelfAttention(6, 5, heads=2, batch_first=False)
    tm.load_state_dict(layer.state_dict())
    x = torch.randn(2, 7, 6)
    lengths = torch.tensor([7, 4])
    torch.testing.assert_close(tm(x.transpose(0, 1), lengths).transpose(0, 1), layer(x, lengths))


def test_concat_is_luong_attentional_state():
    """out_t = tanh(W [x_t; c_t]) with c_t = softmax(x_t W_a x^T) x."""
    torch.manual_seed(0)
    layer = SelfAttention(4, 3)
    x = torch.randn(1, 5, 4)
    w_a = layer.attention.score.weight[0]
    alpha = torch.softmax(x[0] @ w_a @ x[0].T, dim=-1)
    expected = torch.tanh(layer.proj(torch.cat([x[0], alpha @ x[0]], dim=-1)))
    torch.testing.assert_close(layer(x)[0], expected)
    out = layer.with_weights(x)
    torch.testing.assert_close(out.weights[0], alpha)


def test_drops_in_between_two_lstms_and_trains():
    torch.manual_seed(0)
    rnn1 = nn.LSTM(5, 8, bidirectional=True)
    attn = SelfAttention(16, window=(4, 4), batch_first=False)
    rnn2 = nn.LSTM(16, 8)
    x = torch.randn(30, 2, 5)  # (T, B, D), the nn.LSTM default layout
    h, _ = rnn1(x)
    y, _ = rnn2(attn(h, torch.tensor([30, 20])))
    y.sum().backward()
    assert y.shape == (30, 2, 8)
    assert attn.attention.score.weight.grad.abs().max() > 0


@pytest.mark.parametrize("heads", [1, 2])
def test_recording_weights_gives_each_calls_weights_and_leaves_nothing_behind(heads):
    torch.manual_seed(0)
    layer = SelfAttention(8, heads=heads, window=(2, 2)).eval()
    x, lengths = torch.randn(2, 7, 8), torch.tensor([7, 4])
    want = layer.with_weights(x, lengths).weights  # (B, [H,] T, T)
    with layer.recording_weights() as found:
        y = layer(x, lengths)
        layer(x[:1, :5])
    torch.testing.assert_close(y, layer(x, lengths))
    assert [w.shape for w in found] == [want.shape, want[:1, ..., :5, :5].shape]
    torch.testing.assert_close(found[0], want)
    inner = layer.attention
    assert not inner._forward_hooks and not inner._forward_pre_hooks
    with pytest.raises(RuntimeError, match="stop"), layer.recording_weights() as found:
        raise RuntimeError("stop")
    assert not inner._forward_hooks and not inner._forward_pre_hooks
    assert layer.attention(x, x, key_lengths=lengths).weights is None  # not asked: none
