"""Checkpoints from elsewhere: every bad config, vocabulary or weight file is one line of error,
found before anything is built."""

import base64
import json
import re
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from attnkit.cli.main import main


@pytest.fixture
def checkpoint(tiny_translator, tmp_path):
    return shutil.copytree(tiny_translator, tmp_path / "checkpoint")


def _edit_json(path, edit):
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _refused(checkpoint, capsys, message):
    assert main(["translate", "--checkpoint", str(checkpoint), "<en> one"]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.startswith("attnkit: ") and err.count("\n") == 1, err  # one line, no traceback


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("hidden", 1e9, "hidden: expected int, got 1000000000.0 (float)"),
        ("hidden", "128", "hidden: expected int, got '128' (str)"),
        ("hidden", [8], "hidden: expected int, got [8] (list)"),
        ("dropout", [0.1], "dropout: expected float, got [0.1] (list)"),
        ("kind", 3, "kind: expected str, got 3 (int)"),
        ("src_vocab", 11.5, "src_vocab: expected int, got 11.5 (float)"),
        ("input_feeding", "yes", "input_feeding: expected bool, got 'yes' (str)"),
        ("attn_dim", {"a": 1}, "attn_dim: expected int or null, got {'a': 1} (dict)"),
        ("kind", "gpt", "seq2seq cannot be built from it: kind: expected one of"),
        (
            "name",
            "gpt",
            "'name' must be one of captioner, char_lm, crnn, las, seq2seq, transformer, vqa, "
            "got 'gpt'",
        ),
        ("hiden", 8, "seq2seq takes no argument hiden"),
    ],
)
def test_bad_model_config_values_are_named(checkpoint, capsys, key, value, message):
    _edit_json(checkpoint / "config.json", lambda d: d["config"]["model"].update({key: value}))
    _refused(checkpoint, capsys, message)


@pytest.mark.parametrize("key, value", [("hidden", 10**9), ("emb", 10**9), ("hidden", -3)])
def test_a_config_asking_for_a_huge_model_is_refused_without_building_it(
    checkpoint, capsys, monkeypatch, key, value
):
    def no_build(config):
        raise AssertionError("the model was built")

    monkeypatch.setattr("attnkit.tasks.loading.build_model", no_build)
    _edit_json(checkpoint / "config.json", lambda d: d["config"]["model"].update({key: value}))
    assert main(["translate", "--checkpoint", str(checkpoint), "<en> one"]) == 2
    err = capsys.readouterr().err
    assert (
        "config.json: model config: seq2seq cannot be built" in err
        or "the weights do not fit this model" in err
    )
    assert err.count("\n") == 1


def test_a_vocabulary_size_beyond_the_weights_is_refused(checkpoint, capsys):
    def huge(d):
        d["config"]["model"]["tgt_vocab"] = 10**10

    _edit_json(checkpoint / "config.json", huge)
    _refused(
        checkpoint,
        capsys,
        "the tgt vocabulary has 12 entries, the model's config says tgt_vocab=10000000000",
    )


def test_weights_of_other_shapes_are_listed(checkpoint, capsys):
    state = load_file(str(checkpoint / "model.safetensors"))
    state["decoder.out.weight"] = torch.zeros(3, 3)
    save_file(state, str(checkpoint / "model.safetensors"))
    _refused(checkpoint, capsys, "shape mismatch decoder.out.weight: checkpoint (3, 3)")


def test_a_task_setting_of_the_wrong_type_is_named(checkpoint, capsys):
    _edit_json(checkpoint / "config.json", lambda d: d["config"].update(max_len_extra=1e12))
    _refused(checkpoint, capsys, "max_len_extra: expected a non-negative int, got 1000000000000.0")


def test_a_garbage_sentencepiece_model_is_refused(checkpoint, capsys):
    garbage = base64.b64encode(b"\x0a\x05hello not a model").decode()
    _edit_json(
        checkpoint / "vocab.json",
        lambda d: d.update(src={"type": "sentencepiece", "model": garbage}),
    )
    _refused(checkpoint, capsys, "vocab.json: src vocabulary: model: not a SentencePiece model")
    _edit_json(
        checkpoint / "vocab.json",
        lambda d: d.update(src={"type": "sentencepiece", "model": "not base64!"}),
    )
    _refused(checkpoint, capsys, "vocab.json: src vocabulary: 'model' must be a base64 string")


def test_a_vocabulary_shorter_than_the_model_output_is_refused(checkpoint, capsys):
    _edit_json(checkpoint / "vocab.json", lambda d: d["tgt"]["symbols"].pop())
    _refused(
        checkpoint,
        capsys,
        "the tgt vocabulary has 11 entries, the model's config says tgt_vocab=12",
    )
    _edit_json(checkpoint / "vocab.json", lambda d: d["tgt"].update(symbols="0123"))
    _refused(
        checkpoint,
        capsys,
        "vocab.json: tgt vocabulary: 'symbols' must be a list of non-empty strings",
    )
    _edit_json(checkpoint / "vocab.json", lambda d: d["tgt"].update(symbols=list("01234566")))
    _refused(checkpoint, capsys, "vocab.json: tgt vocabulary: 'symbols' lists a symbol twice")


def test_non_finite_weights_are_refused(checkpoint, capsys):
    state = load_file(str(checkpoint / "model.safetensors"))
    state["decoder.out.bias"] = torch.full_like(state["decoder.out.bias"], float("nan"))
    save_file(state, str(checkpoint / "model.safetensors"))
    _refused(checkpoint, capsys, "1 weight tensors hold NaN or infinite values (decoder.out.bias)")


