"""Checkpoints written before the model registry load as today's models."""

import json

import torch
from safetensors.torch import save_file

from attnkit.models import CRNN, Seq2Seq, build_model, model_config
from attnkit.models.legacy import upgrade
from attnkit.tasks.loading import load_task_model
from tests.models.toy import toy_batch

OLD_DECODER = ("embed.", "init.", "attention.", "cell.", "rnn.", "combine.", "out.", "key_proj.")


def _old_seq2seq_state(model):
    """Today's Seq2Seq weights under the names of attnkit 0.1's packed-GRU Seq2Seq."""
    old = {}
    for key, value in model.state_dict().items():
        if key.startswith("encoder.rnns.0."):
            direction, name = key[len("encoder.rnns.0.") :].split(".", 1)
            key = f"encoder.rnn.{name}" + ("_reverse" if direction == "bwd" else "")
        elif key.startswith("decoder."):
            key = key[len("decoder.") :]
            assert key.startswith(OLD_DECODER), key
        old[key] = value.clone()
    return old


def test_an_old_seq2seq_checkpoint_loads_with_the_same_outputs(tmp_path):
    torch.manual_seed(0)
    model = Seq2Seq(11, 13, kind="luong", score="dot", emb=8, hidden=12).eval()
    old_config = {k: v for k, v in model_config(model).items() if k != "name"}
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    save_file(_old_seq2seq_state(model), str(folder / "model.safetensors"))
    (folder / "config.json").write_text(
        json.dumps(
            {
                "format": "attnkit-checkpoint",
                "version": 1,
                "config": {"task": "translate", "model": old_config},
            }
        )
    )
    (folder / "vocab.json").write_text(
        json.dumps(  # 4 specials + 7 and 9 characters
            {
                "src": {"type": "char", "symbols": list("abcdefg")},
                "tgt": {"type": "char", "symbols": list("abcdefghi")},
            }
        )
    )
    loaded, ck = load_task_model(folder, "translate")
    src, src_len, tgt_in = toy_batch()
    with torch.no_grad():
        torch.testing.assert_close(
            loaded.eval()(src, src_len, tgt_in)[0], model(src, src_len, tgt_in)[0]
        )


def test_old_configs_are_named_and_lose_their_naming_kind():
    crnn = CRNN(12, channels=(4, 4, 8, 8, 8), hidden=8)
    old = {**{k: v for k, v in model_config(crnn).items() if k != "name"}, "kind": "crnn"}
    config, state = upgrade(old, crnn.state_dict())
    assert config["name"] == "crnn" and "kind" not in config
    build_model(config).load_state_dict(state)
    assert upgrade({"src_vocab": 5, "tgt_vocab": 5, "kind": "transformer"}, {})[0] == {
        "name": "transformer",
        "src_vocab": 5,
        "tgt_vocab": 5,
    }
    assert upgrade({"listener_hidden": 8, "vocab": 4}, {})[0]["name"] == "las"


def test_todays_and_unknown_configs_pass_through_unchanged():
    today = model_config(Seq2Seq(5, 5, hidden=4, emb=4))
    state = {"x": torch.zeros(1)}
    assert upgrade(today, state) == (today, state)
    assert upgrade({"hidden": 3}, state) == ({"hidden": 3}, state)
