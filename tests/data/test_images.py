"""Image files of any mode and size, the user's caption and question folders, and the errors
that name the file and line."""

import numpy as np
import pytest
import torch
from PIL import Image

from attnkit.data import (
    DataError,
    generate_scenes,
    load_image,
    load_line_image,
    question_set,
    read_caption_folder,
    read_question_folder,
    stack_images,
    write_caption_folder,
    write_question_folder,
)
from attnkit.data.corpora.image_folders import read_pixels
from tests.data.images import grey_png, png_header


def _save(path, array, mode=None):
    Image.fromarray(array, mode).save(path)
    return path


def test_every_mode_becomes_rgb_at_the_size_asked(tmp_path):
    rgb = np.zeros((20, 30, 3), np.uint8)
    rgb[:, :15] = (255, 0, 0)  # left half red
    paths = {"rgb": _save(tmp_path / "rgb.png", rgb)}
    Image.fromarray(rgb).convert("P").save(tmp_path / "palette.png")
    Image.fromarray(rgb).convert("L").save(tmp_path / "grey.png")
    Image.fromarray(rgb).save(tmp_path / "photo.jpg", quality=95)
    rgba = np.concatenate([rgb, np.full((20, 30, 1), 255, np.uint8)], -1)
    rgba[:, 15:, 3] = 0  # right half transparent: laid over white
    _save(tmp_path / "rgba.png", rgba, "RGBA")
    grey16 = np.zeros((20, 30), np.uint16)
    grey16[:, 15:] = 65535
    Image.fromarray(grey16).save(tmp_path / "grey16.png")
    for name in ("rgb.png", "palette.png", "grey.png", "photo.jpg", "rgba.png", "grey16.png"):
        image = load_image(tmp_path / name, 16)
        assert image.shape == (3, 16, 16) and image.dtype == torch.uint8, name
        paths[name] = image
    assert paths["rgb.png"][:, 8, 2].tolist() == [255, 0, 0]
    assert paths["rgba.png"][:, 8, 14].tolist() == [255, 255, 255]  # transparent -> white
    assert paths["grey16.png"][:, 8, 14].tolist() == [255, 255, 255]
    assert paths["grey16.png"][:, 8, 1].tolist() == [0, 0, 0]
    grey = paths["grey.png"]
    assert torch.equal(grey[0], grey[1]) and torch.equal(grey[1], grey[2])
    assert read_pixels(tmp_path / "rgb.png", colour=False).shape == (20, 30)


def test_unreadable_files_name_the_file(tmp_path):
    (tmp_path / "empty.png").write_bytes(b"")
    (tmp_path / "notes.png").write_text("not an image")
    Image.fromarray(np.zeros((4, 4), np.float32), "F").save(tmp_path / "float.tiff")
    for name, match in (
        ("empty.png", "cannot read image"),
        ("notes.png", "cannot read image"),
        ("missing.png", r"cannot read \(no such file\)"),
        ("float.tiff", "unsupported image mode 'F'"),
    ):
        with pytest.raises(DataError, match=f"{name}: {match}"):
            load_image(tmp_path / name, 16)


def test_huge_images_are_refused_from_their_header(tmp_path):
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(png_header(30_000, 30_000))
    with pytest.raises(DataError, match=r"bomb.png: more pixels than Pillow reads safely"):
        load_image(bomb, 64)
    wide = tmp_path / "wide.png"
    wide.write_bytes(png_header(500, 20))

    def refuse(path, width, height):
        raise DataError(f"{path}: {width} x {height}")

    with pytest.raises(DataError, match=r"wide.png: 500 x 20$"):
        read_pixels(wide, colour=False, check_size=refuse)


def test_stack_images_to_float_and_refuses_mixed_shapes():
    a = torch.full((3, 4, 4), 255, dtype=torch.uint8)
    batch = stack_images([a, torch.zeros_like(a)])
    assert batch.shape == (2, 3, 4, 4) and batch.dtype == torch.float32
    assert batch[0].eq(1).all() and batch[1].eq(0).all()
    with pytest.raises(
        ValueError,
        match=r"images\[1\]: expected a uint8 \(3, S, S\) tensor "
        r"shaped like images\[0\] \(3, 4, 4\), got "
        r"torch.uint8 \(3, 8, 8\)",
    ):
        stack_images([a, torch.zeros(3, 8, 8, dtype=torch.uint8)])
    with pytest.raises(ValueError, match="images: expected at least one image"):
        stack_images([])


