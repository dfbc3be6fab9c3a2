"""AsrTask: batches, loss (with CTC), metrics, transcription and speller pre-training;
streaming transcription."""

import time

import pytest
import torch

from attnkit.data import (
    CharVocab,
    DataError,
    FeaturesOnDisk,
    SpeechSet,
    feature_statistics,
    log_mel,
    pad_features,
    read_manifest,
    write_wav,
)
from attnkit.decoding import Decoding
from attnkit.models import guided_attention_loss
from attnkit.tasks.asr import (
    AsrEvaluator,
    AsrTask,
    SpellerPretraining,
    metrics,
    transcribe,
    transcribe_stream,
)
from attnkit.train import TrainConfig, Trainer
from tests.models.toy import streaming_las

WORDS = ["one two", "three", "four five six", "seven", "eight nine", "zero one"]

pytestmark = pytest.mark.usefixtures("one_thread")


def _set(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    feats = [
        torch.randn(int(torch.randint(60, 100, (1,), generator=g)), 6, generator=g)
        for _ in range(n)
    ]
    texts = [WORDS[i % len(WORDS)] for i in range(n)]
    return SpeechSet(feats, texts, [f"utt{i}" for i in range(n)])


def _task(**kw):
    torch.manual_seed(0)
    config = {"listener_hidden": 8, "hidden": 16, "emb": 8, "key_value_dim": 8}
    return AsrTask(_set(10), _set(3, seed=1), model_config=config, batch_size=4, **kw)


def test_batches_are_seeded_by_epoch_and_cover_every_utterance():
    task = _task()
    first = [b["lengths"].tolist() for b in task.batches(0)]
    assert first == [b["lengths"].tolist() for b in task.batches(0)]
    assert first != [b["lengths"].tolist() for b in task.batches(1)]
    assert sorted(n for b in first for n in b) == sorted(f.shape[0] for f in task.train.features)
    batch = next(iter(task.batches(0)))
    assert batch["features"].shape[:2] == (len(batch["lengths"]), max(batch["lengths"]))
    assert (batch["tgt_in"][:, 0] == 1).all()  # BOS


def test_sortagrad_epochs_take_the_shortest_utterances_first():
    task = _task(sortagrad=1)
    first = [b["lengths"].tolist() for b in task.batches(0)]
    frames = sorted(f.shape[0] for f in task.train.features)
    assert [n for b in first for n in sorted(b)] == frames  # every utterance, shortest first
    assert task.config()["batching"]["sortagrad"] == 1
    assert [b["lengths"].tolist() for b in task.batches(1)] == [
        b["lengths"].tolist() for b in _task().batches(1)
    ]  # then shuffled as without it
    assert "sortagrad" not in _task().config()["batching"]
    with pytest.raises(
        ValueError, match="sortagrad: expected a non-negative int \\(epochs\\), got -1"
    ):
        _task(sortagrad=-1)


def test_loss_with_ctc_is_finite_and_counts_target_characters():
    task = _task(ctc_weight=0.5)
    model = task.build_model()
    assert model.ctc_head is not None and task.config()["model"]["ctc"] is True
    batch = next(iter(task.batches(0)))
    loss, tokens = task.loss(model, batch)
    assert torch.isfinite(loss) and tokens == int((batch["tgt_out"] != 0).sum())
    loss.backward()
    assert model.ctc_head.weight.grad.abs().sum() > 0


def test_guided_attention_adds_its_loss_over_the_listener_steps():
    plain, guided = _task(), _task(guided_attention=2.0)
    assert guided.config()["batching"]["guided_attention"] == 2.0
    assert "guided_attention" not in plain.config()["batching"]
    torch.manual_seed(0)
    model = plain.build_model()
    batch = next(iter(plain.batches(0)))
    ce, _ = plain.loss(model, batch)
    total, _ = guided.loss(model, batch)
    _, weights = model(batch["features"], batch["lengths"], batch["tgt_in"])
    steps = model.steps(batch["lengths"])
    memory, listened = model.listener(batch["features"], batch["lengths"])
    assert steps.tolist() == listened.tolist() and weights.shape[-1] == memory.shape[1]
    want = guided_attention_loss(weights, (batch["tgt_out"] != 0).sum(1), steps)
    torch.testing.assert_close(total, ce + 2.0 * want)
    assert want > 0
    total.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_pretraining_the_speller_trains_it_alone_through_the_trainer(tmp_path):
    task = _task()
    model = task.build_model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    pre = SpellerPretraining(task)
    first = pre.evaluate(model)
    config = TrainConfig(
        max_steps=40, lr=1e-2, warmup_steps=5, eval_every=20, checkpoint_every=20, progress=False
    )
    result = Trainer(model, pre, config, tmp_path).fit()
    assert result.step == 40 and [h["step"] for h in result.history] == [20, 40]
    assert result.history[-1]["loss"] < first["loss"]
    assert result.history[-1]["accuracy"] > first["accuracy"]
    for name, p in model.named_parameters():
        changed = not torch.equal(before[name], p)
        assert changed == name.startswith(("speller.embed", "speller.cells", "speller.out")), name
    assert (tmp_path / "checkpoint").is_dir()
    assert pre.config()["task"] == "asr-speller-lm" and pre.vocab() == task.vocab()


def test_pretraining_batches_cover_every_transcript_once_per_epoch():
    pre = SpellerPretraining(_task())
    batches = list(pre.batches(0))
    assert sum(len(b["tgt_in"]) for b in batches) == 10
    assert [b["tgt_in"].tolist() for b in batches] == [b["tgt_in"].tolist() for b in pre.batches(0)]


def test_metrics_and_evaluation():
    assert metrics(["one two"], ["one two"]) == {"cer": 0.0, "wer": 0.0, "1-cer": 1.0}
    scores = metrics(["one tw", ""], ["one two", "six"])
    assert scores["cer"] == pytest.approx(4 / 10) and scores["1-cer"] == pytest.approx(0.6)
    task = _task()
    assert set(task.evaluate(task.build_model())) == {"cer", "wer", "1-cer"}


def test_no_metric_is_called_an_accuracy_when_it_can_be_negative():
    scores = metrics(["one one one one one one"], ["one"])  # 20 insertions, 3 characters
    assert scores["cer"] > 1 and scores["1-cer"] < 0
    assert not any("accuracy" in name for name in scores)


def test_transcribe_beam_one_is_greedy_and_weights_cover_listener_steps():
    task = _task()
    model = task.build_model()
    feats = task.valid.features
    greedy, raws = transcribe(model, task.char_vocab, feats, weights=True)
    one_beam = Decoding(beam=1, length_penalty=0.5)  # beam search with one hypothesis
    assert one_beam.method == "beam"
    beam, _ = transcribe(model, task.char_vocab, feats, decoding=one_beam)
    assert greedy == beam and len(greedy) == 3
    assert raws[0].weights.shape[-1] == max(f.shape[0] for f in feats) // 8
    with pytest.raises(ValueError, match=r"beam: expected an int in \[1, 1000\], got 0"):
        transcribe(model, task.char_vocab, feats, decoding=Decoding(beam=0))


def test_bad_settings_and_short_utterances_are_named():
    short = SpeechSet([torch.randn(7, 6)], ["one"], ["tiny.wav"])
    with pytest.raises(DataError, match="tiny.wav: 7 feature frames; .* need at least 8"):
        AsrTask(short, short, model_config={})
    with pytest.raises(ValueError, match="ctc_weight: expected a number in \\[0, 1\\], got 2"):
        AsrTask(_set(2), _set(2), model_config={}, ctc_weight=2)
    with pytest.raises(
        ValueError, match="guided_attention: expected a non-negative number, got -1"
    ):
        AsrTask(_set(2), _set(2), model_config={}, guided_attention=-1)


def test_float16_feature_storage_changes_the_model_by_rounding_only():
    """A SpeechSet keeps features in float16; batches are float32 again. On normalised
    features (unit variance) the rounding moves the model's log-probabilities by < 1e-4."""
    task = _task()
    model = task.build_model().eval()
    full = _set(4)  # float32, unit variance like normalised log-mels
    stored = [f.half() for f in full.features]
    (x32, lengths), (x16, _) = pad_features(full.features), pad_features(stored)
    assert x16.dtype == torch.float32 and 0 < float((x32 - x16).abs().max()) <= 2**-11 * 8
    tgt = task.text_batch([0, 1, 2, 3])["tgt_in"]
    with torch.no_grad():
        lp32 = model(x32, lengths, tgt)[0].log_softmax(-1)
        lp16 = model(x16, lengths, tgt)[0].log_softmax(-1)
    assert float((lp32 - lp16).abs().max()) < 1e-4


def test_features_on_disk_are_read_per_batch_and_batch_as_in_memory(tmp_path):
    rate = 8000
    g = torch.Generator().manual_seed(0)
    lines = []
    for i in range(6):
        samples = 0.1 * torch.randn(int(torch.randint(800, 2400, (1,), generator=g)), generator=g)
        write_wav(tmp_path / f"{i}.wav", samples, rate)
        lines.append(f"{i}.wav\t{WORDS[i]}\n")
    (tmp_path / "list.tsv").write_text("".join(lines))
    on_disk = read_manifest(tmp_path / "list.tsv", normalize=True)
    assert isinstance(on_disk.features, FeaturesOnDisk)
    assert on_disk.frames == [f.shape[0] for f in on_disk.features]
    in_memory = SpeechSet(list(on_disk.features), on_disk.transcripts, on_disk.origins)
    config = {"listener_hidden": 8, "hidden": 16, "emb": 8, "key_value_dim": 8}
    tasks = [
        AsrTask(data, data.head(2), model_config=config, batch_size=2)
        for data in (in_memory, on_disk)
    ]
    assert tasks[1].train.features is on_disk.features  # not copied into memory
    for a, b in zip(tasks[0].batches(0), tasks[1].batches(0), strict=True):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    batches = tasks[1].batches(0)
    (tmp_path / "0.wav").write_bytes(b"gone")
    with pytest.raises(DataError, match=r"0.wav: cannot decode \(Format not recognised\)"):
        [batches[i] for i in range(len(batches))]  # read when a batch needs it


# ---------------------------------------------------------------- streaming


def _noise(seconds, seed):
    """White noise whose loudness changes every 50 ms, at 16 kHz."""
    g = torch.Generator().manual_seed(seed)
    n = int(16000 * seconds)
    loudness = torch.rand(int(20 * seconds) + 1, generator=g).repeat_interleave(800)[:n]
    return 0.3 * loudness * torch.randn(n, generator=g)


@pytest.mark.parametrize("alignment", ["monotonic", "mocha"])
def test_streaming_transcribes_what_greedy_decoding_of_the_whole_audio_does(alignment):
    vocab = CharVocab.build(["abcdef"])
    model = streaming_las(alignment, vocab=len(vocab))
    for seed, seconds in [(0, 2.0), (1, 1.37)]:
        audio = _noise(seconds, seed)
        features = log_mel(audio)
        model.listener.set_statistics(*feature_statistics([features]))
        (offline,), _ = transcribe(model, vocab, [features])
        assert len(offline) > 20
        for chunk_ms in (20, 45, 200, 5000):
            chunks = list(transcribe_stream(model, vocab, audio, chunk_ms=chunk_ms))
            assert "".join(c.text for c in chunks) == offline
            assert len(chunks) == -(-len(audio) // round(chunk_ms * 16))
            assert [c.end_s for c in chunks[-1:]] == [len(audio) / 16000]
            heard = [h for c in chunks for h in c.heard_s if h is not None]
            assert heard == sorted(heard) and len(heard) >= 4 * seconds  # the stops move on
            for c in chunks:  # nothing is emitted before the audio it read has arrived
                assert len(c.heard_s) == len(c.text)
                assert all(h <= c.end_s for h in c.heard_s if h is not None)
            if chunk_ms == 45:  # and the characters with a stop come out while it arrives
                early = [h for c in chunks[:-1] for h in c.heard_s]
                assert None not in early and len(early) >= len(heard) - 2


def test_a_model_that_cannot_stream_and_bad_chunks_are_refused():
    vocab = CharVocab.build(["abc"])
    task = _task()
    with pytest.raises(ValueError, match="model: streaming needs a unidirectional listener"):
        next(transcribe_stream(task.build_model(), vocab, _noise(1.0, 0)))
    model = streaming_las(vocab=len(vocab))
    with pytest.raises(ValueError, match="chunk_ms: expected a positive number, got 0"):
        next(transcribe_stream(model, vocab, _noise(1.0, 0), chunk_ms=0))
    with pytest.raises(
        ValueError,
        match=r"samples: expected \(N,\) samples of at least 8 "
        r"feature frames \(80 ms\), got \(1100,\)",
    ):
        next(transcribe_stream(model, vocab, torch.zeros(1100)))


def test_a_causal_listener_is_trained_on_raw_log_mels_with_their_statistics():
    config = {
        "listener_hidden": 8,
        "hidden": 16,
        "emb": 8,
        "key_value_dim": 8,
        "listener": "uni",
        "alignment": "monotonic",
    }
    train = _set(10)
    task = AsrTask(train, _set(3, seed=1), model_config=config, batch_size=4)
    model = task.build_model()
    mean, std = feature_statistics(train.features)
    torch.testing.assert_close(model.listener.feature_mean, mean)
    torch.testing.assert_close(model.listener.feature_std, std)
    assert not AsrEvaluator(model, task.config(), task.vocab()).normalize
    assert AsrEvaluator(_task().build_model(), task.config(), task.vocab()).normalize


def test_in_real_time_each_chunk_waits_for_its_audio():
    vocab = CharVocab.build(["abcdef"])
    model = streaming_las(vocab=len(vocab))
    audio = _noise(0.6, 2)
    start = time.perf_counter()
    chunks = list(transcribe_stream(model, vocab, audio, chunk_ms=150, realtime=True))
    assert time.perf_counter() - start >= 0.6  # the last chunk waited for the end of the audio
    assert "".join(c.text for c in chunks) == "".join(
        c.text for c in transcribe_stream(model, vocab, audio, chunk_ms=150)
    )
