"""OCR corpora as kraken, Calamari and OCR-D keep them (NAME.png + NAME.gt.txt, in folders):
the same lines as attnkit's own labels.tsv folder, every image mode, the awkward texts (BOM,
CRLF, gzip), training and eval through the command line, and what is unusable."""

import gzip
import json
import logging
import re
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from attnkit.cli.main import main
from attnkit.data import ALPHABET, DataError, generate_lines
from attnkit.data.corpora.line_formats import read_gt_folder, read_labels
from attnkit.data.corpora.reading import choose_format, read_corpus
from tests.cli.test_ocr import TINY
from tests.data.images import png_header

TEXTS = ["Total 12", "net 4.50", "Invoice", "(ok)", "x-ray 7"]


def _save(image: torch.Tensor, path, mode: str) -> None:
    """A generated line ``(32, W)`` as a file of ``mode``, taller than 32 px for some."""
    grey = Image.fromarray(image.numpy(), "L")
    if mode == "L":
        grey.save(path)
    elif mode == "RGB":
        grey.convert("RGB").resize((grey.width * 2, 64)).save(path)
    elif mode == "RGBA":
        grey.convert("RGBA").save(path)
    elif mode == "P":
        grey.convert("P").save(path)
    elif mode == "I;16":
        Image.fromarray(image.numpy().astype(np.uint16) * 257).save(path)


def _corpora(root):
    """The same five lines as a gt-txt folder (subfolders, ocropus names, every image mode,
    transcriptions with a BOM, CRLF, gzip) and as attnkit's labels.tsv folder."""
    lines = generate_lines(len(TEXTS), seed=3, min_chars=4, max_chars=8)
    gt, native = root / "gt", root / "native"
    names = ["p1/0001.png", "p1/0002.bin.png", "p1/0003.png", "p2/0001.png", "p2/a b.png"]
    modes = ["L", "RGB", "RGBA", "P", "I;16"]
    for (image, _), _text, name, mode in zip(lines, TEXTS, names, modes):
        for folder in (gt, native):
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            _save(image, folder / name, mode)
    (gt / "p1/0002.nrm.png").write_bytes((gt / "p1/0002.bin.png").read_bytes())  # not taken
    gts = [
        gt / "p1/0001.gt.txt",
        gt / "p1/0002.gt.txt",
        gt / "p1/0003.gt.txt",
        gt / "p2/0001.gt.txt",
        gt / "p2/a b.gt.txt",
    ]
    gts[0].write_bytes(b"\xef\xbb\xbf" + TEXTS[0].encode() + b"\r\n")
    gts[1].write_text(TEXTS[1] + "\n", encoding="utf-8")
    gts[2].write_bytes(gzip.compress(TEXTS[2].encode()))
    gts[3].write_text(f"  {TEXTS[3]}  \n\n", encoding="utf-8")
    gts[4].write_text(TEXTS[4], encoding="utf-8")
    (native / "labels.tsv").write_text(
        "".join(f"{n}\t{t}\n" for n, t in zip(names, TEXTS)), encoding="utf-8"
    )
    return gt, native


def _same_lines(a, b) -> None:
    assert len(a) == len(b) and a.texts == b.texts and a.widths == b.widths
    for (image_a, text_a), (image_b, text_b) in zip(a, b):
        assert text_a == text_b and torch.equal(image_a, image_b)


def test_gt_txt_gives_the_lines_of_the_native_folder(tmp_path, caplog):
    gt, native = _corpora(tmp_path)
    with caplog.at_level(logging.INFO, logger="attnkit"):
        lines = read_corpus("ocr", gt)
    assert f"{gt}: read as gt-txt" in caplog.text
    assert "1 images left out, another image of the same .gt.txt taken" in caplog.text
    _same_lines(lines, read_labels(native))
    assert lines.texts == TEXTS and all(image.shape[0] == 32 for image, _ in lines)
    assert lines.path(1) == gt / "p1" / "0002.bin.png"
    assert choose_format("ocr", native).name == "labels"
    assert choose_format("ocr", native / "labels.tsv").name == "labels"


