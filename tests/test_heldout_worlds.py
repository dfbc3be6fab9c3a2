"""The held-out worlds benchmark's comparison of two models on the same examples."""

import numpy as np
import pytest

from attnkit.tasks.evaluator import Evaluation, Example, Output
from benchmarks.heldout_worlds import char_errors, paired_difference


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
