"""benchmarks/serve_load.py runs: a server started, two levels of clients, rows as documented."""

from benchmarks import serve_load


def test_a_small_load_gives_a_row_per_level():
    rows = serve_load.measure("builtin:translate-dates", clients=(1, 3), requests=6, budget=30)
    assert [r["clients"] for r in rows] == [1, 3]
    for row in rows:
        assert row["statuses"] == {200: 6} and row["requests"] == 6
        assert row["requests_per_s"] > 0 and row["p50_ms"] <= row["p99_ms"]
        assert row["mean_batch"] >= 1