def test_train_and_eval_on_gt_txt_through_the_command_line(tmp_path, capsys, caplog):
    gt, native = _corpora(tmp_path)
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "ocr",
                "--train",
                str(gt),
                "--valid",
                str(gt),
                "--out",
                str(out),
                "--steps",
                "3",
                "--eval-every",
                "3",
                "--plot",
                "0",
                *TINY,
            ]
        )
        == 0
    )
    assert "stopped after 3 steps" in capsys.readouterr().out
    scores = {}
    for data, extra in ((gt, []), (native, []), (gt, ["--format", "gt-txt"])):
        assert (
            main(
                [
                    "eval",
                    "--checkpoint",
                    str(out / "checkpoint"),
                    "--data",
                    str(data),
                    "--json",
                    *extra,
                ]
            )
            == 0
        )
        result = json.loads(capsys.readouterr().out)
        assert result["examples"] == len(TEXTS)
        scores[str(data)] = result["metrics"]
    assert scores[str(gt)] == scores[str(native)]  # the same lines, the same outputs
    assert (
        main(
            [
                "eval",
                "--checkpoint",
                str(out / "checkpoint"),
                "--data",
                str(native),
                "--format",
                "gt-txt",
            ]
        )
        == 2
    )
    assert "no usable lines" in capsys.readouterr().err  # native/ has no .gt.txt


def test_what_is_unusable_is_counted_named_and_stops_past_the_share(tmp_path, caplog):
    gt, _ = _corpora(tmp_path)
    (gt / "p2/0001.gt.txt").unlink()  # an image without its transcription
    (gt / "p3").mkdir()
    (gt / "p3/lost.gt.txt").write_text("no image\n", encoding="utf-8")
    with pytest.raises(DataError) as caught:
        read_gt_folder(gt)
    message = str(caught.value)
    assert message.startswith(
        f"{gt}: 2 of 6 lines are unusable (1 images without .gt.txt, "
        "1 .gt.txt without an image), more than max_unusable=0.01 allows"
    )
    assert "p2/0001.png: no 0001.gt.txt beside it" in message
    assert "p3/lost.gt.txt: no image beside it" in message
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        lines = read_gt_folder(gt, max_unusable=0.5)
    assert len(lines) == 4
    assert re.search(
        r"dropped 2 of 6 lines as unusable \(1 images without .gt.txt, 1 .gt.txt "
        r"without an image\): .*p2/0001.png: no 0001.gt.txt",
        caplog.text,
    )


