"""Speech corpora as they come (Kaldi/ESPnet, LibriSpeech, JSON lines, Common Voice, attnkit's
manifest): each reads to the same utterances as the equivalent attnkit manifest, and its bad
input is named by file and line or utterance id."""

import bz2
import gzip
import json
import logging
import re

import numpy as np
import pytest
import soundfile
import torch

from attnkit.data import DataError
from attnkit.data.corpora.reading import choose_format
from attnkit.data.corpora.speech_formats import (
    read_commonvoice,
    read_hf_speech,
    read_jsonl,
    read_kaldi,
    read_librispeech,
)
from attnkit.data.corpora.utterances import normalize_transcript, read_manifest

# (utterance id, transcript as a foreign corpus writes it, as normalised)
UTTERANCES = [
    ("19-198-0001", "HELLO WORLD", "hello world"),
    ("19-198-0002", "It's 42 o'clock.", "it's forty two o'clock"),
    ("19-198-0003", "Good-bye, \u201cfriend\u201d!", "good bye friend"),
    ("26-495-0000", "THE END", "the end"),
]


def tone(i: int, rate: int, channels: int = 1) -> np.ndarray:
    """``(N, channels)`` float32: utterance ``i``'s sine (its own pitch and length)."""
    t = np.arange(round(rate * (0.25 + 0.05 * i))) / rate
    x = 0.3 * np.sin(2 * np.pi * (220 + 110 * i) * t)
    return np.stack([x * (1 - 0.3 * c) for c in range(channels)], axis=1).astype(np.float32)


def manifest(path, rows):
    """attnkit's manifest of ``(audio path relative to it, transcript)`` rows."""
    path.write_text("".join(f"{a}\t{t}\n" for a, t in rows), encoding="utf-8")
    return path


def same(a, b):
    """The two sets hold the same utterances: features (bit for bit) and transcripts."""
    assert len(a) == len(b) and list(a.transcripts) == list(b.transcripts)
    assert a.frames == b.frames
    for x, y in zip(a.features, b.features):
        assert torch.equal(x, y)


def librispeech(root):
    """A LibriSpeech-like folder of FLAC files at 8 kHz, and its native manifest."""
    rows = []
    for i, (utt, text, norm) in enumerate(UTTERANCES):
        speaker, chapter, _ = utt.split("-")
        folder = root / "train-clean" / speaker / chapter
        folder.mkdir(parents=True, exist_ok=True)
        soundfile.write(folder / f"{utt}.flac", tone(i, 8000), 8000, format="FLAC")
        with (folder / f"{speaker}-{chapter}.trans.txt").open("a", encoding="utf-8") as f:
            f.write(f"{utt} {text}\n")
        rows.append((f"train-clean/{speaker}/{chapter}/{utt}.flac", norm))
    return root / "train-clean", manifest(root / "native.tsv", rows)


def kaldi(root, *, bom=True):
    """A Kaldi data directory cutting the utterances out of two WAV recordings (``segments``,
    CRLF and a byte-order mark in ``text``), and the native manifest of the same cuts."""
    data = root / "data" / "train"
    data.mkdir(parents=True)
    (root / "wav").mkdir()
    rows, segments, wav_scp = [], [], []
    for r, members in enumerate([[0, 1], [2, 3]]):
        gap = np.zeros((1600, 1), np.float32)
        pieces, starts, pos = [], [], 1600
        for i in members:
            starts.append(pos)
            pieces += [gap, tone(i, 16000)]
            pos += 1600 + len(tone(i, 16000))
        recording = np.concatenate(pieces + [gap])
        soundfile.write(root / "wav" / f"rec{r}.wav", recording, 16000, subtype="PCM_16")
        wav_scp.append(f"rec{r} wav/rec{r}.wav\n")
        for i, start in zip(members, starts):
            stop = start + len(tone(i, 16000))
            segments.append(f"{UTTERANCES[i][0]} rec{r} {start / 16000:.4f} {stop / 16000:.4f}\n")
            cut = root / "cuts" / f"{i}.wav"
            cut.parent.mkdir(exist_ok=True)
            soundfile.write(cut, recording[start:stop], 16000, subtype="PCM_16")
            rows.append((f"cuts/{i}.wav", UTTERANCES[i][2]))
    text = "".join(f"{u} {t}\r\n" for u, t, _ in UTTERANCES)
    (data / "text").write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    (data / "wav.scp").write_text("".join(wav_scp))
    (data / "segments").write_text("".join(segments))
    (data / "utt2spk").write_text("".join(f"{u} {u[:2]}\n" for u, _, _ in UTTERANCES))
    return data, manifest(root / "native.tsv", rows)


