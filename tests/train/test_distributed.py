"""Data-parallel training: two CPU processes under torchrun train one model.

The check that cannot pass vacuously: two processes, each on its own batch, take the same steps
as one process whose loss is the mean of the two batches' losses (DDP averages gradients), and
that differs from one process training on every batch in turn.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import attnkit
from attnkit.models import build_model
from attnkit.tasks.translate import TranslateTask
from attnkit.train import TrainConfig, Trainer, distributed, load_checkpoint
from tests.train.test_loop import Reverse, ReverseTask

WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
]
PAIRS = [(f"<en> {w}", str(n)) for n, w in enumerate(WORDS)]  # 3 batches of 4 an epoch


class Paired:
    """One process doing what two do together: batches 2k and 2k+1 of an epoch in one step,
    the mean of their losses (an epoch's odd last batch is left out, as with two processes)."""

    def __init__(self, task):
        self.task = task

    def batches(self, epoch):
        b = list(self.task.batches(epoch))
        return [(b[i], b[i + 1]) for i in range(0, len(b) - 1, 2)]

    def loss(self, model, pair, step):
        (l0, t0), (l1, t1) = (self.task.loss(model, b, step) for b in pair)
        return (l0 + l1) / 2, t0 + t1

    def evaluate(self, model):
        return self.task.evaluate(model)

    def config(self):
        return self.task.config()

    def vocab(self):
        return self.task.vocab()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(args: list[str], cwd: Path) -> str:
    src = str(Path(attnkit.__file__).resolve().parents[1])  # the attnkit under test
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={_free_port()}",
        "-m",
        "attnkit.cli.main",
        *args,
    ]
    proc = subprocess.run(
        cmd, check=False, capture_output=True, text=True, timeout=60, env=env, cwd=cwd
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout


def _train_alone(task, model_config, steps, out):
    torch.manual_seed(0)  # as the CLI does before building the model
    model = build_model(model_config)
    cfg = TrainConfig(
        max_steps=steps,
        lr=1e-2,
        warmup_steps=2,
        eval_every=10**6,
        checkpoint_every=10**6,
        progress=False,
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: threads only wait for each other
    try:
        Trainer(model, task, cfg, out).fit()
    finally:
        torch.set_num_threads(threads)
    return model.state_dict()


def test_two_processes_average_gradients_stop_together_and_resume(tmp_path):
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS), encoding="utf-8")
    run = tmp_path / "run"
    # Luong's general score: no additive kernels to compile in each process; no dropout.
    args = [
        "train",
        "translate",
        "--train",
        str(tsv),
        "--valid",
        str(tsv),
        "--out",
        str(run),
        "--batch-size",
        "4",
        "--model",
        "luong",
        "--hidden",
        "16",
        "--emb",
        "8",
        "--lr",
        "1e-2",
        "--warmup",
        "2",
        "--eval-every",
        "1000000",
        "--checkpoint-every",
        "1000000",
        "--no-progress",
    ]
    # The time budget is rank 0's clock: both processes must stop after the same step.
    out = _torchrun(args + ["--steps", "100000", "--time-budget", "0.5", "--plot", "1"], tmp_path)
    reports = [ln for ln in out.splitlines() if ln.startswith("stopped after")]
    assert len(reports) == 1 and "(time_budget)" in reports[0], out  # rank 0 alone reports
    assert (run / "history.json").exists() and (run / "attention_0.png").exists()
    stopped_at = load_checkpoint(run / "checkpoint").trainer_state["step"]
    assert 0 < stopped_at < 100000

    steps = stopped_at + 5
    out = _torchrun(args + ["--steps", str(steps), "--resume", "--plot", "0"], tmp_path)
    assert f"stopped after {steps} steps (max_steps)" in out

    ck = load_checkpoint(run / "checkpoint")  # the single-process format, read alone
    assert ck.trainer_state["step"] == steps and len(ck.trainer_state["rng_by_rank"]) == 2
    model = build_model(ck.config["model"])
    ck.load_model(model)
    config = {k: v for k, v in ck.config["model"].items() if k not in ("src_vocab", "tgt_vocab")}
    task = TranslateTask(PAIRS, PAIRS, model_config=config, batch_size=4)
    expected = _train_alone(Paired(task), ck.config["model"], steps, tmp_path / "paired")
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, expected[name], msg=name)
    # Not vacuous: one process on every batch in turn ends elsewhere.
    alone = _train_alone(task, ck.config["model"], steps, tmp_path / "alone")
    assert max((alone[k] - expected[k]).abs().max().item() for k in alone) > 1e-3


def test_each_process_takes_its_share_of_every_epoch(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    task = ReverseTask(batches_per_epoch=5)
    epochs = [list(task.batches(e)) for e in range(3)]
    trainer = Trainer(Reverse(), task, TrainConfig(progress=False), tmp_path)
    got = trainer._batches()
    # Batches 1 and 3 of each epoch; batch 4 (one for two processes) is left out.
    for e in range(2):
        for i in (1, 3):
            assert torch.equal(next(got), epochs[e][i])
            assert (trainer.epoch, trainer.batch_in_epoch) == (e, i + 1)
    # Resumed after batch 0 of epoch 2: the pairs are (1, 2) and (3, 4), then epoch 3 begins.
    trainer.epoch, trainer.batch_in_epoch = 2, 1
    got = trainer._batches()
    assert torch.equal(next(got), epochs[2][2])
    assert torch.equal(next(got), epochs[2][4])
    assert torch.equal(next(got), list(task.batches(3))[1])


def test_bad_environment_and_too_few_batches_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(
        ValueError, match="^WORLD_SIZE: expected an integer in the environment, got 'two'"
    ):
        distributed.world_size()
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(ValueError, match=r"^RANK: expected 0 <= RANK < WORLD_SIZE=2, got 2"):
        distributed.rank()
    monkeypatch.setenv("RANK", "0")
    assert distributed.is_main() and distributed.world_size() == 2
    trainer = Trainer(Reverse(), ReverseTask(batches_per_epoch=1), TrainConfig(), tmp_path)
    with pytest.raises(
        ValueError,
        match=r"task.batches\(0\): expected at least 2 batches "
        r"\(one per process\), got 1",
    ):
        next(trainer._batches())


def test_two_processes_accumulate_and_ask_about_signals_at_the_same_batches(tmp_path):
    # every batch within a step asks every process whether a signal came: a process that
    # asked at another batch than the rest would wait for ever
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS), encoding="utf-8")
    out = _torchrun(
        [
            "train",
            "translate",
            "--train",
            str(tsv),
            "--valid",
            str(tsv),
            "--out",
            str(tmp_path / "run"),
            "--batch-size",
            "2",
            "--model",
            "luong",
            "--hidden",
            "8",
            "--emb",
            "8",
            "--accumulate",
            "2",
            "--steps",
            "3",
            "--eval-every",
            "1000000",
            "--no-progress",
            "--plot",
            "0",
        ],
        tmp_path,
    )
    assert "stopped after 3 steps (max_steps)" in out
    state = load_checkpoint(tmp_path / "run" / "checkpoint").trainer_state
    # 3 steps of 2 processes x 2 batches: both epochs of 6 batches used up
    assert (state["epoch"], state["batch_in_epoch"]) == (1, 6)
