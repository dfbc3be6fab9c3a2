"""train asr -> transcribe, end to end on tiny data; resume; bad WAVs named in messages."""

import json
import math
import re
import shutil
import struct
import wave

import pytest

from attnkit.cli.main import main
from tests.cli.conftest import float_wav_bytes

TINY = [
    "--listener-hidden",
    "8",
    "--hidden",
    "16",
    "--emb",
    "8",
    "--key-value-dim",
    "8",
    "--batch-size",
    "4",
    "--lr",
    "1e-2",
    "--warmup",
    "2",
    "--no-progress",
]


pytestmark = pytest.mark.usefixtures("one_thread")


def _write_wav(path, seconds, freq, rate=8000, channels=1):
    n = int(seconds * rate)
    frames = b"".join(
        struct.pack("<h", int(8000 * math.sin(2 * math.pi * freq * i / rate))) * channels
        for i in range(n)
    )
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(frames)


def test_manifest_training_transcribe_resume_and_bad_wavs(tmp_path, capsys):
    words = ["one", "two", "three", "four", "five", "six"]
    for i, _ in enumerate(words):
        _write_wav(tmp_path / f"w{i}.wav", 0.2 + 0.05 * i, 200 + 150 * i, channels=1 + i % 2)
    manifest = tmp_path / "train.tsv"
    manifest.write_text("".join(f"w{i}.wav\t{w}\n" for i, w in enumerate(words)))
    out = tmp_path / "run"
    args = [
        "train",
        "asr",
        "--train",
        str(manifest),
        "--valid",
        str(manifest),
        "--out",
        str(out),
        "--steps",
        "6",
        "--eval-every",
        "3",
        "--checkpoint-every",
        "3",
        "--plot",
        "1",
        *TINY,
    ]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert re.search(r"stopped after 6 steps \(max_steps\); held-out: cer [\d.]+, wer", text)
    assert (out / "alignment_0.png").exists() and (out / "history.json").exists()
    assert main(args + ["--steps", "9", "--resume"]) == 0
    assert "stopped after 9 steps" in capsys.readouterr().out

    ck = str(out / "checkpoint")
    plots = tmp_path / "plots"
    assert (
        main(
            [
                "transcribe",
                "--checkpoint",
                ck,
                str(tmp_path / "w0.wav"),
                str(tmp_path / "w3.wav"),
                "--beam",
                "2",
                "--plot",
                str(plots),
            ]
        )
        == 0
    )
    lines = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith("  wrote")]
    assert len(lines) == 2 and (plots / "alignment_1.png").exists()
    sample = [
        "transcribe",
        "--checkpoint",
        ck,
        str(tmp_path / "w0.wav"),
        "--sample",
        "3",
        "--temperature",
        "2.0",
        "--seed",
        "5",
    ]
    assert main(sample) == 0
    drawn = capsys.readouterr().out.splitlines()
    assert len(drawn) == 3
    assert main(sample) == 0 and capsys.readouterr().out.splitlines() == drawn  # seeded

    (tmp_path / "text.wav").write_text("not audio")
    _write_wav(tmp_path / "short.wav", 0.05, 300)
    for name, message in [
        ("text.wav", r"cannot decode \(Format not recognised\)"),
        ("missing.wav", "cannot read"),
        (
            "short.wav",
            (
                r"6 feature frames \(50 ms of audio\); the recogniser "
                r"needs at least 8"
            ),
        ),
    ]:
        assert main(["transcribe", "--checkpoint", ck, str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert re.search(rf"^attnkit: .*{name}: {message}", err), err


def test_bad_arguments_give_usage_errors(tmp_path, capsys):
    for bad in (["--kinds", "poems"], ["--layers", "3"], ["--score", "nope"]):
        with pytest.raises(SystemExit) as exc:
            main(["train", "asr", "--out", str(tmp_path / "x"), *bad])
        assert exc.value.code == 2
    assert main(["train", "asr", "--out", str(tmp_path / "x"), "--pretrain-lm-steps", "-1"]) == 2
    assert "--pretrain-lm-steps: expected a non-negative int, got -1" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng")
def test_built_in_speech_with_lm_pretraining_and_ctc(tmp_path, capsys):
    from attnkit.data import synthesize

    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "asr",
                "--out",
                str(out),
                "--cache-dir",
                str(tmp_path / "cache"),
                "--n-train",
                "4",
                "--n-valid",
                "1",
                "--kinds",
                "digits",
                "--steps",
                "3",
                "--eval-every",
                "3",
                "--plot",
                "1",
                "--pretrain-lm-steps",
                "3",
                "--ctc-weight",
                "0.3",
                "--guided-attention",
                "0.5",
                "--sortagrad",
                "1",
                *TINY,
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    batching = json.loads((out / "checkpoint" / "config.json").read_text())["config"]["batching"]
    assert batching["guided_attention"] == 0.5 and batching["sortagrad"] == 1
    assert re.search(
        r"speller pre-trained as a language model for 3 steps \(max_steps\); "
        r"held-out next character: accuracy [\d.]+, loss [\d.]+",
        text,
    )
    assert "stopped after 3 steps" in text and (out / "alignment_0.png").exists()
    assert (out / "speller-lm" / "checkpoint" / "trainer.json").exists()
    samples, rate = synthesize("seven two", voice="en-us", speed=150)
    with wave.open(str(tmp_path / "say.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(struct.pack("<h", int(s * 32767)) for s in samples.tolist()))
    assert (
        main(
            [
                "transcribe",
                "--checkpoint",
                str(out / "checkpoint"),
                str(tmp_path / "say.wav"),
                "--beam",
                "1",
            ]
        )
        == 0
    )
    assert len(capsys.readouterr().out.splitlines()) == 1


def word_manifest(folder, start=0.2):
    """Four tones of ``start`` seconds and more, as a manifest of the words one to four."""
    words = ["one", "two", "three", "four"]
    for i, _ in enumerate(words):
        _write_wav(folder / f"w{i}.wav", start + 0.05 * i, 200 + 150 * i)
    manifest = folder / "train.tsv"
    manifest.write_text("".join(f"w{i}.wav\t{w}\n" for i, w in enumerate(words)))
    return manifest


def train_tiny(folder, *options, start=0.2):
    """``attnkit train asr`` with :data:`TINY` and ``options`` on :func:`word_manifest`
    (``start``), in ``folder / "run"`` (returned); no pictures unless ``options`` ask."""
    manifest = word_manifest(folder, start=start)
    out = folder / "run"
    assert (
        main(
            [
                "train",
                "asr",
                "--train",
                str(manifest),
                "--valid",
                str(manifest),
                "--out",
                str(out),
                "--plot",
                "0",
                *TINY,
                *options,
            ]
        )
        == 0
    )
    return out


def test_speller_pretraining_is_a_run_that_resumes_and_is_never_overwritten(tmp_path, capsys):
    manifest = word_manifest(tmp_path)
    out = tmp_path / "run"
    args = [
        "train",
        "asr",
        "--train",
        str(manifest),
        "--valid",
        str(manifest),
        "--out",
        str(out),
        "--steps",
        "2",
        "--eval-every",
        "2",
        "--plot",
        "0",
        *TINY,
    ]
    assert main(args + ["--pretrain-lm-steps", "4"]) == 0
    assert "pre-trained as a language model for 4 steps" in capsys.readouterr().out
    lm = json.loads((out / "speller-lm" / "checkpoint" / "trainer.json").read_text())
    assert lm["step"] == 4
    shutil.rmtree(out / "checkpoint")  # as if stopped between the pre-training and the run
    assert main(args + ["--pretrain-lm-steps", "6"]) == 2
    assert "speller-lm/checkpoint: already holds a checkpoint" in capsys.readouterr().err
    assert main(args + ["--pretrain-lm-steps", "6", "--resume"]) == 0
    text = capsys.readouterr().out
    assert "pre-trained as a language model for 6 steps" in text and "stopped after 2 steps" in text
    assert main(args + ["--pretrain-lm-steps", "6", "--steps", "3", "--resume"]) == 0
    text = capsys.readouterr().out  # the run resumes; its pre-training is done
    assert "pre-trained" not in text and "stopped after 3 steps" in text


def test_a_recording_longer_than_the_limit_is_refused_before_loading_anything(tmp_path, capsys):
    wav = tmp_path / "ten_minutes.wav"  # a 10-minute recording, scaled down with the limit
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(bytes(2 * 8000 * 2))  # 2 s of silence
    assert (
        main(["transcribe", "--checkpoint", str(tmp_path / "none"), str(wav), "--max-seconds", "1"])
        == 2
    )
    assert capsys.readouterr().err == (
        f"attnkit: {wav}: 2.0 s of audio, more than max_seconds=1; cut it into utterances\n"
    )


def test_a_streaming_model_transcribes_as_the_audio_arrives(tmp_path, capsys):
    out = train_tiny(
        tmp_path,
        "--steps",
        "3",
        "--eval-every",
        "3",
        "--listener",
        "uni",
        "--alignment",
        "monotonic",
        start=0.6,
    )
    capsys.readouterr()
    ck = out / "checkpoint"
    config = json.loads((ck / "config.json").read_text())["config"]["model"]
    assert config["listener"] == "uni" and config["alignment"] == "monotonic"
    wavs = [str(tmp_path / f"w{i}.wav") for i in range(4)]
    assert main(["transcribe", "--checkpoint", str(ck), *wavs, "--beam", "1"]) == 0
    offline = capsys.readouterr().out
    for chunk in ("30", "200"):
        assert (
            main(["transcribe", "--checkpoint", str(ck), *wavs, "--stream", "--chunk-ms", chunk])
            == 0
        )
        streamed = capsys.readouterr()
        assert streamed.out == offline
        latency = streamed.err.splitlines()
        assert len(latency) == 4 and re.match(
            rf"^{re.escape(wavs[0])}: 0.60 s of audio in \d+ chunks of {chunk} ms; compute per "
            r"chunk [\d.]+ ms mean, [\d.]+ ms max$",
            latency[0],
        )
    assert main(["transcribe", "--checkpoint", str(ck), wavs[0], "--stream", "--realtime"]) == 0
    assert capsys.readouterr().out == offline.splitlines(keepends=True)[0]


def test_streaming_refuses_models_and_options_it_cannot_serve(tmp_path, capsys):
    out = train_tiny(tmp_path, "--steps", "1", "--eval-every", "1")
    capsys.readouterr()
    ck, wav = str(out / "checkpoint"), str(tmp_path / "w0.wav")
    assert main(["transcribe", "--checkpoint", ck, wav, "--stream"]) == 2
    assert capsys.readouterr().err == (
        f"attnkit: --stream: {ck} cannot stream (streaming needs a unidirectional listener "
        "(listener 'uni', got 'bi') and a hard monotonic alignment ('monotonic' or 'mocha', "
        "got 'softmax')); train one with `attnkit train asr --listener uni --alignment "
        "monotonic (or mocha)`\n"
    )
    for extra, message in [
        (["--stream", "--beam", "4"], "--stream: decodes greedily"),
        (["--stream", "--ctc-weight", "0.5"], "--stream: decodes greedily"),
        (["--chunk-ms", "50"], "--chunk-ms: an option of --stream"),
        (["--realtime"], "--realtime: an option of --stream"),
    ]:
        assert main(["transcribe", "--checkpoint", ck, wav, *extra]) == 2
        assert capsys.readouterr().err.startswith(f"attnkit: {message}")


@pytest.mark.parametrize("beam", ["1", "5"])
@pytest.mark.parametrize(
    "value, message",
    [
        (
            float("nan"),
            "1 samples are NaN or infinite (the first at frame 100); expected finite samples",
        ),
        # 1e30 is finite: it passed the finite check and overflowed in the features
        (
            1e30,
            "1 samples have a magnitude above 1000 (the largest 1e+30 at frame 100); expected "
            "samples nominally within [-1, 1]",
        ),
    ],
)
def test_a_broken_float_wav_is_refused_by_name_whatever_the_decoding(
    tmp_path, capsys, beam, value, message
):
    # beam 5 ended in an unrelated "prev_weights" error, greedy in an empty transcript
    samples = [0.01] * 800
    samples[100] = value
    wav = tmp_path / "bad.wav"
    wav.write_bytes(float_wav_bytes(samples, 8000))
    assert main(["transcribe", "--checkpoint", "builtin:asr-digits", str(wav), "--beam", beam]) == 2
    assert capsys.readouterr().err == f"attnkit: {wav}: {message}\n"
