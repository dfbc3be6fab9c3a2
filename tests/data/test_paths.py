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


@pytest.fixture
def no_hang():
    """Fail, instead of blocking for ever, a test whose code opens a FIFO."""
    import signal

    def expire(signum, frame):
        raise TimeoutError("blocked on a FIFO")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_fifos_and_devices_are_refused_before_they_are_opened(tmp_path, no_hang, capsys):
    from attnkit.cli.main import main
    from attnkit.data import load_image, read_tsv, read_wav

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for read in (read_wav, read_tsv, lambda p: load_image(p, 16)):
        with pytest.raises(DataError, match=r"pipe: not a regular file \(a FIFO\)"):
            read(fifo)
        with pytest.raises(DataError, match=r"^/dev/zero: not a regular file \(a character "):
            read("/dev/zero")
    with pytest.raises(DataError, match=r"not a regular file \(a folder\)"):
        read_tsv(tmp_path)
    (tmp_path / "labels.tsv").write_text("pipe\thello\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"pipe: not a regular file \(a FIFO\)"):
        read_line_folder(tmp_path, tmp_path / "labels.tsv")
    assert main(["translate", "--checkpoint", "builtin:translate-dates", "--file",
                 str(fifo)]) == 2
    assert "pipe: not a regular file (a FIFO)" in capsys.readouterr().err
    assert main(["train", "lm", "--text", str(fifo), "--vocab-from", "builtin:asr-digits",
                 "--out", str(tmp_path / "lm")]) == 2
    assert "pipe: not a regular file (a FIFO)" in capsys.readouterr().err
