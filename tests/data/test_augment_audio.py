"""Speech augmentations: each one's effect on a known signal or spectrogram, their ranges,
seeding and stages."""

import math

import numpy as np
import parselmouth
import pytest
import torch
from scipy.signal import lfilter

from attnkit.data.audio.features import SAMPLE_RATE, log_mel, mel_filterbank, vtlp_warp
from attnkit.data.augment.audio_augment import (
    PRESETS,
    VTLP,
    BandLimit,
    ConsonantDuration,
    DynamicRange,
    Gain,
    Noise,
    PitchShift,
    Reverb,
    SpecAugment,
    SpeechAugment,
    SpeedPerturb,
    VoiceSource,
)
from attnkit.data.augment.augmentation import Compose, example_rng

pytestmark = pytest.mark.usefixtures("one_thread")


def sine(hz, seconds=1.0, amplitude=0.5):
    t = torch.arange(round(seconds * SAMPLE_RATE), dtype=torch.float64) / SAMPLE_RATE
    return (amplitude * torch.sin(2 * math.pi * hz * t)).float()


def peak_hz(samples):
    spectrum = np.abs(np.fft.rfft(samples.double().numpy()))
    return float(np.fft.rfftfreq(samples.numel(), 1 / SAMPLE_RATE)[spectrum.argmax()])


def db(x):
    return 10 * math.log10(float(x.double().square().mean()))


def vowel(f0=120.0, formants=(800.0, 2000.0), seconds=1.0):
    """A pulse train at ``f0`` through two resonators (100 Hz wide) at ``formants``."""
    x = np.zeros(round(seconds * SAMPLE_RATE))
    x[:: round(SAMPLE_RATE / f0)] = 1.0
    r = math.exp(-math.pi * 100.0 / SAMPLE_RATE)
    for hz in formants:
        x = lfilter([1 - r], [1, -2 * r * math.cos(2 * math.pi * hz / SAMPLE_RATE), r * r], x)
    return torch.from_numpy((0.3 * x / np.abs(x).max()).astype(np.float32))


def f0_hz(samples):
    """The shortest lag from 60 to 500 Hz whose autocorrelation is a peak within 80% of the
    highest (not a multiple of the period), over 0.25 s from 0.125 s."""
    x = samples.double().numpy()[2000:6000]
    x = x - x.mean()
    ac = np.correlate(x, x, "full")[x.size - 1 :]
    low, high = SAMPLE_RATE // 500, SAMPLE_RATE // 60
    top = ac[low:high].max()
    lag = next(
        k
        for k in range(low, high)
        if ac[k] >= 0.8 * top and ac[k] >= ac[k - 1] and ac[k] >= ac[k + 1]
    )
    return SAMPLE_RATE / lag


def first_formant_hz(samples):
    """The strongest frequency from 400 to 1,600 Hz (the harmonic nearest the first formant)."""
    x = samples.double().numpy()
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    hz = np.fft.rfftfreq(x.size, 1 / SAMPLE_RATE)
    band = (hz > 400) & (hz < 1600)
    return float(hz[band][spectrum[band].argmax()])


@pytest.mark.parametrize("factor", [0.8, 1.5])
def test_pitch_shift_moves_the_pitch_and_keeps_formants_and_length(factor):
    x = vowel()
    assert f0_hz(x) == pytest.approx(120.0, rel=0.02)
    out = PitchShift(factor=(factor, factor)).apply(x, np.random.default_rng(0))
    assert out.shape == x.shape and out.dtype == torch.float32
    assert f0_hz(out) == pytest.approx(120.0 * factor, rel=0.03)
    assert first_formant_hz(out) == pytest.approx(800.0, abs=120.0)
    # speed perturbation moves the pitch as far, and the formant with it
    sped = SpeedPerturb(factors=(factor,)).apply(x, np.random.default_rng(0))
    assert f0_hz(sped) == pytest.approx(120.0 * factor, rel=0.03)
    assert abs(first_formant_hz(sped) - 800.0 * factor) < 100.0


