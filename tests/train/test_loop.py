"""The shared training loop on a tiny attention task."""

import errno
import io
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from attnkit import Attention
from attnkit.train import Batches, TrainConfig, Trainer, load_checkpoint, lr_factor
from attnkit.train.averaging import average_checkpoints, best_checkpoints
from attnkit.train.checkpoint import CheckpointError, save_checkpoint
from attnkit.train.loop import BEST_DIR


class Reverse(nn.Module):
    """Reads a token sequence backwards through additive attention and dropout."""

    def __init__(self, vocab=6, t=5, dim=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(t, dim))
        self.attn = Attention(dim, 2 * dim, dim, score="additive", dropout=0.1)
        self.out = nn.Linear(dim, vocab)

    def forward(self, x):
        b, t = x.shape
        tok = self.emb(x)
        keys = torch.cat([tok, self.pos.expand(b, t, -1)], dim=-1)
        return self.out(self.attn(self.pos.flip(0).expand(b, t, -1), keys, tok).context)


class ReverseTask:
    def __init__(self, vocab=6, t=5, batches_per_epoch=7):
        self.v, self.t, self.n = vocab, t, batches_per_epoch
        g = torch.Generator().manual_seed(99)
        self.valid = torch.randint(0, vocab, (64, t), generator=g)

    def batches(self, epoch):
        g = torch.Generator().manual_seed(1000 + epoch)
        for _ in range(self.n):
            yield torch.randint(0, self.v, (16, self.t), generator=g)

    def loss(self, model, x, step):
        logits = model(x)
        return nn.functional.cross_entropy(logits.flatten(0, 1), x.flip(1).flatten()), x.numel()

    def evaluate(self, model):
        pred = model(self.valid).argmax(-1)
        return {"accuracy": (pred == self.valid.flip(1)).float().mean().item()}

    def config(self):
        return {"vocab": self.v, "t": self.t}

    def vocab(self):
        return {"size": self.v}


def _cfg(**kw):
    base = dict(
        max_steps=20,
        lr=3e-2,
        warmup_steps=3,
        eval_every=5,
        checkpoint_every=5,
        progress=False,
        seed=7,
    )
    return TrainConfig(**(base | kw))


def test_training_learns_and_checkpoints(tmp_path):
    torch.manual_seed(0)
    model = Reverse()
    result = Trainer(model, ReverseTask(), _cfg(max_steps=150, eval_every=50), tmp_path).fit()
    assert result.stopped == "max_steps" and result.step == 150
    assert result.history[-1]["accuracy"] > 0.9
    ck = load_checkpoint(tmp_path / "checkpoint")
    assert ck.trainer_state["step"] == 150 and ck.config == {"vocab": 6, "t": 5}


def test_stopped_and_resumed_equals_straight_through(tmp_path):
    torch.manual_seed(0)
    straight = Reverse()
    Trainer(straight, ReverseTask(), _cfg(max_steps=20), tmp_path / "a").fit()
    torch.manual_seed(0)
    first = Reverse()
    Trainer(first, ReverseTask(), _cfg(max_steps=12), tmp_path / "b").fit()
    torch.manual_seed(5)  # a different initialisation: everything must come from the checkpoint
    resumed = Reverse()
    trainer = Trainer(resumed, ReverseTask(), _cfg(max_steps=20), tmp_path / "b")
    trainer.resume()
    assert trainer.step == 12
    trainer.fit()
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name


def test_signal_saves_a_checkpoint_and_stops(tmp_path):
    torch.manual_seed(0)
    task = ReverseTask()
    original = task.loss
    calls = []

    def loss(model, batch, step):
        calls.append(1)
        if len(calls) == 4:
            signal.raise_signal(signal.SIGTERM)
        return original(model, batch, step)

    task.loss = loss
    result = Trainer(Reverse(), task, _cfg(max_steps=50), tmp_path).fit()
    assert result.stopped == "signal" and result.step == 4 and result.signal == signal.SIGTERM
    assert load_checkpoint(tmp_path / "checkpoint").trainer_state["step"] == 4
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handler restored


class ClosedByHangUp(io.StringIO):
    """A terminal that goes away: once ``gone``, writing to it fails with EIO."""

    gone = False

    def isatty(self):
        return True

    def write(self, text):
        if self.gone:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return super().write(text)

    def flush(self):
        if self.gone:
            raise OSError(errno.EIO, os.strerror(errno.EIO))


