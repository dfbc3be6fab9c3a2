"""CharLMTask: the LM learns the transcripts; characters outside the recogniser's are named."""

import pytest
import torch

from attnkit.data import CharVocab, DataError
from attnkit.tasks.lm import CharLMTask
from attnkit.train import TrainConfig, Trainer


def test_the_lm_learns_and_bad_characters_are_named(tmp_path, one_thread):
    torch.manual_seed(0)
    vocab = CharVocab(list("abc "))
    texts = ["abc abc", "cab", "a b c", "abcabc"] * 8
    task = CharLMTask(
        texts, texts[:4], vocab=vocab, batch_size=8, model_config={"emb": 8, "hidden": 16}
    )
    model = task.build_model()
    before = task.evaluate(model)
    Trainer(
        model, task, TrainConfig(max_steps=60, lr=1e-2, eval_every=60, progress=False), tmp_path
    ).fit()
    after = task.evaluate(model)
    assert after["loss"] < before["loss"] - 0.5 and after["perplexity"] < before["perplexity"]
    assert task.config()["task"] == "lm" and task.config()["model"]["vocab"] == len(vocab)
    with pytest.raises(
        DataError,
        match=r"notes.txt:2: characters outside the recogniser's "
        r"alphabet: 'dz'",
    ):
        CharLMTask(
            ["ab", "zd"],
            [],
            vocab=vocab,
            model_config={},
            origins=(["notes.txt:1", "notes.txt:2"], []),
        )