def test_pitch_shift_draws_log_uniformly_and_leaves_unvoiced_or_short_input():
    x = vowel(seconds=0.5)
    shifted, drawn = [], []
    for seed in range(12):
        shifted.append(f0_hz(PitchShift(factor=(0.8, 1.25)).apply(x, np.random.default_rng(seed))))
        log_factor = np.random.default_rng(seed).uniform(math.log(0.8), math.log(1.25))
        drawn.append(120.0 * math.exp(log_factor))
    assert shifted == pytest.approx(drawn, rel=0.03)
    assert min(shifted) < 110 and max(shifted) > 130
    silence = torch.zeros(8000)
    assert PitchShift(factor=(1.5, 1.5)).apply(silence, np.random.default_rng(0)) is silence
    short = x[:320]  # 20 ms: too short to track a pitch down to 75 Hz
    assert PitchShift(factor=(1.5, 1.5)).apply(short, np.random.default_rng(0)) is short


def harmonicity_db(samples):
    """Praat's mean harmonics-to-noise ratio (cross-correlation) over the voiced frames."""
    hnr = parselmouth.Sound(samples.double().numpy(), SAMPLE_RATE).to_harmonicity_cc().values
    return float(np.mean(hnr[hnr > -100]))


def test_voice_source_keeps_pitch_formant_and_length_and_draws_breathiness():
    x = vowel()
    clean = VoiceSource(hnr_db=(30.0, 30.0), tilt=(0.4, 0.4)).apply(x, np.random.default_rng(0))
    assert clean.shape == x.shape and clean.dtype == torch.float32
    assert not torch.equal(clean, x)
    assert f0_hz(clean) == pytest.approx(120.0, rel=0.03)
    assert first_formant_hz(clean) == pytest.approx(800.0, abs=120.0)
    assert db(clean) == pytest.approx(db(x), abs=0.01)  # the input's mean power
    breathy = VoiceSource(hnr_db=(3.0, 3.0), tilt=(0.4, 0.4)).apply(x, np.random.default_rng(0))
    assert first_formant_hz(breathy) == pytest.approx(800.0, abs=120.0)
    assert harmonicity_db(breathy) < harmonicity_db(clean) - 4.0


def test_dynamic_range_moves_a_weak_sound_against_a_loud_one_by_its_exponent():
    weak, loud = sine(3000.0, 0.5, amplitude=0.01), sine(300.0, 0.5, amplitude=0.5)
    x = torch.cat([weak, loud])  # the weak half 34 dB under the loud one
    gap = db(loud) - db(weak)
    for e, want in ((0.5, 1.5 * gap), (-0.5, 0.5 * gap)):
        out = DynamicRange(p=1.0, exponent=(e, e)).apply(x, np.random.default_rng(0))
        assert out.shape == x.shape and out.dtype == torch.float32
        # away from the edges and the boundary (a 20 ms window)
        assert db(out[8400:15600]) - db(out[400:7600]) == pytest.approx(want, abs=0.5)
        assert db(out) == pytest.approx(db(x), abs=0.01)  # the input's mean power
    drawn = DynamicRange(p=1.0, exponent=(0.0, 0.8))
    assert torch.equal(
        drawn.apply(x, np.random.default_rng(3)), drawn.apply(x, np.random.default_rng(3))
    )
    assert not torch.equal(
        drawn.apply(x, np.random.default_rng(3)), drawn.apply(x, np.random.default_rng(4))
    )
    silence = torch.zeros(8000)
    assert drawn.apply(silence, np.random.default_rng(0)) is silence


def loud_frames(samples, under_db=6.0):
    """How many 10 ms frames of ``samples`` lie within ``under_db`` of the loudest."""
    x = samples.double().numpy()
    level = np.array([np.mean(x[i : i + 160] ** 2) for i in range(0, x.size - 159, 160)])
    return int(np.sum(10 * np.log10(level + 1e-20) > 10 * np.log10(level.max()) - under_db))