def test_a_hang_up_saves_a_checkpoint_though_the_terminal_is_gone(tmp_path, monkeypatch):
    torch.manual_seed(0)
    terminal = ClosedByHangUp()
    monkeypatch.setattr(sys, "stderr", terminal)  # the progress bar's
    task = ReverseTask()
    original = task.loss
    calls = []

    def loss(model, batch, step):
        calls.append(1)
        if len(calls) == 4:  # the terminal closed: it is gone, and the process gets SIGHUP
            terminal.gone = True
            signal.raise_signal(signal.SIGHUP)
        return original(model, batch, step)

    task.loss = loss
    # as when started from a terminal: under nohup (SIGHUP ignored) training goes on, by design
    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        result = Trainer(Reverse(), task, _cfg(max_steps=50, progress=True), tmp_path).fit()
        after = signal.getsignal(signal.SIGHUP)
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert result.stopped == "signal" and result.step == 4 and result.signal == signal.SIGHUP
    assert load_checkpoint(tmp_path / "checkpoint").trainer_state["step"] == 4
    assert after is signal.SIG_DFL  # handler restored


def test_early_stopping_and_time_budget(tmp_path):
    torch.manual_seed(0)
    result = Trainer(
        Reverse(),
        ReverseTask(),
        _cfg(max_steps=500, lr=1e-9, eval_every=2, patience=3),
        tmp_path / "a",
    ).fit()
    assert result.stopped == "early_stopping" and result.step == 8
    result = Trainer(
        Reverse(), ReverseTask(), _cfg(max_steps=10**6, time_budget_s=0.5), tmp_path / "b"
    ).fit()
    assert result.stopped == "time_budget" and 0 < result.step < 10**6


