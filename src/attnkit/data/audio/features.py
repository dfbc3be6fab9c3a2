"""Audio features: resampling to the model rate, log-mel features (whole or streamed) and padding.

Samples come from :mod:`attnkit.data.audio.files` (every codec) or from espeak-ng. Resampling is
``soxr``'s high-quality band-limited resampler (never dropping or repeating samples).

The model rate is :data:`SAMPLE_RATE` (16 kHz); features are 80-bin log-mel frames with a 25 ms
Hann window every 10 ms. The mel filterbank is the Slaney one (mel scale linear below 1 kHz and
logarithmic above, each triangle scaled to unit area), the same as ``librosa.filters.mel``'s
default.

Example:
    >>> t = torch.arange(16000) / 16000
    >>> log_mel(torch.sin(2 * torch.pi * 440 * t)).shape
    torch.Size([101, 80])
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import NamedTuple, cast

import numpy as np
import soxr
import torch

__all__ = [
    "MelStream",
    "N_MELS",
    "SAMPLE_RATE",
    "feature_statistics",
    "frame_count",
    "log_mel",
    "log_mel_stream",
    "mel_filterbank",
    "n_frames",
    "normalize_features",
    "pad_features",
    "resample",
    "resampled_length",
    "samples_needed",
    "vtlp_warp",
]

SAMPLE_RATE = 16000
N_MELS = 80
WINDOW_S = 0.025
HOP_S = 0.010
LOG_FLOOR = 1e-6  # added to mel power before the log: digital silence stays finite
# vtlp_warp's boundary: Jaitly & Hinton 2013 warp linearly up to 4.8 kHz, then to Nyquist
VTLP_BOUNDARY_HZ = 4800.0


def resampled_length(n_samples: int, orig_rate: int, new_rate: int = SAMPLE_RATE) -> int:
    """The samples :func:`resample` makes of ``n_samples``: ``n * new / orig`` rounded to the
    nearest (halves up), what soxr gives."""
    return (2 * n_samples * new_rate + orig_rate) // (2 * orig_rate)


def resample(samples: torch.Tensor, orig_rate: int, new_rate: int = SAMPLE_RATE) -> torch.Tensor:
    """``samples (N,)`` at ``orig_rate`` Hz resampled to ``new_rate`` Hz:
    ``(resampled_length(N, orig_rate, new_rate),)`` float32.

    soxr's high-quality resampler (``"HQ"``: a linear-phase band-limiting filter, -100 dB
    stop band, pass band flat to 91% of the lower Nyquist frequency), which neither drops
    nor repeats samples. Equal rates return the samples unchanged.
    """
    for name, rate in (("orig_rate", orig_rate), ("new_rate", new_rate)):
        if not isinstance(rate, int) or rate < 1:
            raise ValueError(f"{name}: expected a positive int, got {rate!r}")
    if samples.dim() != 1:
        raise ValueError(f"samples: expected shape (N,), got {tuple(samples.shape)}")
    if orig_rate == new_rate:
        return samples
    out = soxr.resample(samples.numpy().astype(np.float32), orig_rate, new_rate, quality="HQ")
    return torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32))


def _hz_to_mel(hz: float | np.ndarray) -> np.ndarray:
    """Slaney mel scale: 3 mels per 200 Hz below 1 kHz, logarithmic (27 mels per 6.4x) above."""
    hz = np.asarray(hz, dtype=np.float64)
    log_step = math.log(6.4) / 27.0
    return np.where(
        hz < 1000.0, hz * 3.0 / 200.0, 15.0 + np.log(np.maximum(hz, 1000.0) / 1000.0) / log_step
    )


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    log_step = math.log(6.4) / 27.0
    return np.where(
        mel < 15.0, mel * 200.0 / 3.0, 1000.0 * np.exp(log_step * (np.maximum(mel, 15.0) - 15.0))
    )


def vtlp_warp(
    hz: np.ndarray,
    alpha: float,
    *,
    sample_rate: int = SAMPLE_RATE,
    boundary_hz: float = VTLP_BOUNDARY_HZ,
) -> np.ndarray:
    """Frequencies ``hz`` warped by vocal-tract-length perturbation's factor ``alpha``
    (Jaitly & Hinton 2013): ``f -> alpha f`` up to ``boundary_hz * min(alpha, 1) / alpha``,
    then the straight line from there to the Nyquist frequency, which maps to itself.

    Example:
        >>> [round(float(f)) for f in vtlp_warp(np.array([0.0, 1000.0, 8000.0]), 1.1)]
        [0, 1100, 8000]
    """
    if not (isinstance(alpha, (int, float)) and 0 < alpha) or not 0 < boundary_hz < sample_rate / 2:
        raise ValueError(
            f"alpha, boundary_hz: expected alpha > 0 and 0 < boundary_hz < "
            f"{sample_rate / 2:g}, got {alpha!r}, {boundary_hz!r}"
        )
    nyquist = sample_rate / 2
    cut = boundary_hz * min(alpha, 1.0) / alpha  # at most boundary_hz
    hz = np.asarray(hz, dtype=np.float64)
    above = nyquist - (nyquist - boundary_hz * min(alpha, 1.0)) / (nyquist - cut) * (nyquist - hz)
    return np.where(hz <= cut, hz * alpha, above)


def mel_filterbank(
    *,
    n_fft: int,
    sample_rate: int = SAMPLE_RATE,
    n_mels: int = N_MELS,
    f_min: float = 0.0,
    f_max: float | None = None,
    warp: float = 1.0,
) -> torch.Tensor:
    """Slaney-normalised triangular mel filters, ``(n_mels, n_fft // 2 + 1)`` float32.

    Filter ``m`` rises from centre ``m - 1`` to centre ``m`` and falls to centre ``m + 1``, the
    ``n_mels + 2`` centres spaced evenly on the mel scale from ``f_min`` to ``f_max`` (default
    the Nyquist frequency); each filter is scaled by ``2 / (upper edge - lower edge)`` in Hz.
    Equals ``librosa.filters.mel(sr=sample_rate, n_fft=n_fft, n_mels=n_mels)``. ``warp`` other
    than 1 moves every centre by :func:`vtlp_warp` (vocal-tract-length perturbation, Jaitly &
    Hinton 2013) before the filters are made.
    """
    f_max = sample_rate / 2 if f_max is None else f_max
    if not 0 <= f_min < f_max <= sample_rate / 2:
        raise ValueError(
            f"f_min, f_max: expected 0 <= f_min < f_max <= {sample_rate / 2}, got {f_min}, {f_max}"
        )
    if n_mels < 1 or n_fft < 2:
        raise ValueError(f"n_mels, n_fft: expected >= 1 and >= 2, got {n_mels}, {n_fft}")
    fft_hz = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)  # (K,)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(f_min), _hz_to_mel(f_max), n_mels + 2))  # (M+2,)
    if warp != 1.0:
        edges = vtlp_warp(edges, warp, sample_rate=sample_rate)
    widths = np.diff(edges)  # (M+1,)
    offsets = edges[:, None] - fft_hz[None, :]  # (M+2, K)
    rising = -offsets[:-2] / widths[:-1, None]  # (M, K)
    falling = offsets[2:] / widths[1:, None]  # (M, K)
    weights = np.maximum(0.0, np.minimum(rising, falling))  # (M, K)
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return torch.from_numpy(weights.astype(np.float32))


def _framing(sample_rate: int) -> tuple[int, int, int]:
    """``(window, hop, n_fft)`` in samples: 25 ms, 10 ms, the next power of two >= window."""
    win = round(WINDOW_S * sample_rate)
    return win, round(HOP_S * sample_rate), 1 << (win - 1).bit_length()


def frame_count(samples: int, sample_rate: int = SAMPLE_RATE) -> int:
    """Frames :func:`log_mel` makes of ``samples`` samples: ``1 + samples // hop``."""
    return 1 + samples // _framing(sample_rate)[1]


def samples_needed(frames: int, sample_rate: int = SAMPLE_RATE) -> int:
    """Samples :func:`log_mel_stream` needs before it gives out ``frames`` frames (before the
    final chunk): the window of the last one ends ``n_fft / 2`` past its centre (0 for none)."""
    _, hop, n_fft = _framing(sample_rate)
    return 0 if frames < 1 else (frames - 1) * hop + n_fft // 2 + 1


@functools.lru_cache(maxsize=8)
def _filters(n_fft: int, sample_rate: int, n_mels: int) -> torch.Tensor:
    """The mel filterbank of :func:`mel_filterbank`, made once per setting (read-only)."""
    return mel_filterbank(n_fft=n_fft, sample_rate=sample_rate, n_mels=n_mels)


def _centred(
    known: torch.Tensor, offset: int, total: int, start: int, stop: int, half: int
) -> torch.Tensor:
    """Samples ``start .. stop - 1`` of a ``total``-sample signal padded by ``half`` samples
    at each end, from ``known = signal[offset : offset + len(known)]``: reflected at the ends
    (``pad_mode="reflect"`` of :func:`torch.stft`) when the signal is longer than ``half``,
    zeros otherwise."""
    j = torch.arange(start - half, stop - half)  # positions in the signal
    if total > half:
        j = j.abs()
        j = torch.where(j >= total, 2 * (total - 1) - j, j)
        return known[j - offset]
    inside = (j >= 0) & (j < total)
    return torch.where(inside, known[j.clamp(0, total - 1) - offset], 0.0)


def _log_mel_frames(
    padded: torch.Tensor, sample_rate: int, n_mels: int, warp: float = 1.0
) -> torch.Tensor:
    """``log(mel power + 1e-6)`` ``(T, n_mels)`` of the frames of a centre-padded segment
    ``(hop * (T - 1) + n_fft,)``: frame ``t`` is ``padded[t * hop : t * hop + n_fft]``; the
    filterbank's centres warped by ``warp`` (:func:`mel_filterbank`)."""
    win, hop, n_fft = _framing(sample_rate)
    spec = torch.stft(
        padded,
        n_fft,
        hop_length=hop,
        win_length=win,
        window=torch.hann_window(win),
        center=False,
        return_complex=True,
    )  # (K, T)
    power = spec.real.square() + spec.imag.square()  # (K, T)
    fbank = (
        _filters(n_fft, sample_rate, n_mels)
        if warp == 1.0
        else mel_filterbank(n_fft=n_fft, sample_rate=sample_rate, n_mels=n_mels, warp=warp)
    )  # (M, K)
    return torch.log(fbank @ power + LOG_FLOOR).T.contiguous()  # (T, M)


def log_mel(
    samples: torch.Tensor,
    *,
    sample_rate: int = SAMPLE_RATE,
    n_mels: int = N_MELS,
    normalize: bool = False,
    warp: float = 1.0,
) -> torch.Tensor:
    """Log-mel features of ``samples (N,)``: ``(T, n_mels)`` float32, ``T = 1 + N // hop``.

    A 25 ms Hann window every 10 ms (400 / 160 samples at 16 kHz), zero-padded to the next power
    of two for the FFT, frames centred on ``t * hop`` (the signal is reflect-padded at both ends);
    ``log(mel power + 1e-6)``. With ``normalize`` each mel bin is shifted and scaled to zero
    mean and unit variance over the utterance. :func:`log_mel_stream` computes the same frames
    from the samples as they arrive. ``warp``: the filterbank's centres moved by
    :func:`vtlp_warp` with that factor (training augmentation; 1: none).
    """
    if samples.dim() != 1 or samples.numel() == 0:
        raise ValueError(f"samples: expected a non-empty (N,) tensor, got {tuple(samples.shape)}")
    _, hop, n_fft = _framing(sample_rate)
    n = samples.numel()
    frames = frame_count(n, sample_rate)
    padded = _centred(samples.float(), 0, n, 0, hop * (frames - 1) + n_fft, n_fft // 2)
    feats = _log_mel_frames(padded, sample_rate, n_mels, warp)
    return normalize_features(feats) if normalize else feats


def n_frames(n_samples: int, rate: int) -> int:
    """The log-mel frames of ``n_samples`` samples at ``rate`` Hz: ``T`` of
    ``log_mel(resample(samples, rate))``, without computing them."""
    return frame_count(resampled_length(n_samples, rate))


class MelStream(NamedTuple):
    """What :func:`log_mel_stream` keeps between chunks: the samples still needed
    (``known``, from sample ``offset`` on), the samples received and the frames given out."""

    known: torch.Tensor
    offset: int
    received: int
    frames: int


def log_mel_stream(
    chunk: torch.Tensor,
    state: MelStream | None = None,
    *,
    final: bool = False,
    sample_rate: int = SAMPLE_RATE,
    n_mels: int = N_MELS,
) -> tuple[torch.Tensor, MelStream]:
    """The raw :func:`log_mel` frames of a signal that arrives ``chunk`` by ``chunk``.

    Each call returns the frames whose window now lies within the samples received (frame
    ``t`` needs the samples up to ``t * hop + n_fft / 2``: 16 ms past its centre at 16 kHz);
    the call with ``final=True`` returns the rest, the last ones reflect-padded as
    :func:`log_mel` pads them. Concatenated, the frames of all calls are :func:`log_mel`
    ``(samples)`` of the whole signal (unnormalised). Between calls only the samples from
    ``n_fft`` before the next frame on are kept.

    Args:
        chunk: ``(n,)`` the next samples (may be empty); state: what the previous call
            returned, None for the first chunk.

    Returns:
        ``(frames (t, n_mels) float32, state)``.

    Raises:
        ValueError: ``chunk`` not 1-D, a state after the final chunk, or a final call with no
            sample at all.
    """
    if chunk.dim() != 1:
        raise ValueError(f"chunk: expected shape (n,), got {tuple(chunk.shape)}")
    if state is None:
        state = MelStream(chunk.new_zeros(0, dtype=torch.float32), 0, 0, 0)
    if state.frames < 0:
        raise ValueError("state: the stream has ended (a final chunk was given)")
    _, hop, n_fft = _framing(sample_rate)
    half = n_fft // 2
    known = torch.cat([state.known, chunk.float()])
    received = state.received + chunk.numel()
    if final:
        if received == 0:
            raise ValueError("chunk: the stream ended with no samples")
        end = frame_count(received, sample_rate)
    else:  # a frame's window is all received samples (and the left reflection is known)
        end = (received - half - 1) // hop + 1 if received > half else 0
    frames = known.new_zeros(0, n_mels)
    if end > state.frames:
        padded = _centred(
            known, state.offset, received, state.frames * hop, hop * (end - 1) + n_fft, half
        )
        frames = _log_mel_frames(padded, sample_rate, n_mels)  # (end - state.frames, M)
    if final:
        return frames, MelStream(known[:0], received, received, -1)
    offset = max(0, end * hop - n_fft)  # the reflection at the end reaches back this far
    return frames, MelStream(known[offset - state.offset :], offset, received, end)


def normalize_features(features: torch.Tensor) -> torch.Tensor:
    """Per-utterance normalisation: each column of ``features (T, F)`` to zero mean, unit
    variance."""
    if features.dim() != 2:
        raise ValueError(f"features: expected shape (T, F), got {tuple(features.shape)}")
    return (features - features.mean(0)) / (features.std(0, unbiased=False) + 1e-5)


def feature_statistics(features: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation ``(F,)`` float32 of each column over every frame of
    ``features[i]`` ``(T_i, F)`` (summed in float64): fixed statistics to normalise any
    utterance with, frame by frame (a streaming model's, unlike :func:`normalize_features`).
    """
    if (
        not features
        or any(f.dim() != 2 for f in features)
        or len({f.shape[1] for f in features}) != 1
    ):
        shapes = sorted({tuple(f.shape) for f in features})[:4]
        raise ValueError(f"features: expected (T_i, F) tensors with one F, got shapes {shapes}")
    total = sum(f.shape[0] for f in features)
    if total == 0:
        raise ValueError("features: expected at least one frame, got none")
    # sum() of tensors is a tensor: features is not empty
    sums = cast(torch.Tensor, sum(f.double().sum(0) for f in features))  # (F,)
    mean = sums / total
    squares = cast(torch.Tensor, sum((f.double() - mean).square().sum(0) for f in features))
    return mean.float(), (squares / total).sqrt().float()


def pad_features(features: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad ``B`` feature matrices ``(T_i, F)`` with zeros: ``(padded (B, Tmax, F), lengths (B,))``.

    float16/bfloat16 features (as a :class:`~attnkit.data.SpeechSet` keeps them) come out as
    float32; other dtypes as given. ``features`` is read once (it may be
    :class:`~attnkit.data.FeaturesOnDisk`)."""
    features = list(features)
    if not features:
        raise ValueError("features: expected at least one (T, F) tensor")
    dims = {tuple(f.shape[1:]) for f in features}
    if any(f.dim() != 2 for f in features) or len(dims) != 1:
        shapes = sorted({tuple(f.shape) for f in features})[:4]
        raise ValueError(f"features: expected (T_i, F) tensors with one F, got shapes {shapes}")
    lengths = torch.tensor([f.shape[0] for f in features], dtype=torch.long)
    padded = torch.nn.utils.rnn.pad_sequence(list(features), batch_first=True)  # (B, Tmax, F)
    if padded.dtype in (torch.float16, torch.bfloat16):
        padded = padded.float()
    return padded, lengths
