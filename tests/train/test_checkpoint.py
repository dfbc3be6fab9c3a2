"""Checkpoints: exact round trip, atomic writes, clear errors, no pickle."""

import errno
import json
import os

import pytest
import torch
from safetensors import SafetensorError
from torch import nn

from attnkit import Attention, folders
from attnkit.train import CheckpointError, load_checkpoint, save_checkpoint
from attnkit.train import checkpoint as ckpt_mod


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(7, 8)
        self.attn = Attention(8, score="additive")
        self.out = nn.Linear(8, 7)
        self.out.weight = self.emb.weight  # tied weights

    def forward(self, x):
        h = self.emb(x)
        return self.out(self.attn(h, h).context)


def _train(model, opt, steps, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randint(0, 7, (4, 5), generator=g)
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), x.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_round_trip_resumes_training_exactly(tmp_path):
    torch.manual_seed(0)
    model = Tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _train(model, opt, 3, seed=1)
    vocab = {"tokens": ["<pad>", "a", "é", "中"]}
    path = save_checkpoint(
        tmp_path / "ck",
        model=model,
        config={"dim": 8},
        vocab=vocab,
        optimizer=opt,
        trainer_state={"step": 3, "best": 0.5},
    )
    ck = load_checkpoint(path)
    assert ck.config == {"dim": 8} and ck.vocab == vocab
    assert ck.trainer_state == {"step": 3, "best": 0.5}

    torch.manual_seed(123)
    resumed = Tiny()
    ck.load_model(resumed)
    opt2 = torch.optim.AdamW(resumed.parameters(), lr=1e-2)
    opt2.load_state_dict(ck.optimizer_state)
    assert resumed.out.weight is resumed.emb.weight
    _train(model, opt, 2, seed=2)
    _train(resumed, opt2, 2, seed=2)
    for a, b in zip(model.state_dict().values(), resumed.state_dict().values()):
        assert torch.equal(a, b)


