"""Synthesised speech (espeak-ng), the split design, the feature cache and manifests."""

import dataclasses
import importlib.metadata
import json
import math
import random
import re
import subprocess
import wave
from collections import Counter

import numpy as np
import pytest
import torch
from num2words import num2words

from attnkit.data import (
    DataError,
    FeaturesOnDisk,
    SpeechSet,
    log_mel,
    mel_filterbank,
    pad_features,
    plan_utterances,
    read_manifest,
    resample,
    speech_dataset,
    synthesize,
)
from attnkit.data.worlds import speech, synthesis
from attnkit.data.worlds.speech import SPLITS
from attnkit.data.worlds.synthesis import ACCENTS, ENGINES
from tests.needs import needs_voice

# planning espeak-ng utterances reads the variants this machine's espeak-ng ships
needs_espeak = needs_voice("espeak-ng")
TRANSCRIPT = re.compile(r"[a-z]+( [a-z]+)*")
DIGITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


@needs_espeak
def test_plan_is_deterministic_and_prefix_stable():
    plan = plan_utterances(200, seed=5)
    assert plan == plan_utterances(200, seed=5)
    assert plan[:50] == plan_utterances(50, seed=5)
    assert plan != plan_utterances(200, seed=6)
    assert len({u.transcript for u in plan}) > 190


@needs_espeak
def test_transcript_conventions():
    plan = plan_utterances(600, seed=1)
    kinds = Counter(u.kind for u in plan)
    assert set(kinds) == {"digits", "numbers", "sentences"} and min(kinds.values()) > 150
    words = set(speech._words())
    for u in plan:
        assert TRANSCRIPT.fullmatch(u.transcript), u
        if u.kind == "digits":
            assert u.transcript == " ".join(DIGITS[int(d)] for d in u.text.split())
            assert 3 <= len(u.text.split()) <= 8
        elif u.kind == "numbers":
            assert u.text.isdigit() and len(u.text) <= 6
            spelled = num2words(int(u.text), lang="en").replace("-", " ").replace(",", " ")
            assert u.transcript == " ".join(spelled.split())
        else:
            assert u.text == u.transcript and set(u.transcript.split()) <= words
    assert plan_utterances(1, seed=0, kinds=("numbers",))[0].kind == "numbers"


def test_numbers_are_spelled_with_spaces_only():
    assert speech.spoken_number(4072) == "four thousand and seventy two"
    assert speech.spoken_number(120034) == "one hundred and twenty thousand and thirty four"
    assert speech.spoken_number(0) == "zero"


needs_gnuspeech = needs_voice("gnuspeech")


@needs_espeak
def test_splits_share_no_voice_and_no_speed():
    both = ENGINES
    plans = {s: plan_utterances(1500, split=s, seed=0, engines=both) for s in SPLITS}
    # festival has three English voices: valid and test share the one training never hears
    voices = {s: {u.voice for u in p if u.engine == "espeak-ng"} for s, p in plans.items()}
    speeds = {s: {u.speed for u in p} for s, p in plans.items()}
    variants = {
        s: {u.voice.partition("+")[2] for u in p if u.engine == "espeak-ng"}
        for s, p in plans.items()
    }
    for a, b in [("train", "valid"), ("train", "test"), ("valid", "test")]:
        assert not voices[a] & voices[b] and not speeds[a] & speeds[b]
        assert not variants[a] & variants[b]
    assert variants["train"] == {"", *speech.training_variants()}
    assert variants["test"] == set(speech.HELD_OUT_VARIANTS["test"])
    assert {"m1", "f1", "klatt", "croak"} < variants["train"]  # every variant espeak-ng ships
    festival = {s: {u.voice for u in p if u.engine == "festival"} for s, p in plans.items()}
    assert festival == {
        "train": {"kal_diphone", "cmu_us_slt_arctic_hts"},
        "valid": {"ked_diphone"},
        "test": {"ked_diphone"},
    }
    gnuspeech = {s: {u.voice for u in p if u.engine == "gnuspeech"} for s, p in plans.items()}
    assert gnuspeech == {
        "train": {"male", "female", "large_child"},
        "valid": {"small_child"},
        "test": {"small_child"},
    }
    pico = {s: {u.voice for u in p if u.engine == "pico"} for s, p in plans.items()}
    assert pico == {"train": {"en-US"}, "valid": {"en-GB"}, "test": {"en-GB"}}
    accented = {s: {u.voice for u in p if u.engine == "accented"} for s, p in plans.items()}
    assert accented == {
        "train": set(synthesis.FESTIVAL_ACCENTS) - {"czech_ph"},
        "valid": {"czech_ph"},
        "test": {"czech_ph"},
    }
    assert {u.voice.partition("+")[0] for u in plans["train"] if u.engine == "espeak-ng"} == set(
        ACCENTS
    )
    same_text = sum(a.transcript == b.transcript for a, b in zip(plans["valid"], plans["test"]))
    assert same_text < 30  # the split is part of each example's seed, not only its voice pool
    assert min(speeds["train"]) < min(speeds["valid"]) and max(speeds["test"]) < max(
        speeds["train"]
    )  # held-out speeds lie inside the training range