def test_consonant_duration_scales_a_weak_sound_between_vowels_and_keeps_the_vowels():
    hiss = torch.from_numpy(0.01 * np.random.default_rng(1).standard_normal(3200)).float()
    x = torch.cat([vowel(seconds=0.4), hiss, vowel(seconds=0.4)])  # 200 ms, ~26 dB under
    ((start, end),) = ConsonantDuration().weak_runs(x.double().numpy())
    assert abs(start - 6400) <= 240 and abs(end - 9600) <= 240  # within 15 ms
    for factor in (0.3, 1.8):
        out = ConsonantDuration(p=1.0, factor=(factor, factor)).apply(x, np.random.default_rng(0))
        assert out.dtype == torch.float32
        # the hiss's 200 ms become 200 * factor; the vowels' 800 ms stay
        assert (out.numel() - x.numel()) / SAMPLE_RATE == pytest.approx(
            (factor - 1.0) * (end - start) / SAMPLE_RATE, abs=0.006
        )
        assert torch.equal(out[:start], x[:start]) and torch.equal(out[-6000:], x[-6000:])
        assert abs(loud_frames(out) - loud_frames(x)) <= 2
        assert f0_hz(out) == pytest.approx(f0_hz(x), rel=0.03)


def test_consonant_duration_keeps_pauses_is_seeded_and_leaves_short_input():
    pause = torch.zeros(3200)
    x = torch.cat([vowel(seconds=0.4), pause, vowel(seconds=0.4)])
    augmentation = ConsonantDuration(p=1.0, factor=(0.3, 1.0))
    assert augmentation.weak_runs(x.double().numpy()) == []
    assert augmentation.apply(x, np.random.default_rng(0)) is x  # silence is not a consonant
    hiss = torch.from_numpy(0.01 * np.random.default_rng(1).standard_normal(3200)).float()
    y = torch.cat([vowel(seconds=0.4), hiss, vowel(seconds=0.4)])
    assert torch.equal(
        augmentation.apply(y, np.random.default_rng(5)),
        augmentation.apply(y, np.random.default_rng(5)),
    )
    assert (
        augmentation.apply(y, np.random.default_rng(5)).numel()
        != augmentation.apply(y, np.random.default_rng(6)).numel()
    )
    short = y[6000:6300]
    assert augmentation.apply(short, np.random.default_rng(0)) is short


def test_voice_source_keeps_unvoiced_sounds_is_seeded_and_leaves_unvoiced_or_short_input():
    hiss = torch.from_numpy(0.05 * np.random.default_rng(1).standard_normal(8000)).float()
    x = torch.cat([hiss, vowel(seconds=0.5)])
    augmentation = VoiceSource(hnr_db=(3.0, 30.0))
    out = augmentation.apply(x, np.random.default_rng(5))
    assert torch.equal(out, augmentation.apply(x, np.random.default_rng(5)))
    assert not torch.equal(out, augmentation.apply(x, np.random.default_rng(6)))
    # the hiss, away from the vowel, is its own residual filtered back: nearly the input
    kept = np.corrcoef(out[1000:7000].numpy(), x[1000:7000].numpy())[0, 1]
    assert kept > 0.95
    assert augmentation.apply(hiss, np.random.default_rng(0)) is hiss
    silence = torch.zeros(8000)
    assert augmentation.apply(silence, np.random.default_rng(0)) is silence
    short = x[8000:8320]
    assert augmentation.apply(short, np.random.default_rng(0)) is short


@pytest.mark.parametrize("factor", [0.9, 1.1])
def test_speed_changes_the_length_by_one_over_the_factor_and_the_pitch_by_it(factor):
    x = sine(1000.0)
    out = SpeedPerturb(factors=(factor,)).apply(x, np.random.default_rng(0))
    assert abs(out.numel() - 16000 / factor) <= 1
    assert peak_hz(out) == pytest.approx(1000.0 * factor, abs=2.0)
    assert SpeedPerturb(factors=(1.0,)).apply(x, np.random.default_rng(0)) is x