def commonvoice(root):
    """A Common Voice TSV of stereo MP3 clips at 16 kHz, and its native manifest."""
    (root / "clips").mkdir()
    lines, rows = ["client_id\tpath\tsentence\tup_votes\n"], []
    for i, (_, text, norm) in enumerate(UTTERANCES):
        name = f"common_voice_en_{i}.mp3"
        soundfile.write(root / "clips" / name, tone(i, 16000, 2), 16000, format="MP3")
        lines.append(f"c{i}\t{name}\t{text}\t2\n")
        rows.append((f"clips/{name}", norm))
    (root / "train.tsv").write_text("".join(lines), encoding="utf-8")
    return root / "train.tsv", manifest(root / "native.tsv", rows)


def hf_dataset(root):
    """A Hugging Face dataset saved with save_to_disk: FLAC files' bytes at 16 kHz in a
    datasets.Audio column, a transcript column named ``sentence``; and its native
    manifest."""
    datasets = pytest.importorskip("datasets", reason="pip install -e '.[hf]'")
    (root / "flac").mkdir()
    audio, rows = [], []
    for i, (_, _, norm) in enumerate(UTTERANCES):
        soundfile.write(root / "flac" / f"{i}.flac", tone(i, 16000), 16000, format="FLAC")
        rows.append((f"flac/{i}.flac", norm))
        audio.append({"bytes": (root / "flac" / f"{i}.flac").read_bytes(), "path": f"{i}.flac"})
    columns = {"audio": audio, "sentence": [text for _, text, _ in UTTERANCES]}
    stored = datasets.Features(
        {
            "audio": {"bytes": datasets.Value("binary"), "path": datasets.Value("string")},
            "sentence": datasets.Value("string"),
        }
    )
    # the Audio type set on the stored column (encoding through it needs torchcodec)
    dataset = datasets.Dataset.from_dict(columns, features=stored).cast_column(
        "audio", datasets.Audio(decode=False)
    )
    saved = root / "speech"
    datasets.DatasetDict({"train": dataset}).save_to_disk(str(saved))
    return f"hf:{saved}:train", manifest(root / "native.tsv", rows)


