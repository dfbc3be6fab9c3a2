"""Odd and bad image input through every image command (caption, ask, eval, train caption|vqa):
images of any mode and size are read; unreadable, empty and non-image files, empty captions
and questions are one-line errors naming the file (and the TSV's line), never a traceback;
unknown question words are refused where a person typed them and count as <unk> in scored
data."""

import numpy as np
import pytest
from PIL import Image

from attnkit.cli.main import main
from attnkit.data import generate_scenes
from tests.cli.conftest import IMAGE_TINY

QUESTION = "how many circles are in the image ?"


@pytest.fixture(scope="module")
def modes(tmp_path_factory):
    """A folder of one scene saved in many modes and sizes, with captions.tsv and
    questions.tsv naming each file (the questions with a word no model saw)."""
    folder = tmp_path_factory.mktemp("modes")
    rgb = generate_scenes(1, seed=3, size=32)[0].image.permute(1, 2, 0).numpy()
    scene = Image.fromarray(rgb)
    palette = scene.convert("P")
    palette.info["transparency"] = 0
    images = {
        "rgba.png": scene.convert("RGBA"),
        "palette.gif": scene.convert("P"),
        "palette-transparent.png": palette,
        "grey.png": scene.convert("L").resize((90, 70)),
        "grey16.png": Image.fromarray(rgb[..., 0].astype(np.uint16) * 257),
        "grey-alpha.png": scene.convert("LA"),
        "bilevel.png": scene.convert("1"),
        "cmyk.jpg": scene.convert("CMYK"),
        "one-pixel.png": scene.resize((1, 1)),
        "wide.png": scene.resize((300, 20)),
    }
    for name, image in images.items():
        image.save(folder / name)
    (folder / "captions.tsv").write_text(
        "".join(
            f"{name}\ta red circle at the top\n{name}\ta blue square left of a red circle\n"
            for name in images
        )
    )
    (folder / "questions.tsv").write_text(
        "".join(f"{name}\thow many zebras are in the image ?\t2\n" for name in images)
    )
    return folder, list(images)


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("attnkit: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.usefixtures("one_thread")
def test_images_of_every_mode_and_size_are_read_by_every_command(
    modes, tiny_captioner, tiny_vqa, tmp_path, capsys
):
    folder, names = modes
    assert (
        main(["caption", "--checkpoint", str(tiny_captioner), *(str(folder / n) for n in names)])
        == 0
    )
    assert len(capsys.readouterr().out.splitlines()) == len(names)
    for name in names:
        assert main(["ask", "--checkpoint", str(tiny_vqa), str(folder / name), QUESTION]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(names)
    assert main(["eval", "--checkpoint", str(tiny_captioner), "--data", str(folder)]) == 0
    assert f"{len(names)} examples" in capsys.readouterr().out
    # "zebras" is no word of the model's: scored data counts it as <unk>
    assert main(["eval", "--checkpoint", str(tiny_vqa), "--data", str(folder)]) == 0
    assert f"{len(names)} examples" in capsys.readouterr().out
    for task in ("caption", "vqa"):
        assert (
            main(
                [
                    "train",
                    task,
                    "--train",
                    str(folder),
                    "--valid",
                    str(folder),
                    "--out",
                    str(tmp_path / task),
                    "--steps",
                    "1",
                    *IMAGE_TINY,
                ]
            )
            == 0
        )
        assert "stopped after 1 steps" in capsys.readouterr().out


BAD = {
    "empty.png": (lambda p: p.write_bytes(b""), "cannot read image"),
    "notes.png": (lambda p: p.write_text("not an image"), "cannot read image"),
    "cut.png": (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0"), "cannot read image"),
    "folder.png": (lambda p: p.mkdir(), "not a regular file (a folder)"),
    "floats.tif": (
        lambda p: Image.fromarray(np.ones((4, 4), np.float32)).save(p),
        "unsupported image mode 'F'",
    ),
}


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("name", [*BAD, "missing.png"])
def test_bad_files_are_one_line_errors_naming_the_file(
    name, modes, tiny_captioner, tiny_vqa, tmp_path, capsys
):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "good.png").write_bytes((modes[0] / "rgba.png").read_bytes())
    make, problem = BAD.get(name, (lambda p: None, "cannot read (no such file)"))
    make(folder / name)
    path = str(folder / name)
    assert main(["caption", "--checkpoint", str(tiny_captioner), path]) == 2
    assert f"{path}: {problem}" in _one_line_error(capsys)
    assert main(["ask", "--checkpoint", str(tiny_vqa), path, QUESTION]) == 2
    assert f"{path}: {problem}" in _one_line_error(capsys)
    (folder / "captions.tsv").write_text(f"good.png\ta red circle\n{name}\ta blue square\n")
    (folder / "questions.tsv").write_text(f"good.png\t{QUESTION}\t1\n{name}\t{QUESTION}\t2\n")
    # in a folder, a missing file is "not found" there; the others cannot be read
    where = (
        f"image {name!r} not found in {folder}" if name == "missing.png" else f"{path}: {problem}"
    )
    for ck, tsv in ((tiny_captioner, "captions.tsv"), (tiny_vqa, "questions.tsv")):
        assert main(["eval", "--checkpoint", str(ck), "--data", str(folder)]) == 2
        assert f"{folder / tsv}:2: {where}" in _one_line_error(capsys)
    for task in ("caption", "vqa"):
        assert (
            main(
                ["train", task, "--train", str(folder), "--out", str(tmp_path / task), *IMAGE_TINY]
            )
            == 2
        )
        tsv = "captions.tsv" if task == "caption" else "questions.tsv"
        assert f"{folder / tsv}:2: {where}" in _one_line_error(capsys)


@pytest.mark.usefixtures("one_thread")
def test_empty_captions_and_questions_and_unknown_words(
    modes, tiny_captioner, tiny_vqa, tmp_path, capsys
):
    folder = modes[0]
    data = tmp_path / "data"
    data.mkdir()
    (data / "scene.png").write_bytes((folder / "rgba.png").read_bytes())
    (data / "captions.tsv").write_text("scene.png\ta red circle\nscene.png\t \n")
    (data / "questions.tsv").write_text(f"scene.png\t{QUESTION}\t1\nscene.png\t \tno\n")
    for ck, tsv, field in (
        (tiny_captioner, "captions.tsv", "caption"),
        (tiny_vqa, "questions.tsv", "question"),
    ):
        assert main(["eval", "--checkpoint", str(ck), "--data", str(data)]) == 2
        assert f"{data / tsv}:2: empty {field}" in _one_line_error(capsys)
        assert (
            main(
                [
                    "train",
                    "caption" if field == "caption" else "vqa",
                    "--train",
                    str(data),
                    "--out",
                    str(tmp_path / field),
                    *IMAGE_TINY,
                ]
            )
            == 2
        )
        assert f"{data / tsv}:2: empty {field}" in _one_line_error(capsys)
    image = str(data / "scene.png")
    assert main(["ask", "--checkpoint", str(tiny_vqa), image, "how many zebras ?"]) == 2
    assert "question 'how many zebras ?': words this model never saw: 'zebras'" in _one_line_error(
        capsys
    )
    assert (
        main(
            [
                "explore",
                "--checkpoint",
                str(tiny_vqa),
                image,
                "how many zebras ?",
                "--out",
                str(tmp_path / "page.html"),
            ]
        )
        == 2
    )
    assert "words this model never saw: 'zebras'" in _one_line_error(capsys)