@needs_espeak
def test_engines_default_to_espeak_and_are_checked():
    assert {u.engine for u in plan_utterances(50)} == {"espeak-ng"}
    with pytest.raises(ValueError, match="engines: expected a non-empty subset"):
        plan_utterances(5, engines=("flute",))


@needs_voice("festival", "kal_diphone", "cmu_us_slt_arctic_hts")
def test_festival_speaks_and_follows_speed_and_pitch():
    slow, _ = synthesis.synthesize("four two", voice="kal_diphone", speed=100, engine="festival")
    fast, rate = synthesis.synthesize("four two", voice="kal_diphone", speed=200, engine="festival")
    assert rate == 16000 and 1.6 < slow.numel() / fast.numel() < 2.4
    low, _ = synthesis.synthesize("four two", voice="kal_diphone", pitch=20, engine="festival")
    high, _ = synthesis.synthesize("four two", voice="kal_diphone", pitch=80, engine="festival")
    assert not torch.equal(
        low[: min(low.numel(), high.numel())], high[: min(low.numel(), high.numel())]
    )
    plan = plan_utterances(12, engines=("festival",))
    assert all(
        torch.equal(a, speech.utterance_audio(u))  # one process or one each: the same
        for a, u in zip(speech._chunk_audio(plan), plan[:3])
    )
    with pytest.raises(ValueError, match="voice: expected a festival voice"):
        synthesis.synthesize("one", voice="en-us", engine="festival")


@needs_gnuspeech
def test_gnuspeech_speaks_reproducibly_and_follows_speed_and_pitch():
    plan = [u for u in plan_utterances(40, engines=("gnuspeech",))][:6]
    together = speech._chunk_audio(plan)  # one node process for all
    assert all(torch.equal(a, speech.utterance_audio(u)) for a, u in zip(together, plan[:2]))
    slow, rate = synthesize("four two", voice="female", speed=100, engine="gnuspeech")
    fast, _ = synthesize("four two", voice="female", speed=200, engine="gnuspeech")
    assert rate == 44100 and 1.5 < slow.numel() / fast.numel() < 2.5
    low, _ = synthesize("four two", voice="female", pitch=20, engine="gnuspeech")
    high, _ = synthesize("four two", voice="female", pitch=80, engine="gnuspeech")
    assert _f0(high, rate) > 1.3 * _f0(low, rate)  # 8 semitones apart: 1.59 times
    with pytest.raises(ValueError, match="voice: expected a gnuspeech voice"):
        synthesize("one", voice="baby", engine="gnuspeech")


@needs_espeak
def test_gnuspeech_speakers_are_drawn_in_range_and_only_for_training():
    a = synthesis.gnuspeech_tract(random.Random(3))
    assert (
        a
        == synthesis.gnuspeech_tract(random.Random(3))
        != synthesis.gnuspeech_tract(random.Random(4))
    )
    for name, (low, high) in synthesis.GNUSPEECH_TRACT.items():
        assert low <= a[name] <= high
    assert a["glottal_pulse_tn_min"] <= a["glottal_pulse_tn_max"] <= a["glottal_pulse_tn_min"] + 10
    plans = {s: plan_utterances(300, split=s, engines=ENGINES) for s in SPLITS}
    train = [u for u in plans["train"] if u.engine == "gnuspeech"]
    assert train and len({u.tract for u in train}) == len(train)  # a speaker each
    assert all(not u.tract for s in ("valid", "test") for u in plans[s])
    assert all(not u.tract for u in plans["train"] if u.engine != "gnuspeech")
    # the speaker is drawn last: every other field is as without one
    plain = plan_utterances(300, split="train", engines=ENGINES)
    assert [dataclasses.replace(u, tract=()) for u in plans["train"]] == [
        dataclasses.replace(u, tract=()) for u in plain
    ]