def test_schedules():
    cfg = _cfg(max_steps=100, warmup_steps=10)
    assert [round(lr_factor(s, cfg), 3) for s in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert lr_factor(39, cfg) == pytest.approx(0.5)  # inverse sqrt: sqrt(10 / 40)
    cos = _cfg(max_steps=110, warmup_steps=10, schedule="cosine")
    assert lr_factor(10, cos) == pytest.approx(1.0) and lr_factor(60, cos) == pytest.approx(0.5)
    assert 0 < lr_factor(109, cos) < 1e-3  # the last step still learns
    assert lr_factor(110, cos) == pytest.approx(0.0)
    with pytest.raises(
        ValueError, match="^schedule: expected one of constant, inverse_sqrt, cosine"
    ):
        TrainConfig(schedule="linear")
    with pytest.raises(ValueError, match="^max_steps: expected a positive int, got 0"):
        TrainConfig(max_steps=0)


def test_resume_refuses_other_settings(tmp_path):
    from attnkit.train import CheckpointError

    torch.manual_seed(0)
    Trainer(Reverse(), ReverseTask(), _cfg(max_steps=5), tmp_path).fit()
    trainer = Trainer(Reverse(), ReverseTask(), _cfg(max_steps=10, lr=1.0), tmp_path)
    with pytest.raises(CheckpointError, match=r"saved with other training settings \(lr=0.03\)"):
        trainer.resume()
    other = ReverseTask(vocab=5)
    with pytest.raises(
        CheckpointError,
        match=r"saved for another task set-up \(differs in "
        r"vocab: 6 saved, 5 now\)",
    ):
        Trainer(Reverse(vocab=5), other, _cfg(max_steps=10), tmp_path).resume()
    with pytest.raises(ValueError, match="^patience: expected a positive int or None, got 0"):
        TrainConfig(patience=0)


class IndexedReverseTask(ReverseTask):
    """ReverseTask whose epochs are :class:`Batches`: batch ``i`` built from its own seed when
    indexed (by a DataLoader worker when asked)."""

    def batches(self, epoch):
        return Batches([1000 * epoch + i for i in range(self.n)], self.make)

    def make(self, seed):
        g = torch.Generator().manual_seed(seed)
        return {"x": torch.randint(0, self.v, (16, self.t), generator=g)}

    def loss(self, model, batch, step):
        return super().loss(model, batch["x"], step)


def test_dataloader_workers_resume_exactly(tmp_path):
    """Worker processes build the batches; the order, the position in the epoch and the
    global RNG (dropout) are those of building them here, straight or stopped and resumed."""

    def run(out, steps, workers, resume=False, seed=0):
        torch.manual_seed(seed)
        model = Reverse()
        trainer = Trainer(
            model, IndexedReverseTask(), _cfg(max_steps=steps, data_workers=workers), out
        )
        if resume:
            trainer.resume()
        trainer.fit()
        return model.state_dict()

    here = run(tmp_path / "a", 20, 0)
    workers = run(tmp_path / "b", 20, 2)
    run(tmp_path / "c", 12, 2)
    resumed = run(tmp_path / "c", 20, 2, resume=True, seed=5)
    for name, value in here.items():
        assert torch.equal(value, workers[name]), name
        assert torch.equal(value, resumed[name]), name
    # not vacuous: other batches end elsewhere
    other = Reverse()
    Trainer(other, ReverseTask(), _cfg(max_steps=20), tmp_path / "d").fit()
    assert any(not torch.equal(v, other.state_dict()[k]) for k, v in here.items())


def test_workers_need_batches_that_can_be_indexed(tmp_path):
    trainer = Trainer(Reverse(), ReverseTask(), _cfg(data_workers=2), tmp_path)
    with pytest.raises(
        ValueError,
        match=r"^workers: 2 data workers need task.batches\(epoch\) "
        r"to be a sequence \(len and indexing\), got generator",
    ):
        trainer.fit()
    with pytest.raises(ValueError, match=r"^data_workers: expected a non-negative int, got -1"):
        TrainConfig(data_workers=-1)


class Watched(ReverseTask):
    """Records whether the loss and the evaluation ran under CPU autocast."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def loss(self, model, x, step):
        self.seen.add(("loss", torch.is_autocast_enabled("cpu")))
        return super().loss(model, x, step)

    def evaluate(self, model):
        self.seen.add(("evaluate", torch.is_autocast_enabled("cpu")))
        return super().evaluate(model)


def test_bf16_autocast_on_cpu_trains_and_keeps_float32_weights(tmp_path):
    torch.manual_seed(0)
    task, model = Watched(), Reverse()
    result = Trainer(
        model, task, _cfg(max_steps=60, precision="bf16", eval_every=30), tmp_path / "bf16"
    ).fit()
    assert task.seen == {("loss", True), ("evaluate", True)}
    assert result.history[-1]["accuracy"] > 0.5  # it learns (chance: 1/6)
    ck = load_checkpoint(tmp_path / "bf16" / "checkpoint")
    assert {v.dtype for v in ck.model_state.values()} == {torch.float32}
    assert {
        v.dtype for s in ck.optimizer_state["state"].values() for v in s.values() if v.dim()
    } == {torch.float32}
    assert ck.trainer_state["train_config"]["precision"] == "bf16"
    assert "scaler" not in ck.trainer_state
    torch.manual_seed(0)
    fp32 = Reverse()
    Trainer(fp32, ReverseTask(), _cfg(max_steps=60, eval_every=30), tmp_path / "fp32").fit()
    gap = max(
        (a - b).abs().max().item()
        for a, b in zip(model.state_dict().values(), fp32.state_dict().values())
    )
    assert 0 < gap < 0.5  # bfloat16 rounding, not another run


def test_a_run_resumes_in_another_precision(tmp_path, caplog):
    torch.manual_seed(0)
    Trainer(Reverse(), ReverseTask(), _cfg(max_steps=5), tmp_path).fit()
    trainer = Trainer(Reverse(), ReverseTask(), _cfg(max_steps=10, precision="bf16"), tmp_path)
    with caplog.at_level("INFO", logger="attnkit"):
        trainer.resume()
    assert "resuming a fp32 run in bf16" in caplog.text
    assert trainer.fit().step == 10
    ck = load_checkpoint(tmp_path / "checkpoint")
    assert ck.trainer_state["train_config"]["precision"] == "bf16"
    with pytest.raises(
        ValueError,
        match=r"^precision: expected one of fp32, bf16, fp16, got "
        r"'half'",
    ):
        TrainConfig(precision="half")
    with pytest.raises(ValueError, match=r"^precision: fp16 trains on CUDA only"):
        Trainer(Reverse(), ReverseTask(), _cfg(precision="fp16"), tmp_path)


def test_fp16_loss_scaling_skips_overflowing_steps_and_resumes_its_scale(tmp_path, monkeypatch):
    """The fp16 path on CPU (torch runs float16 autocast and GradScaler there; the CLI allows
    fp16 on CUDA only): a scale that overflows the float16 gradients skips the step and
    halves; the scale is saved and restored, so a resumed run equals a straight one."""
    from attnkit.train import loop

    monkeypatch.setattr(loop, "check_precision", lambda precision, device: None)

    def trainer(out, steps, seed=0):
        torch.manual_seed(seed)
        t = Trainer(Reverse(), ReverseTask(), _cfg(max_steps=steps, precision="fp16"), out)
        t.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**24)  # overflows float16
        return t

    first = trainer(tmp_path / "a", 1)
    before = {k: v.clone() for k, v in first.model.state_dict().items()}
    first.fit()
    assert first.scaler.get_scale() == 2.0**23  # skipped: the weights did not move
    assert all(torch.equal(v, first.model.state_dict()[k]) for k, v in before.items())

    straight = trainer(tmp_path / "b", 30)
    straight.fit()
    scale = straight.scaler.get_scale()
    assert scale < 2.0**23 and straight.history[-1]["accuracy"] > 0.3
    ck = load_checkpoint(tmp_path / "b" / "checkpoint")
    assert ck.trainer_state["scaler"]["scale"] == scale
    assert {v.dtype for v in ck.model_state.values()} == {torch.float32}

    trainer(tmp_path / "c", 12).fit()
    resumed = Trainer(
        Reverse(), ReverseTask(), _cfg(max_steps=30, precision="fp16"), tmp_path / "c"
    )
    resumed.resume()
    assert resumed.scaler.get_scale() != 2.0**16  # the saved scale, not the default
    resumed.fit()
    assert resumed.scaler.get_scale() == scale
    for name, value in straight.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name]), name


COUNT = "an int from 0 to 1,000,000,000,000"


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda st: st.pop("rng"), "rng: missing"),
        (lambda st: st.update(step="abc"), f"step: expected {COUNT}, got 'abc' (str)"),
        (lambda st: st.update(step=2.5), f"step: expected {COUNT}, got 2.5 (float)"),
        (lambda st: st.update(step=1e18), f"step: expected {COUNT}, got 1e+18 (float)"),
        (lambda st: st.update(step=-5), f"step: expected {COUNT}, got -5 (int)"),
        (
            lambda st: st.update(step=10**18),
            f"step: expected {COUNT}, got 1000000000000000000 (int)",
        ),
        (lambda st: st.update(epoch=True), f"epoch: expected {COUNT}, got True (bool)"),
        (lambda st: st.update(train_config="x"), "train_config: expected an object, got 'x' (str)"),
        (lambda st: st.update(best="high"), "best: expected a finite number or null, got 'high'"),
        (lambda st: st.update(history={}), "history: expected a list of objects, got {} (dict)"),
        (
            lambda st: st["rng"].update(torch=[1, 2]),
            "rng: not a random state this PyTorch and Python can restore",
        ),
        (lambda st: st["rng"].update(python="x" * 10**6), "rng: not a random state this PyTorch"),
    ],
)
def test_a_hand_edited_trainer_json_is_refused_naming_the_key(tmp_path, edit, message):
    import json

    from attnkit.train import CheckpointError

    torch.manual_seed(0)
    Trainer(Reverse(), ReverseTask(), _cfg(max_steps=3, eval_every=3), tmp_path).fit()
    path = tmp_path / "checkpoint" / "trainer.json"
    state = json.loads(path.read_text())
    edit(state)
    path.write_text(json.dumps(state))
    trainer = Trainer(Reverse(), ReverseTask(), _cfg(max_steps=15), tmp_path)
    with pytest.raises(CheckpointError) as info:
        trainer.resume()
    text = str(info.value)
    assert text.startswith(f"{path}: ") and message in text, text
    assert "\n" not in text and len(text) < 600
    assert trainer.step == 0  # nothing restored


@pytest.mark.parametrize(
    "file, edit, message",
    [
        ("config.json", lambda d: d["config"].update(t="x" * 10**7), "differs in t: 'xxx"),
        (
            "trainer.json",
            lambda d: d["train_config"].update(lr="x" * 10**7),
            "saved with other training settings (lr='xxx",
        ),
    ],
)
def test_a_huge_string_in_a_resumed_checkpoint_is_quoted_short(tmp_path, file, edit, message):
    import json

    from attnkit.train import CheckpointError

    torch.manual_seed(0)
    Trainer(Reverse(), ReverseTask(), _cfg(max_steps=3, eval_every=3), tmp_path).fit()
    path = tmp_path / "checkpoint" / file
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(CheckpointError) as info:
        Trainer(Reverse(), ReverseTask(), _cfg(max_steps=15), tmp_path).resume()
    assert message in str(info.value) and "... (10,000,000 characters)" in str(info.value)
    assert len(str(info.value)) < 600


class Joined(ReverseTask):
    """ReverseTask's batches, every ``k`` consecutive ones of an epoch joined into one."""

    def __init__(self, k, **kw):
        super().__init__(**kw)
        self.k = k

    def batches(self, epoch):
        parts = list(super().batches(epoch))
        for i in range(0, len(parts) - self.k + 1, self.k):
            yield torch.cat(parts[i : i + self.k])


class Uneven(ReverseTask):
    """Batches of 4 to 20 sequences, so that their tokens differ."""

    def batches(self, epoch):
        g = torch.Generator().manual_seed(1000 + epoch)
        for size in (4, 20, 9, 16, 7, 12):
            yield torch.randint(0, self.v, (size, self.t), generator=g)


class UnevenJoined(Uneven):
    def batches(self, epoch):
        parts = list(super().batches(epoch))
        for i in range(0, 6, 3):
            yield torch.cat(parts[i : i + 3])


def _no_dropout():
    model = Reverse()
    model.attn.dropout = 0.0
    return model


@pytest.mark.parametrize(
    "tasks",
    [
        (ReverseTask(batches_per_epoch=9), Joined(3, batches_per_epoch=9)),
        (Uneven(), UnevenJoined()),
    ],
    ids=["equal batches", "batches of unequal tokens"],
)
def test_accumulating_k_batches_equals_one_batch_k_times_larger(tmp_path, tasks):
    small, large = tasks
    torch.manual_seed(0)
    accumulated = _no_dropout()
    torch.manual_seed(0)
    joined = _no_dropout()
    cfg = dict(max_steps=6, eval_every=100, checkpoint_every=100, clip_norm=0.5)
    a = Trainer(accumulated, small, _cfg(accumulate=3, **cfg), tmp_path / "a")
    b = Trainer(joined, large, _cfg(**cfg), tmp_path / "b")
    a.fit()
    b.fit()
    assert a.step == b.step == 6
    for (name, x), y in zip(accumulated.state_dict().items(), joined.state_dict().values()):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6, msg=name)


