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
