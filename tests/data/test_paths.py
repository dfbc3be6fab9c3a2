"""Files named by a data file stay inside the data folder: labels.tsv, manifests, captions."""

import os

import numpy as np
import pytest
from PIL import Image

from attnkit.data import DataError, read_caption_folder, read_line_folder, read_manifest
from attnkit.data.paths import inside


def test_names_inside_the_folder_resolve_and_others_are_refused(tmp_path):
    (tmp_path / "sub").mkdir()
    assert inside(tmp_path, "sub/a.png", "labels.tsv:1") == tmp_path / "sub" / "a.png"
    for name in ("../a.png", "/etc/passwd", "sub/../../a.png"):
        with pytest.raises(DataError, match=r"^labels.tsv:1: .* is outside the data folder"):
            inside(tmp_path, name, "labels.tsv:1")
    os.symlink("/etc", tmp_path / "link")
    with pytest.raises(DataError, match="outside the data folder"):
        inside(tmp_path, "link/passwd", "labels.tsv:1")
    assert inside(tmp_path, "/etc/passwd", "x", anywhere=True) == tmp_path / "/etc/passwd"


def test_every_reader_refuses_an_entry_outside_its_folder_without_reading_it(tmp_path):
    outside = tmp_path / "secret.png"
    Image.fromarray(np.zeros((32, 40), np.uint8), "L").save(outside)
    data = tmp_path / "data"
    data.mkdir()
    (data / "labels.tsv").write_text("../secret.png\thello\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"labels.tsv:1: '../secret.png' is outside"):
        read_line_folder(data, data / "labels.tsv")
    (data / "captions.tsv").write_text("../secret.png\ta caption\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"captions.tsv:1: '../secret.png' is outside"):
        read_caption_folder(data, size=16)
    (data / "manifest.tsv").write_text("/etc/passwd\thello\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"manifest.tsv:1: '/etc/passwd' is outside") as exc:
        read_manifest(data / "manifest.tsv")
    assert "root:" not in str(exc.value)  # nothing of the file is read, nor echoed


def test_a_file_that_is_not_audio_is_named_without_quoting_it(tmp_path):
    from attnkit.data import read_wav

    secret = tmp_path / "notes.wav"
    secret.write_text("password=hunter2\n")
    with pytest.raises(DataError, match=r"notes.wav: not a RIFF/WAVE file") as exc:
        read_wav(secret)
    assert "hunter" not in str(exc.value) and "password" not in str(exc.value)
