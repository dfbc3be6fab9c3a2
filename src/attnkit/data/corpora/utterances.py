"""The user's utterances: audio files and their transcripts, gathered a line at a time into a
:class:`~attnkit.data.corpora.speech_sets.SpeechSet` whose features are read when a batch needs
them.

:class:`SpeechCorpus` is what every corpus reader (attnkit's manifest, :func:`read_manifest`,
and the formats of :mod:`attnkit.data.corpora.speech_formats`) feeds: each utterance checked from
its audio file's header and its transcript, unusable ones dropped and counted up to a share
(``max_unusable``), the rest kept as packed paths and transcripts (:class:`PackedTexts`) and
20 bytes of numbers each, so memory grows by a few dozen bytes per utterance and never by its
audio or features. The corpora's text files are read one line at a time by
:func:`attnkit.data.corpora.text_files.text_lines` (gzip, bzip2 and xz decompressed, a byte-order
mark and CRLF taken, NFC).

Transcripts: :func:`normalize_transcript` writes another convention's transcript in the one
of :mod:`attnkit.data.worlds.speech` (lower case, numbers in words); see there.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import unicodedata
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from attnkit.data.audio.features import SAMPLE_RATE, log_mel, n_frames, resample
from attnkit.data.audio.files import MAX_SECONDS, RawPCM, audio_info, read_audio, span
from attnkit.data.corpora.speech_sets import FeaturesOnDisk, SpeechSet, spoken_number
from attnkit.data.corpora.text_files import text_lines
from attnkit.data.corpora.tsv import HEADER_WORDS, MAX_CHARS
from attnkit.data.corpora.unusable import MAX_UNUSABLE, Unusable
from attnkit.data.paths import inside
from attnkit.errors import DataError

__all__ = [
    "Clip",
    "PackedTexts",
    "SPEECH_ALPHABET",
    "SpeechCorpus",
    "TRANSCRIPTS",
    "normalize_transcript",
    "read_manifest",
]

log = logging.getLogger("attnkit")

SPEECH_ALPHABET = "abcdefghijklmnopqrstuvwxyz' "  # what normalised transcripts are written in
TRANSCRIPTS = ("keep", "normalize")  # what a reader does with a corpus's transcripts
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'", "\u00b4": "'"})
_SPACE_MARKS = re.compile(r"[-\u2010-\u2015_/\\]+")  # hyphens, dashes, underscores, slashes
_NUMBER = re.compile(r"\d+")
_QUOTE = re.compile(r"(?<!\w)'|'(?!\w)")  # an apostrophe not inside a word is a quote mark


class PackedTexts(Sequence):
    """Strings kept as one UTF-8 buffer and the offsets of each: about a byte per character
    and 16 bytes per string, where a list of ``str`` holds a Python object of ~50 bytes plus
    1-4 bytes per character for each, so a corpus's transcripts and paths take little memory.
    Indexing gives a ``str``; a slice is a :class:`PackedTexts` over the same buffer."""

    def __init__(self, buffer: bytes, starts: np.ndarray, ends: np.ndarray):
        self.buffer, self.starts, self.ends = buffer, starts, ends

    @classmethod
    def of(cls, texts) -> PackedTexts:
        """The strings of the iterable ``texts``, packed."""
        buffer, ends = bytearray(), array("q")
        for text in texts:
            buffer += text.encode("utf-8")
            ends.append(len(buffer))
        stop = np.frombuffer(ends, dtype=np.int64) if ends else np.zeros(0, np.int64)
        return cls(bytes(buffer), np.concatenate([[0], stop[:-1]]).astype(np.int64), stop)

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return PackedTexts(self.buffer, self.starts[i], self.ends[i])
        return self.buffer[self.starts[i] : self.ends[i]].decode("utf-8")

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, Sequence)
            and len(self) == len(other)
            and all(a == b for a, b in zip(self, other))
        )

    def __repr__(self) -> str:
        head = ", ".join(repr(t) for t in self[:3])
        return f"PackedTexts([{head}{', ...' if len(self) > 3 else ''}], {len(self)} texts)"


class Clip(NamedTuple):
    """Where an utterance's audio is: a file, and the part of it from ``start`` to ``end``
    seconds (None: the end), a Kaldi segment of a longer recording."""

    path: str
    start: float = 0.0
    end: float | None = None


class _Clips(Sequence):
    """:class:`Clip` records kept as packed paths and two float64 arrays (NaN: no end)."""

    def __init__(self, paths: PackedTexts, starts: np.ndarray, ends: np.ndarray):
        self.paths, self.starts, self.ends = paths, starts, ends

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return _Clips(self.paths[i], self.starts[i], self.ends[i])
        end = float(self.ends[i])
        return Clip(self.paths[i], float(self.starts[i]), None if math.isnan(end) else end)


class _AudioFeatures(FeaturesOnDisk):
    """Utterances of audio files: records are :class:`Clip` s, read (the clip's part only;
    ``*.raw`` files as ``raw`` says), resampled to 16 kHz and turned into log-mels when
    indexed."""

    has_samples = True

    def __init__(
        self,
        clips: Sequence[Clip],
        frames: Sequence[int] | np.ndarray,
        *,
        normalize: bool,
        max_seconds: float | None,
        raw: RawPCM | None = None,
    ):
        super().__init__(clips, frames, normalize=normalize)
        self.max_seconds, self.raw = max_seconds, raw

    def read(self, record) -> torch.Tensor:
        return log_mel(self.read_samples(record))

    def read_samples(self, record) -> torch.Tensor:
        path, start, end = record
        samples, rate = read_audio(
            path, start=start, end=end, max_seconds=self.max_seconds, raw=self.raw
        )
        return resample(samples, rate, SAMPLE_RATE)


def normalize_transcript(text: str) -> str:
    """A transcript of another convention in this one's words (:data:`SPEECH_ALPHABET`).

    Unicode NFC, then case-folded (``str.casefold``: ``"Straße"`` -> ``"strasse"``);
    typographic apostrophes become ``'``; every run of digits is spelled out in English
    words (``"42"`` -> ``"forty two"``, as the built-in numbers are); hyphens, dashes,
    underscores and slashes become spaces; other punctuation and symbols (Unicode categories
    P and S) are removed, and so are apostrophes that are not inside a word (quote marks);
    white space is collapsed to single spaces. Letters are kept as they are (``"é"`` stays):
    a reader drops, and counts, a transcript left with characters outside its alphabet.

    Example:
        >>> normalize_transcript("“It’s 42,” she said—QUIETLY.")
        "it's forty two she said quietly"
    """
    text = unicodedata.normalize("NFC", text).casefold().translate(_APOSTROPHES)
    text = _NUMBER.sub(lambda m: f" {_spoken_digits(m.group())} ", text)
    text = _SPACE_MARKS.sub(" ", text)
    text = "".join(c for c in text if c == "'" or unicodedata.category(c)[0] not in "PS")
    return " ".join(_QUOTE.sub(" ", text).split())


def _spoken_digits(digits: str) -> str:
    """A run of digits in words: a number up to 15 digits long, else digit by digit."""
    if len(digits) > 15:
        return " ".join(spoken_number(int(d)) for d in digits)
    return spoken_number(int(digits))


class _TextBuffer:
    """Strings appended one at a time, then packed into a :class:`PackedTexts`."""

    def __init__(self):
        self.buffer, self.ends = bytearray(), array("q")

    def append(self, text: str) -> None:
        self.buffer += text.encode("utf-8")
        self.ends.append(len(self.buffer))

    def pack(self) -> PackedTexts:
        ends = np.array(self.ends, dtype=np.int64)
        starts = np.concatenate([np.zeros(1, np.int64), ends[:-1]]) if len(ends) else ends
        return PackedTexts(bytes(self.buffer), starts, ends)


class SpeechCorpus:
    """A corpus's utterances gathered one at a time by a reader, each checked from its audio
    file's header and its transcript, into a :class:`SpeechSet` whose features are read when
    indexed (:class:`FeaturesOnDisk`). Memory holds the packed paths, transcripts and origins
    and 20 bytes per utterance, never its audio.

    An utterance that cannot be used (its audio missing, unreadable, of a codec neither
    attnkit nor libsndfile reads, of sample rate 0, too long or too short, a segment outside
    its recording; its transcript empty or with characters outside ``alphabet``; a bad line
    of the reader's files) is dropped with a message naming the file and line or utterance
    id, and counted: :meth:`finish` stops with an error listing the first few when more than
    ``max_unusable`` of the corpus (a share, 0 to 1) was dropped, and otherwise logs a
    warning with the counts by kind and the first few.

    Args:
        source: the corpus, as errors name it.
        max_unusable: the share of utterances that may be dropped.
        max_seconds: the longest utterance (None: no limit).
        min_frames: the fewest log-mel frames an utterance may have.
        transcripts: ``"keep"``: as written; ``"normalize"``: :func:`normalize_transcript`.
        alphabet: the characters a transcript may hold (None: any).
        references: False for a corpus read only for its audio (decoding it): an empty
            transcript is kept, not unusable.
        raw: how its headerless ``*.raw`` files are read (:class:`RawPCM`; None: a ``.raw``
            file is read by its header like any other).
    """

    def __init__(
        self,
        source: str | Path,
        *,
        max_unusable: float = MAX_UNUSABLE,
        max_seconds: float | None = MAX_SECONDS,
        min_frames: int = 1,
        transcripts: str = "keep",
        alphabet: str | None = None,
        references: bool = True,
        raw: RawPCM | None = None,
    ):
        if transcripts not in TRANSCRIPTS:
            raise ValueError(
                f"transcripts: expected one of {', '.join(TRANSCRIPTS)}, got {transcripts!r}"
            )
        self.source, self.max_seconds = str(source), max_seconds
        self.unusable = Unusable(source, max_unusable=max_unusable, what="utterances")
        self.min_frames, self.transcripts, self.references = min_frames, transcripts, references
        self.alphabet = None if alphabet is None else frozenset(alphabet)
        self._paths, self._texts, self._origins = _TextBuffer(), _TextBuffer(), _TextBuffer()
        self._starts, self._ends, self._frames = array("d"), array("d"), array("i")
        self.raw = raw
        # segments share recordings
        self._info = functools.lru_cache(maxsize=64)(functools.partial(audio_info, raw=raw))

    @property
    def kept(self) -> int:
        return len(self._frames)

    def drop(self, message: str, kind: str) -> bool:
        """Count one unusable utterance of ``kind`` (a few words: ``"audio"``, ``"line"``),
        ``message`` naming where it is and why; returns False."""
        self.unusable.drop(message, kind)
        return False

    def transcript(self, where: str, text: str) -> str | None:
        """``text`` as the corpus keeps it, or None after counting it unusable."""
        if self.transcripts == "normalize":
            text = normalize_transcript(text)
        if not text.strip() and not self.references:
            return ""
        if not text.strip():
            self.drop(f"{where}: empty transcript", "transcript")
            return None
        if len(text) > MAX_CHARS:
            self.drop(
                f"{where}: transcript of {len(text)} characters, more than the limit "
                f"of {MAX_CHARS}",
                "transcript",
            )
            return None
        outside = set(text) - self.alphabet if self.alphabet is not None else ()
        if outside:
            self.drop(
                f"{where}: transcript {text[:80]!r} has characters outside the "
                f"alphabet: {''.join(sorted(outside))!r}",
                "transcript",
            )
            return None
        return text

    def add(
        self,
        where: str,
        audio: str | Path,
        transcript: str,
        *,
        start: float = 0.0,
        end: float | None = None,
        origin: str | None = None,
        rate: int | None = None,
    ) -> bool:
        """Add the utterance ``transcript`` spoken in ``audio`` (from ``start`` to ``end``
        seconds of it, None: the end), ``where`` naming its line or id in errors and
        ``origin`` in the set (default: the audio path); with ``rate``, audio of another
        sample rate is unusable (a corpus recorded at one rate). Returns whether it was
        kept."""
        text = self.transcript(where, transcript)
        if text is None:
            return False
        audio = str(audio)
        try:
            info = self._info(audio)
            first, stop = (
                span(info, start, end, audio) if start or end is not None else (0, info.samples)
            )
        except DataError as exc:
            return self.drop(f"{where}: {exc}", "audio")
        if rate is not None and info.rate != rate:
            return self.drop(
                f"{where}: {audio}: sample rate {info.rate:,} Hz, expected {rate:,} Hz "
                "as the corpus is recorded",
                "sample rate",
            )
        seconds = (stop - first) / info.rate
        if self.max_seconds is not None and seconds > self.max_seconds:
            return self.drop(
                f"{where}: {audio}: {seconds:.1f} s of audio, more than "
                f"max_seconds={self.max_seconds:g}; cut it into utterances",
                "too long",
            )
        frames = n_frames(stop - first, info.rate)
        if frames < self.min_frames:
            return self.drop(
                f"{where}: {audio}: {frames} feature frames ({seconds * 1000:.0f} "
                f"ms of audio); at least {self.min_frames} needed",
                "too short",
            )
        self._paths.append(audio)
        self._texts.append(text)
        self._origins.append(audio if origin is None else origin)
        self._starts.append(start)
        self._ends.append(math.nan if end is None else end)
        self._frames.append(frames)
        return True

    def finish(self, *, normalize: bool = False) -> SpeechSet:
        """The utterances kept, their features normalised per utterance with ``normalize``.

        Raises:
            DataError: naming the corpus and the first few unusable utterances, when none is
                usable or more than ``max_unusable`` of them are not.
        """
        self.unusable.check(self.kept)
        clips = _Clips(
            self._paths.pack(),
            np.array(self._starts, dtype=np.float64),
            np.array(self._ends, dtype=np.float64),
        )
        features = _AudioFeatures(
            clips,
            np.array(self._frames, dtype=np.int32),
            normalize=normalize,
            max_seconds=self.max_seconds,
            raw=self.raw,
        )
        return SpeechSet(features, self._texts.pack(), self._origins.pack())


def read_manifest(
    path: str | Path,
    *,
    normalize: bool = False,
    max_seconds: float | None = MAX_SECONDS,
    confine: bool = False,
    max_unusable: float = MAX_UNUSABLE,
    min_frames: int = 1,
    transcripts: str = "keep",
    alphabet: str | None = None,
) -> SpeechSet:
    """The user's own speech: a UTF-8 manifest of ``audio_path<TAB>transcript`` lines, attnkit's
    own format (every other is read by :mod:`attnkit.data.corpora.speech_formats`).

    Audio paths are relative to the manifest's folder or absolute (with ``confine``, only
    files inside that folder are taken; :func:`attnkit.data.paths.inside`); each file is a
    WAV (PCM of 8-32 bits, float), FLAC, OGG or MP3 at any rate and channel count (channels are
    averaged), resampled to 16 kHz, at most ``max_seconds`` long. Transcripts are used as
    written, in NFC (``transcripts="normalize"``: :func:`normalize_transcript`). The manifest
    is read a line at a time (:func:`attnkit.data.corpora.text_files.text_lines`: gzip, bzip2 and xz
    decompressed, a byte-order mark and CRLF line ends taken); blank lines are skipped, and a
    first line of column names (``wav<TAB>transcript``) with a warning. Each audio file's
    header is read and checked here; its features are computed when indexed
    (:class:`~attnkit.data.corpora.speech_sets.FeaturesOnDisk`), in float32, and come out in
    :data:`~attnkit.data.corpora.speech_sets.FEATURE_DTYPE`. Unusable lines and files are dropped
    and counted, up to ``max_unusable`` (:class:`SpeechCorpus`).

    Raises:
        DataError: naming the manifest and the first lines or audio files that are missing or
            unusable, when more than ``max_unusable`` of them are.
    """
    path = Path(path)
    corpus = SpeechCorpus(
        path,
        max_unusable=max_unusable,
        max_seconds=max_seconds,
        min_frames=min_frames,
        transcripts=transcripts,
        alphabet=alphabet,
    )
    seen = False
    for n, line in text_lines(path):
        if not line.strip() and "\t" not in line:
            continue
        where, parts = f"{path}:{n}", line.split("\t")
        if not seen and {p.strip().lower() for p in parts} <= HEADER_WORDS:
            log.warning("%s: %r is a header, not an example: skipped", where, line)
            seen = True
            continue
        seen = True
        problem = _manifest_problem(parts)
        if problem:
            corpus.drop(f"{where}: {problem}", "line")
            continue
        try:
            audio = inside(path.parent, parts[0], where, confine=confine)
        except DataError as exc:
            corpus.drop(str(exc), "audio")
            continue
        corpus.add(where, audio, parts[1])
    return corpus.finish(normalize=normalize)


def _manifest_problem(parts: list[str]) -> str | None:
    """What is wrong with the fields of one manifest line, or None."""
    if len(parts) != 2:
        return f"expected wav<TAB>transcript, found {len(parts) - 1} tabs"
    for name, part in zip(("wav", "transcript"), parts):
        if not part.strip():
            return f"empty {name}"
        if "\x00" in part:
            return f"NUL character in the {name}"
    return None
