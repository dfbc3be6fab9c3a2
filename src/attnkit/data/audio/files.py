"""Audio files: WAV of any PCM or float encoding read by attnkit's own parser, every other codec
(FLAC, OGG Vorbis and Opus, MP3, ...) decoded by libsndfile through ``soundfile``.

Headerless PCM (CMU's ``.raw`` files: AN4) is read as a :class:`RawPCM` says, its byte order
told or guessed from the samples (:func:`guess_byte_order`).

WAV files are read from their chunk headers (any chunk layout, streamed sizes, 8-32-bit PCM
and float), the length checked from the header before any sample is decoded. Several channels
are averaged to one; NaN and infinite samples are refused, and so are samples of a
magnitude above :data:`MAX_AMPLITUDE` (a float recording is nominally within [-1, 1]).
:func:`audio_info` reads only a file's header; :func:`read_audio` decodes a file, or only the
part of it an utterance covers (a Kaldi ``segments`` entry). :mod:`attnkit.data.audio.features`
turns the samples into features.
"""

from __future__ import annotations

import io
import logging
import os
import struct
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple

import numpy as np
import soundfile
import torch

from attnkit.data.paths import regular_file
from attnkit.errors import DataError

log = logging.getLogger("attnkit")

__all__ = [
    "AudioInfo",
    "MAX_SECONDS",
    "OVERSHOOT_S",
    "RawPCM",
    "audio_info",
    "guess_byte_order",
    "parse_wav",
    "read_audio",
    "read_wav",
    "span",
    "write_wav",
]

# Longest audio read by default: an utterance, not a recording (the listener and the decoder's
# output cap grow with the length; a 10-minute file would decode for many minutes).
MAX_SECONDS = 60.0
# Data-chunk sizes that mean "unknown, read to the end" (streamed WAVs such as espeak-ng --stdout)
_STREAMING_SIZES = (0, 0xFFFFFFFF)
_STREAMING_MIN = 0x7FFF0000
# The highest sample rate read (8x 96 kHz, the most a studio records at); a header claiming
# more is corrupt, and resampling from it would mean billions of samples per second.
MAX_RATE = 768_000
MAX_FMT_BYTES = 1 << 16  # a 'fmt ' chunk is 16 to 40 bytes; a larger one is a corrupt header
# How far past the end of its recording a Kaldi segment may end (then cut at the end):
# extract-segments' --max-overshoot default.
OVERSHOOT_S = 0.5
# The largest sample magnitude read. Float recordings are nominally within [-1, 1] (PCM always
# is, once scaled); a little above is headroom, 60 dB above is a broken file: its power
# spectrum would overflow float32 (1e30 squared) into an empty or failed transcript.
MAX_AMPLITUDE = 1000.0
_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE
_FORMAT_NAMES = {6: "A-law", 7: "mu-law", 0x55: "MP3", 2: "ADPCM"}
# Sample encodings read, by (format tag, bits): numpy dtype of one sample (24-bit: 3 bytes,
# assembled by hand), and the full scale that maps it to [-1, 1).
_ENCODINGS = {
    (_PCM, 8): ("u1", 128.0),
    (_PCM, 16): ("<i2", 32768.0),
    (_PCM, 24): (None, 2.0**23),
    (_PCM, 32): ("<i4", 2.0**31),
    (_FLOAT, 32): ("<f4", 1.0),
    (_FLOAT, 64): ("<f8", 1.0),
}


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


def parse_wav(
    data: bytes, *, source: str, max_seconds: float | None = None
) -> tuple[torch.Tensor, int]:
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
    return _decode_pcm(data[offset : offset + size], fmt, source), fmt.rate