def test_gain_scales_every_sample_by_one_factor_within_its_range():
    x = sine(300.0)
    for seed in range(10):
        out = Gain(db=6.0).apply(x, np.random.default_rng(seed))
        ratio = out / x.where(x.abs() > 1e-3, torch.tensor(1.0))
        kept = x.abs() > 1e-3
        assert torch.allclose(ratio[kept], ratio[kept][0], rtol=1e-5)
        assert 10 ** (-6 / 20) - 1e-6 <= float(ratio[kept][0]) <= 10 ** (6 / 20) + 1e-6


@pytest.mark.parametrize("colour", ["white", "pink", "brown"])
def test_noise_is_added_at_the_drawn_snr(colour):
    x = sine(440.0)
    out = Noise(snr_db=(20.0, 20.0), colours=(colour,)).apply(x, np.random.default_rng(1))
    assert db(x) - db(out - x) == pytest.approx(20.0, abs=0.01)
    silent = torch.zeros(1000)
    assert Noise().apply(silent, np.random.default_rng(0)) is silent


def test_pink_noise_has_more_power_at_low_frequencies():
    out = Noise(snr_db=(0.0, 0.0), colours=("pink",)).apply(
        sine(1.0, 4.0, 1e-3), np.random.default_rng(2)
    )
    power = np.abs(np.fft.rfft(out.double().numpy())) ** 2
    freqs = np.fft.rfftfreq(out.numel(), 1 / SAMPLE_RATE)
    low = power[(freqs > 100) & (freqs < 200)].mean()
    high = power[(freqs > 3200) & (freqs < 6400)].mean()
    assert 10 * math.log10(low / high) == pytest.approx(10 * math.log10(32), abs=2.0)


def test_reverb_impulse_response_decays_60_db_in_rt60_and_keeps_power_and_length():
    reverb = Reverb(rt60=(0.5, 0.5), drr_db=(5.0, 5.0))
    h = reverb.impulse_response(np.random.default_rng(0))
    assert h.size == 8000 and h[0] == 1.0
    assert 10 * math.log10(np.sum(h[1:] ** 2)) == pytest.approx(-5.0)  # direct/tail = 5 dB

    def level(a, b):  # mean power of the tail between a and b seconds, dB
        return 10 * math.log10(np.mean(h[round(a * 16000) : round(b * 16000)] ** 2))

    # the envelope's power falls 60 dB per rt60: -60 * (0.45 - 0.05) / 0.5 = -48 dB
    assert level(0.44, 0.46) - level(0.04, 0.06) == pytest.approx(-48.0, abs=3.0)
    x = sine(500.0) * torch.from_numpy(np.random.default_rng(1).random(16000) > 0.5).float()
    out = reverb.apply(x, np.random.default_rng(0))
    assert out.shape == x.shape and db(out) == pytest.approx(db(x), abs=1e-3)


def test_band_limit_passes_the_telephone_band_only():
    band = BandLimit()
    for hz, kept in [(100.0, False), (1000.0, True), (2500.0, True), (6000.0, False)]:
        loss = db(sine(hz)) - db(band.apply(sine(hz), np.random.default_rng(0)))
        assert (loss < 1.0) if kept else (loss > 20.0), (hz, loss)
    short = band.apply(torch.ones(10), np.random.default_rng(0))  # too short for filtfilt
    assert short.shape == (10,)


def test_vtlp_warp_is_piecewise_linear_with_fixed_ends():
    hz = np.linspace(0, 8000, 801)
    for alpha in (0.9, 1.1):
        warped = vtlp_warp(hz, alpha)
        assert warped[0] == 0 and warped[-1] == pytest.approx(8000)
        assert np.all(np.diff(warped) > 0)
        cut = 4800 * min(alpha, 1) / alpha
        below = hz <= cut
        assert np.allclose(warped[below], alpha * hz[below])
    assert np.array_equal(vtlp_warp(hz, 1.0), hz)
    with pytest.raises(ValueError, match=r"alpha, boundary_hz: expected alpha > 0"):
        vtlp_warp(hz, 0.0)


