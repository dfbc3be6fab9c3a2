"""Augmentation inside the tasks: only training batches are augmented, by (seed, epoch,
index); audio augmentation needs utterances that keep their audio; built-in speech keeps it
when asked."""

import shutil

import numpy as np
import pytest
import torch

from attnkit.data import SpeechSet, generate_lines, log_mel, speech_dataset
from attnkit.data.augment.audio_augment import Noise, SpecAugment, SpeechAugment, SpeedPerturb
from attnkit.data.augment.line_augment import Stretch
from attnkit.tasks.asr import AsrTask
from attnkit.tasks.ocr import OcrTask

pytestmark = pytest.mark.usefixtures("one_thread")
needs_espeak = pytest.mark.skipif(
    shutil.which("espeak-ng") is None, reason="espeak-ng not installed (apt-get install espeak-ng)"
)
LAS = {"listener_hidden": 8, "hidden": 16, "emb": 8, "key_value_dim": 8}


def _speech(n=6):
    g = torch.Generator().manual_seed(0)
    features = [torch.randn(40 + 4 * i, 80, generator=g) for i in range(n)]
    return SpeechSet(features, ["one two"] * n, [f"u{i}" for i in range(n)])


def test_speech_augmentation_changes_training_batches_only():
    train = _speech()
    task = AsrTask(
        train,
        train,
        model_config=LAS,
        batch_size=3,
        augment=[SpecAugment(freq_mask=20, time_mask=10, fill=0.0)],
    )
    batch = task.batches(0)[0]
    plain = AsrTask(train, train, model_config=LAS, batch_size=3).batches(0)[0]
    assert not torch.equal(batch["features"], plain["features"])
    assert torch.equal(batch["lengths"], plain["lengths"])
    assert torch.equal(task.batches(0)[0]["features"], batch["features"])  # seeded
    assert not torch.equal(task.batches(1)[0]["features"], batch["features"])  # per epoch
    assert all(torch.equal(v, f) for v, f in zip(task.valid.features, train.features))
    assert task.config()["augment"][0]["name"] == "specaugment"
    assert "augment" not in AsrTask(train, train, model_config=LAS, augment=[]).config()


def test_audio_augmentation_of_features_without_audio_is_refused():
    with pytest.raises(
        ValueError,
        match=r"augment: speed, noise change the audio, and these "
        r"training utterances keep features only",
    ):
        AsrTask(
            _speech(),
            _speech(),
            model_config=LAS,
            augment=SpeechAugment([SpeedPerturb(), Noise(), SpecAugment()]),
        )


@needs_espeak
def test_built_in_speech_keeps_its_audio_when_asked(tmp_path):
    plain = speech_dataset(3, split="test", seed=5, cache_dir=tmp_path, normalize=True)
    assert not plain.features.has_samples
    with pytest.raises(ValueError, match="samples: this CachedFeatures keeps features only"):
        plain.features.samples(0)
    data = speech_dataset(3, split="test", seed=5, cache_dir=tmp_path, normalize=True, audio=True)
    assert data.features.has_samples and data.features[:2].has_samples
    for i in range(3):
        samples = data.features.samples(i)
        stored = data.features[i].float()
        assert samples.dtype == torch.float32 and samples.abs().max() <= 1.0
        again = log_mel(samples, normalize=True)  # 16-bit samples: the same frames
        assert again.shape == stored.shape and (again - stored).abs().mean() < 0.05
    task = AsrTask(
        data, data, model_config=LAS, batch_size=3, augment=[SpeedPerturb(factors=(1.1,))]
    )
    faster = task.batches(0)[0]["lengths"]  # the three utterances, 1.1 times as fast
    assert int(faster.sum()) == pytest.approx((sum(data.frames) - 3) / 1.1 + 3, abs=3)


def test_line_augmentation_keeps_ctc_lines_wide_enough_for_their_text():
    lines = generate_lines(4, seed=2, max_chars=10)
    task = OcrTask(
        lines,
        lines,
        model_config={"channels": [4, 4, 8, 8, 8], "hidden": 8},
        batch_size=4,
        augment=[Stretch(p=1.0, factor=(0.25, 0.25))],
    )
    for i, (image, text) in enumerate(lines):
        line = task.training_line(i, 0)
        assert line.shape[0] == 32 and line.shape[1] >= 2 * len(text)
        assert line.shape[1] < image.shape[1]
    assert torch.equal(task.valid[0][0], lines[0][0])
    assert np.isclose(task.batches(0)[0]["images"].max(), 1.0)
