"""train vqa -> ask, end to end on a few tiny scenes; the user's questions.tsv; unknown words
and bad files give messages, never tracebacks."""

import re

from PIL import Image

from attnkit.cli.main import main
from attnkit.data import generate_scenes, question_set, write_question_folder

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
    "8",
    "--no-progress",
]


def test_train_vqa_resume_and_ask(tmp_path, capsys):
    out = tmp_path / "run"
    args = [
        "train",
        "vqa",
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
        "--hops",
        "3",
        "--max-objects",
        "4",
        *TINY,
    ]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert re.search(
        r"stopped after 2 steps \(max_steps\); held-out: accuracy [\d.]+, "
        r"accuracy_above [\d.]+, .*accuracy_relational [\d.]+, "
        r"accuracy_non_relational [\d.]+",
        text,
    )
    assert (out / "answer_0.png").exists()
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
    assert main([*args, "--resume", "--hops", "2", "--model", "none"]) == 2
    assert "--model 'san' saved, 'none' given; --hops 3 saved, 2 given" in capsys.readouterr().err
    image = tmp_path / "scene.jpg"
    Image.fromarray(generate_scenes(1, seed=9)[0].image.permute(1, 2, 0).numpy()).save(image)
    assert (
        main(
            [
                "ask",
                "--checkpoint",
                str(out / "checkpoint"),
                str(image),
                "How many circles are in the image?",
                "is the red circle left of the blue square ?",
                "--plot",
                str(tmp_path / "pics"),
            ]
        )
        == 0
    )
    lines = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith("  wrote")]
    assert len(lines) == 2 and all(ln.strip() for ln in lines)
    assert (tmp_path / "pics" / "answer_1.png").exists()
    assert (
        main(
            ["ask", "--checkpoint", str(out / "checkpoint"), str(image), "what colour is the dog?"]
        )
        == 2
    )
    assert (
        "question 'what colour is the dog?': words this model never saw: 'dog' (it knows"
        in capsys.readouterr().err
    )
    assert main(["ask", "--checkpoint", str(out / "checkpoint"), str(image), " "]) == 2
    assert "question ' ': no words (it knows" in capsys.readouterr().err
    (tmp_path / "empty.png").write_bytes(b"")
    assert (
        main(
            ["ask", "--checkpoint", str(out / "checkpoint"), str(tmp_path / "empty.png"), "what ?"]
        )
        == 2
    )
    assert "empty.png: cannot read image" in capsys.readouterr().err


def test_the_relational_model_trains_and_draws_each_hop(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "vqa",
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
                "--model",
                "relational",
                "--plot",
                "1",
                "--max-objects",
                "4",
                *TINY,
            ]
        )
        == 0
    )
    assert "stopped after 2 steps" in capsys.readouterr().out
    image = tmp_path / "scene.png"
    Image.fromarray(generate_scenes(1, seed=4)[0].image.permute(1, 2, 0).numpy()).save(image)
    assert (
        main(
            [
                "ask",
                "--checkpoint",
                str(out / "checkpoint"),
                str(image),
                "what colour is the object closest to the red square ?",
                "--plot",
                str(tmp_path / "pics"),
            ]
        )
        == 0
    )
    assert len(capsys.readouterr().out.splitlines()) == 2  # the answer, the picture written
    assert (tmp_path / "pics" / "answer_0.png").exists()


def test_the_users_folder_and_the_baseline(tmp_path, capsys):
    images, questions = question_set(generate_scenes(3, seed=2, size=32, max_objects=4))
    folder = write_question_folder(images, questions, tmp_path / "data").parent
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "vqa",
                "--train",
                str(folder),
                "--valid",
                str(folder),
                "--out",
                str(out),
                "--steps",
                "1",
                "--model",
                "none",
                *TINY,
            ]
        )
        == 0
    )
    assert re.search(r"held-out: accuracy [\d.]+, accuracy_user [\d.]+\n", capsys.readouterr().out)
    assert (
        main(
            [
                "ask",
                "--checkpoint",
                str(out / "checkpoint"),
                str(folder / "000000.png"),
                questions[0].question,
                "--plot",
                str(tmp_path / "pics"),
            ]
        )
        == 0
    )
    assert not (tmp_path / "pics").exists()  # no attention to draw


def test_bad_input_gives_messages(tmp_path, capsys):
    images, questions = question_set(generate_scenes(1, size=32))
    folder = write_question_folder(images, questions, tmp_path / "data").parent
    tsv = folder / "questions.tsv"
    run = ["train", "vqa", "--train", str(folder), "--out", str(tmp_path / "r"), *TINY]
    tsv.write_text("000000.png\twhat ?\tyes\n000000.png\twhat colour ?\n")
    assert main(run) == 2
    assert (
        "questions.tsv:2: expected filename<TAB>question<TAB>answer, found 1 tabs"
        in capsys.readouterr().err
    )
    tsv.write_text("000000.png\twhat ?\tyes\nnope.png\twhat ?\tno\n")
    assert main(run) == 2
    assert "questions.tsv:2: image 'nope.png' not found" in capsys.readouterr().err
    ck = tmp_path / "ck"
    ck.mkdir()
    assert main(["ask", "--checkpoint", str(ck), str(folder / "000000.png"), "what ?"]) == 2
    assert "an attnkit checkpoint?" in capsys.readouterr().err