@needs_gnuspeech
def test_gnuspeech_tract_changes_the_speaker_reproducibly():
    def centroid(samples, rate):  # Hz, of the power spectrum below 5 kHz
        power = np.abs(np.fft.rfft(samples.double().numpy())) ** 2
        freqs = np.fft.rfftfreq(samples.numel(), 1 / rate)
        keep = freqs < 5000
        return float((power[keep] * freqs[keep]).sum() / power[keep].sum())

    short, rate = synthesize(
        "nine four three", voice="male", engine="gnuspeech", tract={"vocal_tract_length": 12.0}
    )
    long, _ = synthesize(
        "nine four three", voice="male", engine="gnuspeech", tract={"vocal_tract_length": 19.0}
    )
    assert centroid(long, rate) < 0.9 * centroid(short, rate)  # a longer tube: lower formants
    tract = synthesis.gnuspeech_tract(random.Random(0))
    once = synthesize("seven", voice="female", engine="gnuspeech", tract=tract)[0]
    assert torch.equal(
        once, synthesize("seven", voice="female", engine="gnuspeech", tract=tract)[0]
    )
    assert not torch.equal(once, synthesize("seven", voice="female", engine="gnuspeech")[0])
    plan = [u for u in plan_utterances(30, engines=("gnuspeech",))][:3]
    assert all(u.tract for u in plan)
    assert all(
        torch.equal(a, speech.utterance_audio(u))
        for a, u in zip(speech._chunk_audio(plan), plan[:2])
    )


def test_bad_tract_is_refused():
    with pytest.raises(ValueError, match="tract: expected settings among .*got 'lips'"):
        synthesis.gnuspeech_many([("one", "male", 160, 50, {"lips": 1.0})])
    with pytest.raises(ValueError, match="tract: expected a finite number >= 0 for breathiness"):
        synthesis.gnuspeech_many([("one", "male", 160, 50, {"breathiness": float("nan")})])
    with pytest.raises(ValueError, match="tract: only engine='gnuspeech' takes one"):
        synthesize("one", voice="en-us", tract={"breathiness": 1.0})


def _level_db(samples: torch.Tensor, start: int, stop: int) -> float:
    """The mean power of ``samples[start:stop]``, in dB."""
    return 10 * math.log10(float(samples[start:stop].double().square().mean()))


@needs_espeak
@pytest.mark.parametrize("voice", ["en-us", "en-gb-x-gbclan+klatt3", "en-gb-x-rp+Alicia"])
def test_espeak_consonants_set_how_loud_an_f_is_and_leave_the_vowel(voice):
    own, rate = synthesize("four", voice=voice)
    quiet, _ = synthesize("four", voice=voice, consonants=20)
    loud, _ = synthesize("four", voice=voice, consonants=150)
    assert own.numel() == quiet.numel() == loud.numel()
    f = (int(0.03 * rate), int(0.07 * rate))  # inside the "f" of every voice here
    vowel = int(own.abs().argmax())
    o = (vowel - int(0.02 * rate), vowel + int(0.02 * rate))
    assert abs(_level_db(quiet, *o) - _level_db(own, *o)) < 0.5
    assert _level_db(quiet, *f) < _level_db(own, *f) - 8 < _level_db(loud, *f) - 10
    assert torch.equal(quiet, synthesize("four", voice=voice, consonants=20)[0])


def test_bad_consonants_are_refused():
    with pytest.raises(ValueError, match=r"consonants: expected an int in \[1, 200\], got 0"):
        synthesize("one", voice="en-us", consonants=0)
    with pytest.raises(ValueError, match="consonants: only engine='espeak-ng' takes it"):
        synthesize("one", voice="kal_diphone", engine="festival", consonants=50)
    for bad in [(50, 20), (0, 50), (20, 300), (20.5, 50), (20,)]:
        with pytest.raises(ValueError, match=r"consonants: expected None or \(low, high\)"):
            plan_utterances(3, consonants=bad)


