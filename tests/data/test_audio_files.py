"""Audio files of every codec read: WAV through attnkit's parser, FLAC, OGG Vorbis and Opus and
MP3 through libsndfile; headers alone (audio_info), parts of recordings (segments), soxr
resampling and the errors naming the file."""

import math
import struct

import numpy as np
import pytest
import soundfile
import soxr
import torch

from attnkit.data import DataError
from attnkit.data.audio.features import resample, resampled_length
from attnkit.data.audio.files import OVERSHOOT_S, audio_info, read_audio, read_wav


def tone(freq: float, rate: int, seconds: float, channels: int = 1) -> np.ndarray:
    """``(N, channels)`` float32 sines at ``freq`` (the second channel at half the amplitude)."""
    t = np.arange(round(rate * seconds)) / rate
    x = 0.5 * np.sin(2 * math.pi * freq * t)
    return np.stack([x * (1 - 0.5 * c) for c in range(channels)], axis=1).astype(np.float32)


def peak_hz(x: torch.Tensor, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x.double().numpy() * np.hanning(x.numel())))
    return float(spectrum.argmax()) * rate / x.numel()


CODECS = [  # (suffix, soundfile format, subtype, rate, channels)
    ("flac", "FLAC", "PCM_16", 8000, 1),
    ("flac", "FLAC", "PCM_24", 44100, 2),
    ("ogg", "OGG", "VORBIS", 22050, 2),
    ("opus", "OGG", "OPUS", 48000, 1),
    ("mp3", "MP3", "MPEG_LAYER_III", 16000, 2),
    ("wav", "WAV", "PCM_U8", 11025, 3),
    ("wav", "WAV", "PCM_24", 16000, 2),
    ("wav", "WAV", "PCM_32", 8000, 1),
    ("wav", "WAV", "FLOAT", 32000, 2),
]