def test_accumulation_resumes_exactly_and_is_part_of_the_settings(tmp_path):
    torch.manual_seed(0)
    straight = Reverse()
    Trainer(straight, ReverseTask(), _cfg(max_steps=8, accumulate=2), tmp_path / "a").fit()
    torch.manual_seed(0)
    first = Reverse()
    Trainer(first, ReverseTask(), _cfg(max_steps=5, accumulate=2), tmp_path / "b").fit()
    resumed = Reverse()
    trainer = Trainer(resumed, ReverseTask(), _cfg(max_steps=8, accumulate=2), tmp_path / "b")
    trainer.resume()
    trainer.fit()
    for (name, x), y in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(x, y), name
    other = Trainer(Reverse(), ReverseTask(), _cfg(max_steps=8, accumulate=3), tmp_path / "b")
    with pytest.raises(CheckpointError, match="accumulate=2"):
        other.resume()
    with pytest.raises(ValueError, match="accumulate: expected a positive int, got 0"):
        _cfg(accumulate=0)


class Scripted(ReverseTask):
    """Validation scores read from a list, one per validation."""

    def __init__(self, scores):
        super().__init__()
        self.scores = list(scores)

    def evaluate(self, model):
        return {"accuracy": self.scores.pop(0)}


def test_the_best_validation_keeps_its_own_checkpoint(tmp_path):
    torch.manual_seed(0)
    model = Reverse()
    trainer = Trainer(model, Scripted([0.2, 0.7, 0.5, 0.6]), _cfg(max_steps=20), tmp_path)
    snapshots = {}
    original = trainer._validate

    def validate(events):
        snapshots[trainer.step] = {k: v.clone() for k, v in model.state_dict().items()}
        return original(events)

    trainer._validate = validate
    trainer.fit()
    best = load_checkpoint(tmp_path / BEST_DIR)
    assert best.trainer_state == {"step": 10, "metric": "accuracy", "value": 0.7}
    assert best.optimizer_state is None and best.config == {"vocab": 6, "t": 5}
    loaded = Reverse()
    best.load_model(loaded)
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, snapshots[10][name]), name
    assert load_checkpoint(tmp_path / "checkpoint").trainer_state["step"] == 20


