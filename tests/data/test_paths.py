"""Files named by a data file: read wherever the data file names them (relative to its
folder, absolute, outside it), or, with ``confine`` (``--confine``), only inside its folder;
every refusal says why, truly, and names the option. Each corpus format naming its files is
written here in miniature: Kaldi ``wav.scp``, NeMo JSON lines, attnkit's manifest, Common
Voice, ``labels.tsv`` and COCO."""

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile
from PIL import Image

from attnkit.data import DataError, read_caption_folder, read_line_folder, read_manifest
from attnkit.data.corpora.reading import read_corpus
from attnkit.data.paths import inside
from tests.data.test_formats_speech import tone


def _wav(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, tone(1, 16000)[:, 0], 16000)


def _line(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.full((32, 80), 255, np.uint8)
    pixels[8:24, 10:70] = 0
    Image.fromarray(pixels, "L").save(path)


def _picture(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((32, 32, 3), 90, np.uint8), "RGB").save(path)


# format -> (its files, written with the one file's name for {name}, or {json}: quoted as
# JSON; the file read, "": the folder; the data folder below the corpus's folder; make the
# file; where the corpus names it; task; format name; reader options)
COCO = (
    '{{"images": [{{"id": 1, "file_name": {json}}}], '
    '"annotations": [{{"id": 7, "image_id": 1, "caption": "a dog"}}]}}'
)
FORMATS = {
    "kaldi": (
        {"wav.scp": "u1 {name}\n", "text": "u1 one\n"},
        "",
        "",
        _wav,
        "wav.scp:1",
        "asr",
        "kaldi",
        {},
    ),
    "nemo": (
        {"manifest.json": '{{"audio_filepath": {json}, "text": "one", "duration": 0.3}}\n'},
        "manifest.json",
        "",
        _wav,
        "manifest.json:1",
        "asr",
        "jsonl",
        {},
    ),
    "manifest": (
        {"manifest.tsv": "{name}\tone\n"},
        "manifest.tsv",
        "",
        _wav,
        "manifest.tsv:1",
        "asr",
        "manifest",
        {},
    ),
    "commonvoice": (
        {"train.tsv": "client_id\tpath\tsentence\nc1\t{name}\tone\n"},
        "train.tsv",
        "clips",
        _wav,
        "train.tsv:2",
        "asr",
        "commonvoice",
        {},
    ),
    "labels": (
        {"labels.tsv": "{name}\thello\n"},
        "labels.tsv",
        "",
        _line,
        "labels.tsv:1",
        "ocr",
        "labels",
        {},
    ),
    "coco": (
        {"captions.json": COCO},
        "captions.json",
        "",
        _picture,
        "captions.json: image 1",
        "caption",
        "coco",
        {"size": 16},
    ),
}
PLACES = ("relative", "absolute inside", "absolute elsewhere", "../ elsewhere", "a link elsewhere")


def corpus_naming(tmp_path, fmt: str, place: str, *, made: bool = True):
    """The corpus of ``fmt`` in ``tmp_path/data`` naming one file placed as ``place`` (one of
    :data:`PLACES`; the file not made unless ``made``): its path, the name it writes and its
    data folder."""
    files, read, below, make, *_ = FORMATS[fmt]
    data = tmp_path / "data"
    folder = data / below if below else data
    folder.mkdir(parents=True)
    suffix = ".png" if make is not _wav else ".wav"
    mine, elsewhere = folder / "files" / f"a{suffix}", tmp_path / "elsewhere" / f"a{suffix}"
    target = mine if place in ("relative", "absolute inside") else elsewhere
    if made:
        make(target)
    if place == "a link elsewhere":
        mine.parent.mkdir(parents=True)
        mine.symlink_to(elsewhere)
    name = {
        "relative": "files/" + mine.name,
        "a link elsewhere": "files/" + mine.name,
        "absolute inside": str(mine),
        "absolute elsewhere": str(elsewhere),
        "../ elsewhere": os.path.relpath(elsewhere, folder),
    }[place]
    for file, text in files.items():
        (data / file).write_text(text.format(name=name, json=json.dumps(name)))
    return data / read, name, folder


def _read(fmt: str, path, **options) -> int:
    *_, task, name, given = FORMATS[fmt]
    return len(read_corpus(task, path, format=name, **given, **options))


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_each_format_reads_its_file_wherever_it_names_it(tmp_path, fmt, place):
    path, _, _ = corpus_naming(tmp_path, fmt, place)
    assert _read(fmt, path) == 1


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_confined_reads_absolute_names_inside_and_refuses_the_rest_naming_the_option(tmp_path, fmt):
    where = FORMATS[fmt][4]
    for k, place in enumerate(PLACES):
        path, name, folder = corpus_naming(tmp_path / str(k), fmt, place)
        if place in ("relative", "absolute inside"):
            assert _read(fmt, path, confine=True) == 1, place
            continue
        how = "leads out of" if place == "a link elsewhere" else "is outside"
        with pytest.raises(
            DataError, match=re.escape(f"{where}: {name!r} {how} the data folder {folder}")
        ) as exc:
            _read(fmt, path, confine=True)
        assert "--confine" in str(exc.value) and "name files relative" not in str(exc.value)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_missing_file_is_named_with_the_line_that_names_it(tmp_path, fmt):
    where = "text:1 (u1)" if fmt == "kaldi" else FORMATS[fmt][4]  # kaldi: the utterance
    for confine in (False, True):
        path, name, folder = corpus_naming(
            tmp_path / str(confine), fmt, "absolute inside", made=False
        )
        with pytest.raises(DataError, match=re.escape(where)) as exc:
            _read(fmt, path, confine=confine)
        message = str(exc.value)
        assert name in message and "outside" not in message, message
        assert f"not found in {folder}" not in message  # an absolute name is not looked up there


def test_a_relative_data_folder_holds_absolute_names_inside_it(tmp_path, monkeypatch):
    path, name, _ = corpus_naming(tmp_path, "manifest", "absolute inside")
    monkeypatch.chdir(tmp_path)
    assert len(read_manifest(path.relative_to(tmp_path), confine=True)) == 1


def test_inside_takes_any_name_and_confined_only_those_inside_the_folder(tmp_path):
    (tmp_path / "sub").mkdir()
    assert inside(tmp_path, "sub/a.png", "labels.tsv:1") == tmp_path / "sub" / "a.png"
    assert inside(tmp_path, "/etc/passwd", "x") == Path("/etc/passwd")
    assert (
        inside(tmp_path, str(tmp_path / "sub/a.png"), "x", confine=True)
        == tmp_path / "sub" / "a.png"
    )
    for name in ("../a.png", "/etc/passwd", "sub/../../a.png"):
        with pytest.raises(
            DataError,
            match=r"^labels.tsv:1: .* is outside the data folder "
            r".*; leave out --confine",
        ):
            inside(tmp_path, name, "labels.tsv:1", confine=True)
    os.symlink("/etc", tmp_path / "link")
    with pytest.raises(
        DataError,
        match=r"'link/passwd' leads out of the data folder .* "
        r"through a link; leave out --confine",
    ):
        inside(tmp_path, "link/passwd", "labels.tsv:1", confine=True)


def test_confined_readers_refuse_an_entry_outside_the_folder_without_reading_it(tmp_path):
    outside = tmp_path / "secret.png"
    Image.fromarray(np.zeros((32, 40), np.uint8), "L").save(outside)
    data = tmp_path / "data"
    data.mkdir()
    (data / "labels.tsv").write_text("../secret.png\thello\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"labels.tsv:1: '../secret.png' is outside"):
        read_line_folder(data, data / "labels.tsv", confine=True)
    (data / "captions.tsv").write_text("../secret.png\ta caption\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"captions.tsv:1: '../secret.png' is outside"):
        read_caption_folder(data, size=16, confine=True)
    (data / "manifest.tsv").write_text("/etc/passwd\thello\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"manifest.tsv:1: '/etc/passwd' is outside") as exc:
        read_manifest(data / "manifest.tsv", confine=True)
    assert "root:" not in str(exc.value)  # nothing of the file is read, nor echoed
    with pytest.raises(DataError, match=r"manifest.tsv:1: /etc/passwd: cannot decode") as exc:
        read_manifest(data / "manifest.tsv")  # read where it is: not audio, and not quoted
    assert "root:" not in str(exc.value)


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
    assert main(["translate", "--checkpoint", "builtin:translate-dates", "--file", str(fifo)]) == 2
    assert "pipe: not a regular file (a FIFO)" in capsys.readouterr().err
    assert (
        main(
            [
                "train",
                "lm",
                "--text",
                str(fifo),
                "--vocab-from",
                "builtin:asr-digits",
                "--out",
                str(tmp_path / "lm"),
            ]
        )
        == 2
    )
    assert "pipe: not a regular file (a FIFO)" in capsys.readouterr().err