def test_overwrite_is_atomic_and_leaves_no_temporary_files(tmp_path, monkeypatch):
    model = Tiny()
    save_checkpoint(tmp_path / "ck", model=model, config={"version": "first"})
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _train(model, opt, 1, seed=0)

    def full(*args, **kwargs):  # what safetensors raises on a full disk
        raise SafetensorError(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        )

    def full_json(path, value):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ckpt_mod, "save_file", full)
    with pytest.raises(
        CheckpointError,
        match=r"ck/model.safetensors: not saved \(No space left "
        r"on device\); the checkpoint already there is "
        r"kept$",
    ):
        save_checkpoint(tmp_path / "ck", model=model, config={"version": "second"}, optimizer=opt)
    monkeypatch.setattr(ckpt_mod, "_write_json", full_json)
    with pytest.raises(
        CheckpointError,
        match=r"ck/config.json: not saved \(No space left on "
        r"device\)",
    ):
        save_checkpoint(tmp_path / "ck", model=model, config={"version": "second"}, optimizer=opt)
    assert load_checkpoint(tmp_path / "ck").config == {"version": "first"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
    monkeypatch.undo()
    save_checkpoint(tmp_path / "ck", model=model, config={"version": "second"}, optimizer=opt)
    assert load_checkpoint(tmp_path / "ck").config == {"version": "second"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_non_finite_weights_or_optimizer_state_are_never_saved(tmp_path):
    model = Tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _train(model, opt, 1, seed=0)
    save_checkpoint(tmp_path / "ck", model=model, config={"n": 1}, optimizer=opt)
    with torch.no_grad():
        model.attn.score.v[0] = float("nan")
    with pytest.raises(
        CheckpointError,
        match=r"ck: not saved: 1 weight tensors hold NaN or "
        r"infinite values \(attn.score.v\)",
    ):
        save_checkpoint(tmp_path / "ck", model=model, config={"n": 2}, optimizer=opt)
    with torch.no_grad():
        model.attn.score.v[0] = 0.0
    next(iter(opt.state.values()))["exp_avg"].view(-1)[0] = float("inf")
    with pytest.raises(
        CheckpointError,
        match=r"ck: not saved: 1 optimizer tensors hold NaN or "
        r"infinite values \(state.0.exp_avg\)",
    ):
        save_checkpoint(tmp_path / "ck", model=model, config={"n": 2}, optimizer=opt)
    assert load_checkpoint(tmp_path / "ck").config == {"n": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_a_checkpoint_that_is_a_link_is_saved_at_its_target(tmp_path):
    (tmp_path / "disk").mkdir()
    save_checkpoint(tmp_path / "disk" / "ck", model=Tiny(), config={"n": 1})
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint").symlink_to(tmp_path / "disk" / "ck")
    for n in (2, 3):
        save_checkpoint(tmp_path / "run" / "checkpoint", model=Tiny(), config={"n": n})
        assert ckpt_mod.recover_checkpoint(tmp_path / "run" / "checkpoint") is not None
    assert (tmp_path / "run" / "checkpoint").is_symlink()
    assert load_checkpoint(tmp_path / "run" / "checkpoint").config == {"n": 3}
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["checkpoint"]
    assert sorted(p.name for p in (tmp_path / "disk").iterdir()) == ["ck"]


def test_load_model_names_every_mismatch(tmp_path):
    save_checkpoint(tmp_path / "ck", model=Attention(8, score="general"), config={})
    ck = load_checkpoint(tmp_path / "ck")
    with pytest.raises(
        CheckpointError,
        match=r"shape mismatch score.weight: checkpoint "
        r"\(1, 8, 8\), model \(1, 6, 6\)",
    ):
        ck.load_model(Attention(6, score="general"))
    with pytest.raises(
        CheckpointError,
        match=r"missing score.v, score.w_key, score.w_query "
        r"\| unexpected score.weight",
    ):
        ck.load_model(Attention(8, score="additive"))


def test_corrupt_or_foreign_checkpoints_get_clear_errors(tmp_path):
    with pytest.raises(CheckpointError, match="no such checkpoint directory"):
        load_checkpoint(tmp_path / "nothing")
    path = save_checkpoint(tmp_path / "ck", model=Tiny(), config={})
    (path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"config.json: not valid JSON"):
        load_checkpoint(path)
    (path / "config.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(CheckpointError, match=r"config.json: not an attnkit checkpoint"):
        load_checkpoint(path)
    (path / "config.json").write_text(json.dumps({"format": "attnkit-checkpoint", "version": 9}))
    with pytest.raises(CheckpointError, match=r"checkpoint version 9 is not supported"):
        load_checkpoint(path)
    (path / "config.json").write_text(json.dumps({"format": "attnkit-checkpoint", "version": 1}))
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model.safetensors: not a readable safetensors"):
        load_checkpoint(path)
    (path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model.safetensors: missing"):
        load_checkpoint(path)


def test_a_pickle_in_place_of_the_weights_is_refused_not_run(tmp_path):
    path = save_checkpoint(tmp_path / "ck", model=Tiny(), config={})
    torch.save({"x": torch.zeros(1)}, path / "model.safetensors")  # a pickle archive
    with pytest.raises(CheckpointError, match="not a readable safetensors"):
        load_checkpoint(path)


class Killed(BaseException):
    """The process dying at this point: nothing after it runs (no ``except`` catches it)."""


def test_a_save_killed_at_any_point_leaves_a_complete_checkpoint(tmp_path, monkeypatch):
    """Kill the second save before each of its renames and deletions in turn: the newest
    complete copy is read, and recover_checkpoint puts it in place and deletes the rest."""
    model = Tiny()
    cut = 0
    while True:
        cut += 1
        folder = tmp_path / f"cut{cut}"
        save_checkpoint(folder / "ck", model=model, config={"n": 1})
        calls = []

        def killed_at(real, calls=calls, cut=cut):
            def op(*args, **kwargs):
                calls.append(args)
                if len(calls) == cut:
                    raise Killed
                return real(*args, **kwargs)

            return op

        monkeypatch.setattr(folders.os, "replace", killed_at(folders.os.replace))
        monkeypatch.setattr(folders.shutil, "rmtree", killed_at(folders.shutil.rmtree))
        try:
            save_checkpoint(folder / "ck", model=model, config={"n": 2})
            finished = True
        except Killed:
            finished = False
        monkeypatch.undo()
        read = load_checkpoint(folder / "ck").config["n"]
        assert read == 2 or not finished
        assert ckpt_mod.recover_checkpoint(folder / "ck") == folder / "ck"
        assert sorted(p.name for p in folder.iterdir()) == ["ck"], cut
        assert load_checkpoint(folder / "ck").config["n"] == read
        if finished:
            break
    assert cut > 4  # every rename and deletion of the swap was cut once


def test_recover_restores_the_moved_aside_copy_and_removes_killed_saves(tmp_path):
    save_checkpoint(tmp_path / "ck", model=Tiny(), config={"n": 1})
    (tmp_path / "ck").rename(tmp_path / ".ck.attnkit-old")  # killed between the renames
    partial = tmp_path / ".ck.attnkit-tmp-k2j4h6g8"  # a save killed while writing its files
    partial.mkdir()
    (partial / "config.json").write_text("{")
    theirs = [
        ".ck.old",
        ".ck.new",
        ".ck.k2j4h6g8",
        ".ck.backup",
        ".ck.attnkit-tmp-backup",
        ".ck.attnkit-tmp-k2j4h6g8x",
    ]  # not attnkit's names: never deleted
    for name in theirs:
        (tmp_path / name).mkdir()
    assert load_checkpoint(tmp_path / "ck").config == {"n": 1}
    assert ckpt_mod.recover_checkpoint(tmp_path / "ck") == tmp_path / "ck"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ck", *theirs])
    for name in theirs:
        (tmp_path / name).rmdir()
    assert load_checkpoint(tmp_path / "ck").config == {"n": 1}
    assert ckpt_mod.recover_checkpoint(tmp_path / "none") is None


def test_malformed_config_optimizer_or_trainer_files_are_named(tmp_path):
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _train(model, opt, 1, seed=0)
    path = save_checkpoint(
        tmp_path / "ck", model=model, config={}, optimizer=opt, trainer_state={"step": 1}
    )
    (path / "optimizer.json").write_text(json.dumps({"state": [1, 2]}))
    with pytest.raises(CheckpointError, match=r"ck: optimizer state not in the attnkit layout"):
        load_checkpoint(path)
    (path / "optimizer.json").unlink()
    (path / "trainer.json").write_text("[1]")
    with pytest.raises(CheckpointError, match=r"trainer.json: must be a JSON object, got list"):
        load_checkpoint(path)
    (path / "config.json").write_text(
        json.dumps({"format": "attnkit-checkpoint", "version": 1, "config": "seq2seq"})
    )
    with pytest.raises(CheckpointError, match=r"config.json: 'config' must be a JSON object"):
        load_checkpoint(path)


@pytest.mark.parametrize("name", ["config.json", "vocab.json", "trainer.json", "optimizer.json"])
@pytest.mark.parametrize("depth", [200_000, 40])
def test_json_nested_too_deep_is_refused_naming_the_file(tmp_path, name, depth):
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _train(model, opt, 1, seed=0)
    path = save_checkpoint(
        tmp_path / "ck",
        model=model,
        config={},
        vocab={"a": 1},
        optimizer=opt,
        trainer_state={"step": 1},
    )
    (path / name).write_text("[" * depth + "]" * depth)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert (
        str(info.value) == f"{path / name}: JSON nested deeper than 32 levels (attnkit "
        "writes at most a few)"
    )


def test_json_numbers_python_cannot_read_are_refused_naming_the_file(tmp_path):
    path = save_checkpoint(tmp_path / "ck", model=Tiny(), config={})
    (path / "config.json").write_text('{"config": ' + "9" * 5000 + "}")
    with pytest.raises(CheckpointError, match=r"config.json: not valid JSON \(Exceeds the limit"):
        load_checkpoint(path)


@pytest.mark.parametrize(
    "name",
    [
        "config.json",
        "model.safetensors",
        "vocab.json",
        "trainer.json",
        "optimizer.json",
        "optimizer.safetensors",
    ],
)
def test_a_checkpoint_file_that_is_a_fifo_or_a_folder_is_refused_before_it_is_opened(
    tmp_path, name
):
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _train(model, opt, 1, seed=0)
    path = save_checkpoint(
        tmp_path / "ck",
        model=model,
        config={},
        vocab={"a": 1},
        optimizer=opt,
        trainer_state={"step": 1},
    )
    (path / name).unlink()
    os.mkfifo(path / name)  # opening it would wait for a writer for ever
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert str(info.value) == f"{path / name}: not a regular file (a FIFO)"
    (path / name).unlink()
    (path / name).mkdir()
    with pytest.raises(CheckpointError, match=r": not a regular file \(a folder\)$"):
        load_checkpoint(path)
