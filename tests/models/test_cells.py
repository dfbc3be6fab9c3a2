"""GRUCell / LSTMCell (products on oneDNN on CPU float32) against nn.GRUCell / nn.LSTMCell."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from attnkit.models.rnn import GRUCell, LSTMCell, _one_step_on_onednn, gru_cell, lstm_cell
from tests.float32_bounds import (
    LSTM_STEP,
    assert_within_normwise,
    backward_term_scales,
    forward_term_scales,
    lstm_operations,
)

PAIRS = {"gru": (GRUCell, nn.GRUCell), "lstm": (LSTMCell, nn.LSTMCell)}


def _pair(kind, i, h, bias, dtype=torch.float32):
    ours_cls, ref_cls = PAIRS[kind]
    ours = ours_cls(i, h, bias=bias).to(dtype)
    ref = ref_cls(i, h, bias=bias).to(dtype)
    ref.load_state_dict(ours.state_dict())
    return ours, ref


def _flat(out):
    return list(out) if isinstance(out, tuple) else [out]


@given(
    kind=st.sampled_from(["gru", "lstm"]),
    b=st.integers(1, 6),
    i=st.integers(1, 12),
    h=st.integers(1, 12),
    bias=st.booleans(),
    zero_state=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_matches_torch_cell_outputs_and_gradients(kind, b, i, h, bias, zero_state, seed):
    torch.manual_seed(seed)
    ours, ref = _pair(kind, i, h, bias)
    x = torch.randn(b, i, requires_grad=True)
    states = [torch.randn(b, h, requires_grad=True) for _ in range(1 if kind == "gru" else 2)]
    hx = None if zero_state else (states[0] if kind == "gru" else tuple(states))
    if torch.backends.mkldnn.is_available():  # the oneDNN path is the one under test
        assert _one_step_on_onednn(x, tuple(states), ours)
    got, want = _flat(ours(x, hx)), _flat(ref(x, hx))
    grads = [torch.randn_like(g) for g in got]
    inputs = [x, *ours.parameters()] + ([] if zero_state else states)
    ref_inputs = [x, *ref.parameters()] + ([] if zero_state else states)
    # Both float32 cells within a normwise bound of the formula in float64, scaled by the size
    # of the terms where the result is smaller: a gradient (the hidden state's, summing the
    # paths through every gate and the direct one; a weight's, one product when B = 1, of a
    # gate's gradient that cancels) may cancel to far below its terms. The chain: the gate
    # sums (I + H wide, with both biases) and the step's few roundings, then the backward's
    # elementwise roundings (LSTM_STEP again) and its sums over the gates (4 H at most, for x
    # and h) or over the batch (B, for the parameters)
    operations = lstm_operations(1, i, h) + LSTM_STEP + 4 * h + b
    inputs64 = [t.detach().double().requires_grad_() for t in inputs]
    cell = gru_cell if kind == "gru" else lambda x, h, c, *w: lstm_cell(x, (h, c), *w)
    n_weights = len(list(ours.parameters()))
    zeros = [torch.zeros(b, h, dtype=torch.float64)] * len(states)

    def fn(x, *rest):
        weights, state = rest[:n_weights], rest[n_weights:] or zeros
        return tuple(_flat(cell(x, *state, *weights, *[None] * (4 - n_weights))))

    want64 = fn(*inputs64)
    scales = forward_term_scales(fn, inputs64)
    assert_within_normwise(
        want64, operations, {k: float(s.max()) for k, s in enumerate(scales)}, ours=got, torch=want
    )
    grads64 = [g.double() for g in grads]
    scales = backward_term_scales(fn, inputs64, grads64)
    assert_within_normwise(
        torch.autograd.grad(want64, inputs64, grads64),
        operations,
        {k: float(s.max()) for k, s in enumerate(scales)},
        ours=torch.autograd.grad(got, inputs, grads),
        torch=torch.autograd.grad(want, ref_inputs, grads),
    )


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_formulas_equal_torch_cells_in_float64_and_pass_gradcheck(kind):
    torch.manual_seed(0)
    ours, ref = _pair(kind, 4, 3, True, torch.float64)
    x = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    h = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    c = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    weights = (ours.weight_ih, ours.weight_hh, ours.bias_ih, ours.bias_hh)
    if kind == "gru":
        torch.testing.assert_close(gru_cell(x, h, *weights), ref(x, h))
        assert torch.autograd.gradcheck(lambda x, h, *w: gru_cell(x, h, *w), (x, h, *weights))
    else:
        for a, b in zip(lstm_cell(x, (h, c), *weights), ref(x, (h, c))):
            torch.testing.assert_close(a, b)
        assert torch.autograd.gradcheck(
            lambda x, h, c, *w: lstm_cell(x, (h, c), *w), (x, h, c, *weights)
        )


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_unbatched_input_and_autocast_take_torch_cell(kind):
    torch.manual_seed(0)
    ours, ref = _pair(kind, 5, 4, True)
    x = torch.randn(5)
    for a, b in zip(_flat(ours(x)), _flat(ref(x))):
        assert torch.equal(a, b)
    xb = torch.randn(3, 5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for a, b in zip(_flat(ours(xb)), _flat(ref(xb))):
            assert torch.equal(a, b)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_wrong_state_shape_gives_torchs_error(kind):
    ours, ref = _pair(kind, 5, 4, True)
    x, bad = torch.randn(3, 5), torch.randn(2, 4)
    hx = bad if kind == "gru" else (bad, bad)
    with pytest.raises(RuntimeError) as want:
        ref(x, hx)
    with pytest.raises(RuntimeError) as got:
        ours(x, hx)
    assert str(got.value) == str(want.value)
