"""The model registry: every model rebuilt from its config, with the same weights' shapes."""

import inspect
import json

import pytest
import torch

from attnkit.models import (
    CRNN,
    LAS,
    MODELS,
    VQA,
    Captioner,
    CharLM,
    Seq2Seq,
    Transformer,
    build_model,
    model_config,
    model_shapes,
    registry,
)
from attnkit.models.registry import Model

BUILT = [
    lambda: Seq2Seq(11, 13, kind="luong", score="dot", emb=8, hidden=12),
    lambda: Seq2Seq(11, 13, kind="none", emb=8, hidden=12),
    lambda: Transformer(10, 12, d_model=16, heads=2, layers=1),
    lambda: CRNN(12, channels=(4, 4, 8, 8, 8), hidden=8, attention="window", window=3),
    lambda: LAS(10, features=8, listener_hidden=8, hidden=16, emb=8, key_value_dim=8),
    lambda: LAS(
        10,
        features=8,
        listener_hidden=8,
        hidden=16,
        emb=8,
        key_value_dim=8,
        alignment="mocha",
        alignment_options={"chunk": 3},
    ),
    lambda: CRNN(
        12,
        channels=(4, 4, 8, 8, 8),
        hidden=8,
        head="attention",
        ctc=True,
        dec_score="location",
        dec_alignment="softmax",
    ),
    lambda: CharLM(10, emb=4, hidden=8, layers=2),
    lambda: Captioner(
        9, image_size=16, channels=(4, 8), hidden=8, emb=8, attn_dim=8, attention="hard"
    ),
    lambda: VQA(9, 5, image_size=16, channels=(4, 8), emb=8, hidden=8, attn_dim=8, hops=3),
    lambda: VQA(9, 5, image_size=16, channels=(4, 8), emb=8, hidden=8, kind="none"),
]


def test_every_model_is_registered_by_its_name():
    assert {"seq2seq", "transformer", "crnn", "las", "captioner", "vqa"} <= set(MODELS)
    assert MODELS["las"] is LAS and LAS.model_name == "las"


@pytest.mark.parametrize("make", BUILT, ids=lambda m: m().model_name)
def test_config_round_trips_through_json_and_rebuilds_the_same_model(make):
    model = make()
    config = json.loads(json.dumps(model_config(model)))  # as a checkpoint stores it
    rebuilt = build_model(config)
    assert type(rebuilt) is type(model)
    assert model_config(rebuilt) == config
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {
        k: v.shape for k, v in model.state_dict().items()
    }
    rebuilt.load_state_dict(model.state_dict())


def test_config_records_defaults_and_positional_arguments():
    config = model_config(Seq2Seq(11, 13, hidden=12))
    assert config["name"] == "seq2seq"
    assert config["src_vocab"] == 11 and config["tgt_vocab"] == 13 and config["hidden"] == 12
    assert config["kind"] == "bahdanau" and config["emb"] == 64  # defaults recorded
    assert model_config(CRNN(12, channels=(4, 4, 8, 8, 8)))["channels"] == [4, 4, 8, 8, 8]


@pytest.mark.parametrize(
    "config, match",
    [
        ([], "model config: expected a dict, got list"),
        (
            {"kind": "bahdanau"},
            "model config: 'name' must be one of captioner, char_lm, crnn, las, "
            "seq2seq, transformer, vqa, got None",
        ),
        ({"name": "gpt"}, "'name' must be one of .*got 'gpt'"),
        (
            {"name": "seq2seq", "src_vocab": 5, "tgt_vocab": 5, "hiden": 3, "x": 1},
            "model config: seq2seq takes no argument hiden, x",
        ),
        ({"name": "seq2seq", "src_vocab": 5}, "model config: seq2seq needs tgt_vocab"),
        (
            {"name": "crnn", "vocab": 5, "channels": [4, "4"]},
            r"model config: channels: expected a list of int, got \[4, '4'\] \(list\)",
        ),
        (
            {"name": "las", "vocab": 5, "attn_dim": 2.5},
            r"model config: attn_dim: expected int or null, got 2.5 \(float\)",
        ),
        (
            {"name": "las", "vocab": 5, "dropout": float("inf")},
            r"model config: dropout: expected float, got inf \(float\)",
        ),
        ({"name": "las", "vocab": True}, r"model config: vocab: expected int, got True \(bool\)"),
    ],
)
def test_bad_configs_are_refused_naming_what_is_wrong(config, match):
    with pytest.raises(ValueError, match=match):
        build_model(config)


def test_shapes_come_from_the_meta_device_whatever_the_sizes():
    small = Seq2Seq(3, 7, emb=5, hidden=4)
    assert model_shapes(model_config(small)) == {
        k: tuple(v.shape) for k, v in small.state_dict().items()
    }
    huge = model_shapes(
        {"name": "seq2seq", "src_vocab": 10**9, "tgt_vocab": 7, "emb": 10**6, "hidden": 4}
    )
    assert huge["encoder.embed.weight"] == (10**9, 10**6)  # 4 PB of float32: never allocated
    with pytest.raises(
        ValueError,
        match=r"model config: crnn cannot be built from it: "
        r"window: expected a positive int, got 0",
    ):
        model_shapes({"name": "crnn", "vocab": 5, "attention": "window", "window": 0})


def test_config_of_an_unregistered_module_is_refused():
    with pytest.raises(TypeError, match="model: expected a model of the registry .*got Linear"):
        model_config(torch.nn.Linear(2, 2))


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="name: a model named 'crnn' is already registered"):

        class Other(Model, name="crnn"):
            pass


def test_a_model_too_big_for_the_memory_is_refused_before_anything_is_allocated(monkeypatch):
    monkeypatch.setattr(registry, "available_memory", lambda device: 2**30)  # 1 GiB free
    config = {"name": "seq2seq", "src_vocab": 40, "tgt_vocab": 40, "hidden": 100_000}
    with pytest.raises(
        ValueError,
        match=r"^model config: seq2seq has [\d,]+ parameters "
        r"\([\d.]+ GiB in float32\), more than the 1.0 GiB of memory available "
        r"\(hidden=100000\)$",
    ):
        build_model(config)
    assert isinstance(build_model({**config, "hidden": 16}), Model)  # one that fits is built


@pytest.mark.parametrize("make", BUILT)
def test_complete_config_fills_in_the_defaults_a_built_model_records(make):
    full = model_config(make())
    cls = MODELS[full["name"]]
    defaults = {
        k: json.loads(json.dumps(p.default))
        for k, p in inspect.signature(cls).parameters.items()
        if p.default is not p.empty
    }
    given = {k: v for k, v in full.items() if k not in defaults or defaults[k] != v}
    assert len(given) < len(full)  # some arguments are left at their defaults
    assert registry.complete_config(given) == full
    assert registry.complete_config(full) == full


def test_complete_config_refuses_what_check_config_refuses():
    with pytest.raises(ValueError, match="model config: crnn takes no argument colour"):
        registry.complete_config({"name": "crnn", "vocab": 5, "colour": "red"})
