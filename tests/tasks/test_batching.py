"""group_batches: every example once, groups whole, batches full but the last, the same for
the same (seed, epoch)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.tasks.batching import group_batches, token_batches


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=60), st.integers(1, 8), st.integers(0, 3))
def test_group_batches_keep_groups_whole(groups, batch_size, epoch):
    batches = group_batches(groups, batch_size, seed=1, epoch=epoch)
    assert sorted(i for b in batches for i in b) == list(range(len(groups)))
    home = {}
    for k, batch in enumerate(batches):
        for i in batch:
            assert home.setdefault(groups[i], k) == k  # a group lies in one batch
    assert all(len(b) >= batch_size for b in batches[:-1])
    assert batches == group_batches(groups, batch_size, seed=1, epoch=epoch)


def test_group_batches_shuffle_by_epoch():
    groups = [i // 2 for i in range(40)]
    orders = {tuple(map(tuple, group_batches(groups, 4, seed=0, epoch=e))) for e in range(4)}
    assert len(orders) == 4


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=120), st.integers(1, 100), st.integers(0, 3))
def test_token_batches_hold_at_most_max_tokens_padded(lengths, max_tokens, epoch):
    batches = token_batches(lengths, max_tokens, seed=1, epoch=epoch)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        longest = max(max(lengths[i] for i in batch), 1)
        assert len(batch) * longest <= max_tokens or len(batch) == 1
    assert batches == token_batches(lengths, max_tokens, seed=1, epoch=epoch)


def test_token_batches_fill_up_to_max_tokens_and_shuffle_by_epoch():
    lengths = [10] * 50 + [40] * 10
    batches = token_batches(lengths, 80, seed=0, epoch=0)
    sizes = sorted(len(b) for b in batches)
    # eight sentences of 10 tokens or two of 40 fill 80 tokens exactly; the two 10s left
    # over are a batch of their own (a 40 beside them would make 3 x 40 = 120)
    assert sizes == [2] * 6 + [8] * 6, sizes
    orders = {tuple(map(tuple, token_batches(lengths, 80, seed=0, epoch=e))) for e in range(4)}
    assert len(orders) == 4


def test_token_batches_refuse_a_max_tokens_below_1():
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="max_tokens: expected an int >= 1, got"):
            token_batches([1, 2], bad, seed=0, epoch=0)
