"""WAV reading, resampling, the mel filterbank, log-mel features and padding."""

import io
import math
import re
import struct
import wave

import numpy as np
import pytest
import torch

from attnkit.data import (
    DataError,
    feature_statistics,
    log_mel,
    log_mel_stream,
    mel_filterbank,
    n_frames,
    normalize_features,
    pad_features,
    read_wav,
    resample,
    write_wav,
)
from attnkit.data.audio.features import _hz_to_mel, _mel_to_hz, frame_count, samples_needed
from attnkit.data.audio.files import parse_wav


def wav_bytes(pcm: np.ndarray, rate: int, channels: int = 1) -> bytes:
    """A 16-bit PCM WAV written by the standard library; ``pcm`` is (N * channels,) int16."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.astype("<i2").tobytes())
    return buf.getvalue()


def riff(fmt: bytes, data: bytes, *, data_size: int | None = None, extra: bytes = b"") -> bytes:
    """A WAV assembled by hand: ``fmt `` chunk, optional ``extra`` chunks, ``data`` chunk."""
    body = (
        b"WAVE"
        + b"fmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + extra
        + b"data"
        + struct.pack("<I", len(data) if data_size is None else data_size)
        + data
    )
    return b"RIFF" + struct.pack("<I", len(body)) + body


def pcm_fmt(channels=1, rate=16000, bits=16, tag=1) -> bytes:
    align = channels * bits // 8
    return struct.pack("<HHIIHH", tag, channels, rate, rate * align, align, bits)


RAMP = np.arange(-300, 300, 3, dtype=np.int16) * 100  # (200,) distinct values, both signs


def test_reads_what_the_wave_module_writes(tmp_path):
    path = tmp_path / "a.wav"
    path.write_bytes(wav_bytes(RAMP, 11025))
    samples, rate = read_wav(path)
    assert rate == 11025 and samples.dtype == torch.float32
    assert torch.equal(samples, torch.from_numpy(RAMP.astype(np.float32) / 32768))


@pytest.mark.parametrize("size", [0, 0xFFFFFFFF, 0x7FFFF000])
def test_streaming_data_sizes_mean_read_to_the_end(size):
    data = riff(pcm_fmt(rate=22050), RAMP.astype("<i2").tobytes(), data_size=size)
    samples, rate = parse_wav(data, source="stream")
    assert rate == 22050 and samples.numel() == RAMP.size
    assert samples[0] == RAMP[0] / 32768 and samples[-1] == RAMP[-1] / 32768


def test_other_chunks_and_odd_padding_are_skipped():
    extra = b"LIST" + struct.pack("<I", 5) + b"INFOx" + b"\0"  # odd size, padded to even
    data = riff(pcm_fmt(), RAMP.astype("<i2").tobytes(), extra=extra)
    samples, _ = parse_wav(data, source="x")
    assert torch.equal(samples, torch.from_numpy(RAMP.astype(np.float32) / 32768))


def test_channels_are_averaged():
    left, right = RAMP, -RAMP // 2
    stereo = np.stack([left, right], axis=1).reshape(-1)  # interleaved (N * 2,)
    samples, rate = parse_wav(wav_bytes(stereo, 8000, channels=2), source="stereo")
    expected = (left.astype(np.float32) + right.astype(np.float32)) / 2 / 32768
    assert rate == 8000 and np.allclose(samples.numpy(), expected)


def test_extensible_pcm_is_read():
    fmt = pcm_fmt(tag=0xFFFE) + struct.pack("<HHIH", 22, 16, 4, 1) + bytes(14)  # sub-format PCM
    samples, _ = parse_wav(riff(fmt, RAMP.astype("<i2").tobytes()), source="ext")
    assert samples.numel() == RAMP.size


def _encode(x: np.ndarray, tag: int, bits: int) -> bytes:
    """``x`` (floats in [-1, 1)) as the data bytes of a WAV of that format, written the
    obvious way (independently of the reader)."""
    if tag == 3:
        return x.astype("<f4" if bits == 32 else "<f8").tobytes()
    ints = np.round(x * 2 ** (bits - 1)).astype(np.int64)
    if bits == 8:
        return (ints + 128).astype("u1").tobytes()
    if bits == 24:
        return b"".join(int(v).to_bytes(3, "little", signed=True) for v in ints)
    return ints.astype(f"<i{bits // 8}").tobytes()


@pytest.mark.parametrize("tag, bits", [(1, 8), (1, 24), (1, 32), (3, 32), (3, 64)])
@pytest.mark.parametrize("extensible", [False, True])
def test_other_sample_formats_are_converted_and_said_so(tag, bits, extensible, caplog):
    x = RAMP.astype(np.float64) / 32768  # (200,) in [-1, 1)
    fmt = pcm_fmt(bits=bits, tag=0xFFFE if extensible else tag)
    if extensible:
        fmt += struct.pack("<HHIH", 22, bits, 4, tag) + bytes(14)
    with caplog.at_level("INFO", logger="attnkit"):
        samples, rate = parse_wav(riff(fmt, _encode(x, tag, bits)), source="in.wav")
    assert rate == 16000 and samples.dtype == torch.float32
    step = 2.0 ** -(bits - 1) if tag == 1 else 1e-7
    assert np.abs(samples.numpy() - x).max() <= step
    kind = "float" if tag == 3 else "PCM"
    assert f"in.wav: {bits}-bit {kind} samples converted to float" in caplog.text


def test_stereo_24_bit_is_averaged_and_its_duration_checked_from_the_header():
    left, right = RAMP / 32768, -RAMP / 65536
    frames = np.stack([left, right], axis=1).reshape(-1)  # (2N,) interleaved
    data = riff(pcm_fmt(channels=2, bits=24), _encode(frames, 1, 24))
    samples, _ = parse_wav(data, source="s")
    assert np.abs(samples.numpy() - (left + right) / 2).max() <= 2.0**-23
    with pytest.raises(DataError, match=r"s: 0.0 s of audio, more than max_seconds=0.001"):
        parse_wav(data, source="s", max_seconds=0.001)


BAD_WAVS = {
    "empty file": (b"", "not a RIFF/WAVE file"),
    "text": (b"hello, this is not audio at all", "not a RIFF/WAVE file"),
    "float16": (riff(pcm_fmt(tag=3, bits=16), bytes(8)), r"got 16-bit float"),
    "12-bit": (
        riff(pcm_fmt(bits=12), bytes(8)),
        r"expected 8, 16, 24 or 32-bit PCM or 32 "
        r"or 64-bit float, got 12-bit PCM",
    ),
    "a-law": (riff(pcm_fmt(tag=6, bits=8), bytes(8)), r"format tag 6 \(A-law\)"),
    "mp3": (riff(pcm_fmt(tag=0x55), bytes(8)), r"format tag 85 \(MP3\)"),
    "extensible mu-law": (
        riff(pcm_fmt(tag=0xFFFE) + struct.pack("<HHIH", 22, 16, 4, 7) + bytes(14), bytes(8)),
        r"format tag 7 \(mu-law\)",
    ),
    "no samples": (riff(pcm_fmt(), b""), "no samples"),
    "truncated data": (
        riff(pcm_fmt(), bytes(100), data_size=400),
        "truncated: 'data' chunk declares 400 bytes, 100 present",
    ),
    "half a frame": (riff(pcm_fmt(channels=2), bytes(6)), "not a whole number of 4-byte"),
    "no data chunk": (riff(pcm_fmt(), b"")[:-8], "no 'data' chunk"),
    "data before fmt": (b"RIFF\0\0\0\0WAVEdata\2\0\0\0\0\0", "'data' chunk before"),
    "short fmt": (riff(pcm_fmt()[:10], bytes(4)), "truncated 'fmt ' chunk"),
}


@pytest.mark.parametrize("name", BAD_WAVS)
def test_bad_wavs_raise_data_error_naming_the_file(tmp_path, name):
    data, message = BAD_WAVS[name]
    path = tmp_path / f"{name.replace(' ', '_')}.wav"
    path.write_bytes(data)
    with pytest.raises(DataError, match=re.escape(str(path)) + ".*" + message):
        read_wav(path)


def test_missing_wav_names_the_file(tmp_path):
    with pytest.raises(DataError, match=re.escape(str(tmp_path / "gone.wav")) + ": cannot read"):
        read_wav(tmp_path / "gone.wav")


def sine(freq: float, rate: int, seconds: float = 1.0, amplitude: float = 0.5) -> torch.Tensor:
    t = torch.arange(round(rate * seconds), dtype=torch.float64) / rate
    return (amplitude * torch.sin(2 * math.pi * freq * t)).float()


def peak_hz(x: torch.Tensor, rate: int) -> float:
    spectrum = torch.fft.rfft(x.double() * torch.hann_window(x.numel(), dtype=torch.float64))
    return float(spectrum.abs().argmax()) * rate / x.numel()


@pytest.mark.parametrize("orig", [22050, 44100, 8000])
def test_resampling_keeps_a_sines_frequency_and_amplitude(orig):
    out = resample(sine(1234.0, orig), orig, 16000)
    assert out.dtype == torch.float32 and out.numel() == 16000
    assert abs(peak_hz(out, 16000) - 1234.0) <= 1.0
    middle = out[1000:-1000]  # away from the filter's edge effects
    assert abs(float(middle.abs().max()) - 0.5) < 0.01
    expected = sine(1234.0, 16000)[1000:-1000]
    assert float((middle - expected).abs().max()) < 0.01  # same phase, not only same pitch


def test_resampling_removes_what_the_new_rate_cannot_hold():
    out = resample(sine(10000.0, 44100), 44100, 16000)  # above the 8 kHz Nyquist frequency
    assert float(out[1000:-1000].abs().max()) < 0.01


def test_resample_rejects_bad_arguments():
    with pytest.raises(ValueError, match="orig_rate: expected a positive int, got 0"):
        resample(torch.zeros(10), 0, 16000)
    with pytest.raises(ValueError, match=r"samples: expected shape \(N,\), got \(2, 5\)"):
        resample(torch.zeros(2, 5), 8000, 16000)


def test_mel_scale_round_trips_and_is_linear_below_1khz():
    hz = np.array([0.0, 200.0, 999.0, 1000.0, 4000.0, 8000.0])
    assert np.allclose(_mel_to_hz(_hz_to_mel(hz)), hz)
    assert _hz_to_mel(1000.0) == pytest.approx(15.0)
    assert _hz_to_mel(6400.0) == pytest.approx(42.0)  # 27 mels per factor 6.4 above 1 kHz


# librosa 0.11.0: librosa.filters.mel(sr=16000, n_fft=512, n_mels=80), rows 0, 40 and 79,
# and librosa.filters.mel(sr=22050, n_fft=1024, n_mels=40, fmin=100, fmax=8000) row 20 and sum
LIBROSA_ROWS = {
    0: ([1, 2], [0.0225345604, 0.00863771047]),
    40: ([54, 55, 56, 57], [0.00715944124, 0.0144441761, 0.00876147859, 0.00175120181]),
    79: (
        list(range(238, 256)),
        [
            0.000337596139,
            0.000701915182,
            0.0010662342,
            0.00143055327,
            0.00179487211,
            0.0021591913,
            0.00252351025,
            0.00288782921,
            0.0032521484,
            0.00315533695,
            0.00280474406,
            0.00245415093,
            0.00210355804,
            0.00175296492,
            0.00140237203,
            0.00105177902,
            0.000701186014,
            0.000350593007,
        ],
    ),
}


def test_filterbank_matches_librosa():
    fb = mel_filterbank(n_fft=512)
    assert fb.shape == (80, 257) and fb.dtype == torch.float32
    for row, (bins, values) in LIBROSA_ROWS.items():
        assert torch.nonzero(fb[row]).flatten().tolist() == bins
        assert torch.allclose(fb[row, bins], torch.tensor(values), rtol=1e-5, atol=0)
    fb2 = mel_filterbank(n_fft=1024, sample_rate=22050, n_mels=40, f_min=100, f_max=8000)
    assert fb2.shape == (40, 513)
    assert torch.nonzero(fb2[20]).flatten().tolist() == list(range(80, 93))
    assert fb2[20, 86] == pytest.approx(0.00700770132, rel=1e-5)
    assert float(fb2.sum()) == pytest.approx(1.8579769134521484, rel=1e-5)


def test_filters_are_triangles_peaking_at_mel_spaced_centres_and_cover_the_band():
    n_fft, rate, n_mels = 2048, 16000, 40
    fb = mel_filterbank(n_fft=n_fft, sample_rate=rate, n_mels=n_mels).double()
    bin_hz = rate / n_fft
    centres = _mel_to_hz(np.linspace(0, _hz_to_mel(rate / 2), n_mels + 2))
    for m in range(n_mels):
        nz = torch.nonzero(fb[m]).flatten()
        assert torch.equal(nz, torch.arange(int(nz[0]), int(nz[-1]) + 1))  # one contiguous run
        peak = int(fb[m].argmax())
        assert abs(peak * bin_hz - centres[m + 1]) <= bin_hz  # peak at its mel centre
        rise, fall = fb[m, int(nz[0]) : peak + 1], fb[m, peak : int(nz[-1]) + 1]
        assert (rise.diff() > 0).all() and (fall.diff() < 0).all()  # up, then down
        assert float(fb[m].sum()) * bin_hz == pytest.approx(1.0, rel=0.05)  # unit area in Hz
    first, last = math.ceil(centres[1] / bin_hz), math.floor(centres[-2] / bin_hz)
    assert (fb[:, first : last + 1].sum(0) > 0).all()  # no gap from the first to the last centre


def test_filterbank_rejects_a_bad_band():
    with pytest.raises(ValueError, match="f_min, f_max: expected 0 <= f_min < f_max <= 8000"):
        mel_filterbank(n_fft=512, f_min=100, f_max=9000)


def test_log_mel_frames_and_spectral_peak():
    feats = log_mel(sine(1000.0, 16000))
    assert feats.shape == (101, 80) and feats.dtype == torch.float32  # 1 + 16000 // 160 frames
    centres = _mel_to_hz(np.linspace(0, _hz_to_mel(8000), 82))[1:-1]
    assert int(feats[5:-5].mean(0).argmax()) == int(np.abs(centres - 1000).argmin())
    assert log_mel(torch.zeros(8000)).shape == (51, 80)
    assert torch.isfinite(log_mel(torch.zeros(8000))).all()  # silence stays finite
    assert log_mel(sine(440.0, 22050), sample_rate=22050).shape == (101, 80)


@pytest.mark.parametrize("n", [1, 200, 256, 257, 1000, 16000, 16161])
def test_log_mel_is_torch_stft_centred_with_reflection(n):
    """The frames are those of ``torch.stft(center=True)`` (reflect-padded; zero-padded when
    the signal is too short to reflect), bit for bit."""
    samples = torch.randn(n, generator=torch.Generator().manual_seed(n))
    spec = torch.stft(
        samples,
        512,
        hop_length=160,
        win_length=400,
        window=torch.hann_window(400),
        center=True,
        pad_mode="reflect" if n > 256 else "constant",
        return_complex=True,
    )  # (K, T)
    power = spec.real.square() + spec.imag.square()
    expected = torch.log(mel_filterbank(n_fft=512) @ power + 1e-6).T
    assert torch.equal(log_mel(samples), expected) and len(expected) == frame_count(n)


@pytest.mark.parametrize(
    "n, chunk",
    [
        (300, 1),
        (1000, 1),
        (1000, 7),
        (16000, 160),
        (16161, 161),
        (16161, 3200),
        (35555, 3200),
        (35555, 100000),
    ],
)
def test_streamed_frames_are_the_frames_of_the_whole_signal(n, chunk):
    samples = torch.randn(n, generator=torch.Generator().manual_seed(n))
    state, parts = None, []
    for start in range(0, n, chunk):
        frames, state = log_mel_stream(samples[start : start + chunk], state)
        parts.append(frames)
        received = min(n, start + chunk)  # a frame as soon as its window is in, not before
        given = sum(len(p) for p in parts)
        assert samples_needed(given) <= received < samples_needed(given + 1)
        assert len(state.known) < 512 + 257  # only the samples still needed are kept
    frames, _ = log_mel_stream(samples[:0], state, final=True)  # the last ones, reflected
    streamed = torch.cat(parts + [frames])
    # equal up to float32 rounding: the matrix products run over other numbers of frames
    torch.testing.assert_close(streamed, log_mel(samples), rtol=0, atol=1e-5)


def test_a_stream_in_one_final_chunk_is_log_mel_and_bad_calls_are_named():
    samples = torch.randn(4000, generator=torch.Generator().manual_seed(0))
    frames, state = log_mel_stream(samples, final=True)
    assert torch.equal(frames, log_mel(samples))
    with pytest.raises(ValueError, match="state: the stream has ended"):
        log_mel_stream(samples, state)
    with pytest.raises(ValueError, match=r"chunk: expected shape \(n,\), got \(2, 3\)"):
        log_mel_stream(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="chunk: the stream ended with no samples"):
        log_mel_stream(torch.zeros(0), final=True)


def test_feature_statistics_are_those_of_all_frames_together():
    g = torch.Generator().manual_seed(0)
    feats = [3 + 2 * torch.randn(n, 5, generator=g) for n in (7, 1, 30)]
    mean, std = feature_statistics([f.half() for f in feats])
    every = torch.cat([f.half().float() for f in feats])
    torch.testing.assert_close(mean, every.mean(0))
    torch.testing.assert_close(std, every.std(0, unbiased=False))
    with pytest.raises(ValueError, match="one F, got shapes"):
        feature_statistics([torch.zeros(3, 5), torch.zeros(3, 4)])
    with pytest.raises(ValueError, match="features: expected at least one frame"):
        feature_statistics([torch.zeros(0, 5)])


def test_normalization_gives_zero_mean_unit_variance_per_bin():
    feats = log_mel(
        sine(440.0, 16000) + 0.01 * torch.randn(16000, generator=torch.Generator().manual_seed(0)),
        normalize=True,
    )
    assert torch.allclose(feats.mean(0), torch.zeros(80), atol=1e-4)
    assert torch.allclose(feats.std(0, unbiased=False), torch.ones(80), atol=1e-3)
    with pytest.raises(ValueError, match=r"features: expected shape \(T, F\), got \(5,\)"):
        normalize_features(torch.zeros(5))


def test_pad_features():
    a, b = torch.ones(3, 4), 2 * torch.ones(5, 4)
    padded, lengths = pad_features([a, b])
    assert padded.shape == (2, 5, 4) and lengths.tolist() == [3, 5]
    assert torch.equal(padded[0, :3], a) and (padded[0, 3:] == 0).all()
    assert torch.equal(padded[1], b)
    with pytest.raises(ValueError, match="one F, got shapes"):
        pad_features([a, torch.ones(3, 5)])
    with pytest.raises(ValueError, match="at least one"):
        pad_features([])


def test_write_wav_reads_back_within_one_quantisation_step(tmp_path):
    samples = torch.linspace(-1.5, 1.5, 1001)  # beyond [-1, 1]: clipped
    write_wav(tmp_path / "a.wav", samples, 22050)
    back, rate = read_wav(tmp_path / "a.wav")
    assert rate == 22050 and back.shape == samples.shape
    assert (back - samples.clamp(-1, 1)).abs().max() <= 1 / 32768
    with pytest.raises(ValueError, match=r"samples: expected shape \(N,\), got \(2, 3\)"):
        write_wav(tmp_path / "b.wav", torch.zeros(2, 3), 16000)


@pytest.mark.parametrize("size", [None, 0xFFFFFFFF])
def test_audio_longer_than_the_limit_is_refused_before_decoding(tmp_path, size):
    silence = bytes(2 * 8000 * 3)  # 3 s of 16-bit silence at 8 kHz
    data = riff(pcm_fmt(rate=8000), silence, data_size=size)
    with pytest.raises(
        DataError,
        match=r"^long: 3.0 s of audio, more than max_seconds=2.5; "
        r"cut it into utterances$",
    ):
        parse_wav(data, source="long", max_seconds=2.5)
    assert parse_wav(data, source="long")[0].numel() == 8000 * 3
    path = tmp_path / "long.wav"
    path.write_bytes(data)
    with pytest.raises(DataError, match=r"long.wav: 3.0 s of audio, more than max_seconds=1"):
        read_wav(path, max_seconds=1)


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 44100, 48000])
@pytest.mark.parametrize("n", [3, 159, 160, 441, 22051, 48001])
def test_n_frames_is_the_frame_count_of_the_resampled_log_mels(rate, n):
    samples = torch.linspace(-0.5, 0.5, n)
    assert n_frames(n, rate) == log_mel(resample(samples, rate)).shape[0]
