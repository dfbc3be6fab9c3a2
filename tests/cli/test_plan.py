"""attnkit plan: the table of paths, the fit to a memory limit, and its usage errors."""

import pytest

from attnkit import Attention
from attnkit.attention.planner import CallShape, estimate
from attnkit.cli.main import main
from attnkit.cli.plan import memory_size, size


def test_a_table_of_every_path_and_the_one_auto_takes(capsys):
    assert (
        main(
            [
                "plan",
                "--score",
                "additive",
                "--batch",
                "8",
                "--tq",
                "800",
                "--tk",
                "800",
                "--dim",
                "128",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    plan = estimate(Attention(128, score="additive"), CallShape(8, 800, 800))
    reference, sdpa, chunked, step = plan.estimates
    assert out.startswith(
        "additive attention, B=8, Tq=800, Tk=800, Dq=128, Dk=128, Dv=128, A=128, float32 on cpu\n"
    )
    lines = out.splitlines()
    row = next(line for line in lines if line.lstrip().startswith("chunked"))
    assert row.split() == [
        "chunked",
        "native",
        *size(chunked.forward_bytes).split(),
        *size(chunked.train_bytes).split(),
        "<-",
        "auto",
    ]
    row = next(line for line in lines if line.lstrip().startswith("reference"))
    assert size(reference.train_bytes) in row and "GiB" in row
    assert "sdpa              -                 cannot: score 'additive' is not a dot" in out
    assert "auto takes chunked: " in out


def test_memory_limit_gives_the_largest_batch(capsys):
    assert (
        main(
            [
                "plan",
                "--score",
                "scaled_dot",
                "--heads",
                "4",
                "--batch",
                "8",
                "--tq",
                "1024",
                "--dim",
                "256",
                "--impl",
                "reference",
                "--memory-limit",
                "1GB",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "memory limit 953.7 MiB (1,000,000,000 bytes) for training (forward + backward): "
        "this call needs" in out
    )
    assert "largest batch that fits: " in out and "(reference takes reference there)" in out


def test_memory_limit_falls_back_to_chunks_of_queries(capsys):
    assert (
        main(
            [
                "plan",
                "--tq",
                "20000",
                "--dim",
                "64",
                "--memory-limit",
                "500MiB",
                "--forward-only",
                "--weights",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "for forward: this call needs 3.0 GiB and does not fit" in out
    assert "not even one example fits; one with its queries split into chunks of " in out


@pytest.mark.parametrize(
    "text, expected",
    [
        ("8GB", 8 * 10**9),
        ("8GiB", 8 * 2**30),
        ("8g", 8 * 2**30),
        ("512MB", 512 * 10**6),
        ("1.5e9", 1_500_000_000),
        ("100", 100),
    ],
)
def test_memory_sizes(text, expected):
    assert memory_size(text) == expected


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--memory-limit", "8XB"],
            "argument --memory-limit: invalid memory size (e.g. 8GB, 8GiB, 512MB) value: '8XB'",
        ),
        (["--memory-limit", "0GB"], "argument --memory-limit: invalid memory size"),
        (
            ["--window", "3,4,5"],
            "argument --window: invalid window (W or L,R, keys each side) value: '3,4,5'",
        ),
        (["--batch", "0"], "argument --batch: invalid positive int value: '0'"),
    ],
)
def test_bad_values_are_argparse_errors(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--tq", "10", "--dim", "8", *args])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--score", "dot", "--attn-dim", "4"],
            "--attn-dim: only the 'additive' and 'location' "
            "scores have an attention dim, got attn_dim=4 with score='dot'",
        ),
        (["--heads", "3"], "--heads: 3 does not divide query_dim=8; pass head_dim"),
        (
            ["--score", "additive", "--impl", "sdpa"],
            "--impl: 'sdpa' computes dot-product scores "
            "only, not score='additive'; use impl='auto'",
        ),
        (
            ["--self-attention", "--tk", "12"],
            "--tk: --self-attention attends over the queries, so Tk = Tq = 10; got --tk 12",
        ),
        (["--one-step"], "--tq: a --one-step call has one query per row, got --tq 10"),
    ],
)
def test_inconsistent_options_are_one_line_errors(args, message, capsys):
    assert main(["plan", "--tq", "10", "--dim", "8", *args]) == 2
    assert capsys.readouterr().err == f"attnkit: {message}\n"


def test_time_on_a_device_this_machine_lacks(capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert main(["plan", "--tq", "10", "--dim", "8", "--device", "cuda", "--time"]) == 2
    assert capsys.readouterr().err.startswith(
        "attnkit: --time: runs on the planned device, and this machine has no CUDA"
    )
    assert main(["plan", "--tq", "10", "--dim", "8", "--device", "cuda"]) == 0
    assert "float32 on cuda" in capsys.readouterr().out


def test_a_trillion_queries_is_planned_and_printed_in_large_units(capsys):
    assert main(["plan", "--tq", str(10**12), "--dim", "64"]) == 0
    out = capsys.readouterr().out
    assert "PiB" in out and "TiB" in out and "<- auto" in out


def test_time_on_a_call_too_large_to_run_is_a_table(capsys):
    # it ended in the allocator's RuntimeError (32 TB asked), a traceback
    assert main(["plan", "--tq", "1000000000000", "--dim", "64", "--time"]) == 0
    out = capsys.readouterr().out
    assert "forward s" in out and "~" in out


def test_time_whose_smallest_run_does_not_fit_names_the_option(capsys, monkeypatch):
    from attnkit.attention import planner

    monkeypatch.setattr(planner, "PROBE_BYTES", 1000)
    assert main(["plan", "--tq", "100", "--dim", "64", "--time"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnkit: --time: the smallest run of the ") and err.count("\n") == 1
