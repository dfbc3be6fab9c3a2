"""benchmarks/serve_load.py runs: a server started, two levels of clients, rows as documented."""

import shutil

import pytest

from benchmarks import serve_load


def test_a_small_load_gives_a_row_per_level():
    rows = serve_load.measure("builtin:translate-dates", clients=(1, 3), requests=6, budget=30)
    assert [r["clients"] for r in rows] == [1, 3]
    for row in rows:
        assert row["statuses"] == {200: 6} and row["requests"] == 6
        assert row["requests_per_s"] > 0 and row["p50_ms"] <= row["p99_ms"]
        assert row["mean_batch"] >= 1


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed (make system)")
def test_wrk_clients_give_the_same_rows():
    rows = serve_load.measure("builtin:asr-digits", clients=(2,), budget=3, client="wrk")
    (row,) = rows
    assert row["clients"] == 2 and row["requests"] >= 2
    assert row["statuses"] == {200: row["requests"]}
    assert 0 < row["p50_ms"] <= row["p99_ms"] and row["mean_batch"] >= 1


def test_ratios_against_one_client_and_the_targets_at_32():
    row = dict(statuses={200: 10}, mean_batch=1.0)
    rows = [
        {"model": "m", "clients": 1, "requests_per_s": 10.0, "p50_ms": 40.0, "p99_ms": 50.0, **row},
        {
            "model": "m",
            "clients": 8,
            "requests_per_s": 50.0,
            "p50_ms": 90.0,
            "p99_ms": 120.0,
            **row,
        },
        {
            "model": "m",
            "clients": 32,
            "requests_per_s": 85.0,
            "p50_ms": 300.0,
            "p99_ms": 160.0,
            **row,
        },
        {"model": "n", "clients": 32, "requests_per_s": 9.0, "p50_ms": 1.0, "p99_ms": 2.0, **row},
    ]
    assert serve_load.ratios(rows) == [
        {"model": "m", "clients": 8, "throughput": 5.0, "p99": 2.4, "p99_p50": 3.0},
        {
            "model": "m",
            "clients": 32,
            "throughput": 8.5,
            "p99": 3.2,
            "p99_p50": 4.0,
            "met": {"throughput": True, "p99": False},
        },
    ]  # model n has no 1-client level: no ratio
