"""``attnkit bench``: a benchmark of the source checkout run as ``python -m benchmarks.NAME``."""

from __future__ import annotations

import json

import pytest
import torch

from attnkit.cli import bench
from attnkit.cli.main import main


def test_bench_help_lists_the_benchmarks(capsys):
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: attnkit bench [NAME] [OPTIONS]")
    listed = next(line for line in out.splitlines() if line.startswith("Benchmarks in "))
    names = listed.split(": ", 1)[1].rstrip(".").split(", ")
    assert {"attention", "dense", "models_vs_plain", "time_to_quality"} <= set(names)
    assert not {"harness", "plain", "__init__"} & set(names)


def test_bench_forwards_help_to_the_script_and_it_spells_the_time_budget_one_way(capfd):
    assert main(["bench", "attention", "--help"]) == 0
    out = capfd.readouterr().out
    assert out.startswith("usage: python -m benchmarks.attention")
    for option in (
        "--quick",
        "--group",
        "--targets",
        "--match",
        "--reps",
        "--time-budget",
        "--json",
        "--markdown",
        "--device",
    ):
        assert option in out
    assert "--budget-s" not in out


def test_bench_outside_a_source_checkout_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "candidates", lambda: [tmp_path])
    assert main(["bench", "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("attnkit bench: the benchmarks package was not found")


def test_bench_of_an_unknown_name_lists_the_benchmarks(capsys):
    assert main(["bench", "no_such_benchmark"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no benchmark 'no_such_benchmark'" in err
    assert "attention" in err


def test_bench_runs_the_checkout_script(tmp_path, capfd):
    """A selection that matches no case runs the script end to end without measuring."""
    out_json = tmp_path / "rows.json"
    assert main(["bench", "--match", "no such case", "--json", str(out_json)]) == 0
    assert capfd.readouterr().out.startswith("| case | impl | forward s |")
    data = json.loads(out_json.read_text())
    assert data["rows"] == [] and "cores" in data["machine"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_bench_on_a_gpu_this_machine_lacks_is_a_one_line_error(tmp_path, capfd):
    out_json = tmp_path / "rows.json"
    assert (
        main(
            [
                "bench",
                "attention",
                "--match",
                "additive B=8 T=256",
                "--device",
                "cuda",
                "--json",
                str(out_json),
            ]
        )
        == 2
    )
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and err.startswith("benchmarks.attention: ")
    assert "device: 'cuda' needs CUDA" in err and not out_json.exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_bench_on_the_gpu_times_a_case_there(tmp_path):
    out_json = tmp_path / "rows.json"
    assert (
        main(
            [
                "bench",
                "--match",
                "additive B=8 T=256 A=128",
                "--device",
                "cuda",
                "--reps",
                "2",
                "--json",
                str(out_json),
            ]
        )
        == 0
    )
    data = json.loads(out_json.read_text())
    assert data["rows"] and all(
        r["status"] == "ok" and r["device"] == "cuda:0" for r in data["rows"]
    )
    assert "GPU cuda:0" in data["machine"]
