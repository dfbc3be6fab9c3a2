"""SpeechTask: batches, loss (with CTC), metrics, transcription and speller pre-training."""

import pytest
import torch

from attnkit.data import DataError, SpeechSet
from attnkit.tasks.speech import SpeechTask, metrics, transcribe

WORDS = ["one two", "three", "four five six", "seven", "eight nine", "zero one"]

pytestmark = pytest.mark.usefixtures("one_thread")


def _set(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    feats = [torch.randn(int(torch.randint(60, 100, (1,), generator=g)), 6, generator=g)
             for _ in range(n)]
    texts = [WORDS[i % len(WORDS)] for i in range(n)]
    return SpeechSet(feats, texts, [f"utt{i}" for i in range(n)])


def _task(**kw):
    torch.manual_seed(0)
    config = {"listener_hidden": 8, "hidden": 16, "emb": 8, "key_value_dim": 8}
    return SpeechTask(_set(10), _set(3, seed=1), model_config=config, batch_size=4, **kw)


def test_batches_are_seeded_by_epoch_and_cover_every_utterance():
    task = _task()
    first = [b["lengths"].tolist() for b in task.batches(0)]
    assert first == [b["lengths"].tolist() for b in task.batches(0)]
    assert first != [b["lengths"].tolist() for b in task.batches(1)]
    assert sorted(n for b in first for n in b) == sorted(f.shape[0] for f in task.train.features)
    batch = next(iter(task.batches(0)))
    assert batch["features"].shape[:2] == (len(batch["lengths"]), max(batch["lengths"]))
    assert (batch["tgt_in"][:, 0] == 1).all()  # BOS


def test_loss_with_ctc_is_finite_and_counts_target_characters():
    task = _task(ctc_weight=0.5)
    model = task.build_model()
    assert model.ctc_head is not None and task.config()["model"]["ctc"] is True
    batch = next(iter(task.batches(0)))
    loss, tokens = task.loss(model, batch)
    assert torch.isfinite(loss) and tokens == int((batch["tgt_out"] != 0).sum())
    loss.backward()
    assert model.ctc_head.weight.grad.abs().sum() > 0


def test_pretraining_the_speller_leaves_the_listener_untouched():
    task = _task()
    model = task.build_model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    losses = task.pretrain_speller(model, 40, lr=1e-2)
    assert len(losses) == 40 and sum(losses[-5:]) < sum(losses[:5])
    for name, p in model.named_parameters():
        changed = not torch.equal(before[name], p)
        assert changed == name.startswith(("speller.embed", "speller.cells", "speller.out")), name


def test_metrics_and_evaluation():
    assert metrics(["one two"], ["one two"]) == {"cer": 0.0, "wer": 0.0, "accuracy": 1.0}
    scores = metrics(["one tw", ""], ["one two", "six"])
    assert scores["cer"] == pytest.approx(4 / 10) and scores["accuracy"] == pytest.approx(0.6)
    task = _task()
    assert set(task.evaluate(task.build_model())) == {"cer", "wer", "accuracy"}


def test_transcribe_beam_one_is_greedy_and_weights_cover_listener_steps():
    task = _task()
    model = task.build_model()
    feats = task.valid.features
    greedy, raws = transcribe(model, task.char_vocab, feats)
    beam, _ = transcribe(model, task.char_vocab, feats, beam=1)
    assert greedy == beam and len(greedy) == 3
    assert raws[0].weights.shape[-1] == max(f.shape[0] for f in feats) // 8
    with pytest.raises(ValueError, match="beam: expected a positive int, got 0"):
        transcribe(model, task.char_vocab, feats, beam=0)


def test_bad_settings_and_short_utterances_are_named():
    short = SpeechSet([torch.randn(7, 6)], ["one"], ["tiny.wav"])
    with pytest.raises(DataError, match="tiny.wav: 7 feature frames; .* need at least 8"):
        SpeechTask(short, short, model_config={})
    with pytest.raises(ValueError, match="ctc_weight: expected a number in \\[0, 1\\], got 2"):
        SpeechTask(_set(2), _set(2), model_config={}, ctc_weight=2)
