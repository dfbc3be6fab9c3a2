"""CMU's AN4 as distributed (``--format an4``): headerless big-endian ``.raw`` files read in
the byte order their samples say, AN4's transcript lines, ESPnet's splits, and each kind of bad
input counted and named."""

import logging
import re

import numpy as np
import pytest
import soundfile
import torch

from attnkit.data import DataError
from attnkit.data.audio.files import RawPCM, audio_info, guess_byte_order, read_audio
from attnkit.data.corpora import an4_formats
from attnkit.data.corpora.an4_formats import read_an4
from attnkit.data.corpora.reading import choose_format, read_corpus

RATE = 16000
# (utterance id, transcript line's words) of the fixture's training and test sets
TRAIN = [
    ("an251-fash-b", "<s> YES </s>"),
    ("cen1-fash-b", "<s> H I N I C H </s>"),
    ("an11-mbmg-b", "<s> ERASE C Q Q F SEVEN </s>"),
    ("cen3-mbmg-b", "<s> TWENTY ONE </s>"),
    ("an50-fclc-b", "<s> GO </s>"),
]
TEST = [("an406-fcaw-b", "RUBOUT G M E F THREE NINE"), ("an407-fcaw-b", "ONE TWO")]


def voice(i: int, seconds: float = 0.6) -> np.ndarray:
    """``(N,)`` int16: utterance ``i``'s low, smooth tones, as speech is next to noise."""
    t = np.arange(round(RATE * seconds)) / RATE
    x = 0.25 * np.sin(2 * np.pi * (150 + 40 * i) * t) + 0.1 * np.sin(2 * np.pi * 410 * t)
    return np.round(x * 32767).astype(np.int16)


def write_raw(path, samples: np.ndarray, order: str = ">") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(samples.astype(order + "i2").tobytes())


def write_an4(root, *, order: str = ">", train=TRAIN, test=TEST):
    """An AN4 folder in CMU's layout: transcript files, ``.fileids`` and ``.raw`` files in
    ``order`` (``>`` big-endian, as AN4's; ``<`` little)."""
    (root / "etc").mkdir(parents=True)
    for name, folder, rows in (("train", "an4_clstk", train), ("test", "an4test_clstk", test)):
        lines = "".join(f"{words} ({utt})\n" for utt, words in rows)
        (root / "etc" / f"an4_{name}.transcription").write_text(lines)
        ids = "".join(f"{folder}/{utt.split('-')[1]}/{utt}\n" for utt, _ in rows)
        (root / "etc" / f"an4_{name}.fileids").write_text(ids)
        for i, (utt, _) in enumerate(rows):
            write_raw(root / "wav" / folder / utt.split("-")[1] / f"{utt}.raw", voice(i), order)
    return root


def test_reads_each_split_with_the_marks_and_ids_taken_out(tmp_path):
    root = write_an4(tmp_path / "an4")
    train = read_an4(root, split="train")
    assert list(train.transcripts) == [
        "YES",
        "H I N I C H",
        "ERASE C Q Q F SEVEN",
        "TWENTY ONE",
        "GO",
    ]
    assert train.origins[0].startswith("an251-fash-b (") and train.origins[0].endswith(".raw)")
    assert train.frames[0] == 61  # 0.6 s at 10 ms frames
    test = read_corpus("asr", root, role="test")
    assert list(test.transcripts) == ["RUBOUT G M E F THREE NINE", "ONE TWO"]
    lower = read_an4(root, split="test", transcripts="normalize")
    assert list(lower.transcripts) == ["rubout g m e f three nine", "one two"]
    assert choose_format("asr", root).name == "an4"
    assert not an4_formats._is_an4(root / "etc")


def test_the_roles_read_espnets_dev_split_held_out_of_train(tmp_path, monkeypatch):
    root = write_an4(tmp_path / "an4")
    monkeypatch.setattr(an4_formats, "DEV_UTTERANCES", 2)
    dev = read_corpus("asr", root, role="valid")
    nodev = read_corpus("asr", root, role="train")
    # ids speaker first, sorted: fash-an251-b, fash-cen1-b, fclc-an50-b, mbmg-... -> first two
    assert list(dev.transcripts) == ["YES", "H I N I C H"]
    assert list(nodev.transcripts) == ["ERASE C Q Q F SEVEN", "TWENTY ONE", "GO"]
    with pytest.raises(ValueError, match=r"--split: expected one of .* for an4, got 'dev'"):
        read_an4(root, split="dev")


def test_words_keep_the_digit_strings_or_the_numbers_with_oh_written_zero(tmp_path):
    train = [*TRAIN, ("cen6-fclc-b", "<s> ONE FIVE OH FOUR </s>"), ("cen7-fclc-b", "<s> </s>")]
    root = write_an4(tmp_path / "an4", train=train)
    digits = read_an4(root, split="train", words="digits", max_unusable=0.5)
    assert list(digits.transcripts) == ["ONE FIVE ZERO FOUR"]
    assert digits.origins[0].startswith("cen6-fclc-b (")
    numbers = read_an4(
        root, split="train", words="numbers", transcripts="normalize", max_unusable=0.5
    )
    assert list(numbers.transcripts) == ["twenty one", "one five zero four"]
    test = read_corpus("asr", root, role="test", words="digits")
    assert list(test.transcripts) == ["ONE TWO"]  # the spelled letters' line is left out
    assert len(read_an4(root, split="train", max_unusable=0.5)) == 6  # all: OH kept as OH
    assert "ONE FIVE OH FOUR" in read_an4(root, split="train", max_unusable=0.5).transcripts
    with pytest.raises(ValueError, match=r"--words: expected one of all, digits, numbers .*'odd'"):
        read_an4(root, words="odd")


