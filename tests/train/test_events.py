"""TensorBoard event files: every run writes its scalars and pictures, read back with
tensorboard's own event reader."""

import errno
import os
import socket
import time

import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from attnkit.diagnose.plots import plot_attention
from attnkit.train import Trainer, load_checkpoint
from attnkit.train.events import Events
from tests.train.test_loop import Reverse, ReverseTask, _cfg


class PicturedReverse(ReverseTask):
    def pictures(self, model, folder, n):
        weights = torch.softmax(torch.randn(n, 5, 5), -1)
        return [
            plot_attention(w, None, None, folder / f"reverse_{i}.png")
            for i, w in enumerate(weights)
        ]


def _events(folder):
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    return events


def test_a_run_writes_losses_rates_metrics_and_pictures(tmp_path):
    torch.manual_seed(0)
    result = Trainer(Reverse(), PicturedReverse(), _cfg(max_steps=12, eval_every=5), tmp_path).fit()
    events = _events(tmp_path)
    tags = events.Tags()
    assert {"train/loss", "train/lr", "train/tokens_per_s", "valid/accuracy"} <= set(
        tags["scalars"]
    )
    assert [e.step for e in events.Scalars("train/loss")] == list(range(1, 13))
    assert [e.value for e in events.Scalars("valid/accuracy")] == [
        h["accuracy"] for h in result.history
    ]
    assert [e.step for e in events.Scalars("valid/accuracy")] == [5, 10]
    lrs = [e.value for e in events.Scalars("train/lr")]
    assert lrs[0] < lrs[2] and abs(lrs[2] - 3e-2) < 1e-9  # warm-up over 3 steps, then decay
    assert all(e.value > 0 for e in events.Scalars("train/tokens_per_s"))
    assert set(tags["images"]) == {"attention/reverse_0", "attention/reverse_1"}
    image = events.Images("attention/reverse_0")
    assert [e.step for e in image] == [5, 10] and image[0].width > 50


def test_a_resumed_run_continues_its_curves(tmp_path):
    torch.manual_seed(0)
    Trainer(Reverse(), ReverseTask(), _cfg(max_steps=8), tmp_path).fit()
    trainer = Trainer(Reverse(), ReverseTask(), _cfg(max_steps=14), tmp_path)
    trainer.resume()
    trainer.fit()
    steps = [e.step for e in _events(tmp_path).Scalars("train/loss")]
    assert steps == list(range(1, 15))


def test_a_resumed_runs_events_sort_after_a_file_written_in_the_same_second(tmp_path):
    # within one second and one process the file counter sorts as text: ".10" before ".9"
    earlier = tmp_path / (
        f"events.out.tfevents.{int(time.time()):010d}."
        f"{socket.gethostname()}.{os.getpid()}.9999999999"
    )
    earlier.write_bytes(b"")
    events = Events(tmp_path, step=8)
    events.close()
    names = sorted(p.name for p in tmp_path.glob("events.out.tfevents.*"))
    assert len(names) == 2 and names[0] == earlier.name


def test_a_full_disk_ends_the_events_not_the_training(tmp_path, monkeypatch, caplog):
    # the steps since the last checkpoint were lost with the events: an OSError traceback
    from torch.utils.tensorboard import SummaryWriter

    calls = []

    def full(self, tag, *args, **kwargs):
        calls.append(tag)
        if len(calls) > 6:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(SummaryWriter, "add_scalar", full)
    torch.manual_seed(0)
    result = Trainer(
        Reverse(),
        PicturedReverse(),
        _cfg(max_steps=12, eval_every=5, checkpoint_every=100),
        tmp_path,
    ).fit()
    assert (
        result.step == 12 and load_checkpoint(tmp_path / "checkpoint").trainer_state["step"] == 12
    )
    assert len(calls) == 7  # nothing written after the first failure
    warned = [r.getMessage() for r in caplog.records if "TensorBoard" in r.getMessage()]
    assert warned == [
        f"{tmp_path}: cannot write TensorBoard events (No space left on device); "
        "the training goes on without them"
    ]


def test_pictures_that_cannot_be_drawn_end_the_events_not_the_training(tmp_path, caplog):
    class Unwritable(ReverseTask):
        def pictures(self, model, folder, n):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(folder))

    torch.manual_seed(0)
    result = Trainer(Reverse(), Unwritable(), _cfg(max_steps=12, eval_every=5), tmp_path).fit()
    assert result.step == 12 and [h["step"] for h in result.history] == [5, 10]
    assert "cannot write TensorBoard events (Permission denied)" in caplog.text
    steps = [e.step for e in _events(tmp_path).Scalars("train/loss")]
    assert steps == list(range(1, 5))  # step 5 validates before its scalars are written