def test_vtlp_moves_a_tone_to_lower_mel_bins_for_a_factor_above_one():
    x = sine(1000.0)
    peaks = {a: int(log_mel(x, warp=a).mean(0).argmax()) for a in (0.9, 1.0, 1.1)}
    assert peaks[1.1] < peaks[1.0] < peaks[0.9]
    assert torch.equal(VTLP(alpha=(1.0, 1.0)).apply(x, np.random.default_rng(0)), log_mel(x))
    assert torch.equal(mel_filterbank(n_fft=512, warp=1.0), mel_filterbank(n_fft=512))


def test_a_masked_band_is_zero_and_a_masked_span_is_its_bins_means():
    features = torch.randn(100, 80) + 3.0
    freq = SpecAugment(freq_mask=10, freq_masks=1, time_masks=0, fill=0.0)
    for seed in range(10):
        out = freq.apply(features, np.random.default_rng(seed))
        zero = (out == 0).all(0)  # (F,) bins masked in every frame
        bins = torch.nonzero(zero).flatten()
        assert len(bins) <= 10 and torch.equal(out[:, ~zero], features[:, ~zero])
        if len(bins):
            assert bins[-1] - bins[0] == len(bins) - 1  # one band
    span = SpecAugment(freq_masks=0, time_mask=20, time_masks=1)
    out = span.apply(features, np.random.default_rng(3))
    masked = (out != features).any(1)
    assert 0 < int(masked.sum()) <= 20
    assert torch.allclose(out[masked], features.mean(0).expand(int(masked.sum()), 80))


def test_time_masks_longer_than_the_utterance_are_clipped():
    huge = SpecAugment(
        freq_mask=500, time_mask=1000, time_masks=3, max_time_ratio=1.0, time_warp=50
    )
    for frames in (1, 2, 5, 9):
        features = torch.randn(frames, 80)
        for seed in range(5):
            assert huge.apply(features, np.random.default_rng(seed)).shape == (frames, 80)
    ratio = SpecAugment(freq_masks=0, time_mask=1000, time_masks=1, max_time_ratio=0.1)
    for seed in range(20):
        out = ratio.apply(torch.randn(50, 80), np.random.default_rng(seed))
        assert int((out == out[:, :1]).all(1).sum()) <= 5  # at most 10% of 50 frames


def test_time_warp_keeps_the_length_and_a_steady_spectrogram():
    warp = SpecAugment(freq_masks=0, time_masks=0, time_warp=5)
    steady = torch.arange(80.0).expand(40, 80)
    assert torch.allclose(warp.apply(steady, np.random.default_rng(0)), steady)
    ramp = torch.arange(40.0)[:, None].expand(40, 80)
    changed = [
        not torch.allclose(warp.apply(ramp, np.random.default_rng(s)), ramp) for s in range(10)
    ]
    assert any(changed)
    assert warp.apply(torch.randn(10, 80), np.random.default_rng(0)).shape == (10, 80)  # T <= 2W


def test_speech_augment_runs_by_stage_and_reads_audio_only_when_it_changes_it():
    x = sine(700.0, 0.5)
    stored = log_mel(x, normalize=True)
    read = []

    def samples():
        read.append(1)
        return x

    only_masks = SpeechAugment([SpecAugment(p=0.0)])
    assert not only_masks.needs_samples
    out = only_masks(example_rng(0, 0, 0), samples=samples, features=lambda: stored, normalize=True)
    assert torch.equal(out, stored) and not read
    faster = SpeechAugment([SpecAugment(p=0.0), SpeedPerturb(factors=(1.1,))])  # any order
    assert faster.needs_samples
    out = faster(example_rng(0, 0, 0), samples=samples, features=lambda: stored, normalize=True)
    assert read and out.shape == log_mel(sine(700.0, 0.5 / 1.1)).shape
    assert out.mean(0).abs().max() < 1e-4  # normalised per utterance, as stored
    with pytest.raises(ValueError, match="samples: this augmentation changes the audio"):
        faster(example_rng(0, 0, 0), features=lambda: stored)
    with pytest.raises(TypeError, match=r"augmentations\[0\]: expected a speech augmentation"):
        from attnkit.data.augment.line_augment import Blur

        SpeechAugment([Blur()])


