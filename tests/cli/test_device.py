"""--device, --precision and --workers-data on every command that runs a model."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import attnkit
from attnkit.cli.main import main

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
PAIRS = [
    (f"<en> {w}", str(n))
    for n, w in enumerate(["zero", "one", "two", "three", "four", "five", "six", "seven"])
]
SMALL = [
    "--eval-every",
    "15",
    "--checkpoint-every",
    "15",
    "--batch-size",
    "4",
    "--lr",
    "1e-2",
    "--warmup",
    "5",
    "--hidden",
    "16",
    "--emb",
    "8",
    "--no-progress",
    "--plot",
    "1",
]


def _tsv(tmp_path: Path) -> Path:
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS), encoding="utf-8")
    return tsv


def _commands(tmp_path: Path) -> dict[str, list[str]]:
    """Each command that runs a model, with arguments that would write into ``tmp_path/w``."""
    out, ck = str(tmp_path / "w"), str(tmp_path / "no-checkpoint")
    return {
        "train translate": ["train", "translate", "--out", out, "--n-train", "10"],
        "train ocr": ["train", "ocr", "--out", out, "--n-train", "10"],
        "train asr": ["train", "asr", "--out", out, "--n-train", "10"],
        "translate": ["translate", "--checkpoint", ck, "hello", "--plot", out],
        "eval": ["eval", "--checkpoint", ck, "--data", ck],
        "read": ["read", "--checkpoint", ck, "line.png", "--plot", out],
        "transcribe": ["transcribe", "--checkpoint", ck, "a.wav", "--plot", out],
    }


def _one_line_error(capsys, start: str) -> None:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(start), err


@pytest.mark.parametrize("command", list(_commands(Path("."))))
def test_a_wrong_device_is_a_one_line_error_and_nothing_is_written(tmp_path, capsys, command):
    argv = _commands(tmp_path)[command]
    assert main([*argv, "--device", "gpu"]) == 2
    _one_line_error(capsys, "attnkit: device: expected auto, cpu, cuda or cuda:N, got 'gpu'")
    assert list(tmp_path.iterdir()) == []
    if not torch.cuda.is_available():
        assert main([*argv, "--device", "cuda:1"]) == 2
        _one_line_error(capsys, "attnkit: device: 'cuda:1' needs CUDA, which this machine lacks")
        assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("task", ["translate", "ocr", "asr"])
def test_fp16_on_cpu_is_a_one_line_error_and_nothing_is_written(tmp_path, capsys, task):
    argv = _commands(tmp_path)[f"train {task}"]
    assert main([*argv, "--device", "cpu", "--precision", "fp16"]) == 2
    _one_line_error(
        capsys,
        "attnkit: precision: fp16 trains on CUDA only (float16 autocast "
        "with a GradScaler), the device is cpu; use bf16 or fp32",
    )
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--precision", "fp8"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        main([*argv, "--workers-data", "-1"])
    assert "invalid non-negative int value: '-1'" in capsys.readouterr().err


def test_bf16_on_cpu_with_data_workers_then_every_verb_on_cpu(tmp_path, capsys, one_thread):
    tsv, out = _tsv(tmp_path), tmp_path / "run"
    argv = [
        "train",
        "translate",
        "--train",
        str(tsv),
        "--valid",
        str(tsv),
        "--out",
        str(out),
        "--device",
        "cpu",
        "--workers-data",
        "2",
        *SMALL,
    ]
    assert main([*argv, "--precision", "bf16", "--steps", "30"]) == 0
    assert "stopped after 30 steps (max_steps); held-out:" in capsys.readouterr().out
    trainer = json.loads((out / "checkpoint" / "trainer.json").read_text())
    assert trainer["train_config"]["precision"] == "bf16"
    assert trainer["train_config"]["data_workers"] == 2
    weights = load_file(str(out / "checkpoint" / "model.safetensors"))
    assert {w.dtype for w in weights.values()} == {torch.float32}
    # resumed in fp32 (allowed: the weights are float32 in every precision)
    assert main([*argv, "--precision", "fp32", "--steps", "40", "--resume"]) == 0
    assert "stopped after 40 steps" in capsys.readouterr().out
    ck = str(out / "checkpoint")
    assert main(["translate", "--checkpoint", ck, "--device", "cpu", "<en> two"]) == 0
    assert main(["eval", "--checkpoint", ck, "--data", str(tsv), "--device", "auto", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out.split("\n", 1)[1])["metrics"]) == {
        "exact",
        "cer",
        "bleu",
        "bleu_char",
        "chrf",
    }


@needs_cuda
def test_every_task_trains_and_decodes_on_the_gpu(tmp_path, capsys):
    tsv, out = _tsv(tmp_path), tmp_path / "translate"
    argv = [
        "train",
        "translate",
        "--train",
        str(tsv),
        "--valid",
        str(tsv),
        "--out",
        str(out),
        "--device",
        "cuda",
        "--precision",
        "fp16",
        *SMALL,
    ]
    assert main([*argv, "--steps", "30"]) == 0
    trainer = json.loads((out / "checkpoint" / "trainer.json").read_text())
    assert trainer["scaler"]["scale"] > 0  # the loss scale is saved with the run
    assert main([*argv, "--steps", "40", "--resume"]) == 0
    bf16 = "bf16" if torch.cuda.get_device_capability() >= (8, 0) else "fp32"
    no_emb = [a for a in SMALL if a not in ("--emb", "8")]  # a Transformer's size is --hidden
    assert (
        main(
            [
                "train",
                "translate",
                "--train",
                str(tsv),
                "--out",
                str(tmp_path / "t"),
                "--model",
                "transformer",
                "--heads",
                "2",
                "--device",
                "cuda",
                "--precision",
                bf16,
                "--workers-data",
                "2",
                "--steps",
                "30",
                *no_emb,
            ]
        )
        == 0
    )
    ck = str(out / "checkpoint")
    assert (
        main(["translate", "--checkpoint", ck, "--device", "cuda", "<en> two", "--beam", "2"]) == 0
    )
    assert main(["eval", "--checkpoint", ck, "--data", str(tsv), "--device", "cuda"]) == 0
    ocr = tmp_path / "ocr"
    assert (
        main(
            [
                "train",
                "ocr",
                "--out",
                str(ocr),
                "--n-train",
                "16",
                "--n-valid",
                "4",
                "--max-chars",
                "12",
                "--device",
                "cuda",
                "--precision",
                "fp16",
                "--steps",
                "4",
                "--batch-size",
                "4",
                "--no-progress",
                "--plot",
                "1",
            ]
        )
        == 0
    )
    line = next((ocr / "lines").glob("valid-*/*.png"))
    assert (
        main(
            [
                "read",
                "--checkpoint",
                str(ocr / "checkpoint"),
                str(line),
                "--device",
                "cuda",
                "--plot",
                str(tmp_path / "pics"),
            ]
        )
        == 0
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_torchrun_takes_one_gpu_per_process_with_nccl(tmp_path):
    tsv, out = _tsv(tmp_path), tmp_path / "run"
    src = str(Path(attnkit.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={_free_port()}",
        "-m",
        "attnkit.cli.main",
        "train",
        "translate",
        "--train",
        str(tsv),
        "--valid",
        str(tsv),
        "--out",
        str(out),
        "--device",
        "cuda",
        "--steps",
        "30",
        *SMALL,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ck = json.loads((out / "checkpoint" / "trainer.json").read_text())
    assert ck["step"] == 30 and len(ck["rng_by_rank"]) == 2
    assert "process group of 2 (nccl)" in proc.stderr