@pytest.mark.parametrize("suffix,fmt,subtype,rate,channels", CODECS)
def test_every_codec_reads_to_mono_at_its_rate(tmp_path, suffix, fmt, subtype, rate, channels):
    path = tmp_path / f"a.{suffix}"
    soundfile.write(path, tone(440.0, rate, 1.0, channels), rate, format=fmt, subtype=subtype)
    info = audio_info(path)
    assert (info.rate, info.channels) == (rate, channels)
    samples, got_rate = read_audio(path)
    assert got_rate == rate and samples.dtype == torch.float32 and samples.dim() == 1
    assert abs(samples.numel() - rate) <= rate // 20  # lossy codecs may pad a little
    assert abs(peak_hz(samples, rate) - 440.0) <= 3.0
    expected = 0.5 * (1 + sum(1 - 0.5 * c for c in range(1, channels))) / channels
    middle = samples[rate // 10 : -rate // 10]
    assert abs(float(middle.abs().max()) - expected) < 0.05  # the channels' mean


def test_wav_segments_read_only_their_part(tmp_path):
    path = tmp_path / "long.wav"
    samples = np.random.default_rng(0).uniform(-0.5, 0.5, (16000 * 3, 2)).astype(np.float32)
    soundfile.write(path, samples, 16000, subtype="PCM_16")
    whole, _ = read_audio(path)
    part, rate = read_audio(path, start=1.0, end=1.5)
    assert rate == 16000 and torch.equal(part, whole[16000:24000])
    rest, _ = read_audio(path, start=2.5)
    assert torch.equal(rest, whole[40000:])


@pytest.mark.parametrize("suffix,fmt", [("flac", "FLAC"), ("mp3", "MP3")])
def test_compressed_segments(tmp_path, suffix, fmt):
    path = tmp_path / f"long.{suffix}"
    soundfile.write(path, tone(300.0, 16000, 3.0), 16000, format=fmt)
    whole, _ = read_audio(path)
    part, _ = read_audio(path, start=1.0, end=2.0)
    assert part.numel() == 16000
    if suffix == "flac":  # lossless: exactly the samples of the whole file
        assert torch.equal(part, whole[16000:32000])


def test_segments_past_the_end_are_refused_and_a_small_overshoot_is_cut(tmp_path):
    path = tmp_path / "r.wav"
    soundfile.write(path, tone(300.0, 8000, 2.0), 8000, subtype="PCM_16")
    cut, _ = read_audio(path, start=1.5, end=2.0 + OVERSHOOT_S / 2)
    assert cut.numel() == 4000
    with pytest.raises(
        DataError,
        match=r"r.wav: segment 1.5 s to 7 s is past the end of its "
        r"recording \(2.000 s\)",
    ):
        read_audio(path, start=1.5, end=7.0)
    with pytest.raises(DataError, match="r.wav: segment 2.5 s to the end is past the end"):
        read_audio(path, start=2.5)
    with pytest.raises(DataError, match=r"expected 0 <= start < end, got start 1 s, end 0.5 s"):
        read_audio(path, start=1.0, end=0.5)


def test_unreadable_codec_names_the_file(tmp_path):
    path = tmp_path / "noise.mp3"
    path.write_bytes(bytes(range(256)) * 40)
    for read in (audio_info, read_audio):
        with pytest.raises(
            DataError,
            match=r"noise.mp3: cannot decode \(.*\); expected WAV, "
            r"FLAC, OGG \(Vorbis, Opus\) or MP3 audio",
        ):
            read(path)


def test_wav_only_refuses_other_codecs(tmp_path):
    path = tmp_path / "a.flac"
    soundfile.write(path, tone(300.0, 8000, 0.5), 8000, format="FLAC")
    with pytest.raises(DataError, match=r"a.flac: not a RIFF/WAVE file; expected WAV audio"):
        read_wav(path)


def wav_header(rate: int, channels: int = 1, bits: int = 16, fmt_size: int = 16) -> bytes:
    align = channels * bits // 8
    fmt = struct.pack("<HHIIHH", 1, channels, rate, (rate * align) % 2**32, align, bits)
    fmt += bytes(fmt_size - 16)
    data = bytes(400)
    body = (
        b"WAVE"
        + b"fmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"data"
        + struct.pack("<I", len(data))
        + data
    )
    return b"RIFF" + struct.pack("<I", len(body)) + body


@pytest.mark.parametrize("rate, shown", [(0, "0"), (4_294_967_291, "4,294,967,291")])
def test_a_sample_rate_of_zero_or_billions_is_refused(tmp_path, rate, shown):
    path = tmp_path / "bad.wav"
    path.write_bytes(wav_header(rate))
    for read in (audio_info, read_audio):
        with pytest.raises(
            DataError,
            match=rf"bad.wav: bad 'fmt ' chunk: expected at least 1 "
            rf"channel and a sample rate of 1 to 768,000 Hz, "
            rf"got 1 channels, {shown} Hz",
        ):
            read(path)


def test_an_oversized_fmt_chunk_is_refused(tmp_path):
    path = tmp_path / "big.wav"
    path.write_bytes(wav_header(8000, fmt_size=(1 << 16) + 2))
    with pytest.raises(
        DataError,
        match=r"big.wav: 'fmt ' chunk of 65538 bytes, expected at "
        r"most 65536",
    ):
        audio_info(path)


@pytest.mark.parametrize("codec", ["wav", "flac"])
def test_non_finite_samples_are_refused(tmp_path, codec):
    samples = tone(300.0, 8000, 0.5, 2)
    samples[100, 1] = np.nan
    samples[200, 0] = np.inf
    path = tmp_path / f"bad.{codec}"
    if codec == "wav":
        soundfile.write(path, samples, 8000, subtype="FLOAT")
    else:  # FLAC holds integers: the decoder cannot give NaN; a float WAV in disguise can
        soundfile.write(path, samples, 8000, format="WAV", subtype="DOUBLE")
    with pytest.raises(
        DataError,
        match=rf"bad.{codec}: 2 samples are NaN or infinite \(the "
        r"first at frame 100\); expected finite samples",
    ):
        read_audio(path)


@pytest.mark.parametrize("codec", ["wav", "flac"])
def test_samples_far_beyond_full_scale_are_refused(tmp_path, codec):
    # 1e30 is finite, so it passed the finite check and overflowed in the features: an empty
    # transcript greedy, an unrelated error at beam 5
    samples = tone(300.0, 8000, 0.5, 2)
    samples[50, 0] = 1e30
    samples[60, 1] = -2e30
    path = tmp_path / f"loud.{codec}"
    soundfile.write(path, samples, 8000, format="WAV", subtype="FLOAT")
    with pytest.raises(
        DataError,
        match=rf"loud.{codec}: 2 samples have a magnitude above "
        r"1000 \(the largest -2e\+30 at frame 60\); expected "
        r"samples nominally within \[-1, 1\]",
    ):
        read_audio(path)
    samples[50, 0], samples[60, 1] = 999.0, -1.5  # loud, but within the bound: read
    soundfile.write(path, samples, 8000, format="WAV", subtype="FLOAT")
    assert 499 < read_audio(path)[0].abs().max() < 500  # channels averaged


@pytest.mark.parametrize("head", [b"", b"ID3"])
def test_garbage_is_not_called_a_pipe(tmp_path, head):
    # libsndfile says "File does not exist or is not a regular file (possibly a pipe?)" of
    # random bytes; attnkit has checked that the file is a regular one before
    path = tmp_path / "noise.mp3"
    path.write_bytes(head + np.random.default_rng(0).bytes(100_000))
    with pytest.raises(DataError) as exc:
        read_audio(path)
    assert str(exc.value) == (
        f"{path}: cannot decode (no audio format libsndfile reads "
        "starts it); expected WAV, FLAC, OGG (Vorbis, Opus) or MP3 audio"
    )


def test_the_length_limit_is_checked_from_the_header(tmp_path):
    path = tmp_path / "long.flac"
    soundfile.write(path, tone(300.0, 8000, 3.0), 8000, format="FLAC")
    with pytest.raises(DataError, match=r"long.flac: 3.0 s of audio, more than max_seconds=2"):
        read_audio(path, max_seconds=2)
    assert read_audio(path, start=1.0, end=2.5, max_seconds=2)[0].numel() == 12000


@pytest.mark.parametrize(
    "orig,new",
    [
        (22050, 16000),
        (8000, 16000),
        (44100, 16000),
        (48000, 16000),
        (11025, 16000),
        (16001, 16000),
        (32000, 16000),
    ],
)
def test_resampled_length_is_what_soxr_gives(orig, new):
    for n in [2, 3, 5, 100, 441, 16000, 22050, 22051, 12345, 99991]:
        x = np.zeros(n, dtype=np.float32)
        assert resampled_length(n, orig, new) == len(soxr.resample(x, orig, new, "HQ"))
        assert resample(torch.from_numpy(x), orig, new).numel() == resampled_length(n, orig, new)
