"""benchmarks/corpus_scale_text.py runs its cases (tiny corpora here) and writes its rows."""

import json

from benchmarks import corpus_scale_text


def test_the_scale_benchmark_measures_each_format(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert (
        corpus_scale_text.main(
            [
                "--lines",
                "40",
                "--pairs",
                "60",
                "--formats",
                "gt-txt,moses",
                "--json",
                str(out),
                "--work",
                str(tmp_path / "work"),
            ]
        )
        == 0
    )
    rows = json.loads(out.read_text())["rows"]
    assert [(r["format"], r["status"], r["examples"]) for r in rows] == [
        ("gt-txt", "ok", 40),
        ("moses", "ok", 60),
    ]
    assert all(r["first_step_s"] >= r["read_s"] >= 0 and r["extra_mb"] > 0 for r in rows)
    assert "| gt-txt | 40 |" in capsys.readouterr().out