def test_built_in_scenes_write_and_read_back_unchanged(tmp_path):
    scenes = generate_scenes(3, seed=1)
    tsv = write_caption_folder(scenes, tmp_path / "cap")
    items = read_caption_folder(tmp_path / "cap", size=64)
    assert tsv.name == "captions.tsv" and len(tsv.read_text().splitlines()) == 15
    for item, scene in zip(items, scenes):
        assert torch.equal(item.image, scene.image) and item.captions == scene.captions
    images, questions = question_set(scenes)
    write_question_folder(images, questions, tmp_path / "vqa")
    read_images, read_questions = read_question_folder(tmp_path / "vqa", size=64)
    assert all(torch.equal(a, b) for a, b in zip(read_images, images))
    assert [(q.image, q.question, q.answer) for q in read_questions] == [
        (q.image, q.question, q.answer) for q in questions
    ]
    assert read_questions[0].type == "user"
    assert read_questions[1].origin == f"{tmp_path / 'vqa' / 'questions.tsv'}:2"


def test_several_captions_per_image_in_order_of_first_line(tmp_path):
    _save(tmp_path / "a.png", np.zeros((10, 10, 3), np.uint8))
    _save(tmp_path / "b.png", np.zeros((40, 20, 3), np.uint8))
    (tmp_path / "captions.tsv").write_text("b.png\tone\na.png\ttwo\nb.png\tthree \n")
    items = read_caption_folder(tmp_path, size=32)
    assert [i.captions for i in items] == [("one", "three"), ("two",)]
    assert items[0].image.shape == (3, 32, 32) and items[0].origin.endswith("b.png")


@pytest.mark.parametrize(
    "line, match",
    [
        ("a.png\t\n", r"captions.tsv:2: empty caption"),
        ("a.png\n", r"captions.tsv:2: expected filename<TAB>caption, found 0 tabs"),
        ("gone.png\tx\n", r"captions.tsv:2: image 'gone.png' not found in"),
        ("bad.png\tx\n", r"captions.tsv:2: .*bad.png: cannot read image"),
    ],
)
def test_bad_caption_lines_name_file_and_line(tmp_path, line, match):
    _save(tmp_path / "a.png", np.zeros((10, 10, 3), np.uint8))
    (tmp_path / "bad.png").write_bytes(b"")
    (tmp_path / "captions.tsv").write_text("a.png\tfine\n" + line)
    with pytest.raises(DataError, match=match):
        read_caption_folder(tmp_path, size=16)


@pytest.mark.parametrize(
    "line, match",
    [
        (
            "a.png\twhat ?\n",
            r"questions.tsv:1: expected filename<TAB>question<TAB>answer, "
            r"found 1 tabs",
        ),
        ("a.png\twhat ?\t \n", r"questions.tsv:1: empty answer"),
        ("a.png\t\tyes\n", r"questions.tsv:1: empty question"),
    ],
)
def test_bad_question_lines_name_file_and_line(tmp_path, line, match):
    _save(tmp_path / "a.png", np.zeros((10, 10, 3), np.uint8))
    (tmp_path / "questions.tsv").write_text(line)
    with pytest.raises(DataError, match=match):
        read_question_folder(tmp_path, size=16)


def test_not_a_folder(tmp_path):
    (tmp_path / "captions.tsv").write_text("a.png\tx\n")
    with pytest.raises(DataError, match="not a folder of images"):
        read_caption_folder(tmp_path / "nope", tmp_path / "captions.tsv", size=16)


def test_writers_refuse_what_would_not_read_back(tmp_path):
    scene = generate_scenes(1)[0]
    with pytest.raises(
        ValueError,
        match=r"items\[0\].captions: expected one non-empty line "
        r"without tabs, got 'a\\tb'",
    ):
        write_caption_folder([scene.__class__(scene.objects, scene.image, ("a\tb",), ())], tmp_path)
    images, questions = question_set([scene])
    with pytest.raises(ValueError, match=r"questions\[0\].image: expected an index in \[0, 0\)"):
        write_question_folder([], questions[:1], tmp_path)


def test_an_image_too_big_to_caption_is_refused_from_its_header(tmp_path):
    path = tmp_path / "big.png"
    Image.new("L", (9000, 9000)).save(path)  # ~100 KB on disk, 81 million pixels
    with pytest.raises(
        DataError,
        match=r"big.png: 9000 x 9000 pixels, more than the "
        r"16,777,216 an image may have here",
    ):
        load_image(path, 64)


