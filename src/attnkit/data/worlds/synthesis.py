"""The speech synthesisers of the built-in speech, each run as a process so that the same
arguments give the same samples, bit for bit: the ``espeak-ng`` and ``festival`` command-line
tools (Debian packages ``espeak-ng``, ``festival`` and its voices), ``gnuspeech``, an
articulatory synthesiser (the npm package :data:`GNUSPEECH_PACKAGE`, run by ``node``), and
``pico``, SVOX Pico (the PyPI package :data:`PICO_PACKAGE`, ``pip install attnkit[speech]``,
run by ``pico_runner.py`` beside this file).

Five ways of making speech: ``espeak-ng`` is formant synthesis by rule (its klatt variants
with Klatt's 1980 synthesiser), speaking with any English accent (:data:`ACCENTS`) and voice
variant (:func:`espeak_variants`), speed, pitch, word gap, amplitude and loudness of its
unvoiced consonants; ``festival`` joins
recorded diphones (two voices) or generates from a hidden-Markov model trained on a recorded
speaker (one HTS voice, :data:`FESTIVAL_VOICES`), at a speed and (diphone voices) pitch;
``gnuspeech`` simulates a
vocal tract as a tube whose shapes follow rules (Hill, Manzara & Taube-Schock 1995), with its
voices (:data:`GNUSPEECH_VOICES`), speed and pitch; ``pico`` generates from hidden-Markov
models trained on a recorded speaker, as Android's built-in voice did (two English voices,
:data:`PICO_VOICES`), at a speed and pitch; ``accented`` is festival's recorded voices of
other languages (Italian, Finnish, Czech, Catalan) saying English with their own phones
(:mod:`attnkit.data.worlds.festival_accents`), at a speed.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from attnkit.data.audio.files import parse_wav
from attnkit.data.worlds.festival_accents import ACCENTS as FESTIVAL_ACCENTS
from attnkit.data.worlds.festival_accents import english_pronunciations, lexicon_entry

__all__ = [
    "ACCENTS",
    "ENGINES",
    "ESPEAK_CONSONANTS",
    "FESTIVAL_ACCENTS",
    "FESTIVAL_VOICES",
    "GNUSPEECH_PACKAGE",
    "GNUSPEECH_TRACT",
    "GNUSPEECH_VOICES",
    "PICO_PACKAGE",
    "PICO_VOICES",
    "espeak_command",
    "espeak_variants",
    "festival",
    "festival_many",
    "gnuspeech_folder",
    "gnuspeech_many",
    "gnuspeech_tract",
    "pico_many",
    "pico_version",
    "synthesize",
]

ENGINES = ("espeak-ng", "festival", "gnuspeech", "pico", "accented")
# espeak-ng voices whose "+variant" suffix takes effect ("en-gb+m1" silently ignores it; "en" is
# the same British voice and honours it)
ACCENTS = (
    "en",
    "en-us",
    "en-gb-x-rp",
    "en-gb-scotland",
    "en-029",
    "en-us-nyc",
    "en-gb-x-gbclan",
    "en-gb-x-gbcwmd",
)
# festival voices and the Debian package of each
FESTIVAL_VOICES = {
    "kal_diphone": "festvox-kallpc16k",
    "ked_diphone": "festvox-kdlpc16k",
    "cmu_us_slt_arctic_hts": "festvox-us-slt-hts",
}
# variant files (espeak-ng-data/voices/!v) not used: a distorted or whispered voice, a
# robot buzz, an espeak-ng speed test, one whose file name has a space, and two that speak
# exactly as "klatt" does
UNUSED_VARIANTS = (
    "Demonic",
    "fast",
    "announcer",
    "whisper",
    "whisperf",
    "UniRobot",
    "anikaRobot",
    "Mr serious",
    "caleb",
    "klatt6",
)
# GnuSpeech's voices (vocal tract length, glottal pulse, pitch) but "baby", which no model of
# ours reads
GNUSPEECH_VOICES = ("male", "female", "large_child", "small_child")
GNUSPEECH_PACKAGE = "@echogarden/gnuspeech-wasm@0.3.0"  # npm's name and the version tested
# The ranges :func:`gnuspeech_tract` draws a speaker's settings from: the voice file's
# (the tube's length; the glottal pulse's rise and fall, in % of its period; breathiness in %;
# the lips' and nostrils' radii; each of the eight tube sections' radii, scaled) and the tube
# model's (losses at the junctions; the throat's low-pass cutoff and volume; the noise mix;
# the air's temperature, which sets the speed of sound). The voices' own values lie inside, but
# the held-out small_child's tube (10 cm) is shorter than any drawn.
GNUSPEECH_TRACT = {
    "vocal_tract_length": (12.0, 19.0),  # cm
    "glottal_pulse_tp": (30.0, 50.0),
    "glottal_pulse_tn_min": (16.0, 36.0),
    "breathiness": (0.2, 4.0),
    "aperture_radius": (2.6, 3.5),  # cm
    "global_nose_radius_coef": (0.8, 1.2),
    **{f"radius_{k}_coef": (0.9, 1.1) for k in range(1, 9)},
    "loss_factor": (0.5, 1.5),
    "throat_cutoff": (1000.0, 2000.0),  # Hz
    "throat_volume": (0.0, 12.0),  # dB
    "mix_offset": (42.0, 54.0),  # dB
    "temperature": (28.0, 36.0),  # degrees Celsius
}
GNUSPEECH_TN_SPREAD = 10.0  # the pulse's longest fall is its shortest plus up to this, in %
# words per minute gnuspeech speaks at tempo 1: a 21-word number took 7.63 s (157 wpm, silences
# included), as long as espeak-ng's at -s 160 (7.42 s)
GNUSPEECH_SPEED = 160
FESTIVAL_SPEED = 170  # words per minute that festival speaks with Duration_Stretch 1
PICO_VOICES = ("en-US", "en-GB")  # SVOX Pico's English voices (one speaker each)
PICO_PACKAGE = "py-nanotts"
# words per minute Pico speaks at speed 1: a 20-word number took 6.24 s (en-US) and 7.28 s
# (en-GB), silences included, against 7.42 s for 21 words from espeak-ng at -s 160
PICO_SPEED = 170
ESPEAK_RATE = 22050
ESPEAK_CONSONANTS = (1, 200)  # the unvoiced consonants' loudness a voice may set, in %


@functools.cache
def espeak_variants() -> tuple[str, ...]:
    """The voice variant files this machine's espeak-ng ships (``espeak-ng --voices=variant``),
    sorted, but :data:`UNUSED_VARIANTS`.

    Raises:
        RuntimeError: espeak-ng is not installed.
    """
    proc = subprocess.run(
        [espeak_command(), "--voices=variant"], capture_output=True, text=True, check=False
    )
    header, *rows = proc.stdout.splitlines()
    start, stop = header.index("File"), header.index("Other")  # fixed-width columns
    names = {row[start:stop].strip().rsplit("/", 1)[-1] for row in rows if row.strip()}
    return tuple(sorted(names - set(UNUSED_VARIANTS)))


def espeak_command() -> str:
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise RuntimeError(
            "espeak-ng: command not found; the built-in speech data needs it. "
            "Install it with `apt-get install espeak-ng` (Debian/Ubuntu) or your "
            "system's package manager, or train on your own WAVs via a manifest."
        )
    return exe


def synthesize(
    text: str,
    *,
    voice: str = "en-us",
    speed: int = 160,
    pitch: int = 50,
    gap: int = 0,
    amplitude: int = 100,
    engine: str = "espeak-ng",
    tract: Mapping[str, float] | None = None,
    consonants: int | None = None,
) -> tuple[torch.Tensor, int]:
    """Speak ``text``: ``(samples (N,) float32, rate)`` (espeak-ng 22,050 Hz; festival the
    voice's own rate, 16,000 or 32,000 Hz; gnuspeech 44,100 Hz; pico 16,000 Hz). See
    :class:`attnkit.data.worlds.speech.Utterance` for the arguments. ``consonants`` (espeak-ng
    only): the loudness of the unvoiced consonants (f, s, t, k ...) in percent of espeak-ng's
    default (its voice files' ``consonants``; None: the voice's own), 1-200: at 20 an "f" is
    about 13 dB quieter; recorded and HMM voices often say them 30-50 dB under their vowels,
    espeak-ng's own voices 20-30 dB.

    The same arguments give the same samples, bit for bit.

    Raises:
        RuntimeError: the engine is not installed (the message says how to install it) or
            fails (for example an unknown ``voice``).
    """
    if tract and engine != "gnuspeech":
        raise ValueError(f"tract: only engine='gnuspeech' takes one, got engine={engine!r}")
    if consonants is not None and engine != "espeak-ng":
        raise ValueError(f"consonants: only engine='espeak-ng' takes it, got engine={engine!r}")
    if engine in ("festival", "accented"):
        return festival(text, voice=voice, speed=speed, pitch=pitch)
    if engine == "gnuspeech":
        return gnuspeech_many([(text, voice, speed, pitch, tract or {})])[0]
    if engine == "pico":
        return pico_many([(text, voice, speed, pitch)])[0]
    if engine != "espeak-ng":
        raise ValueError(f"engine: expected one of {ENGINES}, got {engine!r}")
    if consonants is None:
        proc = _espeak([], voice, speed, pitch, gap, amplitude, text)
    else:
        with _consonant_voice(voice, consonants) as (data, shaped):
            proc = _espeak([f"--path={data}"], shaped, speed, pitch, gap, amplitude, text)
    if proc.returncode != 0:
        raise RuntimeError(
            f"espeak-ng -v {voice} -s {speed} -p {pitch} failed with exit code "
            f"{proc.returncode}: {proc.stderr.decode(errors='replace').strip()}"
        )
    return parse_wav(proc.stdout, source=f"espeak-ng -v {voice} output for {text!r}")


def _espeak(
    options: list[str], voice: str, speed: int, pitch: int, gap: int, amplitude: int, text: str
) -> subprocess.CompletedProcess:
    cmd = [
        espeak_command(),
        "--stdout",
        *options,
        "-v",
        voice,
        "-s",
        str(speed),
        "-p",
        str(pitch),
        "-g",
        str(gap),
        "-a",
        str(amplitude),
        text,
    ]
    return subprocess.run(cmd, capture_output=True, check=False)


@functools.cache
def _espeak_data() -> Path:
    """The ``espeak-ng-data`` folder this machine's espeak-ng reads (``espeak-ng
    --version``'s "Data at")."""
    out = subprocess.run(
        [espeak_command(), "--version"], capture_output=True, text=True, check=False
    ).stdout
    _, found, rest = out.partition("Data at:")
    if not found:
        raise RuntimeError(f"espeak-ng --version: expected 'Data at: FOLDER', got {out!r}")
    return Path(rest.strip())


@contextlib.contextmanager
def _consonant_voice(voice: str, consonants: int):
    """``(folder, voice)``: an espeak-ng data folder for ``--path`` and a voice in it that is
    ``voice`` ("accent" or "accent+variant") with its unvoiced consonants at ``consonants``
    percent of espeak-ng's default (the voice file's ``consonants`` setting, which replaces
    the variant's own). The folder, removed on exit, links every file of the installed data
    but the variants, and holds one variant: the chosen one's settings, then
    ``consonants``."""
    low, high = ESPEAK_CONSONANTS
    if not (isinstance(consonants, int) and low <= consonants <= high):
        raise ValueError(f"consonants: expected an int in [{low}, {high}], got {consonants!r}")
    accent, _, variant = voice.partition("+")
    installed = _espeak_data()
    settings = (
        (installed / "voices" / "!v" / variant).read_text(errors="replace") if variant else ""
    )
    with tempfile.TemporaryDirectory(prefix="attnkit-espeak-") as folder:
        data = Path(folder, "espeak-ng-data")
        (data / "voices" / "!v").mkdir(parents=True)
        for entry in installed.iterdir():
            if entry.name != "voices":
                (data / entry.name).symlink_to(entry)
        for entry in (installed / "voices").iterdir():
            if entry.name != "!v":
                (data / "voices" / entry.name).symlink_to(entry)
        name = f"c{consonants}"  # short: espeak-ng overflows on a long "accent+variant"
        (data / "voices" / "!v" / name).write_text(
            f"{settings}\nname {name}\nconsonants {consonants}\n"
        )
        yield folder, f"{accent}+{name}"


def festival(text: str, *, voice: str, speed: int, pitch: int) -> tuple[torch.Tensor, int]:
    """``text`` spoken by festival in ``voice`` (see :func:`festival_many`)."""
    return festival_many([(text, voice, speed, pitch)])[0]


def festival_many(items: Sequence[tuple[str, str, int, int]]) -> list[tuple[torch.Tensor, int]]:
    """Each ``(text, voice, speed, pitch)`` spoken by one ``festival --pipe`` process (a
    process per utterance would spend ten times as long starting up): durations stretched by
    ``FESTIVAL_SPEED / speed`` and, for an English diphone voice, the mean pitch moved with
    ``pitch`` (50: 105 Hz, each 10 steps about 9% higher or lower); a voice of
    :data:`FESTIVAL_ACCENTS` says each word as its English pronunciation mapped to the voice's
    phones, with its own pitch. Every utterance sets its voice and settings afresh, so its
    samples do not depend on the others."""
    packages = {**FESTIVAL_VOICES, **{v: a.package for v, a in FESTIVAL_ACCENTS.items()}}
    for _, voice, _, _ in items:
        if voice not in packages:
            raise ValueError(
                f"voice: expected a festival voice ({', '.join(packages)}), got {voice!r}"
            )
    exe = shutil.which("festival")
    if exe is None:
        raise RuntimeError(
            "festival: command not found; built-in speech with --engines "
            "festival needs Debian's festival and its voices: apt-get install "
            f"festival {' '.join(FESTIVAL_VOICES.values())}"
        )
    said_by = [(text.replace("\\", " ").replace('"', " "), voice) for text, voice, _, _ in items]
    accented = {
        word for said, voice in said_by if voice in FESTIVAL_ACCENTS for word in said.split()
    }
    english = english_pronunciations(accented) if accented else {}
    with tempfile.TemporaryDirectory(prefix="attnkit-festival-") as folder:
        paths = [Path(folder) / f"{i}.wav" for i in range(len(items))]
        script = []
        for (said, voice), (_, _, speed, pitch), path in zip(said_by, items, paths):
            script.append(
                f"(voice_{voice})(Parameter.set 'Duration_Stretch {FESTIVAL_SPEED / speed:.4f})"
            )
            if voice in FESTIVAL_ACCENTS:
                script.extend(
                    lexicon_entry(word, english[word], FESTIVAL_ACCENTS[voice])
                    for word in dict.fromkeys(said.split())
                )
            elif voice.endswith("_diphone"):
                f0 = 105.0 * 2 ** ((pitch - 50) / 80)
                script.append(
                    f"(set! int_lr_params '((target_f0_mean {f0:.1f}) "
                    f"(target_f0_std {0.14 * f0:.1f}) (model_f0_mean 170) "
                    "(model_f0_std 34)))"
                )
            script.append(
                f'(utt.save.wave (utt.synth (Utterance Text "{said}")) "{path}" \'riff)\n'
            )
        proc = subprocess.run(
            [exe, "--pipe"], input="".join(script).encode(), capture_output=True, check=False
        )
        missing = [item for item, path in zip(items, paths) if not path.exists()]
        if proc.returncode != 0 or missing:
            voices = sorted({voice for _, voice, _, _ in items})
            raise RuntimeError(
                f"festival failed (exit code {proc.returncode}"
                f"{f', {len(missing)} utterances not spoken' if missing else ''}): "
                f"{proc.stderr.decode(errors='replace').strip()[-300:]} (are "
                f"{', '.join(packages[v] for v in voices)} installed?)"
            )
        return [
            parse_wav(path.read_bytes(), source=f"festival {voice} output for {text!r}")
            for (text, voice, *_), path in zip(items, paths)
        ]


def gnuspeech_folder() -> Path:
    """The installed npm package :data:`GNUSPEECH_PACKAGE`: under ``$ATTNKIT_NODE_MODULES``
    if set, else ``node_modules`` of the Python environment (``sys.prefix``, where ``make
    install`` puts it).

    Raises:
        RuntimeError: ``node`` or the package is missing (the message says how to install).
    """
    name = GNUSPEECH_PACKAGE.rpartition("@")[0]
    modules = Path(os.environ.get("ATTNKIT_NODE_MODULES") or Path(sys.prefix, "node_modules"))
    folder = modules / name
    how = (
        f"built-in speech with --engines gnuspeech needs Node.js (apt-get install nodejs "
        f"npm) and {GNUSPEECH_PACKAGE}: npm install --prefix {sys.prefix} "
        f"{GNUSPEECH_PACKAGE} (or set ATTNKIT_NODE_MODULES to the node_modules folder that "
        "holds it)"
    )
    if shutil.which("node") is None:
        raise RuntimeError(f"gnuspeech: node: command not found; {how}")
    if not (folder / "wasm" / "gnuspeech.js").exists():
        raise RuntimeError(f"gnuspeech: {name} not found in {modules}; {how}")
    return folder


def gnuspeech_tract(rng: random.Random) -> dict[str, float]:
    """A speaker of GnuSpeech's: each setting of :data:`GNUSPEECH_TRACT` drawn uniformly from
    its range with ``rng`` (three decimals), and the glottal pulse's longest fall
    (``glottal_pulse_tn_max``) up to 10 points longer than its shortest."""
    tract = {
        name: round(rng.uniform(low, high), 3) for name, (low, high) in GNUSPEECH_TRACT.items()
    }
    tract["glottal_pulse_tn_max"] = round(
        tract["glottal_pulse_tn_min"] + rng.uniform(0.0, GNUSPEECH_TN_SPREAD), 3
    )
    return tract


def gnuspeech_many(items: Sequence[tuple]) -> list[tuple[torch.Tensor, int]]:
    """Each ``(text, voice, speed, pitch)`` or ``(text, voice, speed, pitch, tract)`` spoken
    by GnuSpeech, all in one ``node`` process (``gnuspeech.mjs`` beside this file): tempo
    ``speed / 160``, pitch offset ``-4 + (pitch - 50) / 7.5`` semitones (50: the voice's own;
    20-80 spans 8 semitones); ``tract`` replaces settings of the voice's own (names as in
    :func:`gnuspeech_tract`). Random intonation is off, so each utterance's samples depend on
    its own arguments only."""
    known = {*GNUSPEECH_TRACT, "glottal_pulse_tn_max"}
    items = [(*item, {}) if len(item) == 4 else tuple(item) for item in items]
    for _, voice, _, _, tract in items:
        if voice not in GNUSPEECH_VOICES:
            raise ValueError(
                f"voice: expected a gnuspeech voice ({', '.join(GNUSPEECH_VOICES)}), got {voice!r}"
            )
        for name, value in dict(tract).items():
            if name not in known:
                raise ValueError(
                    f"tract: expected settings among {', '.join(sorted(known))}, got {name!r}"
                )
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"tract: expected a finite number >= 0 for {name}, got {value!r}")
    package = gnuspeech_folder()
    runner = Path(__file__).with_name("gnuspeech.mjs")
    script = [
        {
            "text": text,
            "voice": voice,
            "tempo": round(speed / GNUSPEECH_SPEED, 4),
            "pitch": round(-4 + (pitch - 50) / 7.5, 3),
            "tract": dict(tract),
        }
        for text, voice, speed, pitch, tract in items
    ]
    return _speak_all("gnuspeech", ["node", str(runner), str(package)], script)


