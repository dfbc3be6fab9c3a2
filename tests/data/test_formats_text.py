"""Text as every reader opens it (attnkit.data.corpora.text_files): UTF-8 with or without a
byte-order mark, LF or CRLF, gzip / xz / bzip2 known by their first bytes, NFC; what cannot be read
is named file:line."""

import bz2
import gzip
import lzma
import unicodedata

import pytest

from attnkit.data import DataError, read_tsv
from attnkit.data.corpora import text_files as text
from attnkit.data.corpora.text_files import compression, read_text, text_lines

PACK = {"gzip": gzip.compress, "xz": lzma.compress, "bzip2": bz2.compress}


@pytest.mark.parametrize("kind", ["gzip", "xz", "bzip2"])
def test_compressed_files_are_known_by_their_first_bytes_not_their_names(tmp_path, kind):
    raw = "\ufeffun\t1\r\ndeux\t2\r\ntrois\t3".encode()
    named = tmp_path / "pairs.tsv"  # no .gz: the magic number says it
    named.write_bytes(PACK[kind](raw))
    assert compression(named) == kind
    assert list(text_lines(named)) == [(1, "un\t1"), (2, "deux\t2"), (3, "trois\t3")]
    assert read_tsv(named) == [("un", "1"), ("deux", "2"), ("trois", "3")]
    plain = tmp_path / "plain.tsv.gz"  # a .gz name over plain text is read as text
    plain.write_bytes(raw)
    assert compression(plain) is None and read_tsv(plain) == read_tsv(named)


def test_text_starting_like_bzip2_is_text(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("BZh9 is not a compressed stream\n", encoding="utf-8")
    assert compression(f) is None
    assert read_text(f) == "BZh9 is not a compressed stream\n"


def test_bom_crlf_and_a_last_line_without_its_end(tmp_path):
    f = tmp_path / "a.txt"
    f.write_bytes(b"\xef\xbb\xbfone\r\ntwo\r\n\r\nthree")
    assert list(text_lines(f)) == [(1, "one"), (2, "two"), (3, ""), (4, "three")]
    assert read_text(f) == "one\ntwo\n\nthree"
    f.write_bytes(b"")
    assert list(text_lines(f)) == [] and read_text(f) == ""


def test_lines_longer_than_a_block_and_many_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(text, "BLOCK", 7)
    f = tmp_path / "a.txt"
    lines = ["x" * 20, "", "é" * 9, *(str(i) for i in range(50))]
    f.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8")
    assert [t for _, t in text_lines(f)] == lines


def test_text_is_nfc(tmp_path):
    decomposed = "Cafe\u0301 \u212b"  # e + combining acute; the angstrom sign
    f = tmp_path / "a.txt"
    f.write_text(decomposed + "\n", encoding="utf-8")
    composed = unicodedata.normalize("NFC", decomposed)
    assert composed != decomposed
    assert list(text_lines(f)) == [(1, composed)] and read_text(f) == composed + "\n"
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text(f"{decomposed}\tx\n", encoding="utf-8")
    assert read_tsv(tsv) == [(composed, "x")]


def test_an_undecodable_line_is_named_with_its_number(tmp_path):
    f = tmp_path / "a.txt"
    f.write_bytes(gzip.compress(b"one\ntwo\nth\xffree\n"))
    with pytest.raises(DataError, match=r"a.txt:3: not valid UTF-8 \(byte 2\)"):
        list(text_lines(f))
    with pytest.raises(DataError, match=r"a.txt:3: not valid UTF-8 \(byte 10\)"):
        read_text(f)


def test_a_stream_cut_short_is_named_with_the_line_it_stopped_in(tmp_path):
    f = tmp_path / "a.txt.gz"
    f.write_bytes(gzip.compress("".join(f"line {i}\n" for i in range(2000)).encode())[:-30])
    with pytest.raises(DataError, match=r"a.txt.gz:\d+: cannot read \(Compressed file ended"):
        list(text_lines(f))
    with pytest.raises(DataError, match=r"a.txt.gz: cannot read"):
        read_text(f)


@pytest.mark.parametrize(
    "head, what",
    [
        (
            b"\x28\xb5\x2f\xfd\x00\x00",
            r"zstd-compressed; "
            r"decompress it \(zstd -d FILE\)",
        ),
        (b"PK\x03\x04\x00", r"a zip archive; unpack it"),
    ],
)
def test_formats_attnkit_does_not_decompress_say_what_to_do(tmp_path, head, what):
    f = tmp_path / "corpus.de"
    f.write_bytes(head + b"rest")
    with pytest.raises(DataError, match=rf"corpus.de: {what}"):
        list(text_lines(f))


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le"])
def test_utf16_is_refused_compressed_or_not(tmp_path, encoding):
    f = tmp_path / "a.txt"
    f.write_bytes(gzip.compress("one\ntwo\n".encode(encoding)))
    with pytest.raises(DataError, match=r"a.txt: looks like UTF-16 text"):
        list(text_lines(f))
    with pytest.raises(DataError, match=r"a.txt: looks like UTF-16 text"):
        read_text(f)


def test_not_a_file(tmp_path):
    with pytest.raises(DataError, match=r"nothing.txt: cannot read \(no such file\)"):
        list(text_lines(tmp_path / "nothing.txt"))
    with pytest.raises(DataError, match=r"not a regular file \(a folder\)"):
        read_text(tmp_path)


def test_a_line_without_end_is_refused_once_it_passes_the_limit(tmp_path, monkeypatch):
    # a 2 GB file of one line took 1.2 GB of memory and minutes (its pieces joined block by
    # block); the line is named as soon as it is longer than MAX_LINE
    monkeypatch.setattr(text, "BLOCK", 5)
    f = tmp_path / "pairs.tsv"
    f.write_bytes(b"un\t1\n" + b"x" * 64 + b"\t2\nend\t3\n")
    with pytest.raises(
        DataError,
        match=r"pairs.tsv:2: a line of more than 40 bytes; expected "
        r"a text file of shorter lines",
    ):
        list(text.byte_lines(f, max_line=40))
    assert [n for n, _ in text.byte_lines(f, max_line=67)] == [1, 2, 3]
    with pytest.raises(DataError, match=r"pairs.tsv:2: a line of more than 16,777,216 bytes"):
        f.write_bytes(b"un\t1\n" + b"x" * (text.MAX_LINE + 1))
        read_tsv(f)


def test_a_file_of_nul_bytes_is_binary_not_utf16(tmp_path):
    sparse = tmp_path / "sparse.tsv"
    with sparse.open("wb") as f:
        f.truncate(2 << 30)  # 2 GB of NUL bytes, sparse on disk
    for read in (read_tsv, read_text):
        with pytest.raises(
            DataError,
            match=r"sparse.tsv: holds NUL bytes \(1,048,576 in its "
            r"first 1,048,576\): binary data, not UTF-8 text",
        ):
            read(sparse)
    big = tmp_path / "big.txt"
    with big.open("wb") as f:
        f.write(b"x" * text.BLOCK)
        f.truncate(text.MAX_WHOLE + 1)
    with pytest.raises(DataError, match=r"big.txt: more than 1,073,741,824 bytes of text"):
        read_text(big)


def test_a_file_read_whole_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(text, "MAX_WHOLE", 10)
    f = tmp_path / "a.gt.txt"
    f.write_bytes(gzip.compress(b"x" * 11))
    with pytest.raises(DataError, match=r"a.gt.txt: more than 10 bytes of text \(decompressed\)"):
        read_text(f)
    f.write_bytes(gzip.compress(b"x" * 10))
    assert read_text(f) == "x" * 10
