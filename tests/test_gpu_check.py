"""benchmarks/gpu_check.py, the check to run first on a lent GPU: its CPU dry run (--device cpu
--tiny) runs every step and passes, so the check works when a GPU comes; which tests count as
CUDA tests; a run out of time reports every step it could not run."""

import json
import shutil

from benchmarks import gpu_check


def _run(tmp_path, *options) -> tuple[int, dict, str]:
    out = tmp_path / "out"
    code = gpu_check.main(
        ["--device", "cpu", "--tiny", "--out", str(out), "--data", str(tmp_path / "data"), *options]
    )
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check.json", "gpu_check.log"]
    return (
        code,
        json.loads((out / "gpu_check.json").read_text()),
        (out / "gpu_check.log").read_text(),
    )


def test_the_dry_run_passes_every_step_and_writes_one_json_and_one_log(tmp_path):
    code, data, log = _run(tmp_path, "--budget", "900")
    rows = {r["name"]: r for r in data["steps"]}
    assert list(rows) == [s.name for s in gpu_check.STEPS]
    espeak = shutil.which("espeak-ng") is not None  # synthesises the speech step's WAVs
    failed = {name: r["figure"] for name, r in rows.items() if r["status"] != "passed"}
    if espeak:
        assert failed == {} and code == 0
    else:
        assert list(failed) == ["train-asr"] and "espeak-ng" in failed["train-asr"]
    assert data["tiny"] and data["device"] == "cpu" and data["machine"]
    assert rows["tests-cuda"]["figure"].startswith("0 passed, ")  # every one skips on a CPU
    assert rows["tests-cuda"]["details"]["counts"]["skipped"] >= 5
    assert rows["tests-attention-models"]["details"]["counts"]["failures"] == 0
    for task in gpu_check.TASKS:
        if task != "asr" or espeak:
            assert "fp16 not run (CUDA only)" in rows[f"train-{task}"]["figure"]
            assert rows[f"train-{task}"]["details"]["eval"]
    assert rows["torchrun"]["details"]["ddp_probe"]["backend"] == "gloo"
    assert rows["onnx"]["details"]["step_diff"] <= 1e-4
    for name in rows:
        assert f"===== {name}: " in log
    assert log.rstrip().endswith("\n".join(data["summary"]))
    assert [line.split()[0] for line in data["summary"]] == list(rows)


def test_the_tests_that_need_cuda_are_those_whose_skip_reason_says_so():
    class Item:
        def __init__(self, reason):
            self.reason = reason

        def iter_markers(self, name):
            mark = type("Mark", (), {"kwargs": {"reason": self.reason}})
            return [mark] if name == "skipif" else []

    chosen = [
        r
        for r in [
            "needs a CUDA GPU",
            "needs CUDA",
            "needs two CUDA GPUs",
            "needs a machine without CUDA",
            "this machine has CUDA",
            "espeak-ng not installed",
        ]
        if gpu_check.needs_cuda(Item(r))
    ]
    assert chosen == ["needs a CUDA GPU", "needs CUDA", "needs two CUDA GPUs"]


def test_a_step_is_not_run_when_the_budget_leaves_it_too_little(tmp_path):
    code, data, log = _run(tmp_path, "--budget", "1")
    assert code == 1
    assert [r["status"] for r in data["steps"]] == ["not run"] * len(gpu_check.STEPS)
    assert all(r["figure"].endswith("left of --budget 1") for r in data["steps"])
    assert "===== summary =====" in log
