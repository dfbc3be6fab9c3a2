"""Audio: decoding (WAV of any PCM or float encoding, FLAC, OGG Vorbis and Opus, MP3), resampling,
log-mel features and padding.

WAV files are read by attnkit's own parser (any chunk layout, streamed sizes, 8-32-bit PCM and
float, the length checked from the header before any sample is decoded); every other codec is
decoded by libsndfile through ``soundfile`` (FLAC, OGG Vorbis and Opus, MP3 and the other
formats it reads). Several channels are averaged to one. :func:`audio_info` reads only a file's
header; :func:`read_audio` decodes a file, or only the part of it an utterance covers (a Kaldi
``segments`` entry). Resampling to the model rate is ``soxr``'s high-quality band-limited
resampler (never dropping or repeating samples).

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
import io
import logging
import math
import os
import struct
import wave
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple

import numpy as np
import soundfile
import soxr
import torch

from attnkit.data.paths import regular_file
from attnkit.errors import DataError

log = logging.getLogger("attnkit")

__all__ = [
    "AudioInfo",
    "MAX_SECONDS",
    "MelStream",
    "N_MELS",
    "OVERSHOOT_S",
    "SAMPLE_RATE",
    "audio_info",
    "feature_statistics",
    "frame_count",
    "log_mel",
    "log_mel_stream",
    "mel_filterbank",
    "n_frames",
    "normalize_features",
    "pad_features",
    "parse_wav",
    "read_audio",
    "read_wav",
    "resample",
    "resampled_length",
    "samples_needed",
    "span",
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
MAX_FMT_BYTES = 1 << 16  # a 'fmt ' chunk is 16 to 40 bytes; a larger one is a corrupt header
# How far past the end of its recording a Kaldi segment may end (then cut at the end):
# extract-segments' --max-overshoot default.
OVERSHOOT_S = 0.5
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
    from the header, before its samples are decoded; so are samples that are NaN or infinite.

    Returns:
        ``(samples (N,) float32 in [-1, 1), sample_rate)``.

    Raises:
        DataError: naming ``source``: not RIFF/WAVE, compressed, a sample size not listed above,
            no ``fmt `` or ``data`` chunk, truncated, no samples, non-finite samples, or longer
            than ``max_seconds``.
    """
    fmt, offset, size = _wav_layout(io.BytesIO(data), len(data), source)
    _check_duration(size // fmt.frame_bytes, fmt.rate, source, max_seconds)
    return _decode_pcm(data[offset:offset + size], fmt, source), fmt.rate


def _wav_layout(f: BinaryIO, total: int, source: str) -> tuple[_Format, int, int]:
    """``(format, offset of the first sample, bytes of samples)`` of the WAV of ``total`` bytes
    open as ``f``, from its chunk headers only (chunks other than ``fmt `` are skipped by
    seeking, so a long recording's samples are not read)."""
    head = f.read(12)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        raise DataError(f"{source}: not a RIFF/WAVE file (its first 12 bytes are no RIFF/WAVE "
                        "header)")
    fmt, pos = None, 12
    while pos + 8 <= total:
        f.seek(pos)
        header = f.read(8)
        chunk_id, size = header[:4], struct.unpack_from("<I", header, 4)[0]
        body = pos + 8
        if chunk_id == b"fmt ":
            if size > MAX_FMT_BYTES:
                raise DataError(f"{source}: 'fmt ' chunk of {size} bytes, expected at most "
                                f"{MAX_FMT_BYTES} (a corrupt header)")
            fmt = _parse_fmt(f.read(size), source)
        elif chunk_id == b"data":
            if fmt is None:
                raise DataError(f"{source}: 'data' chunk before the 'fmt ' chunk")
            streaming = size in _STREAMING_SIZES or size >= _STREAMING_MIN
            if not streaming and body + size > total:
                raise DataError(f"{source}: truncated: 'data' chunk declares {size} bytes, "
                                f"{total - body} present")
            size = total - body if streaming else size
            if size % fmt.frame_bytes:
                raise DataError(f"{source}: truncated: {size} data bytes is not a whole number "
                                f"of {fmt.frame_bytes}-byte frames")
            if size == 0:
                raise DataError(f"{source}: no samples")
            return fmt, body, size
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
        raise DataError(f"{source}: bad 'fmt ' chunk: expected at least 1 channel and a sample "
                        f"rate of at least 1 Hz, got {channels} channels, {rate} Hz")
    return _Format(channels, rate, tag, bits)


def _check_duration(samples: int, rate: int, source: str, max_seconds: float | None) -> None:
    seconds = samples / rate
    if max_seconds is not None and seconds > max_seconds:
        raise DataError(f"{source}: {seconds:.1f} s of audio, more than max_seconds="
                        f"{max_seconds:g}; cut it into utterances")


def _decode_pcm(raw: bytes, fmt: _Format, source: str) -> torch.Tensor:
    """The mono samples ``(N,)`` float32 of whole frames of ``fmt`` in ``raw``."""
    dtype, scale = _ENCODINGS[(fmt.tag, fmt.bits)]
    if dtype is None:  # 24-bit: three little-endian bytes, sign-extended through int32
        b = np.frombuffer(raw, dtype="u1").reshape(-1, 3).astype(np.int32)  # (N * C, 3)
        values = (b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)) << 8 >> 8
    else:
        values = np.frombuffer(raw, dtype=dtype)
    values = values.astype(np.float64)
    if fmt.bits == 8:
        values = values - 128.0  # 8-bit PCM is unsigned, silence at 128
    if (fmt.tag, fmt.bits) != (_PCM, 16):
        log.info("%s: %s samples converted to float", source, fmt.describe())
    return _mono(values.reshape(-1, fmt.channels) / scale, source)