def test_draws_depend_on_seed_epoch_and_index_only():
    chain = SpeechAugment(PRESETS["strong"])
    x = sine(300.0, 0.6) + 0.05 * torch.randn(9600, generator=torch.Generator().manual_seed(0))
    a = chain(example_rng(3, 1, 4), samples=lambda: x)
    b = chain(example_rng(3, 1, 4), samples=lambda: x)
    assert torch.equal(a, b)
    others = [
        chain(example_rng(*key), samples=lambda: x) for key in [(4, 1, 4), (3, 2, 4), (3, 1, 5)]
    ]
    assert all(o.shape != a.shape or not torch.equal(o, a) for o in others)


def test_presets_round_trip_and_compose_takes_any_family():
    for augmentations in PRESETS.values():
        chain = SpeechAugment(augmentations)
        assert SpeechAugment.from_config(chain.config()) == chain
    assert len(Compose([Gain(), Noise()])) == 2


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: SpeedPerturb(factors=(0.0, 1.0)),
            r"factors: expected a number with 0.5 <= "
            r"factors <= 2, got 0.0",
        ),
        (lambda: SpeedPerturb(factors=()), r"factors: expected a non-empty tuple"),
        (
            lambda: Noise(snr_db=(-5.0, 10.0)),
            r"snr_db: expected \(low, high\) numbers with 0 <= "
            r"low <= high <= 100, got \(-5.0, 10.0\)",
        ),
        (lambda: Noise(snr_db=(30.0, 10.0)), r"snr_db: expected \(low, high\)"),
        (lambda: Noise(p=1.5), r"p: expected a probability in \[0, 1\] for noise, got 1.5"),
        (lambda: Reverb(rt60=(0.0, 0.5)), r"rt60: expected \(low, high\) numbers with 0 < low"),
        (
            lambda: BandLimit(low_hz=3400.0, high_hz=300.0),
            r"low_hz, high_hz: expected 0 <= "
            r"low_hz < high_hz < 8000",
        ),
        (lambda: SpecAugment(time_mask=-1), r"time_mask: expected an int with 0 <= time_mask"),
        (lambda: VTLP(alpha=(0.5, 1.0)), r"alpha: expected \(low, high\) numbers with 0.7"),
        (
            lambda: PitchShift(factor=(0.0, 1.5)),
            r"factor: expected \(low, high\) numbers with "
            r"0.5 <= low <= high <= 2, got \(0.0, 1.5\)",
        ),
        (
            lambda: VoiceSource(hnr_db=(-3.0, 20.0)),
            r"hnr_db: expected \(low, high\) numbers "
            r"with 0 <= low <= high <= 60",
        ),
        (
            lambda: DynamicRange(exponent=(0.0, 1.5)),
            r"exponent: expected \(low, high\) numbers "
            r"with -1 <= low <= high <= 1, got \(0.0, 1.5\)",
        ),
        (
            lambda: ConsonantDuration(factor=(0.1, 1.0)),
            r"factor: expected \(low, high\) numbers "
            r"with 0.2 <= low <= high <= 2, got",
        ),
        (
            lambda: VoiceSource(tilt=(0.0, 1.0)),
            r"tilt: expected \(low, high\) numbers with 0 <= "
            r"low <= high <= 0.95, got \(0.0, 1.0\)",
        ),
    ],
)
def test_settings_out_of_range_are_refused_by_name(make, message):
    with pytest.raises(ValueError, match=message):
        make()
