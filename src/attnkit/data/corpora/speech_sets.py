"""What a speech set is, built-in or read from a corpus: transcripts and log-mel features, the
features read from disk when indexed.

A :class:`SpeechSet` of built-in speech or of a corpus holds its features on disk
(:class:`FeaturesOnDisk`: the cache's rows, or the audio files), each utterance's read when
indexed, and a corpus's transcripts and paths packed
(:class:`attnkit.data.corpora.utterances.PackedTexts`), so memory grows by a few dozen bytes per
utterance, not by its features. Features come out in float16 (:data:`FEATURE_DTYPE`), half of
float32's memory for those a caller keeps (validation sets, ``attnkit eval``'s examples);
:func:`attnkit.data.pad_features` makes each batch float32 again. float16 keeps 11 significant
bits: a relative rounding error of at most ``2**-11`` per value, far below the features' own
variation (``tests/data/test_speech.py`` bounds its effect on a model).
"""

from __future__ import annotations

import abc
import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from attnkit.data.audio.features import normalize_features

__all__ = [
    "FEATURE_DTYPE",
    "FeaturesOnDisk",
    "JoinedFeatures",
    "SpeechSet",
    "joined_speech",
    "spoken_number",
]

FEATURE_DTYPE = torch.float16  # how a SpeechSet keeps its features in memory


class FeaturesOnDisk(Sequence, abc.ABC):
    """Log-mel features read from disk when indexed: ``features[i]`` is ``(T_i, 80)``
    (:data:`FEATURE_DTYPE`, normalised per utterance with ``normalize``), and
    ``frames[i] = T_i`` is known without reading it.

    Memory holds one small record per utterance, not its features, so a training set may be
    larger than memory; a training batch reads its own utterances (in the DataLoader's worker
    processes with ``--workers-data``). A slice is the same kind of sequence over those
    utterances. A subclass writes :meth:`read`, the raw float32 features of one record, and
    where it keeps the utterances' audio, :meth:`read_samples` (which :meth:`samples` reads:
    what augmentation of the audio needs).
    """

    has_samples = False  # whether samples(i) can read the utterances' audio

    def __init__(self, records: Sequence, frames: Sequence[int] | np.ndarray, *, normalize: bool):
        self.records, self.frames, self.normalize = records, frames, normalize

    @abc.abstractmethod
    def read(self, record) -> torch.Tensor:
        """The raw features ``(T, 80)`` float32 of one record."""

    def read_samples(self, record) -> torch.Tensor:
        """The audio ``(N,)`` float32 at 16 kHz of one record (a subclass whose
        :attr:`has_samples` is True writes it)."""
        raise TypeError(
            f"{type(self).__name__}: keeps features only, not the audio (has_samples is False)"
        )

    def samples(self, i: int) -> torch.Tensor:
        """The audio ``(N,)`` float32 at 16 kHz of utterance ``i``, read from disk: the samples
        its raw features are the log-mels of.

        Raises:
            ValueError: this set keeps features only (:attr:`has_samples` is False).
        """
        if not self.has_samples:
            raise ValueError(
                f"samples: this {type(self).__name__.lstrip('_')} keeps features "
                "only, not the utterances' audio"
            )
        return self.read_samples(self.records[i])

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i):
        if isinstance(i, slice):
            part = copy.copy(self)
            part.records, part.frames = self.records[i], self.frames[i]
            return part
        features = self.read(self.records[i])
        return (normalize_features(features) if self.normalize else features).to(FEATURE_DTYPE)


@dataclass(frozen=True)
class SpeechSet:
    """Features and transcripts: ``features[i]`` is ``(T_i, 80)`` float16
    (:data:`FEATURE_DTYPE`; a list, or :class:`FeaturesOnDisk` read when indexed), its
    transcript ``transcripts[i]``, and ``origins[i]`` says where it came from (the voice and
    settings, or the WAV path). Batch with :func:`attnkit.data.pad_features`."""

    features: Sequence[torch.Tensor]
    transcripts: Sequence[str]
    origins: Sequence[str]

    def __len__(self) -> int:
        return len(self.features)

    @property
    def frames(self) -> list[int]:
        """``T_i`` of every utterance (features on disk are not read for it)."""
        if isinstance(self.features, FeaturesOnDisk):
            frames = self.features.frames
            return frames.tolist() if isinstance(frames, np.ndarray) else list(frames)
        return [f.shape[0] for f in self.features]

    def head(self, n: int) -> SpeechSet:
        """The first ``n`` utterances."""
        return SpeechSet(self.features[:n], self.transcripts[:n], self.origins[:n])


class JoinedFeatures(FeaturesOnDisk):
    """Several :class:`FeaturesOnDisk` one after another, as one: the utterances of
    ``parts[0]``, then those of ``parts[1]``, ... (``attnkit train asr --synthetic-share``: a
    corpus's utterances, then built-in ones). A record is ``(part, the part's record)``, read by
    its part; the parts must normalise alike, and the samples can be read when every part
    keeps them.

    Shape:
        ``features[i]``: ``(T_i, 80)``, as the part holding utterance ``i`` gives it.

    Raises:
        ValueError: no part, or parts that normalise differently.
    """

    def __init__(self, parts: Sequence[FeaturesOnDisk]):
        if not parts:
            raise ValueError("parts: expected at least one set of features, got none")
        if len({part.normalize for part in parts}) > 1:
            found = ", ".join(str(part.normalize) for part in parts)
            raise ValueError(f"parts: expected one normalize setting, got {found}")
        records = [(k, record) for k, part in enumerate(parts) for record in part.records]
        frames = [int(n) for part in parts for n in part.frames]
        super().__init__(records, frames, normalize=parts[0].normalize)
        self.parts = list(parts)
        self.has_samples = all(part.has_samples for part in parts)

    def read(self, record) -> torch.Tensor:
        k, own = record
        return self.parts[k].read(own)

    def read_samples(self, record) -> torch.Tensor:
        k, own = record
        return self.parts[k].read_samples(own)


def joined_speech(sets: Sequence[SpeechSet]) -> SpeechSet:
    """The utterances of ``sets`` one after another, as one set (:class:`JoinedFeatures`: the
    sets' features must be on disk).

    Raises:
        TypeError: a set whose features are in memory, not a :class:`FeaturesOnDisk`.
    """
    parts = []
    for k, part in enumerate(sets):
        if not isinstance(part.features, FeaturesOnDisk):
            raise TypeError(
                f"sets[{k}]: expected features on disk (FeaturesOnDisk), "
                f"got {type(part.features).__name__}"
            )
        parts.append(part.features)
    return SpeechSet(
        JoinedFeatures(parts),
        [t for part in sets for t in part.transcripts],
        [o for part in sets for o in part.origins],
    )


def spoken_number(value: int) -> str:
    """``value`` in English words as the built-in transcripts write it (num2words' British
    English, hyphens and commas turned into spaces): ``"four thousand and seventy two"``."""
    from num2words import num2words

    return re.sub(r"[-,\s]+", " ", num2words(value, lang="en")).strip()