def _mono(frames: np.ndarray, source: str) -> torch.Tensor:
    """``frames (N, C)`` averaged over the channels: ``(N,)`` float32; NaN or infinite samples
    are refused, naming the first."""
    bad = ~np.isfinite(frames)
    if bad.any():
        first = int(np.argmax(bad.any(axis=1)))
        raise DataError(f"{source}: {int(bad.sum())} samples are NaN or infinite (the first at "
                        f"frame {first}); expected finite samples")
    return torch.from_numpy(frames.mean(axis=1).astype(np.float32))


def read_wav(path: str | Path, *,
             max_seconds: float | None = MAX_SECONDS) -> tuple[torch.Tensor, int]:
    """Samples ``(N,)`` float32 and sample rate of a WAV file, PCM or float (see
    :func:`parse_wav`), at most ``max_seconds`` long (None: no limit).

    Raises:
        DataError: naming the file, when it cannot be read, is not a usable WAV or is longer
            than ``max_seconds``.
    """
    return read_audio(path, max_seconds=max_seconds, codecs="wav")


class AudioInfo(NamedTuple):
    """What a file's header says: ``rate`` (Hz), ``samples`` per channel, ``channels`` and
    ``codec`` (``"wav"``, or libsndfile's format and encoding, ``"FLAC PCM_16"``)."""

    rate: int
    samples: int
    channels: int
    codec: str

    @property
    def seconds(self) -> float:
        return self.samples / self.rate


def _open(path: Path):
    try:
        return regular_file(path).open("rb")
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None


def _is_wav(f: BinaryIO) -> bool:
    head = f.read(12)
    f.seek(0)
    return head[:4] == b"RIFF" and head[8:12] == b"WAVE"


def _sf_info(path: Path) -> soundfile._SoundFileInfo:
    """libsndfile's header of ``path``, its failures as :class:`DataError`."""
    try:
        info = soundfile.info(str(path))
    except (soundfile.LibsndfileError, RuntimeError, TypeError) as exc:
        raise DataError(f"{path}: cannot decode: {exc}; expected WAV, FLAC, OGG (Vorbis, "
                        f"Opus) or MP3 audio") from None
    if info.samplerate < 1 or info.channels < 1:
        raise DataError(f"{path}: expected a sample rate of at least 1 Hz and at least 1 "
                        f"channel, got {info.samplerate} Hz, {info.channels} channels")
    return info


