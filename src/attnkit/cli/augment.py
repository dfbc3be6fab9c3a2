"""The augmentation options of ``attnkit train asr`` and ``attnkit train ocr``.

``--augment PRESET`` picks a set (:data:`attnkit.data.augment.audio_augment.PRESETS`,
:data:`attnkit.data.augment.line_augment.PRESETS`); each per-augmentation option sets that
augmentation's range, adding it to the set when the preset lacks it; ``--augment-prob
NAME=P,...`` sets probabilities. The set runs in the order of :data:`SPEECH` and :data:`LINES`,
as the changes happen in the world: a speaker's voice before the room, the noise and the
telephone line it passes through; a line's shape before its ink, paper, blur and compression.
Values are checked here, and a value out of range is a one-line error naming the option. A
run resumed with ``--resume`` and no augmentation option takes the augmentation saved in its
checkpoint; options that ask for the same set keep its saved order; options that ask for
another are refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from attnkit.data.augment import audio_augment, line_augment
from attnkit.data.augment.augmentation import AUGMENTATIONS

if TYPE_CHECKING:
    from attnkit.cli.common import Options
    from attnkit.train import Checkpoint

Composition = TypeVar("Composition", audio_augment.SpeechAugment, line_augment.LineAugment)

__all__ = ["add_line_args", "add_speech_args", "line_augmentations", "speech_augmentations"]


class Option(NamedTuple):
    """One command-line option: the augmentation (by name) and field(s) it sets, how its text
    is read (``"number"``, ``"int"``, ``"pair"``, ``"int pair"``, ``"list"``), what it
    expects (said in its help and errors) and its metavar."""

    flag: str
    augmentation: str
    fields: tuple[str, ...]
    kind: str
    expects: str
    metavar: str


UP_TO = f"(0 to {audio_augment.SPECAUGMENT_MAX:,})"  # SpecAugment's sizes and counts

SPEECH = (
    Option(
        "--pitch-shift",
        "pitch",
        ("factor",),
        "pair",
        "LOW,HIGH pitch factors with 0.5 <= LOW <= HIGH <= 2, formants and duration kept (PSOLA)",
        "LOW,HIGH",
    ),
    Option(
        "--voice-source",
        "voice_source",
        ("hnr_db",),
        "pair",
        "LOW,HIGH harmonics-to-noise ratios in dB with 0 <= LOW <= HIGH <= 60 of a new "
        "glottal source under the same formants (LPC resynthesis; low: breathy)",
        "LOW,HIGH",
    ),
    Option(
        "--dynamic-range",
        "dynamic_range",
        ("exponent",),
        "pair",
        "LOW,HIGH exponents with -1 <= LOW <= HIGH <= 1 of a gain (local level / loudest "
        "level) ** E: above 0 the weak sounds (fricatives, nasals) weaker against the "
        "vowels, as in recorded speech; below 0 stronger",
        "LOW,HIGH",
    ),
    Option(
        "--consonant-duration",
        "consonant_duration",
        ("factor",),
        "pair",
        "LOW,HIGH duration factors with 0.2 <= LOW <= HIGH <= 2 of the weak sounds between "
        "the vowels (nasals, fricatives, stops), the vowels and pauses kept (each one's "
        "middle cut out or repeated)",
        "LOW,HIGH",
    ),
    Option(
        "--speed-perturb",
        "speed",
        ("factors",),
        "list",
        "comma-separated speed factors, each from 0.5 to 2 (Ko et al. 2015: 0.9,1.0,1.1); "
        "each utterance is played at one of them, resampled",
        "F,F,...",
    ),
    Option(
        "--gain",
        "gain",
        ("db",),
        "number",
        "the largest gain or attenuation in dB, from 0 to 40 (drawn from -DB to DB)",
        "DB",
    ),
    Option(
        "--reverb",
        "reverb",
        ("rt60",),
        "pair",
        "LOW,HIGH reverberation times (RT60) in seconds with 0 < LOW <= HIGH <= 3 of a "
        "synthetic room",
        "LOW,HIGH",
    ),
    Option(
        "--noise-snr",
        "noise",
        ("snr_db",),
        "pair",
        "LOW,HIGH signal-to-noise ratios in dB with 0 <= LOW <= HIGH <= 100 of added "
        "white or pink noise",
        "LOW,HIGH",
    ),
    Option(
        "--band-limit",
        "band_limit",
        ("low_hz", "high_hz"),
        "pair",
        "LOW,HIGH band edges in Hz with 0 <= LOW < HIGH < 8000 (telephone: 300,3400)",
        "LOW,HIGH",
    ),
    Option(
        "--vtlp",
        "vtlp",
        ("alpha",),
        "pair",
        "LOW,HIGH vocal-tract-length warp factors with 0.7 <= LOW <= HIGH <= 1.3 (Jaitly & "
        "Hinton 2013: 0.9,1.1)",
        "LOW,HIGH",
    ),
    Option(
        "--freq-mask",
        "specaugment",
        ("freq_mask",),
        "int",
        f"SpecAugment's F: the widest frequency mask, in mel bins {UP_TO}",
        "F",
    ),
    Option(
        "--freq-masks",
        "specaugment",
        ("freq_masks",),
        "int",
        f"SpecAugment's mF: frequency masks per utterance {UP_TO}",
        "MF",
    ),
    Option(
        "--time-mask",
        "specaugment",
        ("time_mask",),
        "int",
        f"SpecAugment's T: the longest time mask, in frames of 10 ms {UP_TO}",
        "T",
    ),
    Option(
        "--time-masks",
        "specaugment",
        ("time_masks",),
        "int",
        f"SpecAugment's mT: time masks per utterance {UP_TO}",
        "MT",
    ),
    Option(
        "--time-mask-ratio",
        "specaugment",
        ("max_time_ratio",),
        "number",
        "SpecAugment's p: a time mask covers at most this share of the utterance, from 0 to 1",
        "P",
    ),
    Option(
        "--time-warp",
        "specaugment",
        ("time_warp",),
        "int",
        f"SpecAugment's W: the farthest a time warp moves a frame {UP_TO} (0: no warp)",
        "W",
    ),
)

LINES = (
    Option(
        "--scale",
        "scale",
        ("size",),
        "pair",
        "LOW,HIGH text sizes within the line's height with 0.3 <= LOW <= HIGH <= 1",
        "LOW,HIGH",
    ),
    Option(
        "--stretch",
        "stretch",
        ("factor",),
        "pair",
        "LOW,HIGH width factors with 0.25 <= LOW <= HIGH <= 4",
        "LOW,HIGH",
    ),
    Option(
        "--rotate",
        "rotate",
        ("degrees",),
        "number",
        "the largest rotation in degrees, from 0 to 45 (clamped on long lines so their "
        "ends stay inside)",
        "DEG",
    ),
    Option(
        "--shear",
        "shear",
        ("slant",),
        "number",
        "the largest slant, forward (italic) or backward, as the tangent of its angle, from "
        "0 to 1 (italic faces: 0.15-0.3)",
        "S",
    ),
    Option(
        "--perspective",
        "perspective",
        ("distortion",),
        "number",
        "the farthest a corner moves, as a share of the line's height, from 0 to 0.5",
        "D",
    ),
    Option(
        "--baseline",
        "baseline",
        ("pixels",),
        "number",
        "the largest vertical shift of a wavy baseline, in pixels, from 0 to 16",
        "PX",
    ),
    Option(
        "--margins",
        "margins",
        ("pixels",),
        "int",
        "the most pixels each margin grows or shrinks by (blank columns only), from 0 to 1000",
        "PX",
    ),
    Option(
        "--stroke",
        "stroke",
        ("pixels",),
        "int",
        "the most pixels the ink is dilated or eroded by, from 0 to 4",
        "PX",
    ),
    Option(
        "--paper",
        "shade",
        ("paper",),
        "pair",
        "LOW,HIGH paper gray levels (0 black, 1 white) with 0 <= LOW <= HIGH <= 1, above "
        "every ink level",
        "LOW,HIGH",
    ),
    Option(
        "--ink",
        "shade",
        ("ink",),
        "pair",
        "LOW,HIGH ink gray levels with 0 <= LOW <= HIGH <= 1, below every paper level",
        "LOW,HIGH",
    ),
    Option(
        "--blur",
        "blur",
        ("sigma",),
        "pair",
        "LOW,HIGH Gaussian blur widths (sigma) in pixels with 0 <= LOW <= HIGH <= 8",
        "LOW,HIGH",
    ),
    Option(
        "--pixel-noise",
        "pixel_noise",
        ("std",),
        "pair",
        "LOW,HIGH standard deviations of per-pixel noise in gray levels with 0 <= LOW <= "
        "HIGH <= 0.5",
        "LOW,HIGH",
    ),
    Option(
        "--jpeg",
        "jpeg",
        ("quality",),
        "int pair",
        "LOW,HIGH JPEG qualities with 1 <= LOW <= HIGH <= 95",
        "LOW,HIGH",
    ),
)


def _dest(flag: str) -> str:
    return "aug_" + flag[2:].replace("-", "_")


def _add(p: Options, presets: dict, options: tuple[Option, ...], what: str) -> None:
    group = p.add_argument_group(
        "augmentation (training lines only, drawn afresh each epoch; off by default)"
        if what == "lines"
        else "augmentation (training utterances only, drawn afresh each epoch; off by default)"
    )
    group.add_argument(
        "--augment",
        dest="aug_augment",
        metavar="PRESET",
        help=f"a set of augmentations: {', '.join(presets)} (default none; "
        f"docs/{'ocr' if what == 'lines' else 'speech'}.md); the options "
        "below change or add to it",
    )
    for option in options:
        group.add_argument(
            option.flag, dest=_dest(option.flag), metavar=option.metavar, help=option.expects
        )
    names = sorted({o.augmentation for o in options})
    group.add_argument(
        "--augment-prob",
        dest="aug_augment_prob",
        metavar="NAME=P,...",
        help=f"the probability that each named augmentation ({', '.join(names)}) "
        "changes an example",
    )


def add_speech_args(p: Options) -> None:
    """The augmentation options of ``attnkit train asr``."""
    _add(p, audio_augment.PRESETS, SPEECH, "speech")


def add_line_args(p: Options) -> None:
    """The augmentation options of ``attnkit train ocr``."""
    _add(p, line_augment.PRESETS, LINES, "lines")


def _read(option: Option, text: str) -> float | tuple[float, ...]:
    """The value of ``option`` written as ``text``, in its kind's shape."""
    parts = [t.strip() for t in text.split(",")]
    value: float | tuple[float, ...]
    try:
        if option.kind == "number":
            (value,) = [float(t) for t in parts]
        elif option.kind == "int":
            (value,) = [int(t) for t in parts]
        elif option.kind == "list":
            value = tuple(float(t) for t in parts)
        else:
            cast = int if option.kind == "int pair" else float
            pair = tuple(cast(t) for t in parts)
            if len(pair) != 2:
                raise ValueError(text)
            value = pair
    except ValueError:
        raise ValueError(f"{option.flag}: expected {option.expects}, got {text!r}") from None
    return value