def jsonl(root):
    """A gzipped NeMo manifest: whole OGG files, and one utterance as an offset into a
    longer WAV; and its native manifest (that part cut out)."""
    (root / "audio").mkdir()
    entries, rows = [], []
    for i, (_, text, norm) in enumerate(UTTERANCES[:3]):
        soundfile.write(root / "audio" / f"{i}.ogg", tone(i, 22050), 22050, format="OGG")
        entries.append(
            {
                "audio_filepath": f"audio/{i}.ogg",
                "text": text,
                "duration": len(tone(i, 22050)) / 22050,
            }
        )
        rows.append((f"audio/{i}.ogg", norm))
    long = np.concatenate([np.zeros((8000, 1), np.float32), tone(3, 16000)])
    soundfile.write(root / "audio" / "long.wav", long, 16000, subtype="PCM_16")
    soundfile.write(root / "audio" / "cut.wav", long[8000:], 16000, subtype="PCM_16")
    entries.append(
        {
            "audio_filepath": "audio/long.wav",
            "text": UTTERANCES[3][1],
            "offset": 0.5,
            "duration": len(tone(3, 16000)) / 16000,
        }
    )
    rows.append(("audio/cut.wav", UTTERANCES[3][2]))
    with gzip.open(root / "train.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps(e) + "\n" for e in entries))
    return root / "train.jsonl.gz", manifest(root / "native.tsv", rows)


CORPORA = {
    "librispeech": (librispeech, read_librispeech),
    "kaldi": (kaldi, read_kaldi),
    "commonvoice": (commonvoice, read_commonvoice),
    "jsonl": (jsonl, read_jsonl),
    "hf": (hf_dataset, read_hf_speech),
}
OPTIONS = {"hf": {"columns": "text=sentence"}}  # what a format's corpus needs besides


@pytest.mark.parametrize("name", list(CORPORA))
def test_each_format_reads_the_utterances_of_its_native_manifest(tmp_path, name, caplog):
    make, read = CORPORA[name]
    corpus, native = make(tmp_path)
    options = OPTIONS.get(name, {})
    got = read(corpus, normalize=True, **options)
    same(got, read_manifest(native, normalize=True))
    with caplog.at_level(logging.INFO, logger="attnkit"):
        fmt = choose_format("asr", corpus)
    assert fmt.name == name and f"read as {name}" in caplog.text
    with caplog.at_level(logging.INFO, logger="attnkit"):
        assert choose_format("asr", corpus, name) is fmt
    assert f"{corpus}: read as {name}, as --format says" in caplog.text
    assert choose_format("asr", native).name == "manifest"
    same(fmt.read(corpus, **options), read_manifest(native))


def test_kaldi_origins_name_the_utterance_its_recording_part_and_speaker(tmp_path):
    data, _ = kaldi(tmp_path)
    origin = read_kaldi(data).origins[0]
    assert re.fullmatch(r"19-198-0001 \(.*wav/rec0.wav 0.1-0.35 s, speaker 19\)", origin)


def test_kaldi_without_segments_reads_whole_files_named_by_utterance(tmp_path):
    _, native = librispeech(tmp_path)
    data = tmp_path / "data" / "dev"
    data.mkdir(parents=True)
    (data / "text").write_text("".join(f"{u} {t}\n" for u, t, _ in UTTERANCES))
    (data / "wav.scp").write_text(
        "".join(
            f"{u} train-clean/{u.split('-')[0]}/{u.split('-')[1]}/{u}.flac\n"
            for u, _, _ in UTTERANCES
        )
    )
    same(read_kaldi(data), read_manifest(native))


def test_transcripts_are_kept_on_request_and_the_manifest_can_normalise(tmp_path):
    corpus, native = librispeech(tmp_path)
    assert list(read_librispeech(corpus, transcripts="keep").transcripts) == [
        t for _, t, _ in UTTERANCES
    ]
    foreign = manifest(
        tmp_path / "foreign.tsv",
        [(f"train-clean/19/198/{u}.flac", t) for u, t, _ in UTTERANCES[:3]],
    )
    assert list(read_manifest(foreign, transcripts="normalize").transcripts) == [
        n for _, _, n in UTTERANCES[:3]
    ]


def test_normalisation_is_stated_and_letters_outside_the_alphabet_are_counted(tmp_path, caplog):
    assert (
        normalize_transcript("Ça\u0301 VA? 3rd\tTIME\u2014\u2019tis") == "çá va three rd time tis"
    )
    assert normalize_transcript("e\u0301") == "\u00e9"  # NFC
    corpus, _ = commonvoice(tmp_path)
    text = corpus.read_text(encoding="utf-8").replace("THE END", "Caf\u00e9 au lait")
    corpus.write_text(text, encoding="utf-8")
    with pytest.raises(
        DataError,
        match=r"train.tsv: 1 of 4 utterances are unusable \(1 "
        r"transcript\), more than max_unusable=0.01 allows "
        r"\(--max-unusable\): "
        r".*train.tsv:5: transcript 'café au lait' has "
        r"characters outside the alphabet: 'é'",
    ):
        read_commonvoice(corpus)
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        kept = read_commonvoice(corpus, max_unusable=0.25)
    assert len(kept) == 3 and "dropped 1 of 4 utterances as unusable (1 transcript)" in caplog.text
    assert read_commonvoice(corpus, alphabet=SPEECH_LETTERS + "é").transcripts[3] == "café au lait"
    assert read_commonvoice(corpus, alphabet="any").transcripts[3] == "café au lait"


SPEECH_LETTERS = "abcdefghijklmnopqrstuvwxyz' "


def test_compressed_manifests_and_byte_order_marks(tmp_path):
    corpus, native = librispeech(tmp_path)
    raw = native.read_bytes()
    packed = tmp_path / "native.tsv.bz2"
    crlf = raw.replace(b"\n", b"\r\n")
    packed.write_bytes(bz2.compress(b"\xef\xbb\xbfwav\ttranscript\r\n" + crlf))
    same(read_manifest(packed), read_manifest(native))
    assert choose_format("asr", packed).name == "manifest"


# ---- bad input: every message names the file and line, or the utterance id ----------------


def test_kaldi_text_without_audio_and_audio_without_text(tmp_path, caplog):
    data, _ = kaldi(tmp_path)
    text = (data / "text").read_text(encoding="utf-8-sig")
    (data / "text").write_text(text + "lost-0001 NO AUDIO\n", encoding="utf-8")
    (data / "segments").write_text((data / "segments").read_text() + "spare rec1 0.1 0.3\n")
    (data / "wav.scp").write_text((data / "wav.scp").read_text() + "rec9 wav/rec0.wav\n")
    with pytest.raises(
        DataError,
        match=r"1 of 5 utterances are unusable \(1 no audio entry\)"
        r".*text:5 \(lost-0001\): no entry in .*segments",
    ):
        read_kaldi(data)
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        assert len(read_kaldi(data, max_unusable=0.2)) == 4
    assert (
        "segments: 1 segments entries have no transcript in text and are not used "
        "(the first: spare)" in caplog.text
    )
    assert (
        "wav.scp: 1 recordings have no transcript in text and are not used (the first: "
        "rec9)" in caplog.text
    )
    (data / "segments").unlink()
    with pytest.raises(
        DataError,
        match=r"text:1 \(19-198-0001\): recording '19-198-0001' has "
        r"no entry in .*wav.scp",
    ):
        read_kaldi(data)


def test_kaldi_segment_past_the_end_of_its_recording(tmp_path):
    data, _ = kaldi(tmp_path)
    segments = (data / "segments").read_text().splitlines()
    segments[1] = "19-198-0002 rec0 0.4 9.0"
    (data / "segments").write_text("\n".join(segments) + "\n")
    with pytest.raises(
        DataError,
        match=r"text:2 \(19-198-0002\): .*rec0.wav: segment 0.4 s to "
        r"9 s is past the end of its recording \(0.8[0-9]* s\)",
    ):
        read_kaldi(data)
    segments[1] = "19-198-0002 rec0 0.4"
    (data / "segments").write_text("\n".join(segments) + "\n")
    with pytest.raises(DataError, match=r"segments:2: expected 'utt-id recording-id start end'"):
        read_kaldi(data)


def test_kaldi_commands_and_archives_are_refused_with_how_to_convert(tmp_path):
    data, _ = kaldi(tmp_path)
    (data / "wav.scp").write_text("rec0 sox wav/rec0.flac -t wav - |\nrec1 wav/rec1.wav\n")
    with pytest.raises(
        DataError,
        match=r"wav.scp:1: the recording is a shell command "
        r"\('sox wav/rec0.flac -t wav - \|'\); attnkit runs no "
        r"command named in a data file; convert the recordings "
        r"once, e.g. .*sh -c",
    ):
        read_kaldi(data)
    (data / "wav.scp").write_text("rec0 raw.ark:1234\nrec1 wav/rec1.wav\n")
    with pytest.raises(DataError, match=r"wav.scp:1: 'raw.ark:1234' is a Kaldi archive"):
        read_kaldi(data)
    (data / "wav.scp").write_text("rec0 wav/rec0.wav\nrec0 wav/rec1.wav\n")
    with pytest.raises(DataError, match=r"wav.scp:2: 'rec0' is listed twice \(first at 1\)"):
        read_kaldi(data)
    (data / "wav.scp").unlink()
    with pytest.raises(DataError, match=r"train: not a Kaldi data directory \(no wav.scp\)"):
        read_kaldi(data)


def test_kaldi_absolute_paths_are_read_and_confined_only_inside_the_recipe(tmp_path):
    data, native = kaldi(tmp_path)
    (data / "wav.scp").write_text(
        "".join(f"rec{r} {tmp_path / 'wav' / f'rec{r}.wav'}\n" for r in range(2))
    )
    same(read_kaldi(data), read_manifest(native))
    same(read_kaldi(data, confine=True), read_manifest(native))  # inside the recipe folder
    with pytest.raises(
        DataError,
        match=r"wav.scp:1: '.*rec0.wav' is outside the data folder "
        r".*data/train; leave out --confine",
    ):
        read_kaldi(data, confine=True, audio_folder=data)


def test_librispeech_missing_audio_and_no_transcripts(tmp_path):
    corpus, _ = librispeech(tmp_path)
    (corpus / "19" / "198" / "19-198-0002.flac").unlink()
    with pytest.raises(
        DataError,
        match=r"19-198.trans.txt:2 \(19-198-0002\): .*"
        r"19-198-0002.flac: cannot read \(no such file\)",
    ):
        read_librispeech(corpus)
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        DataError,
        match=r"empty: not a LibriSpeech folder \(no \*.trans.txt "
        r"below it\)",
    ):
        read_librispeech(tmp_path / "empty")


