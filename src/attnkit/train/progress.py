"""Training progress, on a terminal or in a log.

On a terminal: a tqdm bar whose total is the limit that stops the run first: the step limit,
or, when at the current speed the time budget runs out before the steps do, the budget in
seconds (a bar that fills with time). Elsewhere (a log file, a job scheduler): one plain line
every ``interval_s`` seconds at INFO on the ``attnkit`` logger, with the step, the loss,
tokens/s, the time elapsed and the ETA, and one when training ends; no bar frames.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable

# tqdm ships no types (types-tqdm is a separate stub package)
from tqdm.auto import tqdm  # type: ignore[import-untyped]

__all__ = ["Progress", "clock_text"]

log = logging.getLogger("attnkit")

RATE_WINDOW_S = 5.0  # tokens/s is measured over the last few seconds


def clock_text(seconds: float) -> str:
    """``h:mm:ss`` (``m:ss`` under an hour)."""
    s = max(0, int(seconds))
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


class Progress:
    """Shows a run from step ``step`` to ``max_steps`` or ``time_budget_s`` seconds.

    Args:
        enabled: False shows nothing (``--no-progress``, or not the reporting process).
        stream: where the bar goes; its ``isatty()`` chooses bar or log lines (default
            ``sys.stderr``).
        interval_s: seconds between log lines when ``stream`` is not a terminal.
        clock: the time in seconds (``time.monotonic``).
    """

    def __init__(
        self,
        *,
        max_steps: int,
        step: int = 0,
        time_budget_s: float | None = None,
        enabled: bool = True,
        stream=None,
        interval_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        stream = sys.stderr if stream is None else stream
        self.max_steps, self.first_step, self.step = max_steps, step, step
        self.time_budget_s, self.interval_s, self.clock = time_budget_s, interval_s, clock
        self.start = self.window_start = self.logged_at = clock()
        self.logged_step = step
        self.window_tokens, self.tokens_per_s, self.loss = 0, 0.0, math.nan
        self.stream, self.terminal = stream, enabled and stream.isatty()
        self.log_lines = enabled and not self.terminal
        self.bar: tqdm | None = (
            None  # drawn from the first step on, when the binding limit is known
        )

    def time_binds(self, elapsed: float) -> bool:
        """Whether, at the speed so far, the time budget ends the run before the step limit."""
        done = self.step - self.first_step
        if self.time_budget_s is None or done == 0 or elapsed <= 0:
            return False
        return (self.max_steps - self.step) * elapsed / done > self.time_budget_s - elapsed

    def eta(self, elapsed: float) -> float:
        """Seconds left: to the step limit at the speed so far, or to the time budget."""
        done = self.step - self.first_step
        left = (self.max_steps - self.step) * elapsed / done if done else math.inf
        if self.time_budget_s is not None:
            left = min(left, max(0.0, self.time_budget_s - elapsed))
        return left

    def update(self, step: int, loss: float, tokens: int) -> None:
        """After an optimizer step: ``step`` steps done, its ``loss`` and ``tokens``."""
        now = self.clock()
        self.step, self.loss = step, loss
        self.window_tokens += tokens
        if now - self.window_start > 0:
            self.tokens_per_s = self.window_tokens / (now - self.window_start)
        if now - self.window_start > RATE_WINDOW_S:
            self.window_start, self.window_tokens = now, 0
        elapsed = now - self.start
        if self.terminal:
            self._draw(elapsed)
        elif self.log_lines and (
            now - self.logged_at >= self.interval_s or step == self.first_step + 1
        ):
            self.logged_at, self.logged_step = now, step
            log.info("%s", self.line(elapsed))

    def _draw(self, elapsed: float) -> None:
        budget = self.time_budget_s  # time binds only with a budget
        if budget is not None and self.time_binds(elapsed):
            total, n, unit, extra = (
                math.ceil(budget),
                int(elapsed),
                "s",
                {"step": self.step},
            )
        else:
            total, n, unit, extra = self.max_steps, self.step, "steps", {}
        form = "{desc}: {percentage:3.0f}%|{bar}| {n}/{total} " + unit + "{postfix}"
        if self.bar is None:
            self.bar = tqdm(
                total=total,
                initial=n,
                file=self.stream,
                desc="train",
                dynamic_ncols=True,
                bar_format=form,
            )
        self.bar.total, self.bar.n, self.bar.bar_format = total, n, form
        self.bar.set_postfix(
            **extra,
            loss=f"{self.loss:.4f}",
            tok_s=f"{self.tokens_per_s:.0f}",
            eta=clock_text(self.eta(elapsed)),
        )

    def line(self, elapsed: float) -> str:
        """The log line: step, limit, loss, tokens/s, elapsed, ETA."""
        limit = f"step {self.step}/{self.max_steps}"
        if self.time_budget_s is not None:
            limit += f" (time budget {self.time_budget_s:g} s)"
        return (
            f"{limit}: loss {self.loss:.4f}, {self.tokens_per_s:.0f} tokens/s, elapsed "
            f"{clock_text(elapsed)}, ETA {clock_text(self.eta(elapsed))}"
        )

    def close(self) -> None:
        """End the bar, or log the last line (if a step ran since the last one)."""
        if self.log_lines and self.step != self.logged_step:
            log.info("%s", self.line(self.clock() - self.start))
        if self.bar is not None:
            self.bar.close()
