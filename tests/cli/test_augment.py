"""Augmentation on the command line: out-of-range options are one-line errors naming the
option, the settings are saved in the checkpoint and kept by --resume, and a run stopped and
resumed with augmentation ends where an uninterrupted one does."""

import argparse
import json
import math
import wave

import pytest
import torch
from safetensors.torch import load_file

from attnkit.cli import augment
from attnkit.cli.main import main
from attnkit.data import generate_lines, write_line_folder

pytestmark = pytest.mark.usefixtures("one_thread")

OCR_TINY = [
    "--channels",
    "4,4,8,8,8",
    "--hidden",
    "8",
    "--batch-size",
    "4",
    "--no-progress",
    "--plot",
    "0",
    "--attention",
    "none",
    "--eval-every",
    "100",
]


@pytest.fixture(scope="module")
def lines(tmp_path_factory):
    return write_line_folder(
        generate_lines(8, seed=1, max_chars=12), tmp_path_factory.mktemp("lines") / "train"
    ).parent


def _weights(run):
    return load_file(str(run / "checkpoint" / "model.safetensors"))


def _config(run):
    return json.loads((run / "checkpoint" / "config.json").read_text())["config"]


def test_ocr_with_augmentation_resumes_to_the_state_of_an_uninterrupted_run(
    tmp_path, lines, capsys
):
    augment = ["--augment", "strong", "--rotate", "3", "--augment-prob", "rotate=1,jpeg=0.5"]
    base = ["train", "ocr", "--train", str(lines), *OCR_TINY, *augment]
    assert main([*base, "--out", str(tmp_path / "straight"), "--steps", "6"]) == 0
    assert (
        main([*base, "--out", str(tmp_path / "cut"), "--steps", "3", "--checkpoint-every", "3"])
        == 0
    )
    # resumed without the augmentation options (the saved ones are used), in 2 data workers
    resume = [
        "train",
        "ocr",
        "--train",
        str(lines),
        *OCR_TINY,
        "--out",
        str(tmp_path / "cut"),
        "--steps",
        "6",
        "--resume",
        "--workers-data",
        "2",
    ]
    assert main(resume) == 0
    straight, resumed = _weights(tmp_path / "straight"), _weights(tmp_path / "cut")
    for name, value in straight.items():
        assert torch.equal(value, resumed[name]), name
    saved = _config(tmp_path / "cut")["augment"]
    assert [a["name"] for a in saved][:3] == ["scale", "stretch", "rotate"]
    rotate = next(a for a in saved if a["name"] == "rotate")
    assert rotate == {"name": "rotate", "p": 1.0, "degrees": 3.0}
    # not vacuous: without augmentation the same run ends elsewhere
    assert (
        main(
            [
                "train",
                "ocr",
                "--train",
                str(lines),
                *OCR_TINY,
                "--out",
                str(tmp_path / "plain"),
                "--steps",
                "6",
            ]
        )
        == 0
    )
    plain = _weights(tmp_path / "plain")
    assert any(not torch.equal(v, plain[k]) for k, v in straight.items())
    assert "augment" not in _config(tmp_path / "plain")  # off by default: nothing saved
    capsys.readouterr()
    assert main([*resume[:-2], "--steps", "7", "--augment", "light"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(
            f"attnkit: --augment: the run in {tmp_path / 'cut'} was started with "
            "augmentation scale, stretch, rotate"
        )
        and err.count("\n") == 1
    )


ASR_TINY = [
    "--listener-hidden",
    "8",
    "--hidden",
    "16",
    "--emb",
    "8",
    "--key-value-dim",
    "8",
    "--batch-size",
    "3",
    "--lr",
    "1e-2",
    "--warmup",
    "2",
    "--no-progress",
    "--plot",
    "0",
    "--eval-every",
    "100",
]


def _write_wav(path, seconds, hz, rate=8000):
    t = torch.arange(int(seconds * rate)) / rate
    samples = (0.3 * torch.sin(2 * math.pi * hz * t) * 32767).to(torch.int16)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.numpy().tobytes())