def _augmentations(args: argparse.Namespace, presets: dict, options: tuple[Option, ...]) -> list:
    """The augmentations the options of ``args`` ask for (a list of objects), the preset's and
    those the options add together in the order of ``options`` (which lists the speaker's
    changes before the room's and the channel's, the geometry of a line before its ink and
    its scan's degradations)."""
    name = args.aug_augment or "none"
    if name not in presets:
        raise ValueError(f"--augment: expected one of {', '.join(presets)}, got {name!r}")
    chosen = {a.name: a for a in presets[name]}
    settings: dict[str, dict] = {}
    given = []
    for option in options:
        text = getattr(args, _dest(option.flag))
        if text is None:
            continue
        value = _read(option, text)
        fields = option.fields
        parsed: dict[str, float | tuple[float, ...]]
        if len(fields) > 1:
            assert isinstance(value, tuple), option  # options of several fields: lists, pairs
            parsed = dict(zip(fields, value))
        else:
            parsed = {fields[0]: value}
        settings.setdefault(option.augmentation, {}).update(parsed)
        given.append(option)
    for augmentation, values in settings.items():
        flags = [o.flag for o in given if o.augmentation == augmentation]
        try:
            if augmentation in chosen:
                chosen[augmentation] = dataclasses.replace(chosen[augmentation], **values)
            else:
                chosen[augmentation] = AUGMENTATIONS[augmentation](**values)
        except ValueError:
            expects = "; ".join(o.expects for o in given if o.augmentation == augmentation)
            raise ValueError(
                f"{', '.join(flags)}: expected {expects}, got "
                f"{', '.join(repr(getattr(args, _dest(f))) for f in flags)}"
            ) from None
    if args.aug_augment_prob is not None:
        _set_probabilities(args.aug_augment_prob, chosen, {o.augmentation for o in options})
    order = list(dict.fromkeys(o.augmentation for o in options))
    order += [n for n in chosen if n not in order]
    return [chosen[n] for n in order if n in chosen]


