"""Teacher-forcing schedules: end points, monotonicity, bad settings."""

import pytest

from attnkit.train import TeacherForcing


@pytest.mark.parametrize("shape", ["linear", "inverse_sigmoid"])
def test_schedule_goes_from_start_to_end_monotonically(shape):
    tf = TeacherForcing(start=1.0, end=0.25, steps=200, shape=shape)
    ratios = [tf.ratio(s) for s in range(0, 260, 5)]
    assert ratios[0] == 1.0 and tf.ratio(200) == pytest.approx(0.25) and ratios[-1] == 0.25
    assert all(a >= b for a, b in zip(ratios, ratios[1:]))
    assert tf.ratio(100) == pytest.approx(0.625)  # both shapes are symmetric about the middle


def test_inverse_sigmoid_is_slow_at_first():
    lin = TeacherForcing(1.0, 0.0, 100, "linear")
    sig = TeacherForcing(1.0, 0.0, 100, "inverse_sigmoid")
    assert sig.ratio(10) > lin.ratio(10) and sig.ratio(90) < lin.ratio(90)


def test_constant_by_default():
    assert TeacherForcing(0.9).ratio(0) == TeacherForcing(0.9).ratio(10**6) == 0.9


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(start=1.5), r"teacher forcing start: expected a probability in \[0, 1\], got 1.5"),
        (dict(end=-0.1), "teacher forcing end"),
        (dict(steps=0), "teacher forcing steps: expected a positive int, got 0"),
        (dict(shape="cosine"), "teacher forcing shape: expected one of linear, inverse_sigmoid"),
    ],
)
def test_bad_settings_name_the_setting(kw, match):
    with pytest.raises(ValueError, match=match):
        TeacherForcing(**kw)