def test_keep_best_keeps_the_n_best_validations_and_they_average(tmp_path):
    torch.manual_seed(0)
    task = Scripted([0.2, 0.7, 0.5, 0.6, 0.1, 0.65])
    Trainer(Reverse(), task, _cfg(max_steps=30, keep_best=3), tmp_path).fit()
    kept = best_checkpoints(tmp_path)
    assert [p.name for p in kept] == ["step-00000010", "step-00000030", "step-00000020"]
    assert [load_checkpoint(p).trainer_state["value"] for p in kept] == [0.7, 0.65, 0.6]
    assert best_checkpoints(tmp_path, 2) == kept[:2]
    states = [load_checkpoint(p).model_state for p in kept]
    mean = average_checkpoints(kept)
    for name, tensor in mean.model_state.items():
        expected = sum(s[name].double() for s in states) / 3
        torch.testing.assert_close(tensor, expected.float(), msg=name)
    assert mean.trainer_state["steps"] == [10, 30, 20] and mean.optimizer_state is None


class Tied(ReverseTask):
    """Validation metrics read from a list of dicts, one per validation."""

    def __init__(self, metrics):
        super().__init__()
        self.metrics = list(metrics)

    def evaluate(self, model):
        return self.metrics.pop(0)


TIED = [
    {"accuracy": 0.0, "cer": 4.67},
    {"accuracy": 0.0, "cer": 2.5},
    {"accuracy": 0.0, "cer": 0.86},
    {"accuracy": 0.0, "cer": 0.86},
]