@needs_espeak
def test_consonants_are_drawn_for_espeak_utterances_only_and_change_nothing_else():
    plain = plan_utterances(200, seed=3, engines=("espeak-ng", "festival"))
    shaped = plan_utterances(200, seed=3, engines=("espeak-ng", "festival"), consonants=(15, 100))
    assert [dataclasses.replace(u, consonants=None) for u in shaped] == plain
    drawn = [u.consonants for u in shaped if u.engine == "espeak-ng"]
    assert all(15 <= c <= 100 for c in drawn) and len(set(drawn)) > 40
    assert all(u.consonants is None for u in shaped if u.engine == "festival")
    assert shaped == plan_utterances(
        200, seed=3, engines=("espeak-ng", "festival"), consonants=(15, 100)
    )


@needs_espeak
def test_oh_says_zeros_of_digit_strings_and_changes_nothing_else():
    plain = plan_utterances(300, seed=4, kinds=("digits", "numbers"), engines=("espeak-ng", "pico"))
    said = plan_utterances(
        300, seed=4, kinds=("digits", "numbers"), engines=("espeak-ng", "pico"), oh=0.5
    )
    assert [dataclasses.replace(u, spoken=None) for u in said] == plain
    assert all(u.spoken is None and u.said == u.transcript for u in plain)
    zeros = [u for u in said if u.kind == "digits" and "zero" in u.transcript.split()]
    for u in said:
        if u.spoken is None:
            continue
        assert u.kind == "digits" and u.said == u.spoken
        pairs = list(zip(u.transcript.split(), u.spoken.split(), strict=True))
        assert all(s == t or (t, s) == ("zero", "oh") for t, s in pairs)
    oh = sum(w == "oh" for u in said if u.spoken for w in u.spoken.split())
    n = sum(u.transcript.split().count("zero") for u in zeros)
    # each of n zeros said "oh" with probability 1/2: within 4 standard deviations
    assert n > 50 and abs(oh - n / 2) <= 4 * math.sqrt(n / 4)
    always = plan_utterances(300, seed=4, kinds=("digits", "numbers"), oh=1)
    assert all(
        u.said == u.transcript.replace("zero", "oh")
        for u in always
        if u.kind == "digits" or u.spoken is not None
    )


@needs_espeak
def test_an_utterance_is_synthesised_from_what_it_says():
    u = next(
        u for u in plan_utterances(40, seed=1, kinds=("digits",), oh=1) if u.spoken is not None
    )
    audio = speech.utterance_audio(u)
    assert torch.equal(
        audio, speech.utterance_audio(dataclasses.replace(u, transcript=u.spoken, spoken=None))
    )
    assert not torch.equal(audio, speech.utterance_audio(dataclasses.replace(u, spoken=None)))


@pytest.mark.parametrize("bad", [-0.1, 1.5, "half", math.nan])
def test_bad_oh_is_refused(bad):
    with pytest.raises(ValueError, match=r"oh: expected a probability in \[0, 1\], got"):
        plan_utterances(3, oh=bad)


def _f0(samples: torch.Tensor, rate: int) -> float:
    """The median fundamental frequency (Hz) of the voiced frames, by Praat."""
    import parselmouth

    pitch = parselmouth.Sound(samples.double().numpy(), rate).to_pitch()
    f0 = pitch.selected_array["frequency"]
    return float(np.median(f0[f0 > 0]))


needs_pico = needs_voice("pico")


@needs_pico
def test_pico_speaks_reproducibly_and_follows_speed_and_pitch():
    plan = plan_utterances(12, split="test", engines=("pico",))[:3]
    # Pico's library carries state into the next utterance; a fresh process each keeps the
    # same utterance the same, alone or after others
    together = speech.utterances_audio([plan[1], *plan])
    assert torch.equal(together[0], together[2])
    assert all(torch.equal(a, speech.utterance_audio(u)) for a, u in zip(together[1:], plan))
    slow, rate = synthesize("four two", voice="en-US", speed=100, engine="pico")
    fast, _ = synthesize("four two", voice="en-US", speed=200, engine="pico")
    assert rate == 16000 and 1.5 < slow.numel() / fast.numel() < 2.5
    low, _ = synthesize("four two", voice="en-GB", pitch=20, engine="pico")
    high, _ = synthesize("four two", voice="en-GB", pitch=80, engine="pico")
    assert _f0(high, rate) > 1.4 * _f0(low, rate)  # 2 ** (60 / 80): 1.68 times
    with pytest.raises(ValueError, match="voice: expected a pico voice"):
        synthesize("one", voice="de-DE", engine="pico")