def audio_info(path: str | Path) -> AudioInfo:
    """The header of an audio file (WAV read by attnkit's parser, any other codec by
    libsndfile): its samples are not decoded.

    Raises:
        DataError: naming the file: missing, unreadable, a codec neither reads, a sample rate
            of 0, no samples.
    """
    path = Path(path)
    with _open(path) as f:
        if _is_wav(f):
            fmt, _, size = _wav_layout(f, os.fstat(f.fileno()).st_size, str(path))
            return AudioInfo(fmt.rate, size // fmt.frame_bytes, fmt.channels, "wav")
    info = _sf_info(path)
    if info.frames < 1:
        raise DataError(f"{path}: no samples")
    return AudioInfo(info.samplerate, info.frames, info.channels,
                     f"{info.format} {info.subtype}")


def span(info: AudioInfo, start: float, end: float | None, source: str) -> tuple[int, int]:
    """Samples ``[first, stop)`` of the part ``start`` to ``end`` seconds (None: the end) of
    a recording of ``info``: a Kaldi segment ending at most :data:`OVERSHOOT_S` past the
    recording is cut at its end (as Kaldi's ``extract-segments`` does).

    Raises:
        DataError: naming ``source``: start < 0, end <= start, starting past the recording or
            ending more than :data:`OVERSHOOT_S` after it.
    """
    length = info.seconds
    until = "the end" if end is None else f"{end:g} s"
    if start < 0 or (end is not None and end <= start):
        raise DataError(f"{source}: expected 0 <= start < end, got start {start:g} s, end "
                        f"{until}")
    if start >= length or (end is not None and end > length + OVERSHOOT_S):
        raise DataError(f"{source}: segment {start:g} s to {until} is past the end of its "
                        f"recording ({length:.3f} s)")
    first = round(start * info.rate)
    stop = info.samples if end is None else min(info.samples, round(end * info.rate))
    return first, stop


def read_audio(path: str | Path, *, start: float = 0.0, end: float | None = None,
               max_seconds: float | None = MAX_SECONDS,
               codecs: str = "any") -> tuple[torch.Tensor, int]:
    """The mono samples ``(N,)`` float32 and the sample rate of an audio file, or of its part
    from ``start`` to ``end`` seconds (None: the end; see :func:`span`) when an utterance is
    cut out of a longer recording (only that part is read).

    WAV is read by attnkit's parser (:func:`parse_wav`'s encodings); with ``codecs="any"``
    every other file is decoded by libsndfile (FLAC, OGG Vorbis and Opus, MP3, ...) to
    float32 (``codecs="wav"``: WAV only). Channels are averaged. The part read must be at
    most ``max_seconds`` long (None: no limit), checked from the header before decoding.

    Raises:
        DataError: naming the file: missing, unreadable, not a codec read, a sample rate of 0,
            no samples, NaN or infinite samples, a part outside the recording, too long.
    """
    path = Path(path)
    source = str(path)
    with _open(path) as f:
        if _is_wav(f):
            fmt, offset, size = _wav_layout(f, os.fstat(f.fileno()).st_size, source)
            info = AudioInfo(fmt.rate, size // fmt.frame_bytes, fmt.channels, "wav")
            first, stop = span(info, start, end, source) if start or end is not None \
                else (0, info.samples)
            _check_duration(stop - first, fmt.rate, source, max_seconds)
            f.seek(offset + first * fmt.frame_bytes)
            raw = f.read((stop - first) * fmt.frame_bytes)
            return _decode_pcm(raw, fmt, source), fmt.rate
    if codecs == "wav":
        raise DataError(f"{path}: not a RIFF/WAVE file; expected WAV audio")
    info = _sf_info(path)
    whole = AudioInfo(info.samplerate, info.frames, info.channels, info.format)
    first, stop = span(whole, start, end, source) if start or end is not None \
        else (0, info.frames)
    _check_duration(stop - first, info.samplerate, source, max_seconds)
    try:
        frames, rate = soundfile.read(str(path), start=first, stop=stop, dtype="float32",
                                      always_2d=True)  # (N, C)
    except (soundfile.LibsndfileError, RuntimeError) as exc:
        raise DataError(f"{path}: cannot decode its {info.format} {info.subtype} audio: "
                        f"{exc}") from None
    if frames.shape[0] == 0:
        raise DataError(f"{path}: no samples")
    return _mono(frames, source), rate


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
    return frame_count(resampled_length(n_samples, rate))


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