def _wav_layout(f: BinaryIO, total: int, source: str) -> tuple[_Format, int, int]:
    """``(format, offset of the first sample, bytes of samples)`` of the WAV of ``total`` bytes
    open as ``f``, from its chunk headers only (chunks other than ``fmt `` are skipped by
    seeking, so a long recording's samples are not read)."""
    head = f.read(12)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        raise DataError(
            f"{source}: not a RIFF/WAVE file (its first 12 bytes are no RIFF/WAVE header)"
        )
    fmt, pos = None, 12
    while pos + 8 <= total:
        f.seek(pos)
        header = f.read(8)
        chunk_id, size = header[:4], struct.unpack_from("<I", header, 4)[0]
        body = pos + 8
        if chunk_id == b"fmt ":
            if size > MAX_FMT_BYTES:
                raise DataError(
                    f"{source}: 'fmt ' chunk of {size} bytes, expected at most "
                    f"{MAX_FMT_BYTES} (a corrupt header)"
                )
            fmt = _parse_fmt(f.read(size), source)
        elif chunk_id == b"data":
            if fmt is None:
                raise DataError(f"{source}: 'data' chunk before the 'fmt ' chunk")
            streaming = size in _STREAMING_SIZES or size >= _STREAMING_MIN
            if not streaming and body + size > total:
                raise DataError(
                    f"{source}: truncated: 'data' chunk declares {size} bytes, "
                    f"{total - body} present"
                )
            size = total - body if streaming else size
            if size % fmt.frame_bytes:
                raise DataError(
                    f"{source}: truncated: {size} data bytes is not a whole number "
                    f"of {fmt.frame_bytes}-byte frames"
                )
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
        raise DataError(
            f"{source}: expected PCM or float audio (format tag 1 or 3), got "
            f"format tag {tag} ({name})"
        )
    if (tag, bits) not in _ENCODINGS:
        raise DataError(
            f"{source}: expected 8, 16, 24 or 32-bit PCM or 32 or 64-bit float, "
            f"got {bits}-bit {'float' if tag == _FLOAT else 'PCM'}"
        )
    if channels < 1 or not 1 <= rate <= MAX_RATE:
        raise DataError(
            f"{source}: bad 'fmt ' chunk: expected at least 1 channel and a sample "
            f"rate of 1 to {MAX_RATE:,} Hz, got {channels} channels, {rate:,} Hz"
        )
    return _Format(channels, rate, tag, bits)


def _check_duration(samples: int, rate: int, source: str, max_seconds: float | None) -> None:
    seconds = samples / rate
    if max_seconds is not None and seconds > max_seconds:
        raise DataError(
            f"{source}: {seconds:.1f} s of audio, more than max_seconds="
            f"{max_seconds:g}; cut it into utterances"
        )


