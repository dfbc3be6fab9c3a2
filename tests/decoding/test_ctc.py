"""Best-path CTC decoding."""

import pytest
import torch

from attnkit.decoding import ctc_greedy


def test_merges_repeats_drops_blanks_and_specials_and_gives_emission_steps():
    lp = torch.full((2, 6, 8), -10.0)
    for b, row in enumerate([[5, 5, 0, 5, 6, 6], [0, 7, 1, 7, 7, 4]]):
        lp[b, torch.arange(6), torch.tensor(row)] = 0.0
    paths = ctc_greedy(lp, torch.tensor([6, 5]))
    assert paths.ids == [[5, 5, 6], [7, 7]]  # BOS (1) dropped, but it separates the two 7s
    assert paths.steps == [[0, 3, 4], [1, 3]]  # step 5 of the second row is past its length


def test_blank_and_dropped_ids_are_options():
    lp = torch.full((1, 4, 5), -10.0)
    lp[0, torch.arange(4), torch.tensor([4, 0, 4, 2])] = 0.0
    assert ctc_greedy(lp, torch.tensor([4]), blank=4, drop=()).ids == [[0, 2]]


@pytest.mark.parametrize(
    "lp, lengths, match",
    [
        (
            torch.zeros(2, 3),
            torch.tensor([3, 3]),
            r"log_probs: expected \(B, T, V\), got shape \(2, 3\)",
        ),
        (torch.zeros(2, 3, 4), torch.tensor([3]), r"lengths: expected shape \(2,\), got \(1,\)"),
    ],
)
def test_bad_shapes_are_refused(lp, lengths, match):
    with pytest.raises(ValueError, match=match):
        ctc_greedy(lp, lengths)