def test_missing_pico_says_how_to_install_it(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(synthesis.importlib.metadata, "version", not_installed)
    with pytest.raises(RuntimeError, match=r"pico: .*py-nanotts is not installed.*pip install"):
        synthesize("one", voice="en-US", engine="pico")
    with pytest.raises(RuntimeError, match=r"pico: .*pip install"):
        speech.speech_dataset(2, engines=("pico",), cache_dir="unused")


def test_missing_gnuspeech_says_how_to_install_it(monkeypatch, tmp_path):
    """Node.js without the package, then no Node.js: each message, whether or not this
    machine has Node.js."""
    monkeypatch.setenv("ATTNKIT_NODE_MODULES", str(tmp_path))
    monkeypatch.setattr(synthesis.shutil, "which", lambda name: f"/usr/bin/{name}")
    with pytest.raises(RuntimeError, match=r"gnuspeech: .*not found in .*npm install --prefix"):
        synthesize("one", voice="male", engine="gnuspeech")
    monkeypatch.setattr(synthesis.shutil, "which", lambda name: None)
    with pytest.raises(
        RuntimeError,
        match=r"gnuspeech: node: command not found.*apt-get "
        r"install nodejs",
    ):
        synthesize("one", voice="male", engine="gnuspeech")


def test_noise_settings_are_drawn_per_example():
    plan = plan_utterances(50, split="valid", noise_snr_db=(5.0, 20.0))
    assert all(5.0 <= u.noise_snr_db <= 20.0 for u in plan)
    assert len({u.noise_seed for u in plan}) == 50
    assert all(u.noise_snr_db is None for u in plan_utterances(5, split="valid"))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"split": "dev"}, "split: expected one of train, valid, test, got 'dev'"),
        ({"kinds": ("poems",)}, "kinds: expected a non-empty subset"),
        ({"noise_snr_db": (20, 5)}, r"noise_snr_db: expected None or \(low, high\)"),
    ],
)
def test_plan_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        plan_utterances(3, **kwargs)


def test_missing_espeak_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(synthesis.shutil, "which", lambda name: None)
    with pytest.raises(
        RuntimeError,
        match=r"espeak-ng: command not found.*apt-get install "
        r"espeak-ng",
    ):
        synthesize("hello")


@needs_espeak
def test_espeak_stdout_header_has_bogus_sizes_and_is_parsed():
    raw = subprocess.run(
        ["espeak-ng", "--stdout", "-v", "en-us", "-s", "160", "-p", "50", "one two"],
        capture_output=True,
        check=True,
    ).stdout
    riff_size, data_size = int.from_bytes(raw[4:8], "little"), int.from_bytes(raw[40:44], "little")
    assert raw[36:40] == b"data" and data_size > len(raw) and riff_size > len(raw)
    samples, rate = synthesize("one two", voice="en-us")
    assert rate == 22050 and samples.numel() == (len(raw) - 44) // 2
    assert torch.equal(
        samples, torch.from_numpy(np.frombuffer(raw[44:], "<i2").astype(np.float32) / 32768)
    )


@needs_espeak
def test_synthesis_is_bit_reproducible_and_follows_settings():
    a, _ = synthesize("four zero seven two", voice="en-gb-x-rp+f3", speed=150, pitch=40)
    b, _ = synthesize("four zero seven two", voice="en-gb-x-rp+f3", speed=150, pitch=40)
    assert torch.equal(a, b) and float(a.abs().max()) > 0.05
    slower, _ = synthesize("four zero seven two", voice="en-gb-x-rp+f3", speed=120, pitch=40)
    assert slower.numel() > a.numel() * 1.1


@needs_espeak
def test_every_voice_sounds_different():
    """Catches voices that silently ignore their variant (espeak-ng's en-gb+m1 is en-gb): every
    accent with a few variants, and every variant with one accent."""
    variants = ["", *synthesis.espeak_variants()]
    voices = {a + (f"+{v}" if v else "") for a in ACCENTS for v in ("", "m1", "f2", "klatt")}
    voices |= {"en-us" + (f"+{v}" if v else "") for v in variants}
    seen = {}
    for voice in sorted(voices):
        samples, _ = synthesize("hello there, it is half past four", voice=voice)
        seen.setdefault(samples.numpy().tobytes(), []).append(voice)
    assert [v for v in seen.values() if len(v) > 1] == []