@pytest.mark.parametrize("order", [">", "<"])
def test_the_byte_order_is_found_from_the_samples_and_they_read_back_exactly(tmp_path, order):
    root = write_an4(tmp_path / "an4", order=order)
    utterances = read_an4(root, split="train")
    want = torch.from_numpy(voice(1).astype(np.float32) / 32768)
    assert torch.equal(utterances.features.samples(1), want)
    files = sorted((root / "wav").rglob("*.raw"))
    assert guess_byte_order(files) == (("big", 7, 0) if order == ">" else ("little", 0, 7))
    # told the other order, the samples come out swapped: not the recording
    wrong = "little" if order == ">" else "big"
    assert not torch.equal(
        read_an4(root, split="train", byte_order=wrong).features.samples(1), want
    )


def test_raw_reading_matches_numpy_and_cuts_a_part(tmp_path):
    path = tmp_path / "a.raw"
    write_raw(path, voice(0), ">")
    raw = RawPCM(RATE, "big")
    assert audio_info(path, raw) == (RATE, 9600, 1, "raw PCM_16 big-endian")
    part, rate = read_audio(path, start=0.1, end=0.2, raw=raw)
    assert rate == RATE
    assert torch.equal(part, torch.from_numpy(voice(0)[1600:3200].astype(np.float32) / 32768))


def _bad(root, what):
    """Make one utterance of the fixture's training set unusable, as ``what`` says."""
    fash = root / "wav" / "an4_clstk" / "fash"
    listing = root / "etc" / "an4_train.transcription"
    if what == "odd length":
        (fash / "cen1-fash-b.raw").write_bytes((fash / "cen1-fash-b.raw").read_bytes()[:-1])
    elif what == "no audio":
        (fash / "cen1-fash-b.raw").unlink()
    elif what == "no transcript":
        write_raw(fash / "cen2-fash-b.raw", voice(9))
    elif what == "empty transcript":
        listing.write_text(listing.read_text().replace("<s> H I N I C H </s>", "<s> </s>"))
    elif what == "empty recording":
        (fash / "cen1-fash-b.raw").write_bytes(b"")
    elif what == "sample rate":
        (fash / "cen1-fash-b.raw").unlink()
        soundfile.write(fash / "cen1-fash-b.wav", voice(1)[::2], 8000, subtype="PCM_16")


BAD = {
    "odd length": (r"cen1-fash-b\.raw: 19199 bytes, not a whole number of 2-byte samples", "audio"),
    "no audio": (
        r"\(cen1-fash-b\): no recording cen1-fash-b\.raw \(nor \.sph, \.wav\)",
        "no audio",
    ),
    "no transcript": (
        r"cen2-fash-b\.raw: no line of .*an4_train\.transcription transcribes it",
        "no transcript",
    ),
    "empty transcript": (
        r"an4_train\.transcription:2 \(cen1-fash-b\): empty transcript",
        "transcript",
    ),
    "empty recording": (r"cen1-fash-b\.raw: no samples", "audio"),
    "sample rate": (r"cen1-fash-b\.wav: sample rate 8,000 Hz, expected 16,000 Hz", "sample rate"),
}


@pytest.mark.parametrize("what", list(BAD))
def test_bad_input_is_counted_named_and_stops_past_max_unusable(tmp_path, what, caplog):
    root = write_an4(tmp_path / "an4")
    _bad(root, what)
    message, kind = BAD[what]
    with pytest.raises(
        DataError, match=rf"1 of \d+ utterances are unusable \(1 {kind}\).*{message}"
    ):
        read_an4(root, split="train")
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        kept = read_an4(root, split="train", max_unusable=0.5)
    assert len(kept) == (5 if what == "no transcript" else 4)
    assert re.search(message, caplog.text)


def test_a_line_without_its_id_and_an_id_listed_twice(tmp_path):
    root = write_an4(tmp_path / "an4")
    listing = root / "etc" / "an4_train.transcription"
    text = listing.read_text()
    listing.write_text(text.replace("(an50-fclc-b)", ""))
    with pytest.raises(
        DataError,
        match=r"an4_train\.transcription:5: expected 'WORDS \(UTTERANCE-ID\)', got '<s> GO </s> '",
    ):
        read_an4(root, split="train")
    listing.write_text(text + "<s> NO </s> (an251-fash-b)\n")
    with pytest.raises(
        DataError,
        match=r"an4_train\.transcription:6: 'an251-fash-b' is listed twice \(first at .*:1\)",
    ):
        read_an4(root, split="train")


def test_a_folder_that_is_not_an4_is_named(tmp_path):
    root = write_an4(tmp_path / "an4")
    (root / "etc" / "an4_test.transcription").unlink()
    with pytest.raises(DataError, match=r"not an AN4 folder \(no etc/an4_test\.transcription\)"):
        read_an4(root, split="test")
