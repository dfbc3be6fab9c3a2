"""Audio: WAV reading (PCM of 8-32 bits, float), resampling, log-mel features and padding.

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
import logging
import math
import struct
import wave
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from scipy.signal import resample_poly

from attnkit.data.paths import regular_file
from attnkit.errors import DataError

log = logging.getLogger("attnkit")

__all__ = [
    "MAX_SECONDS",
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
    "parse_wav",
    "read_wav",
    "resample",
    "samples_needed",
    "write_wav",
]

SAMPLE_RATE = 16000
N_MELS = 80
# Longest audio read by default: an utterance, not a recording (the listener and the decoder's
# output cap grow with the length; a 10-minute file would decode for many minutes).
MAX_SECONDS = 60.0
WINDOW_S = 0.025
HOP_S = 0.010
LOG_FLOOR = 1e-6  # added to mel power before the log: digital silence stays finite
# Data-chunk sizes that mean "unknown, read to the end" (streamed WAVs such as espeak-ng --stdout)
_STREAMING_SIZES = (0, 0xFFFFFFFF)
_STREAMING_MIN = 0x7FFF0000
_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE
_FORMAT_NAMES = {6: "A-law", 7: "mu-law", 0x55: "MP3", 2: "ADPCM"}
# Sample encodings read, by (format tag, bits): numpy dtype of one sample (24-bit: 3 bytes,
# assembled by hand), and the full scale that maps it to [-1, 1).
_ENCODINGS = {(_PCM, 8): ("u1", 128.0), (_PCM, 16): ("<i2", 32768.0),
              (_PCM, 24): (None, 2.0 ** 23), (_PCM, 32): ("<i4", 2.0 ** 31),
              (_FLOAT, 32): ("<f4", 1.0), (_FLOAT, 64): ("<f8", 1.0)}


@dataclass(frozen=True)
class _Format:
    """What a ``fmt `` chunk says: channels, sample rate, format tag (PCM or float), bits."""

    channels: int
    rate: int
    tag: int
    bits: int

    @property
    def frame_bytes(self) -> int:
        return self.channels * self.bits // 8

    def describe(self) -> str:
        return f"{self.bits}-bit {'float' if self.tag == _FLOAT else 'PCM'}"


def parse_wav(data: bytes, *, source: str,
              max_seconds: float | None = None) -> tuple[torch.Tensor, int]:
    """Samples and sample rate of a WAV held in ``data``; ``source`` names it in errors.

    Integer PCM of 8 (unsigned), 16, 24 or 32 bits and IEEE float of 32 or 64 bits are read
    (plain or ``WAVE_FORMAT_EXTENSIBLE``) and scaled to float32 in ``[-1, 1)``; anything but
    16-bit PCM is logged at INFO as converted. Compressed formats (A-law, mu-law, ADPCM, MP3)
    are refused.

    The RIFF chunks are walked one by one, so chunks other than ``fmt `` and ``data`` are skipped.
    A ``data`` size of 0, 0xFFFFFFFF or at least 0x7FFF0000 (written by streaming tools such as
    ``espeak-ng --stdout``, which cannot seek back to fix the header) means everything after the
    chunk header; any other size larger than the bytes present means a truncated file. Several
    channels are averaged to one. Audio longer than ``max_seconds`` (None: no limit) is refused
    from the header, before its samples are decoded.

    Returns:
        ``(samples (N,) float32 in [-1, 1), sample_rate)``.

    Raises:
        DataError: naming ``source``: not RIFF/WAVE, compressed, a sample size not listed above,
            no ``fmt `` or ``data`` chunk, truncated, no samples, or longer than
            ``max_seconds``.
    """
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise DataError(f"{source}: not a RIFF/WAVE file (its first 12 bytes are no RIFF/WAVE "
                        "header)")
    fmt, pos = None, 12
    while pos + 8 <= len(data):
        chunk_id, size = data[pos:pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        body = pos + 8
        if chunk_id == b"fmt ":
            fmt = _parse_fmt(data[body:body + size], source)
        elif chunk_id == b"data":
            if fmt is None:
                raise DataError(f"{source}: 'data' chunk before the 'fmt ' chunk")
            streaming = size in _STREAMING_SIZES or size >= _STREAMING_MIN
            if not streaming and body + size > len(data):
                raise DataError(f"{source}: truncated: 'data' chunk declares {size} bytes, "
                                f"{len(data) - body} present")
            raw = data[body:] if streaming else data[body:body + size]
            _check_duration(len(raw), fmt, source, max_seconds)
            return _decode_pcm(raw, fmt, source)
        pos = body + size + (size & 1)  # chunks are padded to an even size
    missing = "'fmt '" if fmt is None else "'data'"
    raise DataError(f"{source}: no {missing} chunk (file truncated or not a WAV)")


def _parse_fmt(body: bytes, source: str) -> _Format:
    """The :class:`_Format` of a ``fmt `` chunk, which must describe PCM or float samples of a
    size in ``_ENCODINGS``."""
    if len(body) < 16:
        raise DataError(f"{source}: truncated 'fmt ' chunk ({len(body)} bytes, expected >= 16)")
    tag, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", body)
    if tag == _EXTENSIBLE and len(body) >= 26:
        tag = struct.unpack_from("<H", body, 24)[0]  # the sub-format GUID starts with the tag
    if tag not in (_PCM, _FLOAT):
        name = _FORMAT_NAMES.get(tag, "unknown")
        raise DataError(f"{source}: expected PCM or float audio (format tag 1 or 3), got "
                        f"format tag {tag} ({name})")
    if (tag, bits) not in _ENCODINGS:
        raise DataError(f"{source}: expected 8, 16, 24 or 32-bit PCM or 32 or 64-bit float, "
                        f"got {bits}-bit {'float' if tag == _FLOAT else 'PCM'}")
    if channels < 1 or rate < 1:
        raise DataError(f"{source}: bad 'fmt ' chunk ({channels} channels, {rate} Hz)")
    return _Format(channels, rate, tag, bits)


def _check_duration(n_bytes: int, fmt: _Format, source: str,
                    max_seconds: float | None) -> None:
    seconds = n_bytes / (fmt.frame_bytes * fmt.rate)
    if max_seconds is not None and seconds > max_seconds:
        raise DataError(f"{source}: {seconds:.1f} s of audio, more than max_seconds="
                        f"{max_seconds:g}; cut it into utterances")


def _decode_pcm(raw: bytes, fmt: _Format, source: str) -> tuple[torch.Tensor, int]:
    frame = fmt.frame_bytes
    if len(raw) % frame:
        raise DataError(f"{source}: truncated: {len(raw)} data bytes is not a whole number of "
                        f"{frame}-byte frames")
    if not raw:
        raise DataError(f"{source}: no samples")
    dtype, scale = _ENCODINGS[(fmt.tag, fmt.bits)]
    if dtype is None:  # 24-bit: three little-endian bytes, sign-extended through int32
        b = np.frombuffer(raw, dtype="u1").reshape(-1, 3).astype(np.int32)  # (N * C, 3)
        values = (b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)) << 8 >> 8
    else:
        values = np.frombuffer(raw, dtype=dtype)
    values = values.astype(np.float64)
    if fmt.bits == 8:
        values = values - 128.0  # 8-bit PCM is unsigned, silence at 128
    samples = (values.reshape(-1, fmt.channels).mean(axis=1) / scale).astype(np.float32)  # (N,)
    if (fmt.tag, fmt.bits) != (_PCM, 16):
        log.info("%s: %s samples converted to float", source, fmt.describe())
    return torch.from_numpy(samples), fmt.rate


def read_wav(path: str | Path, *,
             max_seconds: float | None = MAX_SECONDS) -> tuple[torch.Tensor, int]:
    """Samples ``(N,)`` float32 and sample rate of a WAV file, PCM or float (see
    :func:`parse_wav`), at most ``max_seconds`` long (None: no limit).

    Raises:
        DataError: naming the file, when it cannot be read, is not a usable WAV or is longer
            than ``max_seconds``.
    """
    path = regular_file(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    return parse_wav(data, source=str(path), max_seconds=max_seconds)


def write_wav(path: str | Path, samples: torch.Tensor, rate: int) -> Path:
    """Write ``samples (N,)`` (float in ``[-1, 1]``, clipped) as a mono 16-bit PCM WAV file at
    ``rate`` Hz; :func:`read_wav` reads it back to within one quantisation step."""
    if samples.dim() != 1:
        raise ValueError(f"samples: expected shape (N,), got {tuple(samples.shape)}")
    pcm = (samples.detach().float() * 32768).round().clamp(-32768, 32767).to(torch.int16)
    path = Path(path)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.numpy().astype("<i2").tobytes())
    return path


def resample(samples: torch.Tensor, orig_rate: int, new_rate: int = SAMPLE_RATE) -> torch.Tensor:
    """``samples (N,)`` at ``orig_rate`` Hz resampled to ``new_rate`` Hz: ``(ceil(N * new / orig),)``.

    Polyphase filtering with a Kaiser-windowed sinc (``scipy.signal.resample_poly``); returns
    float32. Equal rates return the samples unchanged.
    """
    for name, rate in (("orig_rate", orig_rate), ("new_rate", new_rate)):
        if not isinstance(rate, int) or rate < 1:
            raise ValueError(f"{name}: expected a positive int, got {rate!r}")
    if samples.dim() != 1:
        raise ValueError(f"samples: expected shape (N,), got {tuple(samples.shape)}")
    if orig_rate == new_rate:
        return samples
    ratio = Fraction(new_rate, orig_rate)
    out = resample_poly(samples.numpy(), ratio.numerator, ratio.denominator)
    return torch.from_numpy(out.astype(np.float32))


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney mel scale: 3 mels per 200 Hz below 1 kHz, logarithmic (27 mels per 6.4x) above."""
    hz = np.asarray(hz, dtype=np.float64)
    log_step = math.log(6.4) / 27.0
    return np.where(hz < 1000.0, hz * 3.0 / 200.0,
                    15.0 + np.log(np.maximum(hz, 1000.0) / 1000.0) / log_step)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    log_step = math.log(6.4) / 27.0
    return np.where(mel < 15.0, mel * 200.0 / 3.0,
                    1000.0 * np.exp(log_step * (np.maximum(mel, 15.0) - 15.0)))


