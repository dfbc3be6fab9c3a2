"""``python -m benchmarks.export_latency``'s built-in model part: a model exported and decoded
by its runner at two batch sizes, the table with the ratio and the target."""

from types import SimpleNamespace

from benchmarks import export_latency


def test_a_builtin_model_decodes_at_each_batch_size():
    row = export_latency.model_latency("translate-dates", 4, [1, 4])
    assert row["decoding"] == "beam" and row["beam"] == 5
    assert row["ms_batch_1"] > 0 and row["ms_batch_4"] > 0


def test_the_table_gives_the_ratio_and_the_target(capsys, monkeypatch):
    def fake_run(fn, kwargs, **_):
        assert fn is export_latency.model_latency and kwargs["batches"] == [1, 32]
        return {
            "status": "ok",
            "decoding": "beam",
            "beam": 5,
            "ms_batch_1": 8.0,
            "ms_batch_32": 1.6,
        }

    monkeypatch.setattr(export_latency.harness, "run", fake_run)
    args = SimpleNamespace(
        models="translate-dates,ocr-lines", match="translate", n=64, time_budget=60, threads=1
    )
    (row,) = export_latency.models_table(args)
    assert row["ratio"] == 0.2 and row["model"] == "translate-dates"
    assert "| translate-dates | beam 5 | 8.0 | 1.6 | 0.20 | met |" in capsys.readouterr().out


def test_the_exported_step_is_timed_on_the_encoders_state():
    """onnxruntime's step takes the state the exported encoder gives (with its NaN marks,
    which an eager state lacks) and is checked against PyTorch's before it is timed."""
    from benchmarks import export_latency

    row = export_latency.step_latency("onnxruntime", 2, 2, 10.0)
    assert row["s"] > 0
