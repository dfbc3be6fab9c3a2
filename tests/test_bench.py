"""The benchmarks: the harness (fresh processes, time budget, reports), the attention report,
the plain models of models_vs_plain.py (the same models as attnkit's, every row runs), and the
streaming figures' arithmetic."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from attnkit.models import Seq2Seq, Transformer
from benchmarks import (
    attention,
    decoding_speed,
    dense,
    harness,
    models_vs_plain,
    plain,
    profile_models,
    streaming,
    task_steps,
)

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- run in the fresh process


def holds_memory(mib: int) -> dict:
    """A step that keeps ``mib`` MiB resident for 50 ms."""

    def step():
        x = torch.ones(mib * 2**18)  # float32: mib MiB, every page written
        time.sleep(0.05)
        del x

    timing = harness.timed(step, reps=2, time_budget=60.0)
    return {
        "s": timing.median,
        "extra_mb": timing.extra_mb,
        "runs": len(timing.times),
        "pid": os.getpid(),
        "threads": torch.get_num_threads(),
    }


def sleeps(seconds: float) -> dict:
    time.sleep(seconds)
    return {"slept": seconds}


def fails(message: str) -> dict:
    raise ValueError(message)


def test_a_case_runs_in_a_fresh_process_and_gives_time_and_memory():
    row = harness.run(holds_memory, {"mib": 64}, time_budget=120, threads=1)
    assert row["status"] == "ok"
    assert row["pid"] != os.getpid()
    assert row["threads"] == 1
    assert row["runs"] == 2
    assert row["s"] > 0
    assert 48 < row["extra_mb"] < 200  # the 64 MiB step seen by the sampler, nothing stuck


def test_the_time_budget_stops_a_slow_case():
    start = time.perf_counter()
    row = harness.run(sleeps, {"seconds": 600}, time_budget=3)
    assert row == {"status": "timeout", "note": "over the 3 s budget"}
    assert time.perf_counter() - start < 300  # stopped, not waited for


def test_a_failing_case_gives_its_last_error_line():
    row = harness.run(fails, {"message": "the case broke"}, time_budget=120)
    assert row["status"] == "error"
    assert row["note"] == "ValueError: the case broke"


def test_a_case_that_would_not_fit_in_free_memory_is_skipped_without_running():
    row = harness.run(fails, {"message": "ran"}, time_budget=120, need_bytes=2**60)
    assert row["status"] == "skipped"
    assert row["note"].startswith("needs ~1073741824 GiB")


def test_only_module_level_functions_can_run():
    def local():
        return {}

    with pytest.raises(ValueError, match="fn: expected a module-level function"):
        harness.run(local, {}, time_budget=10)


def test_timed_stops_repeating_after_the_budget():
    timing = harness.timed(lambda: time.sleep(0.02), reps=1000, time_budget=0.01, warmup=0)
    assert timing.times and len(timing.times) == 1


def test_timed_on_the_cpu_reports_resident_memory():
    timing = harness.timed(lambda: torch.ones(2**20), reps=2, time_budget=60, device="cpu")
    assert timing.memory == "rss" and len(timing.times) == 2


def test_timed_without_memory_starts_no_sampler_and_takes_any_clock():
    threads = threading.active_count()

    def step():
        assert threading.active_count() == threads  # no sampling thread
        sum(range(10**5))

    timing = harness.timed(
        step, reps=3, time_budget=60, warmup=0, memory=False, clock=time.process_time
    )
    assert timing.memory == "none" and timing.extra_mb is None
    assert len(timing.times) == 3 and all(t >= 0 for t in timing.times)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_timed_on_a_gpu_waits_for_the_kernels_and_reports_the_allocator_peak():
    def step():
        x = torch.ones(64 * 2**18, device="cuda")  # 64 MiB
        torch.cuda._sleep(10**7)  # kernels still running when step() returns
        del x

    timing = harness.timed(step, reps=2, time_budget=60, device="cuda")
    assert timing.memory == "cuda"
    assert 63 < timing.extra_mb < 80
    assert min(timing.times) > 1e-3  # the sleep kernel was waited for


def test_device_option_names_the_device_or_refuses_in_one_line(capsys):
    p = harness.parser("x", time_budget=1.0, device=True)
    assert p.parse_args([]).device == "cpu"
    assert p.parse_args(["--device", "cpu"]).device == "cpu"
    with pytest.raises(SystemExit):
        p.parse_args(["--device", "gpu"])
    assert "expected auto, cpu, cuda or cuda:N, got 'gpu'" in capsys.readouterr().err
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            p.parse_args(["--device", "cuda"])
        assert "argument --device: " in capsys.readouterr().err
    assert "--device" not in harness.parser("x", time_budget=1.0).format_help()


# ---------------------------------------------------------------- what measured it, reports


def test_machine_names_cpu_cores_and_torch():
    text = harness.machine()
    assert f"{os.cpu_count()} cores" in text
    assert f"torch {torch.__version__}" in text


def test_write_json_records_the_machine_commit_and_command(tmp_path):
    path = tmp_path / "out" / "rows.json"
    harness.write_json(path, [{"case": "a", "s": 1.0}], batch=8)
    data = json.loads(path.read_text())
    assert data["rows"] == [{"case": "a", "s": 1.0}]
    assert data["batch"] == 8
    assert data["machine"] == harness.machine()
    assert data["device"] == "cpu" and "GPU" not in data["machine"]
    assert set(data) >= {"commit", "date", "command"}


def test_a_file_of_several_runs_gets_one_more_and_any_other_is_replaced(tmp_path):
    single, several = tmp_path / "single.json", tmp_path / "several.json"
    harness.write_json(single, [{"s": 1.0}])
    harness.write_json(single, [{"s": 2.0}])
    assert json.loads(single.read_text())["rows"] == [{"s": 2.0}]
    harness.save_run(several, {"commit": "a", "rows": []}, add=True)
    harness.write_json(several, [{"s": 3.0}])
    runs = json.loads(several.read_text())["runs"]
    assert [r["commit"] for r in runs][:1] == ["a"] and runs[1]["rows"] == [{"s": 3.0}]


def test_markdown_table_cells():
    assert harness.table_header(["a", "b"]) == "| a | b |\n|---|---|"
    assert harness.table_row(["x", "", 3]) == "| x | | 3 |"


def test_markdown_report_keeps_the_notes_below_the_mark(tmp_path):
    md = tmp_path / "report.md"
    harness.write_markdown(md, ["# first"])
    assert md.read_text() == f"# first\n{harness.NOTES_MARK}\n"
    md.write_text(md.read_text() + "Hand-written analysis.\n")
    harness.write_markdown(md, ["# second", "table"])
    assert md.read_text() == f"# second\ntable\n{harness.NOTES_MARK}\nHand-written analysis.\n"


def _result(group, impl, machine, train_s):
    case = attention.Case(group, impl, b=8, t=800, steps=100 if group == "decoder" else 0)
    return attention.Result(
        case.__dict__,
        case.name,
        impl,
        train_s=train_s,
        forward_s=train_s / 3,
        train_mb=10.0,
        forward_mb=1.0,
        command=f"attnkit bench --group {group}",
        date="2026-11-22",
        commit="abc1234",
        machine=machine,
    )


def test_attention_report_names_the_machine_of_each_run_and_keeps_the_notes(tmp_path):
    md, js = tmp_path / "b.md", tmp_path / "b.json"
    md.write_text(f"old report\n{harness.NOTES_MARK}\nHand-written analysis.\n")
    results = [
        _result("self", "auto", "CPU one; 2 cores", 0.3),
        _result("decoder", "loop", "CPU two; 2 cores", 0.9),
        _result("decoder", "auto", "CPU two; 2 cores", 0.6),
    ]
    attention.write_report(results, js, md)
    text = md.read_text()
    assert (
        "- `attnkit bench --group self` (2026-11-22, commit abc1234, CPU one; 2 cores): "
        "groups self" in text
    )
    assert (
        "- `attnkit bench --group decoder` (2026-11-22, commit abc1234, CPU two; 2 cores): "
        "groups decoder" in text
    )
    assert (
        "Additive decoder, 100 steps over Tk=800: memory 10 vs 10 MiB, time 0.60 vs 0.90 s" in text
    )
    assert text.endswith(f"{harness.NOTES_MARK}\nHand-written analysis.\n")
    assert "old report" not in text
    assert [r["name"] for r in json.loads(js.read_text())["rows"]] == [r.name for r in results]


def test_attention_targets_select_the_issue_cases_without_slow_baselines():
    targets = [c for c in attention.suite() if attention.is_target(c)]
    assert {c.group for c in targets} == {"self", "mha", "additive", "local"}
    assert not any(c.impl == "loop" and c.group != "self" for c in targets)
    assert any(c.name.startswith("additive B=1 T=16384") for c in targets)


def test_attention_case_measured_in_a_fresh_process():
    case = attention.Case("self", "auto", b=1, t=8, d=4)
    row = harness.run(
        attention.measure, {"case": case.__dict__, "reps": 1, "time_budget": 60}, time_budget=300
    )
    assert row["status"] == "ok"
    result = attention.Result(**row)
    assert result.name == "self B=1 T=8 D=4"
    assert result.train_s > 0 and result.forward_s > 0
    assert result.train_mb >= 0 and result.plan


# ---------------------------------------------------------------- models_vs_plain.py


def _batch(b=3, s=7, t=5, vocab=11, full=False):
    gen = torch.Generator().manual_seed(0)
    src_len = torch.full((b,), s) if full else models_vs_plain.lengths(gen, b, s)
    src = models_vs_plain.tokens(gen, src_len, s, vocab)
    tgt_in, _ = models_vs_plain.teacher_forced(gen, b, t, vocab)
    return src, src_len, tgt_in


def _packed_gru_names(mine, prefix):
    """attnkit's one-layer BiRNN encoder weights under a bidirectional ``nn.GRU``'s names."""
    out = {}
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        out[f"{prefix}.{name}_l0"] = mine[f"encoder.rnns.0.fwd.{name}_l0"]
        out[f"{prefix}.{name}_l0_reverse"] = mine[f"encoder.rnns.0.bwd.{name}_l0"]
    return out


def test_plain_luong_is_attnkits_luong_written_as_a_loop():
    torch.manual_seed(0)
    ours = Seq2Seq(11, 11, kind="luong", score="general", input_feeding=True, emb=4, hidden=6)
    theirs = plain.PlainLuong(11, 11, emb=4, hidden=6)
    mine = ours.state_dict()
    weights = _packed_gru_names(mine, "encoder.rnn")
    weights["encoder.embed.weight"] = mine["encoder.embed.weight"]
    for name in ("embed.weight", "init.weight", "init.bias"):
        weights[name] = mine[f"decoder.{name}"]
    weights["w_a.weight"] = mine["decoder.attention.score.weight"][0].T  # h^T W_a h_s
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        weights[f"cell.{name}"] = mine[f"decoder.rnn.{name}_l0"]
    for a, b in (("combine", "w_c"), ("out", "w_s")):
        weights[f"{b}.weight"] = mine[f"decoder.{a}.weight"]
        weights[f"{b}.bias"] = mine[f"decoder.{a}.bias"]
    theirs.load_state_dict(weights)
    src, src_len, tgt_in = _batch()
    assert src_len.min() < src_len.max()  # padding present, masked on both sides
    torch.testing.assert_close(theirs(src, src_len, tgt_in), ours(src, src_len, tgt_in)[0])


def test_plain_transformer_is_attnkits_transformer_in_nn_transformer():
    torch.manual_seed(0)
    sizes = dict(d_model=8, heads=2, layers=2, ff=16, dropout=0.0)
    ours, theirs = Transformer(11, 11, **sizes), plain.PlainTransformer(11, 11, **sizes)
    mine = ours.state_dict()
    weights = {k: mine[k] for k in ("src_embed.weight", "tgt_embed.weight", "out_bias")}
    weights.update(
        {
            f"transformer.{side}.norm.{p}": mine[f"{side[:3]}_norm.{p}"]
            for side in ("encoder", "decoder")
            for p in ("weight", "bias")
        }
    )

    def attention(src: str, dst: str):
        for p in ("weight", "bias"):
            weights[f"{dst}.in_proj_{p}"] = torch.cat([mine[f"{src}.{x}_proj.{p}"] for x in "qkv"])
            weights[f"{dst}.out_proj.{p}"] = mine[f"{src}.out_proj.{p}"]

    for side, names in (
        ("encoder", {"attn": "self_attn"}),
        ("decoder", {"self_attn": "self_attn", "cross_attn": "multihead_attn"}),
    ):
        for i in range(2):
            ours_at, theirs_at = f"{side}.{i}", f"transformer.{side}.layers.{i}"
            for src, dst in names.items():
                attention(f"{ours_at}.{src}", f"{theirs_at}.{dst}")
            for p in ("weight", "bias"):
                for n in range(1, 4 if side == "decoder" else 3):
                    weights[f"{theirs_at}.norm{n}.{p}"] = mine[f"{ours_at}.norm{n}.{p}"]
                weights[f"{theirs_at}.linear1.{p}"] = mine[f"{ours_at}.ff.0.{p}"]
                weights[f"{theirs_at}.linear2.{p}"] = mine[f"{ours_at}.ff.3.{p}"]
    theirs.load_state_dict(weights)
    ours.eval(), theirs.eval()
    src, src_len, tgt_in = _batch()
    assert src_len.min() < src_len.max()  # padding present, masked on both sides
    torch.testing.assert_close(
        theirs(src, src_len, tgt_in), ours(src, src_len, tgt_in)[0], atol=1e-5, rtol=1e-4
    )


def test_seed_bahdanau_is_attnkits_bahdanau_on_unpadded_batches():
    torch.manual_seed(0)
    ours = Seq2Seq(11, 11, kind="bahdanau", emb=4, hidden=6)
    theirs = plain.TutorialBahdanau(11, 11, emb=4, hidden=6)
    mine = ours.state_dict()
    weights = _packed_gru_names(mine, "encoder.gru")
    weights["encoder.embed.weight"] = mine["encoder.embed.weight"]
    w_init = mine["decoder.init.weight"]  # (H, 2H) over [forward; backward], the tutorial's reverse
    weights["encoder.fc.weight"] = torch.cat([w_init[:, 6:], w_init[:, :6]], dim=1)
    weights["encoder.fc.bias"] = mine["decoder.init.bias"]
    weights["decoder.embedding.weight"] = mine["decoder.embed.weight"]
    score = ours.decoder.attention.score  # v^T tanh(W s + U h): the tutorial's fc1 on [s; h]
    weights["decoder.attention.fc1.weight"] = torch.cat([score.w_query[0].T, score.w_key[0].T], 1)
    weights["decoder.attention.fc1.bias"] = torch.zeros(6)
    weights["decoder.attention.fc2.weight"] = score.v.detach()
    weights["decoder.attention.fc2.bias"] = torch.zeros(1)
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        weights[f"decoder.gru.{name}_l0"] = mine[f"decoder.cell.{name}"]
    weights["decoder.fc.weight"] = mine["decoder.out.weight"]
    weights["decoder.fc.bias"] = mine["decoder.out.bias"]
    theirs.load_state_dict(weights)
    src, src_len, tgt_in = _batch(full=True)
    torch.testing.assert_close(theirs(src, tgt_in), ours(src, src_len, tgt_in)[0])


def test_dense_measures_both_paths_of_a_linear_layer():
    row = dense.measure(rows=8, din=4, dout=3, reps=2)
    assert row["onednn"] == torch.backends.mkldnn.is_available()
    for name in ("torch", "attnkit"):
        assert row[f"{name}_forward_s"] > 0 and row[f"{name}_train_s"] > 0


def test_decoding_speed_cases_decode(one_thread, monkeypatch):
    monkeypatch.setattr(decoding_speed, "SEQ2SEQ", dict(batch=2, src_len=5, max_len=4))
    monkeypatch.setattr(decoding_speed, "SPEECH", dict(batch=2, frames=32, max_len=4))
    for family, beam, ctc_weight in decoding_speed.CASES.values():
        row = decoding_speed.measure(family, beam, ctc_weight, reps=1, time_budget=60.0)
        assert row["s"] > 0 and row["tokens"] > 0


def test_every_models_vs_plain_row_trains_on_its_smoke_shape(one_thread):
    for row in models_vs_plain.rows_of(smoke=True):
        out = models_vs_plain.measure(
            row["family"], row["impl"], row["size"], reps=1, time_budget=60
        )
        assert out["step_s"] > 0 and out["params"] > 0, row["name"]
    families = {r["family"] for r in models_vs_plain.rows_of(smoke=False)}
    assert families == {"bahdanau", "luong", "las", "crnn", "transformer"}


def test_models_vs_plain_smoke_rows_in_fresh_processes(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert (
        models_vs_plain.main(
            ["--smoke", "--match", "luong", "--threads", "1", "--device", "cpu", "--json", str(out)]
        )
        == 0
    )
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert data["device"] == "cpu"
    assert [r["impl"] for r in rows] == ["plain", "attnkit"]
    assert all(r["status"] == "ok" and r["threads"] == 1 and r["memory"] == "rss" for r in rows)
    assert rows[1]["time_ratio"] == rows[1]["step_s"] / rows[0]["step_s"]
    assert "| luong | B=2 S=6 T=4 | attnkit |" in capsys.readouterr().out


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_every_models_vs_plain_row_trains_on_a_gpu():
    for row in models_vs_plain.rows_of(smoke=True):
        out = models_vs_plain.measure(
            row["family"], row["impl"], row["size"], reps=1, time_budget=60, device="cuda"
        )
        assert out["step_s"] > 0 and out["memory"] == "cuda", row["name"]


def test_profile_models_lists_the_top_ops_of_a_step(one_thread):
    out = profile_models.top_ops("bahdanau", "attnkit", [2, 6, 4], top=5)
    assert len(out["ops"]) == 5 and out["total_s"] > 0
    shares = [op["share"] for op in out["ops"]]
    assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 1
    assert set(profile_models.CASES) == {r["family"] for r in models_vs_plain.rows_of(False)}


def test_task_steps_times_each_tasks_default_model(one_thread):
    out = task_steps.step_cpu_time("translate", reps=1)
    assert out["step_cpu_s"] > 0 and len(out["times"]) == 1
    assert task_steps.TASKS[:3] == ("translate", "asr", "ocr")


def test_task_steps_unlikelihood_rows_compute_the_same_loss(one_thread):
    losses = []
    for task in task_steps.MULTI30K:
        torch.manual_seed(0)
        model, loss_of = task_steps._loss_of(task, torch.Generator().manual_seed(0))
        model.eval()  # no dropout: the same logits for the three
        with torch.no_grad():
            losses.append(float(loss_of()))
    assert losses[1] > losses[0]  # the unlikelihood term is positive
    # the same sum from one log-softmax or from two: float32 rounding of a loss near 9
    assert losses[2] == pytest.approx(losses[1], rel=1e-5)
    out = task_steps.interleaved_cpu_times(["translate", "ocr"], reps=1)
    assert [len(out[t]["times"]) for t in ("translate", "ocr")] == [1, 1]


# ---------------------------------------------------------------- streaming.py


def test_streamed_characters_are_printed_after_their_chunk_and_the_ones_before():
    from attnkit.tasks.asr import StreamedChunk

    chunks = [
        StreamedChunk(0, 0.2, "a", [0.15], 0.05, 0.01),
        StreamedChunk(1, 0.4, "", [], 0.30, 0.02),  # slower than real time: a queue
        StreamedChunk(2, 0.5, "bc", [0.42, None], 0.02, 0.02),
    ]
    assert streaming.emission_times(chunks, "wall") == pytest.approx([0.25, 0.7, 0.72])
    assert streaming.emission_times(chunks, "cpu") == pytest.approx([0.21, 0.42, 0.52])
    row = streaming.stream_row(200.0, [chunks], ["abc"], ["abd"], [0.3])
    assert row["cer_offline"] == row["cer_streaming"] == pytest.approx(1 / 3)
    assert row["equal_to_offline"] == 1 and row["chunks"] == 3
    assert row["wall_char_delay_ms"]["max"] == pytest.approx(1000 * (0.72 - 0.42))
    assert row["cpu_char_delay_ms"]["median"] == pytest.approx(80.0)  # of 60 and 100 ms
    assert row["cpu_final_delay_ms"]["mean"] == pytest.approx(20.0)
    assert row["chars_before_audio_end"] == pytest.approx(1 / 3)
    assert row["chars_without_stop"] == pytest.approx(1 / 3)
    assert row["wall_real_time_factor"] == pytest.approx(0.37 / 0.5)
    assert row["cpu_last_char_after_speech_ms"]["max"] == pytest.approx(1000 * (0.52 - 0.3))
    assert row["cpu_char_delay_correct_prefix_ms"]["max"] == pytest.approx(1000 * 0.1)  # "ab"
    assert streaming.common_prefix("abc", "abd") == 2 and streaming.common_prefix("ab", "abc") == 2
    loud = torch.full((50, 80), -13.0)
    loud[10:31] = 0.0  # frames 10 to 30 loud: the speech ends at 0.3 s + half a window
    assert streaming.speech_end_s(loud) == pytest.approx(0.3125)


def test_stop_records_find_the_peaks_their_probabilities_and_repeated_stops():
    p = torch.tensor(
        [
            [
                [0.95, 0.1, 0.1, 0.1],
                [0.7, 0.2, 0.6, 0.3],  # moves to key 2; p at key 0 >= 1/2: stops again
                [0.1, 0.1, 0.8, 0.4],  # stays at key 2: not counted as moving
                [0.9, 0.9, 0.9, 0.9],
            ]
        ]
    ).double()  # padding
    alpha = torch.tensor([[[1.0, 0, 0, 0], [0, 0.2, 0.7, 0.1], [0, 0, 0.6, 0.4], [0, 0, 0, 1.0]]])
    hard = torch.tensor([[0, 0, 2, 3]])
    steps = torch.tensor([[True, True, True, False]])
    at_peak, again, at_stop = streaming.stop_records(torch.logit(p), alpha, hard, steps)
    assert at_peak.tolist() == pytest.approx([0.95, 0.6, 0.8])
    assert again.tolist() == [True] and at_stop.tolist() == [True, False, True]
    figures = streaming.stop_figures(at_peak, again, at_stop)
    assert figures["p_at_peak"][2] == pytest.approx(0.8)  # the median
    assert figures["peak_p_between_0.1_and_0.9"] == pytest.approx(2 / 3)
    assert figures["stops_again"] == 1.0 and figures["moved_steps"] == 1
    assert figures["hard_stop_at_peak"] == pytest.approx(2 / 3) and figures["steps"] == 3


@pytest.mark.parametrize("alignment", ["monotonic", "mocha"])
def test_alignment_stats_of_a_saturated_model_stop_at_the_peaks(alignment):
    from attnkit.data import CharVocab
    from tests.models.toy import streaming_las

    vocab = CharVocab.build(["abcdef"])
    model = streaming_las(alignment, vocab=len(vocab))  # its stops: p >= 0.78, the rest ~0
    attention = model.speller.attention
    features = [torch.randn(160, 80), torch.randn(200, 80)]  # 20 and 25 listener steps
    stats = streaming.alignment_stats(model, vocab, features, ["abc", "fed"], batch_size=1)
    assert stats["steps"] == 8 and stats["hard_stop_at_peak"] == 1.0
    assert stats["stops_again"] == 0.0 and stats["moved_steps"] == 8  # the first from key 0
    assert 0.5 < stats["p_at_peak"][0] < stats["p_at_peak"][4] < 1
    assert attention.inference == "hard" and "monotonic_energies" not in vars(attention)


# ---------------------------------------------------------------- scripts run as modules


def test_a_script_run_as_a_module_measures_in_fresh_processes(tmp_path):
    out = tmp_path / "dense.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.dense",
            "--match",
            "N=32 ",
            "--reps",
            "1",
            "--threads",
            "1",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert [r["status"] for r in data["rows"]] == ["ok"]
    assert data["command"].startswith("python -m benchmarks.dense --match")


# ---------------------------------------------------------------- suite.py (make bench)


def test_every_suite_entry_runs_a_script_of_the_package_with_its_paths_filled(tmp_path):
    import importlib.util

    from benchmarks import suite

    for entry in suite.ENTRIES:
        assert importlib.util.find_spec(f"benchmarks.{entry.script}") is not None, entry.name
        for quick in (False, True):
            cmd = suite.command(entry, quick=quick, out=tmp_path, streaming_checkpoint="ck")
            assert cmd is None and quick or cmd[1:3] == ["-m", f"benchmarks.{entry.script}"]
            assert cmd is None or not any("{" in word for word in cmd), entry.name
    streaming = next(e for e in suite.ENTRIES if e.script == "streaming")
    assert suite.command(streaming, quick=False, out=tmp_path, streaming_checkpoint=None) is None


def _running(pid: int) -> bool:
    """Whether process ``pid`` runs (not gone, not a zombie waiting for its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_suite_stops_an_entry_over_its_budget_with_all_it_started(tmp_path):
    from benchmarks import suite

    pid_file = tmp_path / "pid"
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(120)"
    )
    status, seconds = suite.run_entry([sys.executable, "-c", code], 5, tmp_path / "log")
    assert status == "over the 5 s budget" and seconds < 60
    deadline = time.monotonic() + 30
    while _running(int(pid_file.read_text())):
        assert time.monotonic() < deadline, "the entry's own child outlived the budget"
        time.sleep(0.2)
    assert (
        suite.run_entry([sys.executable, "-c", "raise SystemExit(3)"], 60, tmp_path / "log")[0]
        == "exit 3"
    )
