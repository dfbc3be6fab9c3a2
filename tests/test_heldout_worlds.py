"""The held-out worlds benchmark's comparison of two models on the same examples."""

import numpy as np
import pytest

from attnkit.tasks.evaluator import Evaluation, Example, Output
from benchmarks.heldout_worlds import char_errors, paired_difference, paired_mean_difference


def _evaluation(outputs: list[str], references: list[str]) -> Evaluation:
    examples = [Example(None, ref, f"{i}") for i, ref in enumerate(references)]
    return Evaluation(examples, [Output([text], lambda *a, **k: None) for text in outputs], {})


REFERENCES = ["one two", "three", "four four", "nine", "zero one"] * 8


def test_char_errors_are_each_examples_edits_and_sum_to_the_cer():
    errors, lengths = char_errors(_evaluation(["one too", "three", "for four"], REFERENCES[:3]))
    assert errors.tolist() == [1, 0, 1] and lengths.tolist() == [7, 5, 9]


def test_the_same_outputs_differ_by_nothing():
    same = _evaluation(REFERENCES, REFERENCES)
    assert paired_difference(same, same) == (0.0, 0.0, 0.0)


def test_the_difference_is_ours_minus_theirs_with_an_interval_around_it():
    worse = [("xx" + r[2:]) if i % 2 else r for i, r in enumerate(REFERENCES)]
    ours, theirs = _evaluation(worse, REFERENCES), _evaluation(REFERENCES, REFERENCES)
    total = sum(map(len, REFERENCES))
    diff, low, high = paired_difference(ours, theirs)
    expected = (
        sum(2 - sum(a == b for a, b in zip(r[:2], "xx")) for i, r in enumerate(REFERENCES) if i % 2)
        / total
    )
    assert diff == pytest.approx(expected) and 0 < low < diff < high
    assert paired_difference(theirs, ours)[0] == pytest.approx(-diff)
    assert np.isclose(paired_difference(ours, theirs, seed=0)[1], low)  # seeded


def test_the_mean_difference_averages_each_worlds_difference_with_an_interval():
    worse = [("xx" + r[2:]) if i % 2 else r for i, r in enumerate(REFERENCES)]
    right = _evaluation(REFERENCES, REFERENCES)
    bad, short = _evaluation(worse, REFERENCES), _evaluation(worse[:10], REFERENCES[:10])
    alone = paired_difference(bad, right)
    assert paired_mean_difference([(bad, right)])[0] == pytest.approx(alone[0])
    assert paired_mean_difference([(right, right), (right, right)]) == (0.0, 0.0, 0.0)
    # a world as bad as ``bad`` and one with no difference: half the difference, not the pooled
    # CER of the two worlds' characters together
    diff, low, high = paired_mean_difference([(bad, right), (right, right)])
    assert diff == pytest.approx(alone[0] / 2) and 0 < low < diff < high
    pooled = paired_mean_difference([(short, _evaluation(REFERENCES[:10], REFERENCES[:10]))])
    both = paired_mean_difference(
        [(bad, right), (short, _evaluation(REFERENCES[:10], REFERENCES[:10]))]
    )
    assert both[0] == pytest.approx((alone[0] + pooled[0]) / 2)