def test_a_missing_vocabulary_is_reported_as_missing(checkpoint, capsys):
    (checkpoint / "vocab.json").unlink()
    _refused(
        checkpoint,
        capsys,
        "vocab.json: missing (a translate checkpoint keeps its vocabulary there)",
    )


@pytest.mark.parametrize("config", [[1, 2], {"task": "translate", "model": "seq2seq"}])
def test_configs_of_the_wrong_shape_are_refused(checkpoint, capsys, config):
    _edit_json(checkpoint / "config.json", lambda d: d.update(config=config))
    _refused(checkpoint, capsys, "checkpoint")


def test_a_vocabulary_file_without_an_entry_the_task_reads_is_named(checkpoint, capsys):
    _edit_json(checkpoint / "vocab.json", lambda d: d.pop("src"))
    _refused(
        checkpoint,
        capsys,
        "vocab.json: src: missing (a translate checkpoint's vocab.json holds src and tgt)",
    )
    (checkpoint / "vocab.json").write_text("[1, 2]")
    _refused(
        checkpoint, capsys, "vocab.json: expected an object holding src and tgt, got [1, 2] (list)"
    )


def test_a_vocabulary_file_that_is_a_folder_is_named(checkpoint, capsys):
    (checkpoint / "vocab.json").unlink()
    (checkpoint / "vocab.json").mkdir()
    _refused(checkpoint, capsys, "vocab.json: not a regular file (a folder)")


def test_a_character_symbol_of_two_characters_is_named(checkpoint, capsys):
    _edit_json(checkpoint / "vocab.json", lambda d: d["tgt"]["symbols"].__setitem__(0, "ab"))
    _refused(
        checkpoint,
        capsys,
        "vocab.json: tgt vocabulary: 'symbols' holds 'ab': expected one character\n",
    )


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.uint8])
def test_weights_of_an_integer_or_bool_dtype_are_refused_naming_the_tensor(
    checkpoint, capsys, dtype
):
    state = load_file(str(checkpoint / "model.safetensors"))
    state["decoder.out.weight"] = state["decoder.out.weight"].to(dtype)
    save_file(state, str(checkpoint / "model.safetensors"))
    _refused(
        checkpoint,
        capsys,
        f"model.safetensors: 1 tensors of another dtype than the "
        f"model's (decoder.out.weight: {dtype} where the model has "
        "floating point (torch.float32))",
    )


def test_weights_of_another_floating_dtype_load(checkpoint, capsys):
    state = load_file(str(checkpoint / "model.safetensors"))
    save_file({k: v.double() for k, v in state.items()}, str(checkpoint / "model.safetensors"))
    assert main(["translate", "--checkpoint", str(checkpoint), "<en> one"]) == 0


HUGE = "x" * 10**7  # a 10 MB string: quoted in an error, at most about 200 characters of it


def _model_key(key):
    return lambda d: d["config"]["model"].update({key: HUGE})


@pytest.mark.parametrize(
    "name, edit, message",
    [
        ("config.json", _model_key("name"), "'name' must be one of"),
        (
            "config.json",
            _model_key("kind"),
            "seq2seq cannot be built from it: kind: expected one "
            "of bahdanau, luong, none, got 'xxx",
        ),
        ("config.json", _model_key("hidden"), "hidden: expected int, got 'xxx"),
        (
            "config.json",
            lambda d: d["config"].update(task=HUGE),
            "not a checkpoint of task translate",
        ),
        ("config.json", lambda d: d.update(format=HUGE), "not an attnkit checkpoint"),
        ("config.json", lambda d: d.update(version=HUGE), "checkpoint version 'xxx"),
        (
            "config.json",
            lambda d: d["config"].update(max_len_extra=HUGE),
            "max_len_extra: expected a non-negative int, got 'xxx",
        ),
        ("vocab.json", lambda d: d["tgt"].update(type=HUGE), "expected a character vocabulary"),
        ("vocab.json", lambda d: d["tgt"]["symbols"].append(HUGE), "'symbols' holds 'xxx"),
        ("vocab.json", lambda d: d.update(src=HUGE), "expected a character vocabulary, got 'xxx"),
    ],
)
def test_a_huge_string_in_a_checkpoint_is_quoted_short(checkpoint, capsys, name, edit, message):
    _edit_json(checkpoint / name, edit)
    assert main(["translate", "--checkpoint", str(checkpoint), "<en> one"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err[:1000]
    assert len(err) < 600 + len(str(checkpoint)), err[:1000]
    if "'xxx" in message:
        assert "... (10,000,000 characters)" in err


def test_an_error_message_quoting_a_value_whole_is_cut_to_one_short_line(
    checkpoint, capsys, monkeypatch
):
    def evaluator(*args):  # a check elsewhere that quotes a task setting whole
        raise ValueError(f"max_words: expected a positive int, got {HUGE!r}\nsecond line")

    monkeypatch.setattr("attnkit.tasks.loading.evaluator_for", lambda task: evaluator)
    assert main(["translate", "--checkpoint", str(checkpoint), "<en> one"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"attnkit: {checkpoint / 'config.json'}: max_words: expected a positive int, got 'xxx"
    )
    assert re.search(r"xxx\.\.\. \(10,000,0\d\d characters\)\n$", err) and len(err) < 1200
