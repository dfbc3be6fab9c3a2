"""read_tsv on files that used to give silently wrong pairs: headers, NUL, UTF-16, huge lines."""

import logging

import pytest

from attnkit.data import DataError, read_tsv
from attnkit.data.corpora.tsv import MAX_CHARS, read_tsv_rows


def test_a_header_line_is_not_an_example(tmp_path, caplog):
    f = tmp_path / "pairs.tsv"
    f.write_text("source\ttarget\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        with pytest.raises(DataError, match=r"pairs.tsv: no usable source<TAB>target lines"):
            read_tsv(f)
    assert "pairs.tsv:1: 'source\\ttarget' is a header, not an example: skipped" in caplog.text
    f.write_text("Source\tTarget\nun\t1\n", encoding="utf-8")
    assert read_tsv(f) == [("un", "1")]
    f.write_text("un\t1\nsource\ttarget\n", encoding="utf-8")  # only a first line is a header
    assert read_tsv(f) == [("un", "1"), ("source", "target")]
    labels = tmp_path / "labels.tsv"
    labels.write_text("filename\ttext\na.png\thello\n", encoding="utf-8")
    assert read_tsv_rows(labels, columns=("filename", "text")) == [(2, "a.png", "hello")]


def test_nul_characters_never_reach_the_vocabulary(tmp_path):
    f = tmp_path / "pairs.tsv"
    f.write_bytes(b"un\t1\nde\x00ux\t2\n")
    with pytest.raises(DataError, match=r"pairs.tsv:2: NUL character in the source"):
        read_tsv(f)
    assert read_tsv(f, skip_bad_lines=True) == [("un", "1")]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_a_utf16_file_is_refused_even_when_skipping_bad_lines(tmp_path, encoding):
    f = tmp_path / "pairs.tsv"
    f.write_text("un\t1\ndeux\t2\ntrois\t3\n", encoding=encoding)
    with pytest.raises(DataError, match=r"pairs.tsv: looks like UTF-16 text .*save it as UTF-8"):
        read_tsv(f, skip_bad_lines=True)


def test_lines_longer_than_the_limit_are_named(tmp_path):
    f = tmp_path / "pairs.tsv"
    f.write_text(f"un\t1\n{'x' * 100_000}\t2\ndeux\t{'2' * (MAX_CHARS + 1)}\n", encoding="utf-8")
    with pytest.raises(
        DataError,
        match=r"pairs.tsv:2: source of 100000 characters, more than "
        r"the limit of 1000",
    ):
        read_tsv(f)
    assert read_tsv(f, skip_bad_lines=True) == [("un", "1")]
    assert len(read_tsv(f, max_chars=None)) == 3
