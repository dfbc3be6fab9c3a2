"""The shared training loop on a tiny attention task."""

import signal

import pytest
import torch
from torch import nn

from attnkit import Attention
from attnkit.train import TrainConfig, Trainer, load_checkpoint, lr_factor


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
    base = dict(max_steps=20, lr=3e-2, warmup_steps=3, eval_every=5, checkpoint_every=5,
                progress=False, seed=7)
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
    assert result.stopped == "signal" and result.step == 4
    assert load_checkpoint(tmp_path / "checkpoint").trainer_state["step"] == 4
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handler restored


def test_early_stopping_and_time_budget(tmp_path):
    torch.manual_seed(0)
    result = Trainer(Reverse(), ReverseTask(), _cfg(max_steps=500, lr=1e-9, eval_every=2,
                                                    patience=3), tmp_path / "a").fit()
    assert result.stopped == "early_stopping" and result.step == 8
    result = Trainer(Reverse(), ReverseTask(), _cfg(max_steps=10**6, time_budget_s=0.5),
                     tmp_path / "b").fit()
    assert result.stopped == "time_budget" and 0 < result.step < 10**6


def test_schedules():
    cfg = _cfg(max_steps=100, warmup_steps=10)
    assert [round(lr_factor(s, cfg), 3) for s in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert lr_factor(39, cfg) == pytest.approx(0.5)  # inverse sqrt: sqrt(10 / 40)
    cos = _cfg(max_steps=110, warmup_steps=10, schedule="cosine")
    assert lr_factor(10, cos) == pytest.approx(1.0) and lr_factor(60, cos) == pytest.approx(0.5)
    assert 0 < lr_factor(109, cos) < 1e-3  # the last step still learns
    assert lr_factor(110, cos) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="^schedule: expected constant, inverse_sqrt or cosine"):
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
    with pytest.raises(CheckpointError, match=r"saved for another task set-up \(differs in "
                                              r"vocab\)"):
        Trainer(Reverse(vocab=5), other, _cfg(max_steps=10), tmp_path).resume()
    with pytest.raises(ValueError, match="^patience: expected a positive int or None, got 0"):
        TrainConfig(patience=0)
