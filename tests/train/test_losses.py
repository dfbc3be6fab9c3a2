import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.train.losses import (
    MIN_ONE_MINUS_P,
    smoothed_cross_entropy,
    token_unlikelihood,
    token_unlikelihood_reference,
)

PAD = 0


def test_the_candidates_are_the_earlier_distinct_tokens_but_the_target():
    # target 5 6 5 7 <pad>: position 0 has no candidate, 1 has {5}, 2 has {6} (5 is its own
    # target), 3 has {5, 6} (5 counted once), the padded position none
    target = torch.tensor([[5, 6, 5, 7, PAD]])
    logits = torch.randn(1, 5, 9, dtype=torch.float64)
    p = logits.softmax(-1)
    candidates = {1: [5], 2: [6], 3: [5, 6]}
    want = -sum(math.log(1 - float(p[0, t, c])) for t, cs in candidates.items() for c in cs)
    assert float(token_unlikelihood(logits, target, PAD)) == pytest.approx(want, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    b=st.integers(1, 3),
    t=st.integers(1, 7),
    v=st.integers(2, 6),
    seed=st.integers(0, 2**16),
)
def test_equals_the_loops_on_random_targets(b, t, v, seed):
    g = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(b, t, v, generator=g, dtype=torch.float64)
    target = torch.randint(0, v, (b, t), generator=g)  # pad (0) anywhere, repeats likely
    got = token_unlikelihood(logits, target, PAD)
    want = token_unlikelihood_reference(logits, target, PAD)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_gradcheck():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([[1, 2, 1, 3, 0], [3, 3, 2, 0, 0]])
    assert torch.autograd.gradcheck(lambda x: token_unlikelihood(x, target, PAD), (logits,))


def test_a_sure_candidate_is_floored_not_infinite():
    logits = torch.tensor([[[0.0, 0.0, 0.0], [0.0, 0.0, 200.0]]])  # p(2) = 1 in float32
    target = torch.tensor([[2, 1]])
    loss = token_unlikelihood(logits, target, PAD)
    assert float(loss) == pytest.approx(-math.log(MIN_ONE_MINUS_P))


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="target: expected shape"):
        token_unlikelihood(torch.randn(2, 3, 4), torch.zeros(2, 4, dtype=torch.long), PAD)
    with pytest.raises(ValueError, match="logits"):
        token_unlikelihood(torch.randn(2, 3), torch.zeros(2, 3, dtype=torch.long), PAD)


@settings(max_examples=40, deadline=None)
@given(
    b=st.integers(1, 3),
    t=st.integers(1, 7),
    v=st.integers(2, 6),
    smoothing=st.sampled_from([0.0, 0.1, 0.5]),
    seed=st.integers(0, 2**16),
)
def test_one_log_softmax_serves_both_losses(b, t, v, smoothing, seed):
    g = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(b, t, v, generator=g, dtype=torch.float64)
    target = torch.randint(0, v, (b, t), generator=g)
    target[0, 0] = 1  # one target at least: PyTorch's mean over none is NaN
    log_probs = logits.log_softmax(-1)
    # float64 sums of at most b * t * v terms of size ~10: far inside these tolerances
    torch.testing.assert_close(
        smoothed_cross_entropy(log_probs, target, PAD, smoothing),
        F.cross_entropy(
            logits.flatten(0, 1), target.flatten(), ignore_index=PAD, label_smoothing=smoothing
        ),
        rtol=1e-12,
        atol=1e-12,
    )
    torch.testing.assert_close(
        token_unlikelihood(log_probs, target, PAD, normalized=True),
        token_unlikelihood(logits, target, PAD),
        rtol=1e-12,
        atol=1e-12,
    )


def test_smoothed_cross_entropy_over_no_target_is_zero_and_gradchecks():
    log_probs = torch.randn(2, 3, 4, dtype=torch.float64).log_softmax(-1)
    assert float(smoothed_cross_entropy(log_probs, torch.zeros(2, 3, dtype=torch.long), PAD)) == 0
    logits = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([[1, 2, 1, 3, 0], [3, 3, 2, 0, 0]])

    def both(x):
        log_probs = x.log_softmax(-1)
        return smoothed_cross_entropy(log_probs, target, PAD, 0.1) + token_unlikelihood(
            log_probs, target, PAD, normalized=True
        )

    assert torch.autograd.gradcheck(both, (logits,))
    with pytest.raises(ValueError, match="target: expected shape"):
        smoothed_cross_entropy(log_probs, torch.zeros(2, 4, dtype=torch.long), PAD)
