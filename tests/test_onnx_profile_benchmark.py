"""benchmarks.onnx_profile: the profiler's events summed by operator, and a run on a built-in
model through both exports."""

import json

from benchmarks import onnx_profile


def test_kernel_times_are_summed_by_operator_and_runs_by_session(tmp_path):
    events = [
        {"cat": "Node", "name": "a_kernel_time", "dur": 1500, "args": {"op_name": "MatMul"}},
        {"cat": "Node", "name": "b_kernel_time", "dur": 500, "args": {"op_name": "MatMul"}},
        {"cat": "Node", "name": "c_kernel_time", "dur": 250, "args": {"op_name": "Softmax"}},
        {"cat": "Node", "name": "c_fence_before", "dur": 9999, "args": {"op_name": "Softmax"}},
        {"cat": "Session", "name": "model_run", "dur": 4000},
        {"cat": "Session", "name": "model_run", "dur": 1000},
    ]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(events))
    assert onnx_profile.node_times(path) == {"MatMul": 2.0, "Softmax": 0.25}
    assert onnx_profile.run_times(path) == 5.0


def test_a_builtin_model_is_profiled_in_float32_and_int8(tmp_path, capsys):
    report = tmp_path / "r.json"
    argv = ["--checkpoint", "builtin:translate-dates", "--n", "4", "--batch", "4"]
    assert onnx_profile.main([*argv, "--threads", "1", "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    ops = {row["op"]: row for row in data["rows"]}
    assert ops["MatMul"]["float32_ms"] > 0  # the float32 graphs multiply in float32 ...
    assert any(op.startswith(("DynamicQuantize", "MatMulInteger")) for op in ops)  # ... int8
    assert set(data["wall_s"]) == {"float32", "int8"}
    assert "outside the graphs (int8)" in ops and "| operator |" in capsys.readouterr().out
