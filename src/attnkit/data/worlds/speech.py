"""Speech for the Listen, Attend and Spell task: utterances synthesised offline, and the user's own.

Built-in utterances are spoken by the ``espeak-ng`` command-line tool (bit-reproducible, unlike
its library), resampled from 22,050 Hz to 16 kHz and turned into 80-bin log-mel features.
Three kinds of content:

* **digits**: ``"4 0 7 2"`` read digit by digit, transcript ``"four zero seven two"``;
* **numbers**: ``"4072"`` read as a number, transcript ``"four thousand and seventy two"``
  (num2words' British English, hyphens and commas turned into spaces);
* **sentences**: 3 to 8 words from a list of common English words shipped with attnkit.

Transcript convention: lower-case ``a``-``z`` and single spaces only, numbers always spelled out
in words, and the transcript is exactly the text espeak-ng is given, so the audio says what the
target says. The written form (``"4 0 7 2"``, ``"4072"``) is kept as :attr:`Utterance.text`.

The user's corpora follow their own conventions (LibriSpeech is upper case, Common Voice
punctuated, with digits). A reader keeps a transcript as written (``transcripts="keep"``, the
default of attnkit's own manifest) or normalises it (``"normalize"``, the default of every other
format; :func:`attnkit.data.corpora.utterances.normalize_transcript`): Unicode NFC, case-folded,
digits spelled out in English words, punctuation and symbols removed, apostrophes inside words kept.
A transcript then left with characters outside the reader's alphabet (``a``-``z``, ``'`` and
space by default, :data:`attnkit.data.corpora.utterances.SPEECH_ALPHABET`; ``--alphabet``) is not
mapped further: its utterance is dropped and counted, with the characters named
(:class:`attnkit.data.corpora.utterances.SpeechCorpus`), so a corpus in another language is trained
with its own alphabet rather than losing its letters.

Five engines speak (``engines``, :data:`ENGINES`; :mod:`attnkit.data.worlds.synthesis` says how
each makes speech): ``espeak-ng`` (formant synthesis) with every English accent
(:data:`ACCENTS`) and voice variant it ships (:func:`espeak_variants`), at a drawn speed, pitch,
word gap and amplitude; ``festival`` (two diphone voices and one HTS voice) at a drawn duration
stretch and, for the diphone voices, mean pitch; ``gnuspeech`` (articulatory synthesis, four
voices) at a drawn tempo and pitch; ``pico`` (SVOX Pico's hidden-Markov models, two voices)
at a drawn speed and pitch; and ``accented`` (festival's voices of other languages saying
English, seven voices) at a drawn duration stretch. Splits hold out speakers and speaking
rates (:data:`SPLITS`): valid and test have their own espeak-ng variants, one voice of each
other engine that training never hears (``ked_diphone``, ``small_child``, ``en-GB``,
``czech_ph``) and their own speed band. Each example is drawn from a generator seeded by
``(seed, split, index)``. Features are cached on disk, keyed by a hash of the settings.

Built-in speech is a :class:`~attnkit.data.corpora.speech_sets.SpeechSet`, as a corpus is, its
features kept on disk in the cache (:mod:`attnkit.data.corpora.speech_sets` says how).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from attnkit.data.audio.features import (
    N_MELS,
    SAMPLE_RATE,
    frame_count,
    log_mel,
    resample,
)
from attnkit.data.corpora.speech_sets import FeaturesOnDisk, SpeechSet, spoken_number
from attnkit.data.worlds.synthesis import (
    ACCENTS,
    ENGINES,
    ESPEAK_CONSONANTS,
    FESTIVAL_ACCENTS,
    GNUSPEECH_PACKAGE,
    GNUSPEECH_TRACT,
    espeak_command,
    espeak_variants,
    festival_many,
    gnuspeech_many,
    gnuspeech_tract,
    pico_many,
    pico_version,
    synthesize,
)
from attnkit.errors import DataError

__all__ = [
    "HELD_OUT_VARIANTS",
    "KINDS",
    "SPLITS",
    "Utterance",
    "plan_utterances",
    "speech_dataset",
    "training_variants",
    "utterance_audio",
    "utterances_audio",
]

log = logging.getLogger("attnkit")

KINDS = ("digits", "numbers", "sentences")

# espeak-ng variants held out of training; every other variant espeak-ng ships is a training one
HELD_OUT_VARIANTS = {
    "valid": ("m5", "f4", "Andy", "AnxiousAndy", "Annie", "klatt2", "Mike"),
    "test": (
        "m6",
        "m7",
        "f5",
        "Alicia",
        "Jacky",
        "klatt4",
        "steph",
        "steph2",
        "steph3",
        "Gene",
        "Gene2",
    ),
}


@dataclass(frozen=True)
class SplitSpeakers:
    """The espeak-ng voice variants (``""`` = the accent's own voice; ``None``: every variant
    not held out), festival, gnuspeech, pico and accented voices and speed bands of one split;
    with ``gnuspeech_tract`` each gnuspeech utterance has a speaker of its own, its voice's
    settings drawn anew (:func:`attnkit.data.worlds.synthesis.gnuspeech_tract`)."""

    variants: tuple[str, ...] | None
    festival: tuple[str, ...]
    speeds: tuple[range, ...]  # words per minute, espeak-ng's -s
    gnuspeech: tuple[str, ...]
    gnuspeech_tract: bool = False
    pico: tuple[str, ...] = ()
    accented: tuple[str, ...] = ()


SPLITS = {
    "train": SplitSpeakers(
        None,
        ("kal_diphone", "cmu_us_slt_arctic_hts"),
        (range(110, 150), range(171, 211)),
        ("male", "female", "large_child"),
        gnuspeech_tract=True,
        pico=("en-US",),
        accented=tuple(v for v in FESTIVAL_ACCENTS if v != "czech_ph"),
    ),
    "valid": SplitSpeakers(
        HELD_OUT_VARIANTS["valid"],
        ("ked_diphone",),
        (range(150, 160),),
        ("small_child",),
        pico=("en-GB",),
        accented=("czech_ph",),
    ),
    "test": SplitSpeakers(
        HELD_OUT_VARIANTS["test"],
        ("ked_diphone",),
        (range(160, 171),),
        ("small_child",),
        pico=("en-GB",),
        accented=("czech_ph",),
    ),
}
PITCHES = range(20, 81)  # espeak-ng's -p, 0-99 with 50 the voice's default
GAPS = range(0, 6)  # espeak-ng's -g: pause between words, in units of 10 ms
AMPLITUDES = range(60, 181)  # espeak-ng's -a, 100 its default
SYNTH_CHUNK = 64  # utterances synthesised by one task of the cache's worker pool
AUDIO_FILE = "audio.safetensors"  # a cache's samples, beside its features, when asked for
PCM_SCALE = 32768.0  # the cache keeps samples as 16-bit PCM: int16 / 32768 in [-1, 1)
CACHE_VERSION = 3  # bump when a change here or in audio.py changes the cached features
_DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


@dataclass(frozen=True)
class Utterance:
    """One synthesised utterance: what is said, by which engine and voice, and how.

    ``voice`` is an espeak-ng voice such as ``"en-us+f3"`` or a festival voice such as
    ``"kal_diphone"`` (:data:`FESTIVAL_VOICES`), a gnuspeech voice such as ``"female"``
    (:data:`GNUSPEECH_VOICES`) or a pico voice such as ``"en-US"`` (:data:`PICO_VOICES`);
    ``speed`` in words per minute (festival: a duration stretch of ``170 / speed``; gnuspeech:
    a tempo of ``speed / 160``; pico: ``speed / 170`` of its own); ``pitch`` 0-99, 50 the
    voice's own (festival's HTS voice keeps its own); ``gap`` espeak-ng's pause between words
    in 10 ms units and ``amplitude`` its loudness, 100 its default (the others: 0 and 100);
    ``noise_snr_db`` the signal-to-noise ratio of added white noise (``None``: clean), drawn
    with ``noise_seed``; ``tract`` gnuspeech's settings that replace the voice's own, as
    ``(name, value)`` pairs (:func:`attnkit.data.worlds.synthesis.gnuspeech_tract`); ``consonants``
    espeak-ng's unvoiced consonants' loudness in percent (``None``: the voice's own); ``spoken``
    the words said aloud where they differ from the transcript (``None``: the transcript; a
    digit string says "oh" where its transcript writes "zero").
    """

    kind: str
    text: str
    transcript: str
    voice: str
    speed: int
    pitch: int
    noise_snr_db: float | None
    noise_seed: int
    engine: str = "espeak-ng"
    gap: int = 0
    amplitude: int = 100
    tract: tuple[tuple[str, float], ...] = ()
    consonants: int | None = None
    spoken: str | None = None

    @property
    def said(self) -> str:
        """The words the engine is given: :attr:`spoken`, else the transcript."""
        return self.transcript if self.spoken is None else self.spoken


class _CachedFeatures(FeaturesOnDisk):
    """Utterances of a built-in cache: records are their ``(first, last + 1)`` rows in
    ``features.safetensors``, read through safetensors' memory map (the file mapped only while
    one utterance is read), and with the cache's audio (``audio``) their samples' ``(first,
    last + 1)`` in ``audio.safetensors`` after them."""

    def __init__(
        self,
        path: Path,
        rows: Sequence[tuple[int, ...]],
        *,
        normalize: bool,
        audio: Path | None = None,
    ):
        super().__init__(rows, [row[1] - row[0] for row in rows], normalize=normalize)
        self.path, self.audio = path, audio
        self.has_samples = audio is not None

    def read(self, record) -> torch.Tensor:
        start, stop = record[:2]
        with safe_open(str(self.path), framework="pt") as f:
            return f.get_slice("features")[start:stop]

    def read_samples(self, record) -> torch.Tensor:
        start, stop = record[2:]
        with safe_open(str(self.audio), framework="pt") as f:
            return f.get_slice("samples")[start:stop].float() / PCM_SCALE


@functools.cache
def _words() -> tuple[str, ...]:
    text = resources.files("attnkit.data.worlds").joinpath("spoken_words_en.txt").read_text("utf-8")
    return tuple(text.split())


def _content(kind: str, rng: random.Random) -> tuple[str, str]:
    """``(written text, transcript)`` of one example of ``kind``."""
    if kind == "digits":
        digits = [rng.randrange(10) for _ in range(rng.randint(3, 8))]
        return " ".join(map(str, digits)), " ".join(_DIGITS[d] for d in digits)
    if kind == "numbers":
        n_digits = rng.randint(1, 6)  # lengths spread evenly: 1 to 6 digits
        value = rng.randrange(10 ** (n_digits - 1) if n_digits > 1 else 0, 10**n_digits)
        return str(value), spoken_number(value)
    sentence = " ".join(rng.choices(_words(), k=rng.randint(3, 8)))
    return sentence, sentence


def training_variants() -> tuple[str, ...]:
    """The espeak-ng voice variants training speaks with: every one this machine's espeak-ng
    ships (:func:`attnkit.data.worlds.synthesis.espeak_variants`) but :data:`HELD_OUT_VARIANTS`."""
    held = {v for variants in HELD_OUT_VARIANTS.values() for v in variants}
    return tuple(v for v in espeak_variants() if v not in held)


def plan_utterances(
    n: int,
    *,
    split: str = "train",
    seed: int = 0,
    kinds: tuple[str, ...] = KINDS,
    noise_snr_db: tuple[float, float] | None = None,
    engines: tuple[str, ...] = ("espeak-ng",),
    consonants: tuple[int, int] | None = None,
    oh: float = 0.0,
) -> list[Utterance]:
    """The ``n`` utterances of ``split`` (text, engine, voice, speed, pitch, noise), without
    audio.

    Example ``i`` depends only on ``(seed, split, i)`` and the other arguments, so a longer
    plan starts with a shorter one. Each example's engine is drawn uniformly from ``engines``
    (:data:`ENGINES`), then its voice from the split's voices of that engine.
    ``noise_snr_db=(low, high)`` adds white noise at an SNR drawn uniformly from that range
    in dB; ``consonants=(low, high)`` each espeak-ng utterance's unvoiced consonants at a
    loudness drawn uniformly from that range, in percent (:func:`synthesize`); ``oh`` the
    probability that a digit string says each of its zeros "oh", as people reading digits
    aloud often do (the transcript keeps "zero"; drawn after every other choice, so an
    example's other draws are those of ``oh=0``).
    """
    if split not in SPLITS:
        raise ValueError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")
    if not kinds or any(k not in KINDS for k in kinds):
        raise ValueError(f"kinds: expected a non-empty subset of {KINDS}, got {kinds!r}")
    if not engines or any(e not in ENGINES for e in engines):
        raise ValueError(f"engines: expected a non-empty subset of {ENGINES}, got {engines!r}")
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n: expected a non-negative int, got {n!r}")
    if not (isinstance(oh, (int, float)) and 0 <= oh <= 1):
        raise ValueError(f"oh: expected a probability in [0, 1], got {oh!r}")
    if noise_snr_db is not None and not (
        len(noise_snr_db) == 2 and noise_snr_db[0] <= noise_snr_db[1]
    ):
        raise ValueError(
            f"noise_snr_db: expected None or (low, high) with low <= high, got {noise_snr_db!r}"
        )
    least, most = ESPEAK_CONSONANTS
    if consonants is not None and not (
        len(consonants) == 2
        and all(isinstance(c, int) and least <= c <= most for c in consonants)
        and consonants[0] <= consonants[1]
    ):
        raise ValueError(
            f"consonants: expected None or (low, high), ints with {least} <= low "
            f"<= high <= {most}, got {consonants!r}"
        )
    speakers = SPLITS[split]
    variants = speakers.variants
    if variants is None:
        variants = ("", *training_variants()) if "espeak-ng" in engines else ()
    speeds = [s for band in speakers.speeds for s in band]
    out = []
    for i in range(n):
        rng = random.Random(f"speech-{seed}-{split}-{i}")
        kind = rng.choice(kinds)
        text, transcript = _content(kind, rng)
        engine = rng.choice(engines)
        if engine == "espeak-ng":
            variant = rng.choice(variants)
            voice = rng.choice(ACCENTS) + (f"+{variant}" if variant else "")
            gap, amplitude = rng.choice(GAPS), rng.choice(AMPLITUDES)
        else:
            voices = {
                "festival": speakers.festival,
                "gnuspeech": speakers.gnuspeech,
                "pico": speakers.pico,
                "accented": speakers.accented,
            }[engine]
            voice, gap, amplitude = rng.choice(voices), 0, 100
        speed, pitch = rng.choice(speeds), rng.choice(PITCHES)
        snr = None if noise_snr_db is None else round(rng.uniform(*noise_snr_db), 2)
        noise_seed = rng.getrandbits(63)
        tract: tuple[tuple[str, float], ...] = ()
        if engine == "gnuspeech" and speakers.gnuspeech_tract:
            tract = tuple(gnuspeech_tract(rng).items())
        loudness = rng.randint(*consonants) if engine == "espeak-ng" and consonants else None
        spoken = None
        if oh and kind == "digits" and "zero" in transcript.split():
            words = ["oh" if w == "zero" and rng.random() < oh else w for w in transcript.split()]
            spoken = " ".join(words) if "oh" in words else None
        out.append(
            Utterance(
                kind,
                text,
                transcript,
                voice,
                speed,
                pitch,
                snr,
                noise_seed,
                engine,
                gap,
                amplitude,
                tract,
                loudness,
                spoken,
            )
        )
    return out


def _describe(u: Utterance) -> str:
    noise = "" if u.noise_snr_db is None else f" snr={u.noise_snr_db}dB"
    if u.engine != "espeak-ng":
        tract = f" tract={dict(u.tract).get('vocal_tract_length', '?')}cm+" if u.tract else ""
        return f"{u.engine} {u.voice}{tract} s={u.speed} p={u.pitch}{noise}"
    shaped = "" if u.consonants is None else f" c={u.consonants}"
    return f"espeak-ng {u.voice} s={u.speed} p={u.pitch} g={u.gap} a={u.amplitude}{shaped}{noise}"


def utterance_audio(u: Utterance) -> torch.Tensor:
    """The samples ``(N,)`` of one planned utterance at 16 kHz, noise added: what its cached
    features are the log-mels of (synthesised again: the cache holds features only)."""
    return _chunk_audio([u])[0]


def utterances_audio(plan: Sequence[Utterance]) -> list[torch.Tensor]:
    """:func:`utterance_audio` of each planned utterance, the same samples, each engine's
    utterances spoken :data:`SYNTH_CHUNK` at a time by one process (festival, gnuspeech and
    pico start up once a chunk instead of once an utterance)."""
    return [samples for chunk in _chunks(list(plan)) for samples in _chunk_audio(chunk)]


def _spoken_item(u: Utterance) -> tuple:
    """The item :func:`festival_many`, :func:`gnuspeech_many` or :func:`pico_many` takes for
    ``u``."""
    item = (u.said, u.voice, u.speed, u.pitch)
    return (*item, dict(u.tract)) if u.engine == "gnuspeech" else item


def _chunk_audio(plan: Sequence[Utterance]) -> list[torch.Tensor]:
    """:func:`utterance_audio` of each planned utterance, festival's (and accented) spoken by
    one process, gnuspeech's by another and pico's by a third."""
    spoken: dict[int, tuple[torch.Tensor, int]] = {}
    for engines, speak in (
        (("festival", "accented"), festival_many),
        (("gnuspeech",), gnuspeech_many),
        (("pico",), pico_many),
    ):
        ours = [i for i, u in enumerate(plan) if u.engine in engines]
        if ours:
            said = speak([_spoken_item(plan[i]) for i in ours])
            spoken.update(zip(ours, said))
    out = []
    for i, u in enumerate(plan):
        samples, rate = (
            spoken[i]
            if i in spoken
            else synthesize(
                u.said,
                voice=u.voice,
                speed=u.speed,
                pitch=u.pitch,
                gap=u.gap,
                amplitude=u.amplitude,
                engine=u.engine,
                tract=dict(u.tract),
                consonants=u.consonants,
            )
        )
        samples = resample(samples, rate, SAMPLE_RATE)  # (N,)
        if u.noise_snr_db is not None:
            rms = float(samples.square().mean().sqrt())
            noise = np.random.default_rng(u.noise_seed).standard_normal(samples.numel())
            samples = samples + torch.from_numpy(noise.astype(np.float32)) * (
                rms / 10 ** (u.noise_snr_db / 20)
            )
        out.append(samples)
    return out


def _chunks(plan: list[Utterance]) -> list[list[Utterance]]:
    return [plan[i : i + SYNTH_CHUNK] for i in range(0, len(plan), SYNTH_CHUNK)]


def _chunk_features(plan: Sequence[Utterance]) -> list[torch.Tensor]:
    """Raw log-mel features ``(T, 80)`` of each planned utterance."""
    return [log_mel(samples) for samples in _chunk_audio(plan)]


def speech_dataset(
    n: int,
    *,
    split: str = "train",
    seed: int = 0,
    cache_dir: str | Path,
    kinds: tuple[str, ...] = KINDS,
    noise_snr_db: tuple[float, float] | None = None,
    normalize: bool = False,
    workers: int = 2,
    audio: bool = False,
    engines: tuple[str, ...] = ("espeak-ng",),
    consonants: tuple[int, int] | None = None,
    oh: float = 0.0,
) -> SpeechSet:
    """``n`` synthesised utterances of ``split`` as log-mel features, cached under ``cache_dir``.

    ``engines`` are the synthesisers drawn from, ``consonants`` the range of espeak-ng's
    unvoiced consonants' loudness, ``oh`` the probability of a digit's zero said "oh"
    (:func:`plan_utterances`). The first call
    synthesises with ``workers`` synthesiser processes at a time and writes
    ``cache_dir/<split>-<n>-<hash of the settings>/`` (``features.safetensors`` and
    ``index.json``); a later call with the same settings reads it without running espeak-ng.
    The cache holds raw float32 log-mels, read one utterance at a time when indexed
    (:class:`FeaturesOnDisk`); ``normalize`` (zero mean, unit variance per mel bin over each
    utterance) is applied in float32 then, and the features come out in
    :data:`~attnkit.data.corpora.speech_sets.FEATURE_DTYPE`.

    With ``audio`` the set keeps the utterances' 16 kHz samples as well (16-bit PCM,
    ``audio.safetensors`` in the same folder, written the first time they are asked for, by
    synthesising again), which :meth:`FeaturesOnDisk.samples` reads: what augmentation of the
    audio (speed, noise, reverberation) needs.

    Shape:
        ``features[i]``: ``(T_i, 80)``, ``T_i = 1 + samples_i // 160`` at 16 kHz.
    """
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: expected a positive int, got {workers!r}")
    plan = plan_utterances(
        n,
        split=split,
        seed=seed,
        kinds=kinds,
        noise_snr_db=noise_snr_db,
        engines=engines,
        consonants=consonants,
        oh=oh,
    )
    settings = {
        "version": CACHE_VERSION,
        "n": n,
        "split": split,
        "seed": seed,
        "kinds": list(kinds),
        "engines": list(engines),
        "noise_snr_db": noise_snr_db,
        "variants": list(espeak_variants()) if "espeak-ng" in engines else [],
        "sample_rate": SAMPLE_RATE,
        "n_mels": N_MELS,
        "words": hashlib.sha256(" ".join(_words()).encode()).hexdigest()[:16],
    }
    if "gnuspeech" in engines:
        settings["gnuspeech"] = GNUSPEECH_PACKAGE
        if SPLITS[split].gnuspeech_tract:
            settings["gnuspeech_tract"] = {k: list(v) for k, v in GNUSPEECH_TRACT.items()}
    if "pico" in engines:
        settings["pico"] = pico_version()
    if consonants is not None and "espeak-ng" in engines:
        settings["consonants"] = list(consonants)
    if oh and "digits" in kinds:  # absent at 0: the caches written before it stay valid
        settings["oh"] = oh
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    folder = Path(cache_dir) / f"{split}-{n}-{key}"
    if not (folder / "index.json").exists():
        _write_cache(folder, plan, settings, workers)
    features = _read_cache(folder, n, normalize)
    if audio:
        if not (folder / AUDIO_FILE).exists():
            _write_audio(folder, plan, workers)
        features = _with_audio(features, folder / AUDIO_FILE)
    return SpeechSet(features, [u.transcript for u in plan], [_describe(u) for u in plan])


def _write_cache(folder: Path, plan: list[Utterance], settings: dict, workers: int) -> None:
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        feats = [f for chunk in pool.map(_chunk_features, _chunks(plan)) for f in chunk]
    elapsed = time.perf_counter() - start
    log.info(
        "synthesised %d utterances in %.1f s (%.1f utterances/s)",
        len(plan),
        elapsed,
        len(plan) / max(elapsed, 1e-9),
    )
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    lengths = torch.tensor([f.shape[0] for f in feats], dtype=torch.long)
    stacked = torch.cat(feats) if feats else torch.zeros(0, N_MELS)
    save_file({"features": stacked, "lengths": lengths}, str(tmp / "features.safetensors"))
    espeak_version = subprocess.run(
        [espeak_command(), "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    index = {
        "settings": settings,
        "espeak_ng": espeak_version,
        "utterances": [dataclasses.asdict(u) for u in plan],
    }
    (tmp / "index.json").write_text(json.dumps(index, indent=1), encoding="utf-8")
    try:
        os.replace(tmp, folder)
    except OSError:  # another process wrote the same cache first; theirs is identical
        shutil.rmtree(tmp)


def _write_audio(folder: Path, plan: list[Utterance], workers: int) -> None:
    """``folder/audio.safetensors``: the planned utterances' samples as 16-bit PCM
    (``samples``) and their ``lengths``, written beside and moved in whole."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        audio = [a for chunk in pool.map(_chunk_audio, _chunks(plan)) for a in chunk]
    log.info(
        "synthesised the audio of %d utterances in %.1f s", len(plan), time.perf_counter() - start
    )
    lengths = torch.tensor([a.numel() for a in audio], dtype=torch.long)
    pcm = torch.cat(audio) if audio else torch.zeros(0)
    pcm = (pcm * PCM_SCALE).round().clamp(-PCM_SCALE, PCM_SCALE - 1).to(torch.int16)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{AUDIO_FILE}.")
    os.close(fd)
    save_file({"samples": pcm, "lengths": lengths}, tmp)
    os.replace(tmp, folder / AUDIO_FILE)


