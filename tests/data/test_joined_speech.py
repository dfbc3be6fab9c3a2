""":class:`JoinedFeatures`: two speech sets read as one give each utterance's features and
samples exactly as its own set does (the reference), sliced across the join too."""

import pytest
import torch

from attnkit.data import SpeechSet
from attnkit.data.corpora.an4_formats import read_an4
from attnkit.data.corpora.speech_sets import JoinedFeatures, joined_speech
from tests.data.test_formats_an4 import write_an4


def test_joined_sets_read_as_their_parts(tmp_path):
    root = write_an4(tmp_path / "an4")
    train, test = read_an4(root, split="train"), read_an4(root, split="test")
    joined = joined_speech([train, test])
    assert list(joined.transcripts) == [*train.transcripts, *test.transcripts]
    assert list(joined.origins) == [*train.origins, *test.origins]
    assert joined.frames == [*train.frames, *test.frames]
    assert joined.features.has_samples
    reference = [*(train.features[i] for i in range(5)), *(test.features[i] for i in range(2))]
    for i, want in enumerate(reference):
        assert torch.equal(joined.features[i], want)
    assert torch.equal(joined.features.samples(6), test.features.samples(1))
    across = joined.features[4:6]  # the last of train, the first of test
    assert torch.equal(across[0], reference[4]) and torch.equal(across[1], reference[5])


def test_parts_must_agree_and_be_on_disk(tmp_path):
    root = write_an4(tmp_path / "an4")
    plain, normalized = read_an4(root, split="test"), read_an4(root, split="test", normalize=True)
    with pytest.raises(ValueError, match="expected one normalize setting, got False, True"):
        JoinedFeatures([plain.features, normalized.features])
    with pytest.raises(ValueError, match="expected at least one"):
        JoinedFeatures([])
    in_memory = SpeechSet([plain.features[0]], ["ONE"], ["memory"])
    with pytest.raises(TypeError, match=r"sets\[1\]: expected features on disk"):
        joined_speech([plain, in_memory])