def _speak_all(
    engine: str, command: list[str], script: list[dict]
) -> list[tuple[torch.Tensor, int]]:
    """Run ``command``, a runner that reads a JSON list of items (each of ``script`` with
    ``out``, the WAV file to write, added) on its standard input; the samples and rate of
    each item's WAV."""
    with tempfile.TemporaryDirectory(prefix=f"attnkit-{engine}-") as folder:
        paths = [Path(folder) / f"{i}.wav" for i in range(len(script))]
        items = [{**item, "out": str(path)} for item, path in zip(script, paths)]
        proc = subprocess.run(
            command, capture_output=True, input=json.dumps(items).encode(), check=False
        )
        missing = sum(not path.exists() for path in paths)
        if proc.returncode != 0 or missing:
            raise RuntimeError(
                f"{engine} failed (exit code {proc.returncode}"
                f"{f', {missing} utterances not spoken' if missing else ''}): "
                f"{proc.stderr.decode(errors='replace').strip()[-300:]}"
            )
        return [
            parse_wav(
                path.read_bytes(), source=f"{engine} {item['voice']} output for {item['text']!r}"
            )
            for item, path in zip(items, paths)
        ]


def pico_version() -> str:
    """``"py-nanotts VERSION"``: the installed :data:`PICO_PACKAGE`, whose version is part of
    a built-in speech cache's settings.

    Raises:
        RuntimeError: it is not installed (the message says how to install it).
    """
    try:
        return f"{PICO_PACKAGE} {importlib.metadata.version(PICO_PACKAGE)}"
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError(
            f"pico: the Python package {PICO_PACKAGE} is not installed; built-in "
            f"speech with --engines pico needs it: pip install {PICO_PACKAGE} "
            "(or pip install 'attnkit[speech]')"
        ) from None