def test_librispeech_refuses_an_utterance_id_listed_twice(tmp_path):
    # the second was read silently: one utterance trained on twice, or under two transcripts
    corpus, _ = librispeech(tmp_path)
    trans = corpus / "19" / "198" / "19-198.trans.txt"
    with trans.open("a", encoding="utf-8") as f:
        f.write("19-198-0001 ANOTHER TRANSCRIPT\n")
    with pytest.raises(
        DataError,
        match=r"19-198.trans.txt:4: '19-198-0001' is listed twice "
        r"\(first at .*19-198.trans.txt:1\); expected one "
        r"entry per id",
    ):
        read_librispeech(corpus)


def test_commonvoice_header_and_unreadable_codec(tmp_path):
    corpus, _ = commonvoice(tmp_path)
    (tmp_path / "clips" / "common_voice_en_1.mp3").write_bytes(bytes(range(256)) * 8)
    with pytest.raises(
        DataError,
        match=r"train.tsv:3: .*common_voice_en_1.mp3: cannot decode "
        r"\(.*\); expected WAV, FLAC, OGG",
    ):
        read_commonvoice(corpus)
    corpus.write_text(
        "client_id\tfile\tsentence\nc0\tcommon_voice_en_0.mp3\thello\n", encoding="utf-8"
    )
    with pytest.raises(
        DataError,
        match=r"train.tsv:1: expected a header line with the columns "
        r"'path' and 'sentence', got \['client_id', 'file', "
        r"'sentence'\]",
    ):
        read_commonvoice(corpus)
    assert list(read_commonvoice(corpus, columns="audio=file").transcripts) == ["hello"]
    with pytest.raises(
        ValueError,
        match=r"--columns: the commonvoice format's fields are "
        r"audio, text, got speaker",
    ):
        read_commonvoice(corpus, columns={"speaker": "client_id"})
    with pytest.raises(ValueError, match=r"--columns: expected FIELD=NAME,... "):
        read_commonvoice(corpus, columns="file")


