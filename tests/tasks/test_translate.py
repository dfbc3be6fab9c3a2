"""translate_texts(): bounded input and output lengths, weights only on request."""

import pytest
import torch

from attnkit.tasks import translate as translate_task
from attnkit.tasks.translate import TranslateTask, translate_texts

PAIRS = [(f"<en> {w}", str(n)) for n, w in enumerate(["zero", "one", "two", "three"])]


@pytest.fixture
def task():
    torch.manual_seed(0)
    return TranslateTask(PAIRS, PAIRS, model_config={"kind": "bahdanau", "emb": 8, "hidden": 8})


def test_output_length_is_capped_whatever_the_checkpoint_says(task, monkeypatch):
    monkeypatch.setattr(translate_task, "MAX_OUTPUT_TOKENS", 9)
    model = task.build_model()
    with torch.no_grad():  # never emits EOS: the decoder runs to its cap
        model.decoder.out.bias[2] = -1e4
    _, raws = translate_texts(
        model, task.src_vocab, task.tgt_vocab, ["<en> one", "<en> two"], max_len_extra=10**12
    )
    assert raws[0].tokens.shape[1] == 9


def test_long_sources_are_refused_and_weights_kept_only_on_request(task):
    model = task.build_model()
    with pytest.raises(ValueError, match=r"texts\[1\]: 11 characters, more than max_chars=10"):
        translate_texts(
            model, task.src_vocab, task.tgt_vocab, ["<en> one", "<en> twelve"], max_chars=10
        )
    _, lean = translate_texts(model, task.src_vocab, task.tgt_vocab, ["<en> one"])
    _, kept = translate_texts(model, task.src_vocab, task.tgt_vocab, ["<en> one"], weights=True)
    assert lean[0].weights is None and kept[0].weights is not None