def _set_probabilities(text: str, chosen: dict, names: set[str]) -> None:
    expected = "NAME=P,... with P a probability in [0, 1]"
    for item in (t.strip() for t in text.split(",") if t.strip()):
        name, _, value = item.partition("=")
        name = name.strip()
        try:
            p = float(value)
        except ValueError:
            raise ValueError(f"--augment-prob: expected {expected}, got {item!r}") from None
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"--augment-prob: expected {expected}, got {item!r}")
        if name not in names:
            raise ValueError(
                f"--augment-prob: expected NAME one of {', '.join(sorted(names))}, got {name!r}"
            )
        if name not in chosen:
            raise ValueError(
                f"--augment-prob: {name} is not among the augmentations asked "
                "for; add it with its option or a preset"
            )
        chosen[name] = dataclasses.replace(chosen[name], p=p)


def _given(args: argparse.Namespace) -> bool:
    return any(v is not None for k, v in vars(args).items() if k.startswith("aug_"))


def _for_run(
    args: argparse.Namespace,
    ck: Checkpoint | None,
    composition: type[Composition],
    made: list,
) -> Composition:
    """``made`` (what the options ask for), or with ``--resume`` the checkpoint's augmentation
    (``ck``, in its saved order), which options given as well must equal, as a
    ``composition``."""
    if ck is None:
        return composition(made)
    saved = ck.config.get("augment", [])
    if not _given(args):
        return composition.from_config(saved)
    asked = [a.config() for a in made]
    if sorted(map(_key, asked)) != sorted(map(_key, saved)):
        if sorted(c["name"] for c in asked) == sorted(c["name"] for c in saved):
            started = f"other values of {_changed(saved, asked)}"  # the names alike
        else:
            started = f"{_describe(saved)}, not {_describe(asked)}"
        raise ValueError(
            f"--augment: the run in {args.out} was started with {started}; "
            "resume without augmentation options to continue it as it was, or "
            "start a new run in another --out"
        )
    return composition.from_config(saved)


