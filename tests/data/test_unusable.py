"""attnkit's own TSV formats under --max-unusable: bad lines and missing images dropped and
counted as every corpus format drops them, instead of stopping at the first."""

import logging

import numpy as np
import pytest
from PIL import Image

from attnkit.data import DataError
from attnkit.data.corpora.reading import read_corpus


def _pairs(tmp_path):
    f = tmp_path / "pairs.tsv"
    lines = [f"s{i}\tt{i}" for i in range(8)]
    lines[2], lines[5] = "no tab here", "a\tb\tc"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return f


def test_pairs_stop_at_the_first_bad_line_unless_a_share_is_given(tmp_path, caplog):
    f = _pairs(tmp_path)
    with pytest.raises(DataError, match=r"pairs.tsv:3: expected source<TAB>target, found 0 tabs"):
        read_corpus("translate", f)
    with caplog.at_level(logging.WARNING, "attnkit"):
        pairs = read_corpus("translate", f, max_unusable=0.25)
    assert [pairs[i] for i in range(len(pairs))] == [(f"s{i}", f"t{i}") for i in (0, 1, 3, 4, 6, 7)]
    assert (
        f"{f}: dropped 2 of 8 pairs as unusable (2 bad lines): {f}:3: expected "
        "source<TAB>target, found 0 tabs; " in caplog.text
    )
    with pytest.raises(
        DataError,
        match=rf"pairs.tsv: 2 of 8 pairs are unusable \(2 bad lines\), "
        rf"more than max_unusable=0.1 allows \(--max-unusable\): {f}:3: .*; "
        rf"{f}:6: expected source<TAB>target, found 2 tabs$",
    ):
        read_corpus("translate", f, max_unusable=0.1)


def _image(path):
    Image.fromarray(np.full((32, 60), 255, np.uint8)).save(path)


def test_lines_and_captions_drop_rows_whose_image_is_missing(tmp_path):
    lines = tmp_path / "lines"
    lines.mkdir()
    for i in (0, 1, 3):
        _image(lines / f"{i}.png")
    (lines / "labels.tsv").write_text(
        "".join(f"{i}.png\tline {i}\n" for i in range(4)) + "bad line\n"
    )
    with pytest.raises(DataError, match=r"labels.tsv:5: expected filename<TAB>text, found 0 tabs"):
        read_corpus("ocr", lines)
    folder = read_corpus("ocr", lines, max_unusable=0.5)
    assert folder.texts == ["line 0", "line 1", "line 3"]
    with pytest.raises(DataError, match=r"2 of 5 lines are unusable \(1 bad lines, 1 images\)"):
        read_corpus("ocr", lines, max_unusable=0.2)

    captions = tmp_path / "captions"
    captions.mkdir()
    _image(captions / "a.png")
    (captions / "captions.tsv").write_text("a.png\tone\nb.png\ttwo\na.png\tthree\nb.png\tfour\n")
    read = read_corpus("caption", captions, size=16, max_unusable=0.5)
    assert [(c.captions, c.origin) for c in read] == [(("one", "three"), str(captions / "a.png"))]
    with pytest.raises(
        DataError,
        match=r"captions.tsv: 2 of 4 captions are unusable \(2 images\)"
        r", more than max_unusable=0.4 allows .*captions.tsv:2: image 'b.png' not "
        r"found in .*; .*captions.tsv:4: image 'b.png' not found in",
    ):
        read_corpus("caption", captions, size=16, max_unusable=0.4)
    (captions / "questions.tsv").write_text("a.png\tone?\tyes\nb.png\ttwo?\tno\n")
    images, questions = read_corpus("vqa", captions / "questions.tsv", size=16, max_unusable=0.5)
    assert len(images) == 1 and [q.question for q in questions] == ["one?"]