def mel_filterbank(*, n_fft: int, sample_rate: int = SAMPLE_RATE, n_mels: int = N_MELS,
                   f_min: float = 0.0, f_max: float | None = None) -> torch.Tensor:
    """Slaney-normalised triangular mel filters, ``(n_mels, n_fft // 2 + 1)`` float32.

    Filter ``m`` rises from centre ``m - 1`` to centre ``m`` and falls to centre ``m + 1``, the
    ``n_mels + 2`` centres spaced evenly on the mel scale from ``f_min`` to ``f_max`` (default
    the Nyquist frequency); each filter is scaled by ``2 / (upper edge - lower edge)`` in Hz.
    Equals ``librosa.filters.mel(sr=sample_rate, n_fft=n_fft, n_mels=n_mels)``.
    """
    f_max = sample_rate / 2 if f_max is None else f_max
    if not 0 <= f_min < f_max <= sample_rate / 2:
        raise ValueError(f"f_min, f_max: expected 0 <= f_min < f_max <= {sample_rate / 2}, "
                         f"got {f_min}, {f_max}")
    if n_mels < 1 or n_fft < 2:
        raise ValueError(f"n_mels, n_fft: expected >= 1 and >= 2, got {n_mels}, {n_fft}")
    fft_hz = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)  # (K,)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(f_min), _hz_to_mel(f_max), n_mels + 2))  # (M+2,)
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