def _refused_jsonl(tmp_path, lines):
    """``bad.jsonl`` of ``lines``, and the message ``read_jsonl`` refuses it with."""
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as exc:
        read_jsonl(path)
    return path, str(exc.value)


def test_jsonl_lines_without_the_text_key_and_a_sample_rate_of_zero(tmp_path):
    corpus, _ = jsonl(tmp_path)
    lines = gzip.decompress(corpus.read_bytes()).decode().splitlines()
    lines[1] = json.dumps({"audio_filepath": "audio/1.ogg", "duration": 0.3})
    lines.append("not json")
    zero = tmp_path / "audio" / "zero.wav"
    fmt = (
        (1).to_bytes(2, "little") * 2
        + bytes(8)
        + (2).to_bytes(2, "little")
        + (16).to_bytes(2, "little")
    )  # PCM, 1 channel, 0 Hz, 0 bytes/s, 2-byte frames, 16 bits
    body = (
        b"WAVEfmt "
        + (16).to_bytes(4, "little")
        + fmt
        + b"data"
        + (400).to_bytes(4, "little")
        + bytes(400)
    )
    zero.write_bytes(b"RIFF" + len(body).to_bytes(4, "little") + body)
    lines.append(json.dumps({"audio_filepath": "audio/zero.wav", "text": "zero"}))
    path, message = _refused_jsonl(tmp_path, lines)
    assert "bad.jsonl: 3 of 6 utterances are unusable (2 line, 1 audio)" in message
    assert "bad.jsonl:2: no 'text' key (keys: audio_filepath, duration)" in message
    assert "bad.jsonl:5: not JSON (Expecting value at column 1)" in message
    assert re.search(
        r"bad.jsonl:6: .*zero.wav: bad 'fmt ' chunk: expected at least 1 channel "
        r"and a sample rate of 1 to 768,000 Hz, got 1 channels, 0 Hz",
        message,
    )
    renamed = tmp_path / "renamed.jsonl"
    renamed.write_text(json.dumps({"wav": "audio/0.ogg", "words": "HELLO"}) + "\n")
    assert list(read_jsonl(renamed, columns="audio=wav,text=words").transcripts) == ["hello"]