@pytest.mark.parametrize("interlace", [False, True])
def test_a_png_holding_fewer_rows_than_its_header_says_is_refused(tmp_path, interlace):
    pixels = np.random.default_rng(0).integers(0, 256, (37, 53), dtype=np.uint8)
    whole = tmp_path / "whole.png"
    whole.write_bytes(grey_png(pixels, interlace=interlace))
    assert np.array_equal(np.round(read_pixels(whole, colour=False) * 255), pixels)
    short = tmp_path / "short.png"
    short.write_bytes(grey_png(pixels, interlace=interlace, keep=54))
    if interlace:  # Pillow finds this one itself
        with pytest.raises(
            DataError,
            match=r"short.png: cannot read image \(image file is "
            r"truncated",
        ):
            load_image(short, 16)
        return
    with Image.open(short) as image:
        image.load()  # Pillow decodes it without an error, the rows it lacks black
    with pytest.raises(
        DataError,
        match=rf"short.png: its header says 53 x 37 pixels, but its "
        rf"image data hold only 54 of the {37 * 54:,} bytes those need",
    ):
        load_image(short, 16)


def test_a_line_too_narrow_for_the_crnn_is_refused(tmp_path):
    tall = tmp_path / "tall.png"
    Image.fromarray(np.zeros((9000, 200), np.uint8)).save(tall)
    with pytest.raises(
        DataError,
        match=r"tall.png: 200 x 9000 pixels is 1 px wide at height "
        r"32; a line image must be at least 2 px wide there",
    ):
        load_line_image(tall)


def test_a_corpus_holds_image_paths_and_reads_pixels_when_indexed(tmp_path, monkeypatch):
    from attnkit.data.corpora import image_folders as module
    from attnkit.tasks.caption import CaptionTask, caption_examples, check_images
    from attnkit.tasks.vqa import VqaTask, question_examples

    scenes = generate_scenes(4, seed=2)
    write_caption_folder(scenes, tmp_path / "cap")
    read = []
    real = module.load_image
    monkeypatch.setattr(
        module, "load_image", lambda path, size: read.append(path) or real(path, size)
    )
    items = read_caption_folder(tmp_path / "cap", size=64)
    assert isinstance(items, module.CaptionedImages) and read == []  # headers only
    assert len(items.images.paths) == 4 and all(p.is_file() for p in items.images.paths)
    tail = items[2:]
    assert isinstance(tail, module.CaptionedImages) and len(tail) == 2 and read == []
    assert torch.equal(tail[0].image, scenes[2].image) and len(read) == 1
    assert tail[0].image is tail[0].image and len(read) == 1  # kept while recent
    with pytest.raises(IndexError):
        items[4]
    check_images(items, "train", 64)  # by their size: nothing read
    task = CaptionTask(
        items,
        items[:2],
        model_config={
            "image_size": 64,
            "channels": [4, 8, 8],
            "hidden": 8,
            "emb": 8,
            "attn_dim": 8,
        },
    )
    assert len(read) == 1 and len(task.pairs) == sum(len(s.captions) for s in scenes)
    write_question_folder(*question_set(scenes), tmp_path / "vqa")
    images, questions = read_question_folder(tmp_path / "vqa", size=64)
    VqaTask(
        (images, questions),
        (images, questions[:3]),
        model_config={
            "image_size": 64,
            "channels": [4, 8, 8],
            "hidden": 8,
            "emb": 8,
            "attn_dim": 8,
        },
    )
    assert len(read) == 1  # the tasks keep the images unread
    first = caption_examples(items)[:1]  # eval --limit 1: one image read
    assert len(first) == 1 and torch.equal(first[0].input, scenes[0].image) and len(read) == 2
    asked = question_examples(images, questions)[:2]
    assert [e.reference for e in asked] == [q.answer for q in questions[:2]] and len(read) == 3
    with pytest.raises(DataError, match=r"train: images read at \(32, 32\) are expected"):
        check_images(items, "train", 32)
    last = items.images.paths[3]  # not read yet
    last.write_bytes(last.read_bytes()[:60])  # the header stays, the pixels are cut
    with pytest.raises(DataError, match=rf"{last}"):
        _ = items[3].image  # reading the cut image raises
