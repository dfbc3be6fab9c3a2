"""Speech augmentation: changes to an utterance's audio, to its filterbank and to its log-mels.

Three stages, in this order (:class:`SpeechAugment` runs them):

* **samples** ``(N,)`` float32 at 16 kHz: :class:`PitchShift` (PSOLA: the pitch moved, the
  formants and duration kept), :class:`VoiceSource` (LPC resynthesis: a new glottal source,
  breathy to buzzy, under the same formants), :class:`DynamicRange` (weak sounds moved against
  loud ones), :class:`ConsonantDuration` (weak sounds made shorter or longer),
  :class:`SpeedPerturb` (Ko et al. 2015), :class:`Gain`,
  :class:`Reverb` (a synthetic room), :class:`Noise` (at an SNR), :class:`BandLimit` (a
  telephone channel);
* **filterbank**: :class:`VTLP`, the mel filters' centres warped (Jaitly & Hinton 2013);
* **features** ``(T, F)`` log-mels: :class:`SpecAugment` (Park et al. 2019: frequency and time
  masks, time warp).

Each is an :class:`attnkit.data.augment.augmentation.Augmentation`: a frozen dataclass of its
probability ``p`` and ranges, called with the example and a ``numpy.random.Generator``.
:data:`PRESETS` are the sets ``attnkit train asr --augment`` names.

Why one file: each augmentation is a short class of one change, and together they are the one
registry of speech augmentations that :class:`SpeechAugment` stages and the presets name; split
by stage, the presets and the stage order would live apart from what they order.

Example:
    >>> import torch
    >>> from attnkit.data.augment.augmentation import example_rng
    >>> chain = SpeechAugment([SpeedPerturb(factors=(1.1,)), SpecAugment(time_mask=10)])
    >>> samples = torch.randn(16000)
    >>> chain(example_rng(0, 0, 0), samples=lambda: samples).shape  # 1 s at speed 1.1
    torch.Size([91, 80])
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import ClassVar, cast

import numpy as np
import parselmouth
import torch
import torch.nn.functional as F
from scipy.ndimage import maximum_filter1d
from scipy.signal import butter, fftconvolve, lfilter, sosfilt, sosfiltfilt

from attnkit.data.audio.features import SAMPLE_RATE, log_mel, normalize_features, resample
from attnkit.data.augment.augmentation import (
    Augmentation,
    Compose,
    check_number,
    number_check,
    range_check,
)

__all__ = [
    "PRESETS",
    "SPECAUGMENT_MAX",
    "AudioAugmentation",
    "BandLimit",
    "ConsonantDuration",
    "DynamicRange",
    "Gain",
    "Noise",
    "PitchShift",
    "Reverb",
    "SpecAugment",
    "SpeechAugment",
    "SpeedPerturb",
    "VTLP",
    "VoiceSource",
    "preset",
]

STAGES = ("samples", "filterbank", "features")


@dataclasses.dataclass(frozen=True)
class AudioAugmentation(Augmentation):
    """The base of speech augmentations; ``stage`` says what they change (:data:`STAGES`)."""

    family: ClassVar[str] = "audio"
    stage: ClassVar[str] = "samples"


def _check_samples(samples: torch.Tensor) -> None:
    if not isinstance(samples, torch.Tensor) or samples.dim() != 1 or samples.numel() == 0:
        shape = tuple(samples.shape) if isinstance(samples, torch.Tensor) else type(samples)
        raise ValueError(f"samples: expected a non-empty (N,) tensor, got {shape}")


@dataclasses.dataclass(frozen=True)
class PitchShift(AudioAugmentation, name="pitch"):
    """The voice's pitch (its fundamental frequency F0) multiplied by a factor drawn
    log-uniformly from ``factor``, its formants and duration kept: pitch-synchronous overlap-add
    (PSOLA; Moulines & Charpentier 1990), Praat's manipulation through parselmouth (Jadoul et
    al. 2018), with F0 tracked from 75 to 600 Hz. Where :class:`SpeedPerturb` and
    :class:`VTLP` move the formants, this moves the harmonics under them, as a speaker with a
    higher or lower voice and the same vocal tract; unvoiced sounds are left as they are, and
    an utterance with no voiced frame is returned unchanged.

    Shape: ``(N,)`` -> ``(N,)``.
    """

    p: float = 0.5
    factor: tuple[float, float] = (0.8, 1.5)

    checks = {"factor": range_check(0.5, 2.0)}

    def apply(self, samples: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        _check_samples(samples)
        low, high = self.factor
        factor = math.exp(rng.uniform(math.log(low), math.log(high)))
        # PSOLA needs a few pitch periods of the lowest F0 (75 Hz) to track it
        if factor == 1.0 or samples.numel() < 3 * SAMPLE_RATE // 75:
            return samples
        sound = parselmouth.Sound(samples.double().numpy(), sampling_frequency=SAMPLE_RATE)
        manipulation = parselmouth.praat.call(sound, "To Manipulation", 0.01, 75.0, 600.0)
        tier = parselmouth.praat.call(manipulation, "Extract pitch tier")
        if parselmouth.praat.call(tier, "Get number of points") == 0:
            return samples
        parselmouth.praat.call(tier, "Multiply frequencies", sound.xmin, sound.xmax, factor)
        parselmouth.praat.call([tier, manipulation], "Replace pitch tier")
        out = parselmouth.praat.call(manipulation, "Get resynthesis (overlap-add)")
        y = out.values[0]
        y = np.pad(y, (0, max(0, samples.numel() - y.size)))[: samples.numel()]
        return torch.from_numpy(y.astype(np.float32))


def _envelope(x: np.ndarray, width: int) -> np.ndarray:
    """The local RMS of ``x`` over a Hann window of ``width`` samples, ``(N,)``."""
    window = np.hanning(width + 2)[1:-1]
    return np.sqrt(np.maximum(fftconvolve(x * x, window / window.sum(), mode="same"), 0.0))


@dataclasses.dataclass(frozen=True)
class VoiceSource(AudioAugmentation, name="voice_source"):
    """A new voice source under the same vocal tract: linear-prediction source-filter
    resynthesis (Atal & Hanauer 1971), as an LPC vocoder does. The spectral envelope is
    tracked by linear prediction (Burg's method, order 16, 25 ms windows every 5 ms; Praat's,
    through parselmouth) and the utterance inverse-filtered to its excitation (the prediction
    residual). In voiced frames (F0 tracked from 75 to 600 Hz) the excitation is replaced by a
    glottal source drawn anew: a pulse train at the tracked F0 with 1% jitter, smoothed by a
    one-pole low-pass whose coefficient is drawn uniformly from ``tilt`` (0: flat impulses, a
    buzzy voice; towards 1: rounder pulses, weaker upper harmonics), plus Gaussian aspiration
    noise at a harmonics-to-noise ratio drawn uniformly from ``hnr_db`` (low: breathy), the
    mixture following the residual's energy over 25 ms. Unvoiced frames keep their residual,
    so fricatives and bursts are kept. The new excitation is filtered by the same envelope and
    scaled to the input's mean power. Formants, pitch contour and timing stay; the voice
    quality (breathy, buzzy, smooth) is the speaker's that no synthesiser of the training data
    had. An utterance with no voiced frame, or too short to track 75 Hz, is returned as it is.

    Shape: ``(N,)`` -> ``(N,)``.
    """

    p: float = 0.5
    hnr_db: tuple[float, float] = (3.0, 30.0)
    tilt: tuple[float, float] = (0.0, 0.8)

    jitter: ClassVar[float] = 0.01  # the pulses' timing noise, a share of the period
    order: ClassVar[int] = 16  # LPC order: 2 poles per kHz at 16 kHz, and a few for the tilt

    checks = {"hnr_db": range_check(0.0, 60.0), "tilt": range_check(0.0, 0.95)}

    def apply(self, samples: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        _check_samples(samples)
        hnr_db, tilt = rng.uniform(*self.hnr_db), rng.uniform(*self.tilt)
        if samples.numel() < 3 * SAMPLE_RATE // 75:
            return samples
        x = samples.double().numpy()
        sound = parselmouth.Sound(x, sampling_frequency=SAMPLE_RATE)
        pitch = sound.to_pitch_ac(time_step=0.005, pitch_floor=75.0, pitch_ceiling=600.0)
        f0, times = pitch.selected_array["frequency"], pitch.xs()
        if not (f0 > 0).any():
            return samples
        call = parselmouth.praat.call
        lpc = call(sound, "To LPC (burg)", self.order, 0.025, 0.005, 50.0)
        residual = call([sound, lpc], "Filter (inverse)").values[0][: x.size]
        t = np.arange(x.size) / SAMPLE_RATE
        frame = np.clip(np.round((t - times[0]) / pitch.dt).astype(int), 0, f0.size - 1)
        voiced = (f0[frame] > 0).astype(np.float64)
        hz = np.interp(t, times[f0 > 0], f0[f0 > 0])
        marks = np.flatnonzero(np.diff(np.floor(np.cumsum(hz / SAMPLE_RATE))) > 0) + 1
        marks += np.round(
            rng.normal(0.0, self.jitter, marks.size) * SAMPLE_RATE / hz[marks]
        ).astype(marks.dtype)
        pulses = np.zeros(x.size)
        pulses[marks[(marks >= 0) & (marks < x.size)]] = 1.0
        pulses = lfilter([1.0], [1.0, -tilt], pulses)
        width = round(0.025 * SAMPLE_RATE)
        source = pulses / (_envelope(pulses, width) + 1e-9) + 10.0 ** (
            -hnr_db / 20.0
        ) * rng.standard_normal(x.size)
        source *= _envelope(residual, width) / (_envelope(source, width) + 1e-9)
        fade = np.hanning(83)[1:-1]  # 5 ms between voiced and unvoiced excitation
        voiced = np.clip(fftconvolve(voiced, fade / fade.sum(), mode="same"), 0.0, 1.0)
        excitation = parselmouth.Sound(
            voiced * source + (1.0 - voiced) * residual, sampling_frequency=SAMPLE_RATE
        )
        y = call([lpc, excitation], "Filter...", False).values[0][: x.size]
        power = float(np.mean(y * y))
        if power > 0:
            y *= math.sqrt(float(np.mean(x * x)) / power)
        return torch.from_numpy(np.ascontiguousarray(y, dtype=np.float32))


@dataclasses.dataclass(frozen=True)
class DynamicRange(AudioAugmentation, name="dynamic_range"):
    """A level-dependent gain that moves the weak sounds against the loud ones: each sample
    scaled by ``(level / loudest level) ** e``, an exponent ``e`` drawn uniformly from
    ``exponent``, the level the local RMS over 20 ms (floored at -60 dB below the loudest, so
    that silence is not raised without bound). ``e > 0`` expands: a sound 30 dB under the
    vowels goes to ``30 * (1 + e)`` dB under them, as the fricatives, nasals and bursts of
    recorded speech lie further under its vowels than a formant synthesiser's do (the
    consonant-vowel intensity ratio); ``e < 0`` compresses. The result has the input's mean
    power.

    Shape: ``(N,)`` -> ``(N,)``.
    """

    p: float = 0.5
    exponent: tuple[float, float] = (0.0, 0.6)

    floor_db: ClassVar[float] = -60.0
    window_s: ClassVar[float] = 0.02

    checks = {"exponent": range_check(-1.0, 1.0)}

    def apply(self, samples: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        _check_samples(samples)
        e = rng.uniform(*self.exponent)
        if e == 0.0:
            return samples
        x = samples.double().numpy()
        level = _envelope(x, round(self.window_s * SAMPLE_RATE))
        loudest = float(level.max())
        if loudest == 0.0:
            return samples
        y = x * np.maximum(level / loudest, 10.0 ** (self.floor_db / 20.0)) ** e
        power = float(np.mean(y * y))
        y *= math.sqrt(float(np.mean(x * x)) / power)
        return torch.from_numpy(np.ascontiguousarray(y, dtype=np.float32))


def _frame_db(x: np.ndarray, hop: int, width: int) -> np.ndarray:
    """The level in dB of frames of ``width`` samples every ``hop`` samples of ``x``
    (``N >= width``), ``(frames,)``."""
    frames = np.lib.stride_tricks.sliding_window_view(x, width)[::hop]
    return 10.0 * np.log10(np.mean(frames * frames, axis=1) + 1e-20)


@dataclasses.dataclass(frozen=True)
class ConsonantDuration(AudioAugmentation, name="consonant_duration"):
    """The weak sounds between the vowels (nasals, fricatives, stops, glides) made shorter or
    longer, the vowels and pauses kept: each one's duration multiplied by a factor drawn
    log-uniformly from ``factor``. Synthesisers differ most in how long they hold a consonant
    against its vowel: one says the "n" of "nine" for 80-90 ms, another for 30.

    A sound is weak where its level (20 ms frames every 10 ms) lies more than ``weak_db`` under
    the loudest level within 150 ms of it (the vowel next to it) and less than ``silence_db``
    under the utterance's loudest (not a pause). Its middle is cut out (shorter) or repeated
    (longer) in one splice, its edges (the transitions into and out of the vowels, which carry
    the place of articulation) kept: the splice point is moved by up to 5 ms to where the
    waveforms on its two sides agree best (normalised cross-correlation, as WSOLA does;
    Verhelst & Roelands 1993) and joined by a 5 ms crossfade, so a voiced nasal keeps its
    periods whole. No randomness but the factor's draw. An utterance with no weak sound is
    returned as it is.

    Shape: ``(N,)`` -> ``(N',)``, ``N'`` about ``N`` plus ``(factor - 1)`` times the weak
    sounds' length.
    """

    p: float = 0.5
    factor: tuple[float, float] = (0.3, 1.0)

    weak_db: ClassVar[float] = 10.0
    silence_db: ClassVar[float] = 50.0
    reach_s: ClassVar[float] = 0.15
    fade: ClassVar[int] = SAMPLE_RATE // 200  # the crossfade and the splice's search, 5 ms

    checks = {"factor": range_check(0.2, 2.0)}

    def weak_runs(self, x: np.ndarray) -> list[tuple[int, int]]:
        """The weak sounds of ``x`` ``(N,)`` at 16 kHz, as ``[start, end)`` sample ranges."""
        hop, width = SAMPLE_RATE // 100, SAMPLE_RATE // 50
        if x.size < width:
            return []
        level = _frame_db(x, hop, width)
        near = maximum_filter1d(level, size=2 * round(self.reach_s * 100) + 1)
        weak = (level < near - self.weak_db) & (level > level.max() - self.silence_db)
        edges = np.flatnonzero(np.diff(np.concatenate([[0], weak.astype(np.int8), [0]])))
        # frame i covers [i * hop, i * hop + width); a run spans its frames' middle hops
        low = (width - hop) // 2
        return [(int(a) * hop + low, int(b) * hop + low) for a, b in zip(edges[::2], edges[1::2])]

    def _splice(self, x: np.ndarray, at: int, lo: int, hi: int) -> int:
        """Where in ``[lo, hi]`` the samples that follow ``at`` continue best: the start ``j``
        whose ``fade`` samples correlate most with ``x[at:at + fade]``."""
        w = self.fade
        candidates = np.lib.stride_tricks.sliding_window_view(x[lo : hi + w], w)
        target = x[at : at + w]
        score = candidates @ target / (np.linalg.norm(candidates, axis=1) + 1e-12)
        return lo + int(np.argmax(score))

    def apply(self, samples: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        _check_samples(samples)
        low, high = self.factor
        factor = math.exp(rng.uniform(math.log(low), math.log(high)))
        if factor == 1.0:
            return samples
        x = samples.double().numpy()
        w = self.fade
        ramp = np.linspace(0.0, 1.0, w + 2)[1:-1]
        pieces, done = [], 0
        for start, end in self.weak_runs(x):
            change = round(abs(factor - 1.0) * (end - start))
            if change < w or start < done:
                continue
            cut = start + (end - start - change) // 2
            if factor < 1.0:  # from cut, go on at about cut + change
                at = cut
                lo, hi = max(at + w, cut + change - w), min(cut + change + w, x.size - w)
            else:  # from cut + change, go back to about cut
                at = cut + change
                lo, hi = max(start, cut - w), min(cut + w, at - w)
            if at + w > x.size or lo > hi:
                continue
            j = self._splice(x, at, lo, hi)
            pieces += [x[done:at], x[at : at + w] * ramp[::-1] + x[j : j + w] * ramp]
            done = j + w
        if not pieces:
            return samples
        y = np.concatenate(pieces + [x[done:]])
        return torch.from_numpy(np.ascontiguousarray(y, dtype=np.float32))


@dataclasses.dataclass(frozen=True)
class SpeedPerturb(AudioAugmentation, name="speed"):
    """Speed perturbation (Ko et al. 2015): the utterance played ``factor`` times as fast, a
    factor drawn uniformly from ``factors``. The samples are resampled from ``16 kHz *
    factor`` to 16 kHz (:func:`attnkit.data.audio.features.resample`, a band-limited resampler), so
    duration scales by ``1 / factor`` and every frequency by ``factor``, pitch and formants
    with it.

    Shape: ``(N,)`` -> ``(round(N / factor),)``.
    """

    factors: tuple[float, ...] = (0.9, 1.0, 1.1)

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.factors, tuple) or not self.factors:
            raise ValueError(
                f"factors: expected a non-empty tuple of speed factors, got {self.factors!r}"
            )
        for f in self.factors:
            check_number("factors", f, 0.5, 2.0)

    def apply(self, samples: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        _check_samples(samples)
        factor = self.factors[int(rng.integers(len(self.factors)))]
        if factor == 1.0:
            return samples
        return resample(samples.float(), round(SAMPLE_RATE * factor), SAMPLE_RATE)


@dataclasses.dataclass(frozen=True)
class Gain(AudioAugmentation, name="gain"):
    """The samples scaled by a gain drawn uniformly from ``[-db, db]`` decibels.

    On features normalised per utterance a gain changes only what the floor of the log
    (:data:`attnkit.data.audio.features.LOG_FLOOR`) hides; raw log-mels (a causal listener's) shift
    by ``gain * ln(10) / 10``.

    Shape: ``(N,)`` -> ``(N,)``.
    """

    p: float = 0.5
    db: float = 6.0

    checks = {"db": number_check(0.0, 40.0)}

    def apply(self, samples: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        _check_samples(samples)
        return samples * float(10.0 ** (rng.uniform(-self.db, self.db) / 20.0))


NOISE_COLOURS = ("white", "pink", "brown")  # power spectra flat, 1/f, 1/f^2


def _coloured_noise(n: int, colour: str, rng: np.random.Generator) -> np.ndarray:
    """``n`` samples of Gaussian noise whose power spectrum falls as ``1 / f**k`` (white 0,
    pink 1, brown 2), unit mean power."""
    noise = rng.standard_normal(n)
    k = NOISE_COLOURS.index(colour)
    if k:
        freqs = np.fft.rfftfreq(n)
        freqs[0] = freqs[1] if n > 1 else 1.0  # no infinite DC
        noise = np.fft.irfft(np.fft.rfft(noise) / freqs ** (k / 2), n)
    return noise / max(float(np.sqrt(np.mean(noise**2))), 1e-12)


@dataclasses.dataclass(frozen=True)
class Noise(AudioAugmentation, name="noise"):
    """Additive noise at a signal-to-noise ratio drawn uniformly from ``snr_db`` (decibels:
    the utterance's mean power over the noise's), of a colour drawn from ``colours`` (white,
    pink: ``1/f``, brown: ``1/f^2``). An utterance of digital silence is left as it is.

    Shape: ``(N,)`` -> ``(N,)``.
    """

    p: float = 0.5
    snr_db: tuple[float, float] = (10.0, 30.0)
    colours: tuple[str, ...] = ("white", "pink")

    checks = {"snr_db": range_check(0.0, 100.0)}

    def __post_init__(self):
        super().__post_init__()
        if (
            not isinstance(self.colours, tuple)
            or not self.colours
            or any(c not in NOISE_COLOURS for c in self.colours)
        ):
            raise ValueError(
                f"colours: expected a non-empty tuple of {', '.join(NOISE_COLOURS)}, "
                f"got {self.colours!r}"
            )

    def apply(self, samples: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        _check_samples(samples)
        snr = rng.uniform(*self.snr_db)
        colour = self.colours[int(rng.integers(len(self.colours)))]
        noise = _coloured_noise(samples.numel(), colour, rng)  # unit power
        power = float(samples.double().square().mean())
        if power == 0.0:
            return samples
        scale = math.sqrt(power / 10.0 ** (snr / 10.0))
        return samples + torch.from_numpy((noise * scale).astype(np.float32))


@dataclasses.dataclass(frozen=True)
class Reverb(AudioAugmentation, name="reverb"):
    """Room reverberation: the samples convolved with a synthetic impulse response, a direct
    path (one unit sample) followed by Gaussian noise that decays exponentially by 60 dB in
    ``rt60`` seconds (the reverberation time, drawn uniformly from ``rt60``), scaled so that
    the direct path holds ``drr_db`` (drawn uniformly) decibels more energy than the tail.
    The output keeps the input's length (the tail past its end is cut) and mean power.

    Shape: ``(N,)`` -> ``(N,)``.
    """

    p: float = 0.3
    rt60: tuple[float, float] = (0.2, 0.8)
    drr_db: tuple[float, float] = (0.0, 10.0)

    checks = {"rt60": range_check(0.0, 3.0, open_low=True), "drr_db": range_check(-20.0, 40.0)}

    def impulse_response(self, rng: np.random.Generator) -> np.ndarray:
        """One drawn impulse response ``(L,)``, ``L = rt60 * 16 kHz`` samples."""
        rt60 = rng.uniform(*self.rt60)
        drr = rng.uniform(*self.drr_db)
        n = max(2, round(rt60 * SAMPLE_RATE))
        t = np.arange(1, n) / SAMPLE_RATE
        tail = rng.standard_normal(n - 1) * np.exp(-3.0 * math.log(10.0) * t / rt60)
        tail *= math.sqrt(10.0 ** (-drr / 10.0) / float(np.sum(tail**2)))
        return np.concatenate([[1.0], tail])

    def apply(self, samples: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        _check_samples(samples)
        x = samples.double().numpy()
        wet = fftconvolve(x, self.impulse_response(rng))[: x.size]
        power, wet_power = float(np.mean(x**2)), float(np.mean(wet**2))
        if wet_power > 0:
            wet *= math.sqrt(power / wet_power)
        return torch.from_numpy(wet.astype(np.float32))


@dataclasses.dataclass(frozen=True)
class BandLimit(AudioAugmentation, name="band_limit"):
    """A band-pass channel, by default the telephone band (300-3,400 Hz): a zero-phase
    4th-order Butterworth filter (forward and backward, so nothing is delayed); ``low_hz``
    0 makes it a low-pass filter.

    Shape: ``(N,)`` -> ``(N,)``.
    """

    p: float = 0.2
    low_hz: float = 300.0
    high_hz: float = 3400.0

    checks = {
        "low_hz": number_check(0.0, SAMPLE_RATE / 2),
        "high_hz": number_check(0.0, SAMPLE_RATE / 2, open_low=True),
    }

    def __post_init__(self):
        super().__post_init__()
        if not self.low_hz < self.high_hz < SAMPLE_RATE / 2:
            raise ValueError(
                f"low_hz, high_hz: expected 0 <= low_hz < high_hz < "
                f"{SAMPLE_RATE // 2}, got {self.low_hz!r}, {self.high_hz!r}"
            )

    def apply(self, samples: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        _check_samples(samples)
        if self.low_hz > 0:
            sos = butter(
                4, [self.low_hz, self.high_hz], btype="bandpass", fs=SAMPLE_RATE, output="sos"
            )
        else:
            sos = butter(4, self.high_hz, btype="lowpass", fs=SAMPLE_RATE, output="sos")
        x = samples.double().numpy()
        # filtfilt pads the signal by 3 * (2 * sections + 1) samples at each end
        out = sosfiltfilt(sos, x) if x.size > 3 * (2 * len(sos) + 1) else sosfilt(sos, x)
        return torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32))


@dataclasses.dataclass(frozen=True)
class VTLP(AudioAugmentation, name="vtlp"):
    """Vocal-tract-length perturbation (Jaitly & Hinton 2013): the log-mels computed with the
    filterbank's centres warped by a factor drawn uniformly from ``alpha``
    (:func:`attnkit.data.audio.features.vtlp_warp`: linear up to 4.8 kHz, then to the Nyquist
    frequency), as a longer or shorter vocal tract moves the formants.

    Shape: samples ``(N,)`` -> raw log-mels ``(T, 80)``.
    """

    stage: ClassVar[str] = "filterbank"
    alpha: tuple[float, float] = (0.9, 1.1)

    checks = {"alpha": range_check(0.7, 1.3)}

    def draw(self, rng: np.random.Generator) -> float:
        """One warp factor."""
        return float(rng.uniform(*self.alpha))

    def apply(self, samples: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        _check_samples(samples)
        return log_mel(samples, warp=self.draw(rng))


SPECAUGMENT_MAX = 10_000  # the largest of SpecAugment's sizes and counts (F, mF, T, mT, W)


@dataclasses.dataclass(frozen=True)
class SpecAugment(AudioAugmentation, name="specaugment"):
    """SpecAugment (Park et al. 2019) on log-mel features: ``freq_masks`` (mF) bands of
    ``f ~ U{0, ..., freq_mask}`` (F) adjacent mel bins and ``time_masks`` (mT) spans of ``t ~
    U{0, ..., min(time_mask, max_time_ratio * T)}`` (T, p) frames, each at a uniform position,
    are set to ``fill`` (None: each bin's mean over the utterance, 0 on features normalised
    per utterance, as in the paper); first, with ``time_warp`` (W) > 0, the frames are warped
    in time: the point at frame ``w0 ~ U{W, ..., T - W - 1}`` moves to ``w0 + w``, ``w ~
    U{-W, ..., W}``, each side stretched linearly (as ESPnet's ``TimeWarp`` does; an utterance
    of ``2 W`` frames or fewer is not warped). A mask wider than the utterance is clipped to it.

    Shape: ``(T, F)`` -> ``(T, F)``.
    """

    stage: ClassVar[str] = "features"
    freq_mask: int = 27
    freq_masks: int = 2
    time_mask: int = 100
    time_masks: int = 2
    max_time_ratio: float = 1.0
    time_warp: int = 0
    fill: float | None = None

    checks = {
        **dict.fromkeys(
            ("freq_mask", "freq_masks", "time_mask", "time_masks", "time_warp"),
            number_check(0, SPECAUGMENT_MAX, integer=True),
        ),
        "max_time_ratio": number_check(0.0, 1.0),
    }

    def __post_init__(self):
        super().__post_init__()
        if self.fill is not None:
            check_number("fill", self.fill, -1e6, 1e6)

    def apply(self, features: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        if not isinstance(features, torch.Tensor) or features.dim() != 2:
            raise ValueError(
                f"features: expected a (T, F) tensor, got "
                f"{getattr(features, 'shape', type(features))}"
            )
        x = features.float().clone()
        frames, bins = x.shape
        if self.time_warp and frames > 2 * self.time_warp:
            x = _time_warp(x, self.time_warp, rng)
        fill = x.mean(0) if self.fill is None else torch.full((bins,), float(self.fill))  # (F,)
        for _ in range(self.freq_masks):
            width = min(int(rng.integers(self.freq_mask + 1)), bins)
            start = int(rng.integers(bins - width + 1))
            x[:, start : start + width] = fill[start : start + width]
        longest = min(self.time_mask, int(self.max_time_ratio * frames), frames)
        for _ in range(self.time_masks):
            width = int(rng.integers(longest + 1))
            start = int(rng.integers(frames - width + 1))
            x[start : start + width] = fill
        return x


def _time_warp(x: torch.Tensor, w_max: int, rng: np.random.Generator) -> torch.Tensor:
    """``x (T, F)`` with frame ``w0`` moved to ``w0 + w`` and both sides resized linearly."""
    frames = x.shape[0]
    centre = int(rng.integers(w_max, frames - w_max))
    shift = int(rng.integers(-w_max, w_max + 1))
    if shift == 0 or centre + shift < 1 or centre + shift > frames - 1:
        return x
    rows = x.T[None]  # (1, F, T)
    left = F.interpolate(
        rows[..., :centre], size=centre + shift, mode="linear", align_corners=False
    )
    right = F.interpolate(
        rows[..., centre:], size=frames - centre - shift, mode="linear", align_corners=False
    )
    return torch.cat([left, right], dim=2)[0].T.contiguous()


class SpeechAugment(Compose):
    """Speech augmentations run stage by stage (samples, filterbank, features; in the given
    order within a stage), each with its own generator (:class:`Compose`).

    Called with a generator and the utterance: ``samples`` (a function giving its audio
    ``(N,)`` at 16 kHz, read only when an augmentation of the samples or filterbank stage
    applies) and ``features`` (a function giving its log-mels as stored, used when none does;
    None: computed from the samples). The log-mels of changed audio are normalised per
    utterance with ``normalize`` (as the stored ones are). Returns float32 ``(T, F)``.

    Raises:
        TypeError: an augmentation that is not a speech one.
        ValueError: at the call, audio needed (``samples`` is None) or neither given.
    """

    family = "audio"
    augmentations: list[AudioAugmentation]  # checked in __init__

    takes = AudioAugmentation
    takes_name = "a speech augmentation"

    @property
    def needs_samples(self) -> bool:
        """Whether any augmentation changes the audio or the filterbank (then the utterances'
        audio must be at hand)."""
        return any(a.stage != "features" and a.p > 0 for a in self.augmentations)

    # called with the utterance's parts rather than an ``x``: a speech augmentation needs
    # to know which of them to read, and reads the samples only when one applies
    def __call__(  # type: ignore[override]
        self,
        rng: np.random.Generator,
        *,
        samples: Callable[[], torch.Tensor] | None = None,
        features: Callable[[], torch.Tensor] | None = None,
        normalize: bool = False,
    ) -> torch.Tensor:
        own = self.generators(rng)
        staged = {
            stage: [(a, g) for a, g in zip(self.augmentations, own) if a.stage == stage]
            for stage in STAGES
        }
        changes = [(a, g) for a, g in staged["samples"] if a.applies(g)]
        # VTLP is the one augmentation of the filterbank stage
        warps = [cast(VTLP, a).draw(g) for a, g in staged["filterbank"] if a.applies(g)]
        if changes or warps or features is None:
            if samples is None:
                raise ValueError(
                    "samples: this augmentation changes the audio; expected the "
                    "utterance's samples, got none"
                )
            x = samples()
            for augmentation, g in changes:
                x = augmentation.apply(x, g)
            x = log_mel(x, warp=math.prod(warps))
            x = normalize_features(x) if normalize else x
        else:
            x = features().float()
        for augmentation, g in staged["features"]:
            x = augmentation(x, g)
        return x


PRESETS: dict[str, tuple[AudioAugmentation, ...]] = {
    "none": (),
    # masks scaled to short utterances (1-5 s): at most 10% of the frames per time mask
    "specaugment": (
        SpecAugment(freq_mask=15, freq_masks=2, time_mask=40, time_masks=2, max_time_ratio=0.1),
    ),
    "light": (
        SpeedPerturb(),
        SpecAugment(freq_mask=15, freq_masks=2, time_mask=40, time_masks=2, max_time_ratio=0.1),
    ),
    "strong": (
        SpeedPerturb(),
        Gain(),
        Reverb(),
        Noise(),
        BandLimit(),
        VTLP(),
        SpecAugment(freq_mask=15, freq_masks=2, time_mask=40, time_masks=2, max_time_ratio=0.1),
    ),
}


def preset(name: str) -> list[AudioAugmentation]:
    """The augmentations of preset ``name`` (:data:`PRESETS`)."""
    if name not in PRESETS:
        raise ValueError(f"name: expected one of {', '.join(PRESETS)}, got {name!r}")
    return list(PRESETS[name])