def _centred(known: torch.Tensor, offset: int, total: int, start: int, stop: int,
             half: int) -> torch.Tensor:
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


def _log_mel_frames(padded: torch.Tensor, sample_rate: int, n_mels: int) -> torch.Tensor:
    """``log(mel power + 1e-6)`` ``(T, n_mels)`` of the frames of a centre-padded segment
    ``(hop * (T - 1) + n_fft,)``: frame ``t`` is ``padded[t * hop : t * hop + n_fft]``."""
    win, hop, n_fft = _framing(sample_rate)
    spec = torch.stft(padded, n_fft, hop_length=hop, win_length=win,
                      window=torch.hann_window(win), center=False,
                      return_complex=True)  # (K, T)
    power = spec.real.square() + spec.imag.square()  # (K, T)
    fbank = _filters(n_fft, sample_rate, n_mels)  # (M, K)
    return torch.log(fbank @ power + LOG_FLOOR).T.contiguous()  # (T, M)


def log_mel(samples: torch.Tensor, *, sample_rate: int = SAMPLE_RATE, n_mels: int = N_MELS,
            normalize: bool = False) -> torch.Tensor:
    """Log-mel features of ``samples (N,)``: ``(T, n_mels)`` float32, ``T = 1 + N // hop``.

    A 25 ms Hann window every 10 ms (400 / 160 samples at 16 kHz), zero-padded to the next power
    of two for the FFT, frames centred on ``t * hop`` (the signal is reflect-padded at both ends);
    ``log(mel power + 1e-6)``. With ``normalize`` each mel bin is shifted and scaled to zero
    mean and unit variance over the utterance. :func:`log_mel_stream` computes the same frames
    from the samples as they arrive.
    """
    if samples.dim() != 1 or samples.numel() == 0:
        raise ValueError(f"samples: expected a non-empty (N,) tensor, got {tuple(samples.shape)}")
    _, hop, n_fft = _framing(sample_rate)
    n = samples.numel()
    frames = frame_count(n, sample_rate)
    padded = _centred(samples.float(), 0, n, 0, hop * (frames - 1) + n_fft, n_fft // 2)
    feats = _log_mel_frames(padded, sample_rate, n_mels)
    return normalize_features(feats) if normalize else feats


def n_frames(n_samples: int, rate: int) -> int:
    """The log-mel frames of ``n_samples`` samples at ``rate`` Hz: ``T`` of
    ``log_mel(resample(samples, rate))``, without computing them."""
    resampled = -(-n_samples * SAMPLE_RATE // rate)  # ceil: resample's output length
    return frame_count(resampled)


class MelStream(NamedTuple):
    """What :func:`log_mel_stream` keeps between chunks: the samples still needed
    (``known``, from sample ``offset`` on), the samples received and the frames given out."""

    known: torch.Tensor
    offset: int
    received: int
    frames: int


def log_mel_stream(chunk: torch.Tensor, state: MelStream | None = None, *, final: bool = False,
                   sample_rate: int = SAMPLE_RATE,
                   n_mels: int = N_MELS) -> tuple[torch.Tensor, MelStream]:
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
        padded = _centred(known, state.offset, received, state.frames * hop,
                          hop * (end - 1) + n_fft, half)
        frames = _log_mel_frames(padded, sample_rate, n_mels)  # (end - state.frames, M)
    if final:
        return frames, MelStream(known[:0], received, received, -1)
    offset = max(0, end * hop - n_fft)  # the reflection at the end reaches back this far
    return frames, MelStream(known[offset - state.offset:], offset, received, end)


def normalize_features(features: torch.Tensor) -> torch.Tensor:
    """Per-utterance normalisation: each column of ``features (T, F)`` to zero mean, unit variance."""
    if features.dim() != 2:
        raise ValueError(f"features: expected shape (T, F), got {tuple(features.shape)}")
    return (features - features.mean(0)) / (features.std(0, unbiased=False) + 1e-5)


def feature_statistics(features: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation ``(F,)`` float32 of each column over every frame of
    ``features[i]`` ``(T_i, F)`` (summed in float64): fixed statistics to normalise any
    utterance with, frame by frame (a streaming model's, unlike :func:`normalize_features`).
    """
    if not features or any(f.dim() != 2 for f in features) or \
            len({f.shape[1] for f in features}) != 1:
        shapes = sorted({tuple(f.shape) for f in features})[:4]
        raise ValueError(f"features: expected (T_i, F) tensors with one F, got shapes {shapes}")
    total = sum(f.shape[0] for f in features)
    if total == 0:
        raise ValueError("features: expected at least one frame, got none")
    sums = sum(f.double().sum(0) for f in features)  # (F,)
    mean = sums / total
    squares = sum((f.double() - mean).square().sum(0) for f in features)  # (F,)
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