def test_links_leading_out_of_the_folder_are_refused_with_confine(tmp_path, caplog):
    """The user's own folder is read where its links lead, as every reader reads what the
    user's corpus names; with ``confine`` (as every reader's, attnkit.data.paths.inside) a
    .gt.txt or an image that is a link to a file outside the folder is unusable, and nothing
    of it is read; a link that stays inside the folder is a line like any other."""
    gt, _ = _corpora(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("password hunter2\n", encoding="utf-8")
    (gt / "p1/0001.gt.txt").unlink()
    (gt / "p1/0001.gt.txt").symlink_to(secret)
    shutil.move(gt / "p1/0003.png", tmp_path / "outside.png")
    (gt / "p1/0003.png").symlink_to(tmp_path / "outside.png")
    assert read_gt_folder(gt).texts[:3] == ["password hunter2", *TEXTS[1:3]]
    with pytest.raises(DataError) as caught:
        read_gt_folder(gt, confine=True)
    message = str(caught.value)
    assert message.startswith(f"{gt}: 2 of 5 lines are unusable (2 links out of the folder)")
    assert f"{gt / 'p1/0001.gt.txt'}: a link leading out of the data folder {gt}" in message
    assert f"{gt / 'p1/0003.png'}: a link leading out of the data folder {gt}" in message
    assert "hunter2" not in message
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        lines = read_gt_folder(gt, max_unusable=0.5, confine=True)
    assert lines.texts == [TEXTS[1], TEXTS[3], TEXTS[4]] and "hunter2" not in caplog.text
    (gt / "p1/0001.gt.txt").unlink()
    (gt / "p1/0001.gt.txt").symlink_to(gt / "p2/0001.gt.txt")  # inside: taken
    (gt / "p1/0003.png").unlink()
    (gt / "p1/0003.png").symlink_to(gt / "p1/0002.bin.png")
    assert read_gt_folder(gt, confine=True).texts == [
        TEXTS[3],
        TEXTS[1],
        TEXTS[2],
        TEXTS[3],
        TEXTS[4],
    ]


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", r"0001.gt.txt: empty transcription"),
        (b"two\nlines\n", r"0001.gt.txt: 2 lines; a line's transcription is one line"),
        (b"caf\xe9\n", r"0001.gt.txt:1: not valid UTF-8 \(byte 3\)"),
        (b"\xff\xfeh\x00i\x00", r"0001.gt.txt: looks like UTF-16 text"),
        (b"a longer line with a \x00 in it", r"0001.gt.txt: NUL character"),
        (
            b"\xe2\x82\xac 5\n",
            "0001.gt.txt: characters outside the alphabet: '\u20ac' in '\u20ac 5'",
        ),
    ],
)
def test_bad_transcriptions_are_named(tmp_path, content, message):
    gt, _ = _corpora(tmp_path)
    (gt / "p1/0001.gt.txt").write_bytes(content)
    with pytest.raises(DataError, match=message):
        read_gt_folder(gt, alphabet=ALPHABET)


def test_bad_images_are_named(tmp_path, monkeypatch):
    gt, _ = _corpora(tmp_path)
    (gt / "p1/0001.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match=r"0001.png: cannot read image"):
        read_gt_folder(gt)
    (gt / "p1/0001.png").write_bytes(png_header(30_000, 30_000))
    with pytest.raises(DataError, match=r"0001.png: more pixels than Pillow reads safely"):
        read_gt_folder(gt)
    (gt / "p1/0001.png").write_bytes(png_header(200_000, 32))
    with pytest.raises(DataError, match=r"more than max_width=10000"):
        read_gt_folder(gt)
    # only headers are read with the corpus: pixels that cannot be decoded are named when
    # their line is read
    whole = (gt / "p1/0003.png").read_bytes()
    (gt / "p1/0001.png").write_bytes(whole[: len(whole) // 2])
    lines = read_gt_folder(gt)
    with pytest.raises(DataError, match=r"0001.png: cannot read image"):
        lines[0]


def test_not_a_folder_and_the_options_of_another_format(tmp_path, capsys):
    with pytest.raises(DataError, match=r"x.png: not a folder of line images and .gt.txt"):
        read_gt_folder(tmp_path / "x.png")
    gt, _ = _corpora(tmp_path)
    with pytest.raises(ValueError, match=r"--labels: not an option of the ocr format gt-txt"):
        read_corpus("ocr", gt, labels="other.tsv")
    with pytest.raises(SystemExit):
        main(
            [
                "train",
                "ocr",
                "--train",
                str(gt),
                "--out",
                str(tmp_path / "r"),
                "--src-lang",
                "de",
                *TINY,
            ]
        )
    assert "unrecognized arguments: --src-lang" in capsys.readouterr().err
    shutil.rmtree(gt / "p2")
    assert (
        main(
            [
                "train",
                "ocr",
                "--train",
                str(gt),
                "--out",
                str(tmp_path / "r"),
                "--labels",
                "x.tsv",
                *TINY,
            ]
        )
        == 2
    )
    assert "--labels: not an option of the ocr format gt-txt" in capsys.readouterr().err