def _with_audio(features: _CachedFeatures, path: Path) -> _CachedFeatures:
    """``features`` whose records hold their samples' rows in the cache's audio file too.

    Raises:
        DataError: the file is unreadable, or its utterances' lengths do not give the cached
            features' frames.
    """
    try:
        with safe_open(str(path), framework="pt") as f:
            lengths = f.get_tensor("lengths")
    except (OSError, KeyError, SafetensorError) as exc:
        raise DataError(
            f"{path}: unreadable speech audio cache ({exc}); delete it to rebuild it"
        ) from None
    frames = [frame_count(int(n)) for n in lengths]
    if frames != list(features.frames):
        raise DataError(
            f"{path}: its {len(lengths)} utterances do not match the features "
            f"beside it; delete it to rebuild it"
        )
    ends = lengths.cumsum(0).tolist()
    rows = [
        (*row, start, stop) for row, start, stop in zip(features.records, [0, *ends[:-1]], ends)
    ]
    return _CachedFeatures(features.path, rows, normalize=features.normalize, audio=path)


def _read_cache(folder: Path, n: int, normalize: bool) -> _CachedFeatures:
    path = folder / "features.safetensors"
    try:
        with safe_open(str(path), framework="pt") as f:
            rows, lengths = f.get_slice("features").get_shape()[0], f.get_tensor("lengths")
    except (OSError, KeyError, SafetensorError) as exc:
        raise DataError(
            f"{path}: unreadable speech cache ({exc}); delete {folder} to rebuild it"
        ) from None
    if len(lengths) != n or int(lengths.sum()) != rows:
        raise DataError(
            f"{path}: speech cache holds {len(lengths)} utterances, expected {n}; "
            f"delete {folder} to rebuild it"
        )
    ends = lengths.cumsum(0).tolist()
    return _CachedFeatures(path, list(zip([0, *ends[:-1]], ends)), normalize=normalize)
