"""The batcher's waiting rule, on a decode function that records its batches."""

import asyncio
import threading
import time

import pytest

from attnkit.decoding import Decoding
from attnkit.serve.dynamic_batching import Batcher


def _recording_batcher(seconds: float, **kw):
    batches = []
    started = threading.Event()

    def decode(inputs, decoding):
        batches.append(list(inputs))
        started.set()
        time.sleep(seconds)
        return [f"out {x}" for x in inputs]

    return Batcher(decode, **kw), batches, started


def test_a_request_queued_during_a_batch_waits_for_the_clients_just_answered():
    # "a" is decoded alone; "b" arrives while it decodes; "c" arrives 50 ms after "a" is
    # answered, as a client that sends again on its answer does. Waiting max_wait_ms from
    # "b"'s arrival alone would decode "b" at once, without "c".
    batcher, batches, started = _recording_batcher(0.3, max_batch=8, max_wait_ms=250)

    async def run():
        batcher.start()
        greedy = Decoding()
        first = asyncio.ensure_future(batcher.submit("a", greedy, "1"))
        await asyncio.get_running_loop().run_in_executor(None, started.wait)
        second = asyncio.ensure_future(batcher.submit("b", greedy, "2"))
        done = await first
        await asyncio.sleep(0.05)
        third = await batcher.submit("c", greedy, "3")
        return done, await second, third

    try:
        a, b, c = asyncio.run(run())
    finally:
        batcher.stop()
    assert batches == [["a"], ["b", "c"]]
    assert (a.output, b.output, c.output) == ("out a", "out b", "out c")
    assert (a.batch_size, b.batch_size, c.batch_size) == (1, 2, 2)


def test_a_lone_request_waits_max_wait_ms_from_its_arrival():
    batcher, batches, _ = _recording_batcher(0.0, max_batch=8, max_wait_ms=100)

    async def run():
        batcher.start()
        start = time.monotonic()
        done = await batcher.submit("a", Decoding(), "1")
        return done, time.monotonic() - start

    try:
        done, seconds = asyncio.run(run())
    finally:
        batcher.stop()
    assert batches == [["a"]] and done.output == "out a"
    assert seconds >= 0.1


@pytest.mark.parametrize("bad", [0, -1, 1.5])
def test_max_batch_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="max_batch"):
        Batcher(lambda inputs, decoding: inputs, max_batch=bad)