@needs_espeak
def test_unknown_voice_is_a_clear_error():
    with pytest.raises(RuntimeError, match="espeak-ng -v xx-nowhere .* failed"):
        synthesize("hi", voice="xx-nowhere")


@needs_espeak
def test_dataset_is_cached_and_reused(tmp_path, monkeypatch):
    data = speech_dataset(6, split="test", seed=2, cache_dir=tmp_path)
    plan = plan_utterances(6, split="test", seed=2)
    assert isinstance(data, SpeechSet) and len(data) == 6
    assert data.transcripts == [u.transcript for u in plan]
    assert data.origins[0] == (
        f"espeak-ng {plan[0].voice} s={plan[0].speed} p={plan[0].pitch} "
        f"g={plan[0].gap} a={plan[0].amplitude}"
    )
    audio, rate = synthesize(
        plan[0].transcript,
        voice=plan[0].voice,
        speed=plan[0].speed,
        pitch=plan[0].pitch,
        gap=plan[0].gap,
        amplitude=plan[0].amplitude,
    )
    assert rate == 22050
    assert data.features[0].shape == (1 + math.ceil(audio.numel() * 320 / 441) // 160, 80)
    # read from the cache's rows when indexed: each utterance's own features
    assert isinstance(data.features, FeaturesOnDisk)
    assert data.frames == [f.shape[0] for f in data.features]
    assert torch.equal(data.features[4], speech._chunk_features([plan[4]])[0].to(torch.float16))
    assert torch.equal(data.head(5).features[4], data.features[4])
    (folder,) = tmp_path.iterdir()
    index = json.loads((folder / "index.json").read_text())
    assert index["utterances"][3]["voice"] == plan[3].voice

    def no_espeak(*args, **kwargs):
        raise AssertionError("espeak-ng was run although the cache holds these settings")

    monkeypatch.setattr(speech, "synthesize", no_espeak)
    again = speech_dataset(6, split="test", seed=2, cache_dir=tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(data.features, again.features))
    normed = speech_dataset(6, split="test", seed=2, cache_dir=tmp_path, normalize=True)
    assert data.features[1].dtype == normed.features[1].dtype == torch.float16
    assert torch.allclose(normed.features[1].float().mean(0), torch.zeros(80), atol=1e-3)
    with pytest.raises(AssertionError, match="espeak-ng was run"):
        speech_dataset(6, split="test", seed=3, cache_dir=tmp_path)  # a new setting, a new cache


@needs_espeak
def test_noise_is_seeded_and_at_the_drawn_level(tmp_path):
    clean = speech_dataset(2, split="valid", cache_dir=tmp_path / "a", kinds=("digits",))
    noisy = speech_dataset(
        2, split="valid", cache_dir=tmp_path / "a", kinds=("digits",), noise_snr_db=(0.0, 0.0)
    )
    again = speech_dataset(
        2,
        split="valid",
        cache_dir=tmp_path / "b",
        kinds=("digits",),
        noise_snr_db=(0.0, 0.0),
        workers=1,
    )
    assert clean.transcripts == noisy.transcripts
    assert all(torch.equal(a, b) for a, b in zip(noisy.features, again.features))
    # at 0 dB the noise fills the silences: the quietest frames get much louder
    assert float(noisy.features[0].mean(1).min()) > float(clean.features[0].mean(1).min()) + 3


@needs_espeak
def test_a_consonants_range_is_a_cache_of_its_own(tmp_path):
    own = speech_dataset(3, split="valid", seed=2, cache_dir=tmp_path, kinds=("digits",))
    shaped = speech_dataset(
        3, split="valid", seed=2, cache_dir=tmp_path, kinds=("digits",), consonants=(10, 20)
    )
    assert len(list(tmp_path.iterdir())) == 2 and own.transcripts == shaped.transcripts
    plan = plan_utterances(3, split="valid", seed=2, kinds=("digits",), consonants=(10, 20))
    assert shaped.origins[0].endswith(f" c={plan[0].consonants}")
    assert torch.equal(shaped.features[0], speech._chunk_features(plan[:1])[0].to(torch.float16))
    assert not torch.equal(shaped.features[0], own.features[0])


def test_corrupt_cache_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(speech, "_chunk_features", lambda us: [torch.zeros(3, 80) for _ in us])
    monkeypatch.setattr(speech, "espeak_command", lambda: "true")
    monkeypatch.setattr(speech, "espeak_variants", lambda: ("m1",))
    speech_dataset(2, cache_dir=tmp_path)
    (folder,) = tmp_path.iterdir()
    (folder / "features.safetensors").write_bytes(b"garbage")
    with pytest.raises(DataError, match=re.escape(str(folder / "features.safetensors"))):
        speech_dataset(2, cache_dir=tmp_path)


def write_wav(path, pcm, rate, channels=1):
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.asarray(pcm, dtype="<i2").tobytes())