def test_tied_validations_are_ranked_by_the_tiebreak_then_the_latest(tmp_path):
    # exact match stayed 0 while CER fell 4.67 -> 0.86: checkpoint-best kept the first, worst
    trainer = Trainer(
        Reverse(),
        Tied(TIED),
        _cfg(max_steps=20, keep_best=2, tiebreak="-cer", patience=3),
        tmp_path,
    )
    result = trainer.fit()
    best = load_checkpoint(tmp_path / BEST_DIR).trainer_state
    assert best == {
        "step": 20,
        "metric": "accuracy",
        "value": 0.0,
        "tiebreak": "-cer",
        "tiebreak_value": -0.86,
    }
    assert sorted(p.name for p in best_checkpoints(tmp_path)) == ["step-00000015", "step-00000020"]
    # a better CER is progress for early stopping; an equal one is not
    assert result.stopped == "max_steps" and trainer.bad_evals == 1
    without = Trainer(Reverse(), Tied(TIED), _cfg(max_steps=20), tmp_path / "plain")
    without.fit()  # no tie-break: the latest of the tied validations
    assert load_checkpoint(tmp_path / "plain" / BEST_DIR).trainer_state["step"] == 20


def test_a_tiebreak_the_validation_lacks_is_named(tmp_path):
    trainer = Trainer(Reverse(), Tied(TIED), _cfg(max_steps=5, tiebreak="-wer"), tmp_path)
    with pytest.raises(
        KeyError,
        match=r"tiebreak: the task's evaluate\(\) returned "
        r"\['accuracy', 'cer'\], not 'wer'",
    ):
        trainer.fit()


def test_averaging_refuses_checkpoints_of_other_models(tmp_path):
    save_checkpoint(tmp_path / "a", model={"w": torch.zeros(2)}, config={"task": "x"})
    save_checkpoint(tmp_path / "b", model={"w": torch.zeros(3)}, config={"task": "x"})
    save_checkpoint(tmp_path / "c", model={"w": torch.zeros(2)}, config={"task": "y"})
    save_checkpoint(
        tmp_path / "d", model={"w": torch.zeros(2, dtype=torch.int64)}, config={"task": "x"}
    )
    with pytest.raises(CheckpointError, match=r"tensor w is \(3,\) torch.float32, in .* \(2,\)"):
        average_checkpoints([tmp_path / "a", tmp_path / "b"])
    with pytest.raises(CheckpointError, match="another config than"):
        average_checkpoints([tmp_path / "a", tmp_path / "c"])
    with pytest.raises(CheckpointError, match="torch.int64"):
        average_checkpoints([tmp_path / "a", tmp_path / "d"])
    with pytest.raises(CheckpointError, match="no checkpoints of best validations"):
        best_checkpoints(tmp_path)


def test_runs_trained_with_other_augmentation_batching_or_dropout_average(tmp_path):
    model = {"task": "x", "model": {"hidden": 4}}
    configs = {
        "a": {**model, "augment": [{"name": "speed"}], "batching": {"batch_size": 8}},
        "b": {**model, "augment": [], "batching": {"batch_size": 32}},
        "c": {**model, "augment": [], "model": {"hidden": 5}},
        "d": {**model, "data": {"normalize": True}},
        "e": {**model, "model": {"hidden": 4, "dropout": 0.2}},
    }
    for name, config in configs.items():
        save_checkpoint(
            tmp_path / name, model={"w": torch.full((2,), float(ord(name)))}, config=config
        )
    mean = average_checkpoints([tmp_path / "a", tmp_path / "b"])
    assert mean.config == configs["a"]  # the first one's
    assert mean.model_state["w"].tolist() == [97.5, 97.5]
    tuned = average_checkpoints([tmp_path / "a", tmp_path / "e"])  # dropout shapes no weight
    assert tuned.config == configs["a"] and tuned.model_state["w"].tolist() == [99.0, 99.0]
    for other in ("c", "d"):  # another model, another reading of the inputs
        with pytest.raises(CheckpointError, match="another config than"):
            average_checkpoints([tmp_path / "a", tmp_path / other])