def pico_many(items: Sequence[tuple[str, str, int, int]]) -> list[tuple[torch.Tensor, int]]:
    """Each ``(text, voice, speed, pitch)`` spoken by SVOX Pico (:data:`PICO_VOICES`), all from
    one Python process (``pico_runner.py`` beside this file) that forks a fresh child per
    utterance, since Pico carries state from one utterance into the next: speed ``speed /
    170`` of the voice's own, pitch ``2 ** ((pitch - 50) / 80)`` of its own (50: the voice's;
    20-80 spans about 0.77-1.30). Samples at 16,000 Hz.

    Raises:
        ValueError: a voice that is not one of :data:`PICO_VOICES`.
        RuntimeError: :data:`PICO_PACKAGE` is not installed (the message says how), or Pico
            fails.
    """
    for _, voice, _, _ in items:
        if voice not in PICO_VOICES:
            raise ValueError(
                f"voice: expected a pico voice ({', '.join(PICO_VOICES)}), got {voice!r}"
            )
    pico_version()
    script = [
        {
            "text": text,
            "voice": voice,
            "speed": round(speed / PICO_SPEED, 4),
            "pitch": round(2 ** ((pitch - 50) / 80), 4),
        }
        for text, voice, speed, pitch in items
    ]
    runner = Path(__file__).with_name("pico_runner.py")
    return _speak_all("pico", [sys.executable, str(runner)], script)
