"""BiRNN equals a bidirectional nn.LSTM/GRU on packed sequences, without packing."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnkit.models.rnn import LSTM, BiRNN, reverse_within_lengths, segment_plan


def _packed_reference(bi: BiRNN, kind: str, x, lengths):
    ref = {"lstm": nn.LSTM, "gru": nn.GRU}[kind](
        x.shape[2], bi.fwd.hidden_size, batch_first=True, bidirectional=True
    ).double()
    with torch.no_grad():
        for name, p in bi.fwd.named_parameters():
            getattr(ref, name).copy_(p)
            getattr(ref, name + "_reverse").copy_(getattr(bi.bwd, name))
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    return pad_packed_sequence(ref(packed)[0], batch_first=True, total_length=x.shape[1])[0]


@settings(deadline=None, max_examples=15)
@given(
    kind=st.sampled_from(["lstm", "gru"]),
    b=st.integers(1, 4),
    t=st.integers(1, 9),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_equals_packed_bidirectional_rnn(kind, b, t, seed, data):
    torch.manual_seed(seed)
    lengths = torch.tensor(data.draw(st.lists(st.integers(1, t), min_size=b, max_size=b)))
    bi = BiRNN(3, 4, kind=kind).double()
    x = torch.randn(b, t, 3, dtype=torch.float64)
    torch.testing.assert_close(bi(x, lengths), _packed_reference(bi, kind, x, lengths))


def test_gradients_never_reach_padding_and_match_packing():
    torch.manual_seed(0)
    bi = BiRNN(3, 4).double()
    x = torch.randn(3, 7, 3, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([7, 4, 1])
    bi(x, lengths).square().sum().backward()
    assert x.grad[1, 4:].abs().max() == 0 and x.grad[2, 1:].abs().max() == 0
    torch.autograd.gradcheck(lambda inp: bi(inp, lengths), (x,))


def test_reverse_within_lengths_and_bad_kind():
    x = torch.arange(8.0).reshape(2, 4, 1)
    out = reverse_within_lengths(x, torch.tensor([4, 2]))
    assert out[:, :, 0].tolist() == [[3, 2, 1, 0], [5, 4, 6, 7]]
    with pytest.raises(ValueError, match="kind: expected one of lstm, gru, got 'rnn'"):
        BiRNN(3, 4, kind="rnn")


@pytest.mark.parametrize("seed", range(4))
def test_reverse_within_lengths_is_the_loop_over_each_sequence(seed):
    g = torch.Generator().manual_seed(seed)
    b, t = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 9, (1,), generator=g))
    x = torch.randn(t, b, 3, 2, generator=g, dtype=torch.float64).transpose(0, 1)  # strided
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    want = x.clone()
    for i, n in enumerate(lengths.tolist()):
        want[i, :n] = x[i, :n].flip(0)
    assert torch.equal(reverse_within_lengths(x, lengths), want)
    torch.autograd.gradcheck(
        lambda inp: reverse_within_lengths(inp, lengths), (x.detach().requires_grad_(),)
    )


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_float32_inputs_run_under_bf16_autocast_near_float32(kind):
    # oneDNN's LSTM refuses a float32 input under CPU bf16 autocast on CPUs without native
    # bfloat16 (AVX2); the models' LSTM casts it, as autocast would.
    torch.manual_seed(0)
    rnn = BiRNN(6, 8, kind=kind)
    x, lengths = torch.randn(3, 10, 6), torch.tensor([10, 7, 3])
    want = rnn(x, lengths)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = rnn(x, lengths)
    assert float((got.detach().float() - want.detach()).abs().max()) < 0.05
    got.float().sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in rnn.parameters())


def test_lstm_is_nn_lstm_with_the_same_weights_and_outputs():
    torch.manual_seed(0)
    plain = torch.nn.LSTM(4, 5, 2, batch_first=True)
    ours = LSTM(4, 5, 2, batch_first=True)
    ours.load_state_dict(plain.state_dict())
    x = torch.randn(2, 7, 4)
    assert isinstance(ours, torch.nn.LSTM)
    assert torch.equal(ours(x)[0], plain(x)[0])


@settings(deadline=None, max_examples=25)
@given(
    kind=st.sampled_from(["lstm", "gru"]),
    segments=st.integers(2, 5),
    b=st.integers(1, 9),
    t=st.integers(1, 12),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_segmented_run_equals_the_padded_one_forward_and_backward(kind, segments, b, t, seed, data):
    torch.manual_seed(seed)
    lengths = torch.tensor(data.draw(st.lists(st.integers(0, t), min_size=b, max_size=b)))
    padded = BiRNN(3, 4, kind=kind, segments=1).double()
    segmented = BiRNN(3, 4, kind=kind, segments=segments).double()
    segmented.load_state_dict(padded.state_dict())
    x = torch.randn(b, t, 3, dtype=torch.float64, requires_grad=True)
    want, got = padded(x, lengths), segmented(x, lengths)
    torch.testing.assert_close(got, want)
    grad = torch.randn_like(want)
    torch.testing.assert_close(
        torch.autograd.grad(got, [x, *segmented.parameters()], grad),
        torch.autograd.grad(want, [x, *padded.parameters()], grad),
    )


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_segmented_run_gradcheck_over_several_segments(kind):
    torch.manual_seed(0)
    lengths = torch.tensor([3, 9, 5, 1, 7, 9, 2])
    order, ends, rows = segment_plan(lengths, 4)
    assert len(ends) > 2  # the case runs several segments
    bi = BiRNN(2, 3, kind=kind).double()
    x = torch.randn(7, 10, 2, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda inp: bi(inp, lengths), (x,), fast_mode=True)
    torch.testing.assert_close(bi(x, lengths), _packed_reference(bi, kind, x, lengths))


@settings(deadline=None, max_examples=50)
@given(sizes=st.lists(st.integers(0, 50), min_size=1, max_size=40), segments=st.integers(1, 6))
def test_segment_plan_covers_every_step_of_every_row(sizes, segments):
    lengths = torch.tensor(sizes)
    order, ends, rows = segment_plan(lengths, segments)
    ordered = lengths[order].tolist()
    assert ordered == sorted(sizes, reverse=True)
    assert ends == sorted(set(ends)) and (ends[-1] if ends else 0) == max(sizes)
    for start, _end, n in zip([0, *ends], ends, rows):
        assert n >= sum(size > start for size in sizes)  # every row still inside runs
        assert all(size > start for size in ordered[:n])  # and only those, or one segment
    assert rows == sorted(rows, reverse=True)
    work = sum(n * (end - start) for start, end, n in zip([0, *ends], ends, rows))
    assert work <= len(sizes) * max(sizes)


def test_segment_plan_runs_uniform_lengths_in_one_call():
    order, ends, rows = segment_plan(torch.tensor([6, 6, 5, 6]))
    assert (ends, rows) == ([6], [4])


def test_bad_segments_are_refused():
    with pytest.raises(ValueError, match="segments: expected a positive int, got 0"):
        BiRNN(3, 4, segments=0)