def test_jsonl_lines_nested_deep_or_with_bad_numbers_are_counted_by_their_line(tmp_path):
    # a line nested 100,000 deep ended in a RecursionError; a 5000-digit number, a NaN offset
    # and a NUL in the path stopped the reading with no file or line named, whatever
    # max_unusable said
    corpus, _ = jsonl(tmp_path)
    lines = gzip.decompress(corpus.read_bytes()).decode().splitlines()
    lines += [
        "[" * 100_000 + "]" * 100_000,
        '{"audio_filepath": "audio/0.ogg", "text": "hi", "duration": ' + "9" * 5000 + "}",
        json.dumps(
            {"audio_filepath": "audio/0.ogg", "text": "hi", "offset": float("nan"), "duration": 1.0}
        ),
        json.dumps({"audio_filepath": "audio/0\x00.ogg", "text": "hi"}),
    ]
    path, message = _refused_jsonl(tmp_path, lines)
    assert "bad.jsonl: 4 of 8 utterances are unusable (4 line)" in message
    assert "bad.jsonl:5: JSON nested deeper than Python reads (about 1,000 levels)" in message
    assert "bad.jsonl:6: not valid JSON (Exceeds the limit (4300 digits)" in message
    assert (
        "bad.jsonl:7: expected finite numbers under 'offset' and 'duration' (seconds) "
        "with offset >= 0, got nan and 1.0" in message
    )
    assert "bad.jsonl:8: a NUL character in 'audio_filepath'" in message
    kept = read_jsonl(path, max_unusable=0.6)  # counted as unusable, the rest read
    assert len(kept) == 4


def test_manifest_unusable_share_lists_the_first_few(tmp_path, caplog):
    corpus, native = librispeech(tmp_path)
    lines = native.read_text().splitlines()
    bad = lines + [f"gone{i}.flac\tgone" for i in range(7)] + ["no tab"]
    big = tmp_path / "big.tsv"
    big.write_text("\n".join(bad) + "\n")
    with pytest.raises(DataError) as exc:
        read_manifest(big, max_unusable=0.5)
    message = str(exc.value)
    assert message.startswith(
        f"{big}: 8 of 12 utterances are unusable (7 audio, 1 line), more "
        "than max_unusable=0.5 allows (--max-unusable): "
    )
    assert f"{big}:5: {tmp_path / 'gone0.flac'}: cannot read (no such file)" in message
    assert message.endswith("; ...") and message.count("gone") == 5
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        assert len(read_manifest(big, max_unusable=0.7)) == 4
    assert f"{big}: dropped 8 of 12 utterances as unusable (7 audio, 1 line)" in caplog.text
    with pytest.raises(ValueError, match=r"max_unusable: expected a share from 0 to 1, got 2"):
        read_manifest(big, max_unusable=2)


def test_detection_says_when_nothing_matches(tmp_path):
    (tmp_path / "notes.txt").write_text("just words\n")
    with pytest.raises(
        DataError,
        match=r"notes.txt: not a corpus of task asr in any format "
        r"attnkit reads \(an4, hf, kaldi, librispeech, jsonl, "
        r"commonvoice, manifest, mini-librispeech\); name one with --format",
    ):
        choose_format("asr", tmp_path / "notes.txt")
    with pytest.raises(
        ValueError,
        match=r"--format: expected one of an4, hf, kaldi, librispeech, "
        r"jsonl, commonvoice, manifest, mini-librispeech for asr, got 'coco'",
    ):
        choose_format("asr", tmp_path, "coco")


def test_corpora_to_decode_need_no_transcripts(tmp_path):
    # a Kaldi directory without text (segments cut as with it), a JSON-lines manifest without
    # text keys: the same audio, empty transcripts; training and eval still need them
    data, _ = kaldi(tmp_path / "k")
    with_text = read_kaldi(data)
    (data / "text").unlink()
    without = read_kaldi(data, references=False)
    assert list(without.transcripts) == [""] * len(with_text) and without.frames == with_text.frames
    assert all(torch.equal(x, y) for x, y in zip(without.features, with_text.features))
    with pytest.raises(DataError, match=r"not a Kaldi data directory \(no text\)"):
        read_kaldi(data)
    corpus, _ = jsonl(tmp_path)
    lines = gzip.decompress(corpus.read_bytes()).decode().splitlines()
    bare = tmp_path / "bare.jsonl"
    bare.write_text(
        "".join(
            json.dumps({k: v for k, v in json.loads(line).items() if k != "text"}) + "\n"
            for line in lines
        )
    )
    assert list(read_jsonl(bare, references=False).transcripts) == [""] * len(lines)
    with pytest.raises(DataError, match=r"no usable utterances: .*bare.jsonl:1: no 'text' key"):
        read_jsonl(bare)