def test_asr_with_augmentation_resumes_to_the_state_of_an_uninterrupted_run(tmp_path):
    words = ["one", "two", "three", "four", "five", "six"]
    for i, _ in enumerate(words):
        _write_wav(tmp_path / f"w{i}.wav", 0.2 + 0.05 * i, 200 + 150 * i)
    manifest = tmp_path / "train.tsv"
    manifest.write_text("".join(f"w{i}.wav\t{w}\n" for i, w in enumerate(words)))
    augment = ["--augment", "strong", "--time-warp", "2", "--augment-prob", "reverb=1,noise=1"]
    base = ["train", "asr", "--train", str(manifest), "--valid", str(manifest), *ASR_TINY]
    assert main([*base, *augment, "--out", str(tmp_path / "straight"), "--steps", "6"]) == 0
    assert (
        main(
            [
                *base,
                *augment,
                "--out",
                str(tmp_path / "cut"),
                "--steps",
                "3",
                "--checkpoint-every",
                "3",
            ]
        )
        == 0
    )
    assert main([*base, "--out", str(tmp_path / "cut"), "--steps", "6", "--resume"]) == 0
    straight, resumed = _weights(tmp_path / "straight"), _weights(tmp_path / "cut")
    for name, value in straight.items():
        assert torch.equal(value, resumed[name]), name
    saved = [a["name"] for a in _config(tmp_path / "cut")["augment"]]
    assert saved == ["speed", "gain", "reverb", "noise", "band_limit", "vtlp", "specaugment"]
    assert main([*base, "--out", str(tmp_path / "plain"), "--steps", "6"]) == 0
    plain = _weights(tmp_path / "plain")
    assert any(not torch.equal(v, plain[k]) for k, v in straight.items())


