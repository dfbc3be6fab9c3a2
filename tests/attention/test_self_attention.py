"""SelfAttention between two RNN layers."""

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attnkit import SelfAttention
from attnkit.attention.self_attention import length_groups
from tests.float32_bounds import assert_within_normwise, key_bias_scales


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
    # Each example alone gives the result of the padded batch: both within a normwise bound of
    # the padded batch in float64. The longest chain: the general score (two sums 8 wide), the
    # softmax's and the context's sums (T = 10 each), the combination (the concat's projection
    # 16 wide, or the residual's 8 wide and its layer norm's mean and variance, 8 each), and a
    # rounding or two at each (bias, scale, tanh, exp): 16 + 20 + 24 + 12
    want = copy.deepcopy(layer).double()(x.double(), lengths)
    for b in range(3):
        n = int(lengths[b])
        assert_within_normwise(
            [want[b, :n]],
            16 + 2 * 10 + 24 + 12,
            alone=[layer(x[b : b + 1, :n])[0]],
            batch=[y[b, :n]],
        )


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


@settings(deadline=None, max_examples=30)
@given(
    b=st.integers(1, 9),
    t=st.integers(1, 12),
    heads=st.sampled_from([1, 2]),
    score=st.sampled_from(["general", "scaled_dot", "additive"]),
    combine=st.sampled_from(["concat", "residual"]),
    window=st.sampled_from([None, (2, 1)]),
    causal=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_groups_of_similar_length_equal_one_padded_pass(
    b, t, heads, score, combine, window, causal, dtype, seed, data
):
    # layer(x, lengths) attends in length groups on CPU; with_weights takes one padded pass.
    torch.manual_seed(seed)
    lengths = torch.tensor(data.draw(st.lists(st.integers(0, t), min_size=b, max_size=b)))
    layer = SelfAttention(
        4, score=score, combine=combine, heads=heads, window=window, causal=causal
    ).to(dtype)
    x = torch.randn(b, t, 4, dtype=dtype, requires_grad=True)
    got, want = layer(x, lengths), layer.with_weights(x, lengths).context
    grad = torch.randn_like(want)
    params = [x, *layer.parameters()]
    got, want = ([y, *torch.autograd.grad(y, params, grad)] for y in (got, want))
    if dtype == torch.float64:
        for a, b_ in zip(got, want):
            torch.testing.assert_close(a, b_)
        return
    # float32: both paths within a normwise bound of the padded pass in float64. The longest
    # chain: the attention's projections and score (4 wide: at most 4 x 4), the softmax's and
    # the context's sums (T each), the combination (the concat's 8, or the residual's layer
    # norm: 4 for the mean, 4 for the variance), all run back, and a parameter's gradient
    # summed over every (row, step)
    layer64 = copy.deepcopy(layer).double()
    x64 = x.detach().double().requires_grad_()
    scales = key_bias_scales(layer64, layer64.attention, 2)
    y64 = layer64.with_weights(x64, lengths).context
    want64 = [y64, *torch.autograd.grad(y64, [x64, *layer64.parameters()], grad.double())]
    assert_within_normwise(want64, 2 * (6 * 4 + 2 * t) + b * t, scales(), groups=got, padded=want)


def test_groups_gradcheck_and_their_plan():
    torch.manual_seed(0)
    lengths = torch.tensor([2, 9, 5, 0, 7, 9, 3, 1])
    order, runs = length_groups(lengths, 9)
    assert lengths[order].tolist() == [9, 9, 7, 5, 3, 2, 1, 0]
    assert runs == [(2, 9), (2, 7), (2, 3), (2, 1)]
    assert length_groups(torch.tensor([9, 9, 8]), 9) is None  # too little to save
    layer = SelfAttention(3, combine="residual").double()
    x = torch.randn(8, 9, 3, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda inp: layer(inp, lengths), (x,))