def test_runs_fine_tuned_on_other_data_average_but_not_other_input_reading(tmp_path):
    base = {"task": "x", "model": {"hidden": 4}}
    configs = {
        "a": {
            **base,
            "data": {
                "built_in": ["digits"],
                "engines": ["espeak-ng"],
                "n_train": 100,
                "normalize": True,
            },
        },
        "b": {
            **base,
            "data": {
                "built_in": ["digits", "numbers"],
                "n_train": 900,
                "engines": ["espeak-ng", "gnuspeech"],
                "espeak_consonants": [15, 100],
                "normalize": True,
            },
        },
        "c": {
            **base,
            "data": {
                "built_in": ["digits"],
                "engines": ["espeak-ng"],
                "n_train": 100,
                "normalize": False,
            },
        },
    }
    for name, config in configs.items():
        save_checkpoint(
            tmp_path / name, model={"w": torch.full((2,), float(ord(name)))}, config=config
        )
    mean = average_checkpoints([tmp_path / "a", tmp_path / "b"])
    assert mean.config == configs["a"] and mean.model_state["w"].tolist() == [97.5, 97.5]
    with pytest.raises(CheckpointError, match="another config than"):
        average_checkpoints([tmp_path / "a", tmp_path / "c"])


def test_the_last_steps_model_is_kept_when_its_final_evaluation_is_the_best(tmp_path, caplog):
    torch.manual_seed(0)
    trainer = Trainer(Reverse(), Scripted([0.2, 0.5, 0.9]), _cfg(max_steps=12), tmp_path)
    with caplog.at_level("INFO", logger="attnkit"):
        trainer.fit()  # validations at steps 5 and 10
        assert f"best accuracy so far (0.5) at step 10: {tmp_path / BEST_DIR}" in caplog.text
        assert load_checkpoint(tmp_path / BEST_DIR).trainer_state["step"] == 10
        trainer.keep_final(trainer.evaluate())  # 0.9 after step 12
    assert f"best accuracy (0.9) after the last step 12: {tmp_path / BEST_DIR}" in caplog.text
    assert load_checkpoint(tmp_path / BEST_DIR).trainer_state == {
        "step": 12,
        "metric": "accuracy",
        "value": 0.9,
    }
    assert [(h["step"], h["accuracy"]) for h in trainer.history] == [(5, 0.2), (10, 0.5), (12, 0.9)]
    done = Trainer(Reverse(), Scripted([0.2, 0.5]), _cfg(max_steps=10), tmp_path / "b")
    done.fit()
    done.keep_final({"accuracy": 0.99})  # step 10 was validated: nothing more to keep
    assert load_checkpoint(tmp_path / "b" / BEST_DIR).trainer_state["value"] == 0.5
    assert [h["step"] for h in done.history] == [5, 10]


def _kept_values(run):
    return {
        p.name: load_checkpoint(p).trainer_state["value"]
        for p in sorted((run / "best").glob("step-*"))
    }


def test_a_displaced_kept_model_is_removed_atomically(tmp_path, monkeypatch):
    # issue 57: a kill inside the removal of a displaced kept model left a half-deleted
    # best/step-N that made every --resume die at its first validation
    torch.manual_seed(0)
    Trainer(Reverse(), Scripted([0.2, 0.7]), _cfg(max_steps=10, keep_best=2), tmp_path).fit()
    real = shutil.rmtree

    def killed(path, *args, **kwargs):  # the kill comes after one file is gone
        next(p for p in Path(path).iterdir() if p.is_file()).unlink()
        raise SystemExit("killed")

    monkeypatch.setattr(shutil, "rmtree", killed)
    trainer = Trainer(Reverse(), Scripted([0.5]), _cfg(max_steps=15, keep_best=2), tmp_path)
    trainer.resume()
    with pytest.raises(SystemExit):
        trainer.fit()  # step 15's 0.5 displaces step 5's 0.2
    monkeypatch.setattr(shutil, "rmtree", real)
    assert _kept_values(tmp_path) == {"step-00000010": 0.7, "step-00000015": 0.5}
    assert [p.name.split(".attnkit-tmp-")[0] for p in (tmp_path / "best").glob(".*")] == [
        ".step-00000005"
    ]  # the half-deleted copy, under a name no reader lists
    resumed = Trainer(Reverse(), Scripted([0.6]), _cfg(max_steps=15, keep_best=2), tmp_path)
    resumed.resume()  # at step 10: the kill came before step 15's save
    resumed.fit()  # step 15 validated again: its model replaces the one kept before the kill
    assert _kept_values(tmp_path) == {"step-00000010": 0.7, "step-00000015": 0.6}
    assert sorted(p.name for p in (tmp_path / "best").iterdir()) == [
        "step-00000010",
        "step-00000015",
    ]  # the leftover was deleted


