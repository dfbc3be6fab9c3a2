"""train caption -> caption, end to end on a few tiny scenes; the user's folders, images of any
mode, and bad input give messages, never tracebacks."""

import re

import numpy as np
from PIL import Image

from attnkit.cli import common
from attnkit.cli.main import build_parser, main
from attnkit.data import generate_scenes, write_caption_folder
from attnkit.decoding import Decoding
from attnkit.train import TeacherForcing

TINY = [
    "--image-size",
    "32",
    "--channels",
    "4,8",
    "--hidden",
    "8",
    "--emb",
    "8",
    "--attn-dim",
    "8",
    "--batch-size",
    "4",
    "--no-progress",
]


def test_train_caption_resume_on_built_in_scenes(tmp_path, capsys):
    out = tmp_path / "run"
    args = [
        "train",
        "caption",
        "--out",
        str(out),
        "--n-train",
        "6",
        "--n-valid",
        "2",
        "--steps",
        "2",
        "--eval-every",
        "2",
        "--plot",
        "1",
        "--max-objects",
        "4",
        *TINY,
    ]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert re.search(
        r"stopped after 2 steps \(max_steps\); held-out: bleu [\d.]+, chrf [\d.]+, "
        r"exact [\d.]+, true_captions [\d.]+, attention_on_object [\d.]+",
        text,
    )
    assert (out / "caption_0.png").exists()
    assert (
        main(
            [
                *args[: args.index("--steps")],
                "--steps",
                "3",
                "--resume",
                *args[args.index("--eval-every") :],
            ]
        )
        == 0
    )
    assert "stopped after 3 steps" in capsys.readouterr().out
    assert main([*args, "--resume", "--hidden", "16"]) == 2
    assert "--hidden 8 saved, 16 given" in capsys.readouterr().err
    scene = tmp_path / "scene.png"
    Image.fromarray(generate_scenes(1, seed=9)[0].image.permute(1, 2, 0).numpy()).save(scene)
    assert (
        main(
            [
                "caption",
                "--checkpoint",
                str(out / "checkpoint"),
                str(scene),
                str(scene),
                "--beam",
                "3",
                "--plot",
                str(tmp_path / "pics"),
            ]
        )
        == 0
    )
    lines = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith("  wrote")]
    assert len(lines) == 2 and lines[0] == lines[1]
    assert (tmp_path / "pics" / "caption_1.png").exists()
    assert (
        main(
            [
                "caption",
                "--checkpoint",
                str(out / "checkpoint"),
                str(scene),
                "--sample",
                "3",
                "--seed",
                "1",
            ]
        )
        == 0
    )
    assert len(capsys.readouterr().out.splitlines()) == 3


def test_caption_searches_a_beam_of_5_by_default():
    def decoding_of(*options):
        return common.decoding(
            build_parser().parse_args(["caption", "--checkpoint", "run", "a.png", *options])
        )

    assert decoding_of() == Decoding(beam=5, length_penalty=1.0)
    assert decoding_of("--beam", "1") == Decoding()


def test_train_caption_gives_the_task_its_training_options():
    args = build_parser().parse_args(
        ["train", "caption", "--out", "run", "--seed", "3", "--teacher-forcing", "0.5"]
        + ["--label-smoothing", "0.2", "--entropy-weight", "0.5"]
    )
    assert common.sequence_task_options(args, "doubly_stochastic", "entropy_weight") == {
        "batch_size": 32,
        "seed": 3,
        "label_smoothing": 0.2,
        "teacher_forcing": TeacherForcing(0.5),
        "doubly_stochastic": 1.0,
        "entropy_weight": 0.5,
    }


def test_the_users_folder_and_images_of_any_mode(tmp_path, capsys, caplog):
    folder = write_caption_folder(generate_scenes(4, seed=1, size=32), tmp_path / "data").parent
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "caption",
                "--train",
                str(folder),
                "--out",
                str(out),
                "--steps",
                "1",
                "--attention",
                "hard",
                "--plot",
                "0",
                *TINY,
            ]
        )
        == 0
    )
    assert "no validation data" in caplog.text
    capsys.readouterr()
    rgb = np.asarray(Image.open(folder / "000000.png"))
    modes = {
        "rgba.png": Image.fromarray(rgb).convert("RGBA"),
        "palette.gif": Image.fromarray(rgb).convert("P"),
        "grey.png": Image.fromarray(rgb).convert("L").resize((100, 70)),
        "grey16.png": Image.fromarray(rgb[..., 0].astype(np.uint16) * 257),
    }
    paths = []
    for name, image in modes.items():
        image.save(tmp_path / name)
        paths.append(str(tmp_path / name))
    assert main(["caption", "--checkpoint", str(out / "checkpoint"), *paths]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 4
    (tmp_path / "empty.png").write_bytes(b"")
    (tmp_path / "notes.png").write_text("not an image")
    for bad in ("empty.png", "notes.png", "missing.png"):
        assert main(["caption", "--checkpoint", str(out / "checkpoint"), str(tmp_path / bad)]) == 2
        assert f"{bad}: cannot read" in capsys.readouterr().err


def test_bad_input_gives_messages(tmp_path, capsys):
    folder = write_caption_folder(generate_scenes(2, size=32), tmp_path / "data").parent
    tsv = folder / "captions.tsv"
    tsv.write_text("000000.png\ta red circle\nmissing.png\ta blue square\n")
    run = ["train", "caption", "--train", str(folder), "--out", str(tmp_path / "r"), *TINY]
    assert main(run) == 2
    assert "captions.tsv:2: image 'missing.png' not found" in capsys.readouterr().err
    tsv.write_text("000000.png\ta red circle\n000001.png\t \n")
    assert main(run) == 2
    assert "captions.tsv:2: empty caption" in capsys.readouterr().err
    (folder / "broken.png").write_bytes(b"")
    tsv.write_text("broken.png\ta red circle\n")
    assert main(run) == 2
    assert re.search(r"captions.tsv:1: .*broken.png: cannot read image", capsys.readouterr().err)
    tsv.write_text("000000.png\ta red circle\n")
    assert main([*run[: -len(TINY)], "--image-size", "30", *TINY[2:]]) == 2
    assert (
        "image_size: expected a multiple of 2 ** len(channels) = 4, got 30"
        in capsys.readouterr().err
    )
    ck = tmp_path / "ck"
    ck.mkdir()
    assert main(["caption", "--checkpoint", str(ck), str(folder / "000000.png")]) == 2
    assert "an attnkit checkpoint?" in capsys.readouterr().err