@pytest.mark.parametrize(
    "task, option, value, message",
    [
        (
            "asr",
            "--noise-snr",
            "-5,10",
            "--noise-snr: expected LOW,HIGH signal-to-noise ratios in "
            "dB with 0 <= LOW <= HIGH <= 100 of added white or pink "
            "noise, got '-5,10'",
        ),
        ("asr", "--noise-snr", "30,10", "--noise-snr: expected LOW,HIGH"),
        (
            "asr",
            "--speed-perturb",
            "0",
            "--speed-perturb: expected comma-separated speed factors, each from 0.5 to 2",
        ),
        ("asr", "--speed-perturb", "0.9,x", "--speed-perturb: expected comma-separated"),
        (
            "asr",
            "--augment-prob",
            "noise=1.5",
            "--augment-prob: expected NAME=P,... with P a probability in [0, 1], got 'noise=1.5'",
        ),
        (
            "asr",
            "--augment-prob",
            "noise=0.5",
            "--augment-prob: noise is not among the augmentations asked for",
        ),
        (
            "asr",
            "--augment",
            "loud",
            "--augment: expected one of none, specaugment, light, strong, got 'loud'",
        ),
        ("asr", "--time-mask", "-3", "--time-mask: expected SpecAugment's T"),
        # the message said "(0 or more)": 20000 seemed allowed
        (
            "asr",
            "--time-mask",
            "20000",
            "--time-mask: expected SpecAugment's T: the longest time "
            "mask, in frames of 10 ms (0 to 10,000), got '20000'",
        ),
        (
            "asr",
            "--freq-masks",
            "10001",
            "--freq-masks: expected SpecAugment's mF: frequency "
            "masks per utterance (0 to 10,000), got '10001'",
        ),
        (
            "asr",
            "--pitch-shift",
            "1.5,0.8",
            "--pitch-shift: expected LOW,HIGH pitch factors with 0.5 <= LOW <= HIGH <= 2",
        ),
        (
            "asr",
            "--voice-source",
            "-3,20",
            "--voice-source: expected LOW,HIGH harmonics-to-noise "
            "ratios in dB with 0 <= LOW <= HIGH <= 60",
        ),
        (
            "asr",
            "--dynamic-range",
            "0,2",
            "--dynamic-range: expected LOW,HIGH exponents with -1 <= LOW <= HIGH <= 1",
        ),
        (
            "asr",
            "--consonant-duration",
            "0,1",
            "--consonant-duration: expected LOW,HIGH duration factors with 0.2 <= LOW <= HIGH <= 2",
        ),
        ("asr", "--band-limit", "3400,300", "--band-limit: expected LOW,HIGH band edges in Hz"),
        (
            "ocr",
            "--rotate",
            "90",
            "--rotate: expected the largest rotation in degrees, from 0 to 45",
        ),
        ("ocr", "--jpeg", "0,50", "--jpeg: expected LOW,HIGH JPEG qualities with 1 <= LOW"),
        ("ocr", "--ink", "0.5,0.9", "--ink: expected LOW,HIGH ink gray levels"),
        ("ocr", "--augment-prob", "speed=0.5", "--augment-prob: expected NAME one of baseline"),
    ],
)
def test_augmentation_options_out_of_range_are_one_line_errors(
    tmp_path, capsys, task, option, value, message
):
    assert main(["train", task, "--out", str(tmp_path / "r"), f"{option}={value}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attnkit: {message}") and err.count("\n") == 1, err
    assert not (tmp_path / "r").exists()


SPEECH_VALUES = {
    "--dynamic-range": "0,0.6",
    "--pitch-shift": "0.8,1.2",
    "--voice-source": "3,30",
    "--consonant-duration": "0.3,1",
    "--speed-perturb": "0.9,1.1",
    "--gain": "6",
    "--reverb": "0.2,0.5",
    "--noise-snr": "10,20",
    "--band-limit": "300,3400",
    "--vtlp": "0.9,1.1",
    "--freq-mask": "10",
    "--freq-masks": "1",
    "--time-mask": "10",
    "--time-masks": "1",
    "--time-mask-ratio": "0.1",
    "--time-warp": "5",
}
LINE_VALUES = {
    "--scale": "0.6,0.9",
    "--stretch": "0.8,1.2",
    "--rotate": "2",
    "--shear": "0.2",
    "--perspective": "0.1",
    "--baseline": "2",
    "--margins": "4",
    "--stroke": "1",
    "--paper": "0.8,1",
    "--ink": "0,0.3",
    "--blur": "0,1",
    "--pixel-noise": "0,0.05",
    "--jpeg": "30,90",
}


@pytest.mark.parametrize(
    "options, values, add, made",
    [
        (augment.SPEECH, SPEECH_VALUES, augment.add_speech_args, augment.speech_augmentations),
        (augment.LINES, LINE_VALUES, augment.add_line_args, augment.line_augmentations),
    ],
)
def test_every_option_adds_its_augmentation_with_its_value(options, values, add, made):
    assert set(values) == {o.flag for o in options}  # a new option gets a value here
    parser = argparse.ArgumentParser()
    add(parser)
    for option in options:
        chain = made(parser.parse_args([option.flag, values[option.flag]]))
        assert [a.name for a in chain.augmentations] == [option.augmentation], option.flag
        given = [float(v) for v in values[option.flag].split(",")]
        got = [getattr(chain.augmentations[0], f) for f in option.fields]
        flat = [float(v) for g in got for v in (g if isinstance(g, tuple) else (g,))]
        assert flat == given, option.flag
    every = made(parser.parse_args([t for flag, v in values.items() for t in (flag, v)]))
    assert [a.name for a in every.augmentations] == list(
        dict.fromkeys(o.augmentation for o in options)
    )


@pytest.mark.parametrize(
    "options, presets, add, made, argv, want",
    [
        (
            augment.SPEECH,
            augment.audio_augment.PRESETS,
            augment.add_speech_args,
            augment.speech_augmentations,
            [
                "--augment",
                "strong",
                "--noise-snr",
                "5,20",
                "--voice-source",
                "3,30",
                "--pitch-shift",
                "0.8,1.2",
            ],
            [
                "pitch",
                "voice_source",
                "speed",
                "gain",
                "reverb",
                "noise",
                "band_limit",
                "vtlp",
                "specaugment",
            ],
        ),
        (
            augment.LINES,
            augment.line_augment.PRESETS,
            augment.add_line_args,
            augment.line_augmentations,
            ["--jpeg", "30,90", "--augment", "light", "--rotate", "2"],
            None,
        ),
    ],
)
def test_a_preset_and_the_options_added_to_it_run_in_the_order_of_the_options(
    options, presets, add, made, argv, want
):
    order = list(dict.fromkeys(o.augmentation for o in options))
    for name, chain in presets.items():  # every preset's augmentations are ordered
        assert {a.name for a in chain} <= set(order), name
    parser = argparse.ArgumentParser()
    add(parser)
    names = [a.name for a in made(parser.parse_args(argv)).augmentations]
    assert names == sorted(names, key=order.index)
    if want is not None:  # the voice changed at its source, before the room and the channel
        assert names == want


def test_a_resumed_run_keeps_its_saved_order_when_the_options_ask_for_the_same_set():
    parser = argparse.ArgumentParser()
    augment.add_speech_args(parser)
    parser.add_argument("--out", default="run")
    args = parser.parse_args(["--augment", "light", "--pitch-shift", "0.8,1.2"])
    made = augment.speech_augmentations(args).augmentations
    assert [a.name for a in made] == ["pitch", "speed", "specaugment"]
    saved = [a.config() for a in made[1:] + made[:1]]  # a run that ran the pitch shift last
    ck = argparse.Namespace(config={"augment": saved})
    resumed = augment.speech_augmentations(args, ck).augmentations
    assert [a.name for a in resumed] == ["speed", "specaugment", "pitch"]
    other = parser.parse_args(["--augment", "light", "--pitch-shift", "0.8,1.3"])
    with pytest.raises(ValueError) as exc:
        augment.speech_augmentations(other, ck)
    # the two lists were the same names: "speed, specaugment, pitch, not pitch, speed, ..."
    assert str(exc.value).startswith(
        "--augment: the run in run was started with other values "
        "of pitch: factor=[0.8, 1.2] saved, factor=[0.8, 1.3] "
        "asked; resume without augmentation options"
    )