def _decode_pcm(raw: bytes, fmt: _Format, source: str) -> torch.Tensor:
    """The mono samples ``(N,)`` float32 of whole frames of ``fmt`` in ``raw``."""
    dtype, scale = _ENCODINGS[(fmt.tag, fmt.bits)]
    values: np.ndarray  # integers, then float64
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
    are refused, naming the first, and so are samples above :data:`MAX_AMPLITUDE` in
    magnitude, naming the largest."""
    bad = ~np.isfinite(frames)
    if bad.any():
        first = int(np.argmax(bad.any(axis=1)))
        raise DataError(
            f"{source}: {int(bad.sum())} samples are NaN or infinite (the first at "
            f"frame {first}); expected finite samples"
        )
    loud = np.abs(frames) > MAX_AMPLITUDE
    if loud.any():
        largest = int(np.argmax(np.abs(frames).max(axis=1)))
        value = frames[largest, int(np.argmax(np.abs(frames[largest])))]
        raise DataError(
            f"{source}: {int(loud.sum())} samples have a magnitude above "
            f"{MAX_AMPLITUDE:g} (the largest {value:g} at frame {largest}); "
            "expected samples nominally within [-1, 1]"
        )
    return torch.from_numpy(frames.mean(axis=1).astype(np.float32))


def read_wav(
    path: str | Path, *, max_seconds: float | None = MAX_SECONDS
) -> tuple[torch.Tensor, int]:
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


RAW_SUFFIX = ".raw"  # the files a RawPCM reads


class RawPCM(NamedTuple):
    """How a headerless file of mono 16-bit PCM samples is read (CMU Sphinx's ``.raw``):
    ``rate`` (Hz) and ``byte_order`` (``"big"`` or ``"little"``). Only files named ``*.raw``
    are read so; a file with a header is read by it."""

    rate: int
    byte_order: str

    @property
    def dtype(self) -> str:
        return ">i2" if self.byte_order == "big" else "<i2"

    def applies(self, path: Path) -> bool:
        return path.suffix.lower() == RAW_SUFFIX


def _raw_info(path: Path, raw: RawPCM) -> AudioInfo:
    """The :class:`AudioInfo` of a headerless 16-bit file, from its size.

    Raises:
        DataError: naming the file: an odd number of bytes (a truncated file), no bytes.
    """
    try:
        size = regular_file(path).stat().st_size
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    if size % 2:
        raise DataError(
            f"{path}: {size} bytes, not a whole number of 2-byte samples (headerless "
            "16-bit PCM); a truncated file"
        )
    if size == 0:
        raise DataError(f"{path}: no samples")
    return AudioInfo(raw.rate, size // 2, 1, f"raw PCM_16 {raw.byte_order}-endian")


def _lag1(values: np.ndarray) -> float:
    """The lag-1 autocorrelation of ``values (N,)``: near 1 for speech, whose energy lies low
    in the spectrum; near 0 or below for noise, or speech read in the wrong byte order."""
    x = values.astype(np.float64) - values.mean()
    energy = float((x * x).sum())
    return float((x[1:] * x[:-1]).sum() / energy) if energy > 0 else 0.0


def guess_byte_order(paths: list[Path], *, max_files: int = 20) -> tuple[str, int, int]:
    """The byte order of headerless 16-bit PCM recordings, from their samples:
    ``(order, votes for big, votes for little)`` over the first ``max_files`` of ``paths``.

    Each file is read both ways; the reading whose samples have the higher lag-1
    autocorrelation (:func:`_lag1`) gets its vote. Speech read in its own order is smooth
    (AN4: 0.92 in the median), read swapped its low bytes become the high ones, noise
    (0.15). Ties, unreadable and odd-sized files give no vote; with no vote at all, big-endian
    (CMU's AN4 as distributed).
    """
    votes = {"big": 0, "little": 0}
    for path in paths[:max_files]:
        try:
            data = regular_file(path).read_bytes()
        except OSError:
            continue
        if len(data) % 2 or len(data) < 4:
            continue
        big, little = (_lag1(np.frombuffer(data, dtype=t)) for t in (">i2", "<i2"))
        if big != little:
            votes["big" if big > little else "little"] += 1
    order = "little" if votes["little"] > votes["big"] else "big"
    return order, votes["big"], votes["little"]


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
        why = str(getattr(exc, "error_string", exc)).rstrip(".")
        if "possibly a pipe" in why:  # libsndfile's words for bytes it cannot place; the
            why = "no audio format libsndfile reads starts it"  # file is a regular one here
        raise DataError(
            f"{path}: cannot decode ({why}); expected WAV, FLAC, OGG (Vorbis, Opus) or MP3 audio"
        ) from None
    if not 1 <= info.samplerate <= MAX_RATE or info.channels < 1:
        raise DataError(
            f"{path}: expected a sample rate of 1 to {MAX_RATE:,} Hz and at least "
            f"1 channel, got {info.samplerate:,} Hz, {info.channels} channels"
        )
    return info


def audio_info(path: str | Path, raw: RawPCM | None = None) -> AudioInfo:
    """The header of an audio file (WAV read by attnkit's parser, any other codec by
    libsndfile; with ``raw``, a ``*.raw`` file is headerless PCM and its size says its
    length): its samples are not decoded.

    Raises:
        DataError: naming the file: missing, unreadable, a codec neither reads, a sample rate
            of 0, no samples, a raw file of an odd number of bytes.
    """
    path = Path(path)
    if raw is not None and raw.applies(path):
        return _raw_info(path, raw)
    with _open(path) as f:
        if _is_wav(f):
            fmt, _, size = _wav_layout(f, os.fstat(f.fileno()).st_size, str(path))
            return AudioInfo(fmt.rate, size // fmt.frame_bytes, fmt.channels, "wav")
    info = _sf_info(path)
    if info.frames < 1:
        raise DataError(f"{path}: no samples")
    return AudioInfo(info.samplerate, info.frames, info.channels, f"{info.format} {info.subtype}")


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
        raise DataError(f"{source}: expected 0 <= start < end, got start {start:g} s, end {until}")
    if start >= length or (end is not None and end > length + OVERSHOOT_S):
        raise DataError(
            f"{source}: segment {start:g} s to {until} is past the end of its "
            f"recording ({length:.3f} s)"
        )
    first = round(start * info.rate)
    stop = info.samples if end is None else min(info.samples, round(end * info.rate))
    return first, stop


def read_audio(
    path: str | Path,
    *,
    start: float = 0.0,
    end: float | None = None,
    max_seconds: float | None = MAX_SECONDS,
    codecs: str = "any",
    raw: RawPCM | None = None,
) -> tuple[torch.Tensor, int]:
    """The mono samples ``(N,)`` float32 and the sample rate of an audio file, or of its part
    from ``start`` to ``end`` seconds (None: the end; see :func:`span`) when an utterance is
    cut out of a longer recording (only that part is read).

    WAV is read by attnkit's parser (:func:`parse_wav`'s encodings); with ``codecs="any"``
    every other file is decoded by libsndfile (FLAC, OGG Vorbis and Opus, MP3, ...) to
    float32 (``codecs="wav"``: WAV only); with ``raw``, a ``*.raw`` file is headerless 16-bit
    PCM read as it says (:class:`RawPCM`). Channels are averaged. The part read must be at
    most ``max_seconds`` long (None: no limit), checked from the header before decoding.

    Raises:
        DataError: naming the file: missing, unreadable, not a codec read, a sample rate of 0,
            no samples, NaN or infinite samples, a part outside the recording, too long.
    """
    path = Path(path)
    source = str(path)
    if raw is not None and raw.applies(path):
        info = _raw_info(path, raw)
        first, stop = (
            span(info, start, end, source) if start or end is not None else (0, info.samples)
        )
        _check_duration(stop - first, raw.rate, source, max_seconds)
        with _open(path) as f:
            f.seek(2 * first)
            values = np.frombuffer(f.read(2 * (stop - first)), dtype=raw.dtype)
        return _mono(values.astype(np.float64)[:, None] / 32768.0, source), raw.rate
    with _open(path) as f:
        if _is_wav(f):
            fmt, offset, size = _wav_layout(f, os.fstat(f.fileno()).st_size, source)
            info = AudioInfo(fmt.rate, size // fmt.frame_bytes, fmt.channels, "wav")
            first, stop = (
                span(info, start, end, source) if start or end is not None else (0, info.samples)
            )
            _check_duration(stop - first, fmt.rate, source, max_seconds)
            f.seek(offset + first * fmt.frame_bytes)
            data = f.read((stop - first) * fmt.frame_bytes)
            return _decode_pcm(data, fmt, source), fmt.rate
    if codecs == "wav":
        raise DataError(f"{path}: not a RIFF/WAVE file; expected WAV audio")
    info = _sf_info(path)
    whole = AudioInfo(info.samplerate, info.frames, info.channels, info.format)
    first, stop = span(whole, start, end, source) if start or end is not None else (0, info.frames)
    _check_duration(stop - first, info.samplerate, source, max_seconds)
    try:
        frames, rate = soundfile.read(
            str(path), start=first, stop=stop, dtype="float32", always_2d=True
        )  # (N, C)
    except (soundfile.LibsndfileError, RuntimeError) as exc:
        raise DataError(
            f"{path}: cannot decode its {info.format} {info.subtype} audio: {exc}"
        ) from None
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