def _changed(saved: list[dict], asked: list[dict]) -> str:
    """The settings of each augmentation that differ between ``saved`` and ``asked`` (the
    same names): ``pitch: factor=[0.8, 1.2] saved, factor=[0.8, 1.3] asked``."""
    same = {_key(c) for c in saved} & {_key(c) for c in asked}
    before = [c for c in saved if _key(c) not in same]
    after = [c for c in asked if _key(c) not in same]
    parts = []
    for old in before:
        new = next(c for c in after if c["name"] == old["name"])
        after.remove(new)
        keys = [k for k in {**old, **new} if old.get(k) != new.get(k)]
        parts.append(
            f"{old['name']}: "
            + ", ".join(f"{k}={json.dumps(old.get(k))}" for k in keys)
            + " saved, "
            + ", ".join(f"{k}={json.dumps(new.get(k))}" for k in keys)
            + " asked"
        )
    return "; ".join(parts)


def _key(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


def _describe(config: list) -> str:
    if not config:
        return "no augmentation"
    return "augmentation " + ", ".join(c["name"] for c in config)


def speech_augmentations(
    args: argparse.Namespace, ck: Checkpoint | None = None
) -> audio_augment.SpeechAugment:
    """The speech augmentations of ``attnkit train asr``'s options (``ck``: the checkpoint
    resumed, whose augmentation a resumed run keeps); empty for none.

    Raises:
        ValueError: naming an option whose value is out of range or does not parse, or
            asking a resumed run for other augmentation.
    """
    made = _augmentations(args, audio_augment.PRESETS, SPEECH)
    return _for_run(args, ck, audio_augment.SpeechAugment, made)


def line_augmentations(
    args: argparse.Namespace, ck: Checkpoint | None = None
) -> line_augment.LineAugment:
    """The line augmentations of ``attnkit train ocr``'s options; see
    :func:`speech_augmentations`."""
    made = _augmentations(args, line_augment.PRESETS, LINES)
    return _for_run(args, ck, line_augment.LineAugment, made)