def test_a_half_deleted_kept_model_is_skipped_and_cleaned_up(tmp_path, caplog):
    # what a kill inside the former non-atomic removal left: a step-N missing its weights
    torch.manual_seed(0)
    Trainer(Reverse(), Scripted([0.2, 0.7]), _cfg(max_steps=10, keep_best=2), tmp_path).fit()
    (tmp_path / "best" / "step-00000005" / "model.safetensors").unlink()
    with caplog.at_level("WARNING", logger="attnkit"):
        assert best_checkpoints(tmp_path) == [tmp_path / "best" / "step-00000010"]
    assert "step-00000005: skipped, unreadable" in caplog.text
    assert (tmp_path / "best" / "step-00000005").exists()  # reading deletes nothing
    caplog.clear()
    trainer = Trainer(Reverse(), Scripted([0.5]), _cfg(max_steps=15, keep_best=2), tmp_path)
    trainer.resume()
    with caplog.at_level("WARNING", logger="attnkit"):
        trainer.fit()  # died here at the first validation
    assert "step-00000005: removed, unreadable" in caplog.text
    assert sorted((tmp_path / "best").iterdir()) == [
        tmp_path / "best" / "step-00000010",
        tmp_path / "best" / "step-00000015",
    ]


def test_accumulate_is_bounded():
    assert _cfg(accumulate=4096).accumulate == 4096
    with pytest.raises(
        ValueError,
        match=r"accumulate: expected a positive int at most 4096 "
        r"\(batches per optimizer step\), got 1000000000000",
    ):
        _cfg(accumulate=10**12)


def test_a_signal_mid_accumulation_stops_after_that_batch_and_resumes_exactly(tmp_path):
    # issue 57: a stop request was looked at only after an optimizer step, so Ctrl-C waited
    # for K batches; now after every batch, the partial accumulation discarded
    torch.manual_seed(0)
    straight = Reverse()
    Trainer(straight, ReverseTask(), _cfg(max_steps=6, accumulate=3), tmp_path / "a").fit()
    task, calls = ReverseTask(), []
    original = task.loss

    def loss(model, batch, step):
        calls.append(step)
        if len(calls) == 5:  # the second batch of the second step
            signal.raise_signal(signal.SIGTERM)
        return original(model, batch, step)

    task.loss = loss
    torch.manual_seed(0)
    result = Trainer(Reverse(), task, _cfg(max_steps=6, accumulate=3), tmp_path / "b").fit()
    assert len(calls) == 5  # stopped after the batch it came in, not the step's third
    assert result.stopped == "signal" and result.step == 1
    state = load_checkpoint(tmp_path / "b" / "checkpoint").trainer_state
    assert (state["step"], state["epoch"], state["batch_in_epoch"]) == (1, 0, 3)
    resumed = Reverse()
    trainer = Trainer(resumed, ReverseTask(), _cfg(max_steps=6, accumulate=3), tmp_path / "b")
    trainer.resume()
    trainer.fit()
    for (name, x), y in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(x, y), name  # dropout's random draws rewound too


def test_a_minimised_metric_keeps_the_validation_of_the_lowest_value(tmp_path):
    # "-cer": checkpoint-best is the validation of the lowest CER; a later, higher CER is not
    # progress, so patience 1 stops after it
    falling_then_rising = [{"accuracy": 0.0, "cer": c} for c in (4.0, 1.5, 2.0, 3.0)]
    trainer = Trainer(
        Reverse(),
        Tied(falling_then_rising),
        _cfg(max_steps=20, metric="-cer", patience=1),
        tmp_path,
    )
    result = trainer.fit()
    best = load_checkpoint(tmp_path / BEST_DIR).trainer_state
    assert best == {"step": 10, "metric": "-cer", "value": -1.5}
    assert result.stopped == "early_stopping" and result.best == -1.5