def test_manifest_reads_resamples_and_downmixes(tmp_path):
    t = np.arange(8000) / 8000
    tone = (8000 * np.sin(2 * np.pi * 500 * t)).astype(np.int16)  # 1 s at 8 kHz
    (tmp_path / "audio").mkdir()
    write_wav(tmp_path / "audio" / "a.wav", tone, 8000)
    write_wav(tmp_path / "b.wav", np.stack([tone, tone], 1).reshape(-1), 8000, channels=2)
    (tmp_path / "list.tsv").write_text("audio/a.wav\tfive hundred\nb.wav\tstereo\n")
    data = read_manifest(tmp_path / "list.tsv")
    assert data.transcripts == ["five hundred", "stereo"]
    assert data.origins == [str(tmp_path / "audio" / "a.wav"), str(tmp_path / "b.wav")]
    assert data.features[0].shape == (101, 80)  # resampled to 16 kHz: 1 + 16000 // 160 frames
    assert torch.allclose(data.features[0], data.features[1])
    expected = log_mel(resample(torch.from_numpy(tone.astype(np.float32) / 32768), 8000))
    assert data.features[0].dtype == torch.float16  # kept in half the memory
    assert torch.equal(data.features[0], expected.half())
    # float16 rounds each value to 11 significant bits, and a batch is float32 again
    error = (data.features[0].float() - expected).abs() / expected.abs()
    assert 0 < float(error.max()) <= 2**-11
    batch, lengths = pad_features(data.features)
    assert batch.dtype == torch.float32 and torch.equal(batch[0], data.features[0].float())
    peak_filter = mel_filterbank(n_fft=512)[int(data.features[0].mean(0).argmax())]
    assert abs(float(peak_filter.argmax()) * 16000 / 512 - 500) < 60  # the tone is at 500 Hz
    normed = read_manifest(tmp_path / "list.tsv", normalize=True)
    assert torch.allclose(normed.features[0].float().mean(0), torch.zeros(80), atol=1e-3)


def test_manifest_errors_name_the_file(tmp_path):
    (tmp_path / "list.tsv").write_text("missing.wav\thello\n")
    with pytest.raises(DataError, match=re.escape(str(tmp_path / "missing.wav"))):
        read_manifest(tmp_path / "list.tsv")
    (tmp_path / "bad.tsv").write_text("no tab here\n")
    with pytest.raises(DataError, match=re.escape(str(tmp_path / "bad.tsv")) + ":1"):
        read_manifest(tmp_path / "bad.tsv")
    (tmp_path / "mulaw.wav").write_bytes(
        b"RIFF\x24\0\0\0WAVEfmt \x10\0\0\0\x07\0\x01\0"
        b"\x80\x3e\0\0\0\xfa\0\0\x04\0\x20\0data\0\0\0\0"
    )
    (tmp_path / "f.tsv").write_text("mulaw.wav\thello\n")
    with pytest.raises(DataError, match=re.escape(str(tmp_path / "mulaw.wav")) + ".*mu-law"):
        read_manifest(tmp_path / "f.tsv")


def test_features_on_disk_are_sliced_without_reading_and_read_once_per_batch():
    reads = []

    class Counted(FeaturesOnDisk):
        def read(self, record):
            reads.append(record)
            return torch.full((record, 80), float(record))

    features = Counted([3, 5, 4], [3, 5, 4], normalize=False)
    part = features[1:]
    assert isinstance(part, Counted) and part.frames == [5, 4] and reads == []
    batch, lengths = pad_features(part)
    assert reads == [5, 4] and lengths.tolist() == [5, 4]
    assert batch.dtype == torch.float32 and float(batch[1, 3, 0]) == 4.0  # float16 on the way
