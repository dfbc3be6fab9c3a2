"""group_batches: every example once, groups whole, batches full but the last, the same for
the same (seed, epoch)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.tasks.batching import group_batches


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
