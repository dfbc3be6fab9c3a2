"""What ``/metrics`` reports, in Prometheus' text exposition format (version 0.0.4): requests
and errors by endpoint and status, the queue's depth, the sizes of the decoded batches and the
requests' latency. Updated from the event loop and from the decoding thread, under one lock."""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from collections.abc import Callable

__all__ = ["BATCH_BUCKETS", "LATENCY_BUCKETS", "Histogram", "Metrics"]

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Histogram:
    """Counts of observations at or below each of ``buckets`` (upper bounds, ascending), their
    sum and their count, as a Prometheus histogram exposes them."""

    def __init__(self, buckets):
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)  # per bucket, not yet cumulative
        self.total = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.buckets, value)
        if i < len(self.counts):
            self.counts[i] += 1
        self.total += value
        self.n += 1

    def lines(self, name: str, labels: str = "") -> list[str]:
        """The ``_bucket``, ``_sum`` and ``_count`` lines; ``labels``: ``key="value",...``."""
        sep = "," if labels else ""
        out, cumulative = [], 0
        for bound, count in zip(self.buckets, self.counts):
            cumulative += count
            out.append(f'{name}_bucket{{{labels}{sep}le="{bound:g}"}} {cumulative}')
        out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.n}')
        braces = f"{{{labels}}}" if labels else ""
        out += [f"{name}_sum{braces} {self.total:.6f}", f"{name}_count{braces} {self.n}"]
        return out


class Metrics:
    """The server's counters. ``queue_depth``: a callable giving the requests waiting to be
    decoded now (read when ``/metrics`` is asked; it may be set after the fact)."""

    def __init__(self, queue_depth: Callable[[], int] = lambda: 0) -> None:
        self._lock = threading.Lock()
        self.queue_depth = queue_depth
        self.requests: dict[tuple[str, int], int] = defaultdict(int)
        self.latency: dict[str, Histogram] = {}
        self.batches = Histogram(BATCH_BUCKETS)
        self.failed_decodings = 0

    def request(self, endpoint: str, status: int, seconds: float) -> None:
        """One answered request: its ``endpoint`` (the route's path), ``status`` and time."""
        with self._lock:
            self.requests[endpoint, status] += 1
            self.latency.setdefault(endpoint, Histogram(LATENCY_BUCKETS)).observe(seconds)

    def batch(self, size: int) -> None:
        """One batch of ``size`` requests decoded together."""
        with self._lock:
            self.batches.observe(size)

    def decoding_failed(self) -> None:
        """One request whose decoding raised (answered 500)."""
        with self._lock:
            self.failed_decodings += 1

    def text(self) -> str:
        """Every metric in the text exposition format."""
        with self._lock:
            out = [
                "# HELP attnkit_requests_total Requests answered, by endpoint and status.",
                "# TYPE attnkit_requests_total counter",
            ]
            out += [
                f'attnkit_requests_total{{endpoint="{e}",status="{s}"}} {n}'
                for (e, s), n in sorted(self.requests.items())
            ]
            out += [
                "# HELP attnkit_request_errors_total Requests answered with a status of "
                "400 or more, by endpoint and status.",
                "# TYPE attnkit_request_errors_total counter",
            ]
            out += [
                f'attnkit_request_errors_total{{endpoint="{e}",status="{s}"}} {n}'
                for (e, s), n in sorted(self.requests.items())
                if s >= 400
            ]
            out += [
                "# HELP attnkit_decoding_failures_total Requests whose decoding raised.",
                "# TYPE attnkit_decoding_failures_total counter",
                f"attnkit_decoding_failures_total {self.failed_decodings}",
                "# HELP attnkit_queue_depth Requests waiting to be decoded.",
                "# TYPE attnkit_queue_depth gauge",
                f"attnkit_queue_depth {self.queue_depth()}",
                "# HELP attnkit_batch_size Requests decoded together in one batch.",
                "# TYPE attnkit_batch_size histogram",
                *self.batches.lines("attnkit_batch_size"),
                "# HELP attnkit_request_duration_seconds Time from a request's arrival to "
                "its answer, by endpoint.",
                "# TYPE attnkit_request_duration_seconds histogram",
            ]
            for endpoint, histogram in sorted(self.latency.items()):
                out += histogram.lines("attnkit_request_duration_seconds", f'endpoint="{endpoint}"')
        return "\n".join(out) + "\n"
