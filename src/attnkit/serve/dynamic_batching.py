"""Dynamic batching: requests that arrive close together are decoded in one call.

The event loop hands each request's input to :meth:`Batcher.submit`, which queues it and
awaits its output. One thread decodes: it takes the oldest waiting request and waits for
others decoded with the same settings (at most ``max_batch`` in all) until ``max_wait_ms``
after that request arrived or after the previous batch was answered, whichever is later,
then decodes them together with the evaluator.

The second bound is what makes batches full under load. Clients that wait for an answer
before they send again come back together, a batch's worth at a time: counting only from
the oldest request's arrival, the requests that queued during one batch would leave at once,
without the clients just answered, and the load would settle into two half batches decoded
in turn, each request waiting for the other half's decoding as well as its own. A lone
request, arriving at an idle server, waits ``max_wait_ms`` from its arrival.

Outputs are those of decoding each request alone: every task's decoding keeps the examples
of a batch apart (padding changes nothing), and a request that samples is decoded alone,
since its draws come from one generator seeded for it.

The queue is bounded (``max_queue``): a request arriving when it is full is refused with
:class:`QueueFull`, which says when to retry. A batch whose decoding raises is decoded again
one request at a time, so that only the request that fails gets the error.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from attnkit.checks import check_positive_int
from attnkit.decoding import Decoding

__all__ = ["Batcher", "DecodingFailed", "Done", "QueueFull"]

log = logging.getLogger("attnkit.serve")


class QueueFull(Exception):
    """The queue holds ``max_queue`` requests; ``retry_after`` is a guess, in whole seconds,
    of when it will have room (what the queue takes to drain at the recent pace)."""

    def __init__(self, depth: int, retry_after: int):
        super().__init__(
            f"queue: {depth} requests waiting, the server's --max-queue; "
            f"retry after {retry_after} s"
        )
        self.retry_after = retry_after


@dataclass(frozen=True)
class Done:
    """A request's output (an :class:`attnkit.tasks.evaluator.Output`), how many requests were
    decoded with it (its own included) and the seconds that decoding took."""

    output: Any
    batch_size: int
    seconds: float


@dataclass(eq=False)
class _Job:
    input: Any
    decoding: Decoding
    request_id: str
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    arrived: float = field(default_factory=time.monotonic)
    abandoned: bool = False  # timed out: not decoded when it has not started

    @property
    def key(self):
        """Jobs of one key may be decoded together: same settings, and not sampled."""
        return None if self.decoding.sample else self.decoding

    def settle(self, result=None, error: BaseException | None = None) -> None:
        """Give the awaiting request its result (or error), from any thread."""

        def set_():
            if not self.future.done():
                if error is None:
                    self.future.set_result(result)
                else:
                    self.future.set_exception(error)

        self.loop.call_soon_threadsafe(set_)


class Batcher:
    """Decodes queued requests in batches on one thread (see the module's docstring).

    Args:
        decode: ``decode(inputs, decoding) -> outputs``, one per input, in order (an
            evaluator's :meth:`~attnkit.tasks.evaluator.Evaluator.decode`).
        max_batch: requests decoded together at most.
        max_wait_ms: how long the oldest waiting request waits for others to join its batch.
        max_queue: requests waiting at most; more are refused (:class:`QueueFull`).
        on_batch: called with each batch's size (the metrics).
    """

    def __init__(
        self,
        decode: Callable[[Sequence, Decoding], Sequence],
        *,
        max_batch: int = 16,
        max_wait_ms: float = 5.0,
        max_queue: int = 256,
        on_batch: Callable[[int], None] = lambda size: None,
    ):
        check_positive_int("max_batch", max_batch)
        check_positive_int("max_queue", max_queue)
        if not (isinstance(max_wait_ms, (int, float)) and 0 <= max_wait_ms < math.inf):
            raise ValueError(f"max_wait_ms: expected a finite number >= 0, got {max_wait_ms!r}")
        self._decode, self._on_batch = decode, on_batch
        self.max_batch, self.max_wait, self.max_queue = max_batch, max_wait_ms / 1000, max_queue
        self._jobs: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._seconds_per_job = 0.05  # a running mean, for Retry-After
        self._answered = -math.inf  # when the previous batch was answered

    @property
    def depth(self) -> int:
        """Requests waiting to be decoded (not those being decoded)."""
        return len(self._jobs)

    def start(self) -> None:
        """Start the decoding thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="attnkit-batcher", daemon=True)
            self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Decode what is queued, then end the thread (waiting ``timeout`` seconds at most;
        None: until it ends). Requests submitted after this are refused."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    async def submit(
        self, item, decoding: Decoding, request_id: str, *, timeout: float | None = None
    ) -> Done:
        """Queue one input, await its output.

        Raises:
            QueueFull: ``max_queue`` requests are waiting, or the batcher is stopping.
            TimeoutError: no output within ``timeout`` seconds (the request is not decoded
                if it has not started).
            Exception: what decoding this input alone raised.
        """
        loop = asyncio.get_running_loop()
        job = _Job(item, decoding, request_id, loop, loop.create_future())
        with self._cond:
            if self._stopping or len(self._jobs) >= self.max_queue:
                raise QueueFull(len(self._jobs), self._retry_after())
            self._jobs.append(job)
            self._cond.notify_all()
        try:
            return await asyncio.wait_for(asyncio.shield(job.future), timeout)
        except (TimeoutError, asyncio.TimeoutError):
            job.abandoned = True
            raise TimeoutError(f"no output within {timeout:g} s") from None

    def _retry_after(self) -> int:
        return max(1, math.ceil(len(self._jobs) * self._seconds_per_job))

    def _next_batch(self) -> list[_Job] | None:
        """The next batch, once it is full or its oldest request has waited ``max_wait``;
        None when stopping with nothing queued."""
        with self._cond:
            while True:
                while self._jobs and self._jobs[0].abandoned:
                    self._jobs.popleft()
                if self._jobs:
                    break
                if self._stopping:
                    return None
                self._cond.wait()
            first = self._jobs[0]
            while not self._stopping:
                same = sum(
                    1
                    for job in self._jobs
                    if job.key is not None and job.key == first.key and not job.abandoned
                )
                left = max(first.arrived, self._answered) + self.max_wait - time.monotonic()
                if first.key is None or same >= self.max_batch or left <= 0:
                    break
                self._cond.wait(left)
            batch = [first]
            if first.key is not None:
                batch += [
                    job
                    for job in list(self._jobs)[1:]
                    if job.key == first.key and not job.abandoned
                ][: self.max_batch - 1]
            for job in batch:
                self._jobs.remove(job)
            return batch

    def _run(self) -> None:
        while (batch := self._next_batch()) is not None:
            self._decode_batch(batch)
            self._answered = time.monotonic()

    def _decode_batch(self, batch: list[_Job]) -> None:
        start = time.monotonic()
        try:
            outputs = self._decode([job.input for job in batch], batch[0].decoding)
        except Exception:
            if len(batch) == 1:
                self._fail(batch[0])
                return
            for job in batch:  # only the request that fails gets the error
                try:
                    output = self._decode([job.input], job.decoding)[0]
                except Exception:
                    self._fail(job)
                    continue
                self._on_batch(1)
                job.settle(Done(output, 1, time.monotonic() - start))
            return
        seconds = time.monotonic() - start
        self._seconds_per_job = 0.8 * self._seconds_per_job + 0.2 * seconds / len(batch)
        self._on_batch(len(batch))
        for job, output in zip(batch, outputs):
            job.settle(Done(output, len(batch), seconds))

    def _fail(self, job: _Job) -> None:
        log.exception("request %s: decoding raised", job.request_id)
        job.settle(error=DecodingFailed(job.request_id))


class DecodingFailed(Exception):
    """The model raised while decoding request ``request_id`` (the log has the traceback)."""

    def __init__(self, request_id: str):
        super().__init__(f"request {request_id}: decoding failed (the server's log has why)")
        self.request_id = request_id
