"""Progress: a bar whose total is the limit that binds first on a terminal, log lines elsewhere."""

import io
import logging

import pytest

from attnkit.train.progress import Progress, clock_text


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Terminal(io.StringIO):
    def isatty(self):
        return True


def _run(progress, clock, steps, seconds_per_step, tokens=50):
    for step in range(progress.step + 1, progress.step + steps + 1):
        clock.now += seconds_per_step
        progress.update(step, 2.5, tokens)


def test_on_a_terminal_the_bar_counts_steps_or_seconds_whichever_ends_the_run():
    clock, screen = Clock(), Terminal()
    steps = Progress(max_steps=40, time_budget_s=3600, stream=screen, clock=clock)
    _run(steps, clock, 10, 0.5)
    assert (steps.bar.total, steps.bar.n) == (40, 10)  # 15 s to go: the steps bind
    assert "10/40 steps" in screen.getvalue() and "eta=0:15" in screen.getvalue()
    steps.close()
    clock, screen = Clock(), Terminal()
    timed = Progress(max_steps=10**6, time_budget_s=15.0, stream=screen, clock=clock)
    _run(timed, clock, 8, 0.5)
    assert (timed.bar.total, timed.bar.n) == (15, 4)  # a bar that fills with time
    assert "4/15 s" in screen.getvalue() and "step=8" in screen.getvalue()
    assert "eta=0:11" in screen.getvalue() and "1000000" not in screen.getvalue()
    timed.close()


def test_elsewhere_one_plain_line_per_interval_and_one_at_the_end(caplog):
    clock, log = Clock(), io.StringIO()  # not a terminal
    progress = Progress(
        max_steps=10**6, time_budget_s=15.0, stream=log, clock=clock, interval_s=5.0
    )
    with caplog.at_level(logging.INFO, logger="attnkit"):
        _run(progress, clock, 30, 0.5, tokens=100)
        progress.close()
    assert log.getvalue() == ""  # no bar frames
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 + 2 + 1  # the first step, every 5 s (10 steps), the end
    assert lines[0] == (
        "step 1/1000000 (time budget 15 s): loss 2.5000, 200 tokens/s, elapsed 0:00, ETA 0:14"
    )
    assert lines[-1] == (
        "step 30/1000000 (time budget 15 s): loss 2.5000, 200 tokens/s, elapsed 0:15, ETA 0:00"
    )


@pytest.mark.parametrize("stream", [Terminal(), io.StringIO()])
def test_no_progress_shows_nothing(stream, caplog):
    clock = Clock()
    progress = Progress(max_steps=5, enabled=False, stream=stream, clock=clock)
    with caplog.at_level(logging.INFO, logger="attnkit"):
        _run(progress, clock, 5, 1.0)
        progress.close()
    assert stream.getvalue() == "" and caplog.records == []


def test_clock_text():
    assert [clock_text(s) for s in (0, 59.6, 61, 3600 + 62)] == ["0:00", "0:59", "1:01", "1:01:02"]
