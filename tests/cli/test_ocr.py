"""train ocr -> read, end to end on a handful of tiny lines; bad input gives messages."""

import json
import re

from PIL import Image

from attnkit.cli.main import main
from attnkit.data import generate_lines, write_line_folder
from tests.data.images import png_header

TINY = ["--channels", "4,4,8,8,8", "--hidden", "8", "--batch-size", "4", "--no-progress"]


def test_train_read_and_resume(tmp_path, capsys):
    folder = write_line_folder(generate_lines(8, seed=1, max_chars=12), tmp_path / "lines").parent
    out = tmp_path / "run"
    args = [
        "train",
        "ocr",
        "--train",
        str(folder),
        "--out",
        str(out),
        "--steps",
        "4",
        "--eval-every",
        "2",
        "--attention",
        "global",
        "--plot",
        "1",
        *TINY,
    ]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert re.search(
        r"stopped after 4 steps \(max_steps\); held-out: cer [\d.]+, "
        r"char_accuracy",
        text,
    )
    assert (out / "line_0.png").exists()  # with the self-attention under the line
    assert main(args[: -len(TINY) - 2] + ["--steps", "6", "--resume", *TINY[4:]]) == 2
    assert (
        "saved with other model settings (--channels [4, 4, 8, 8, 8] saved, [32, 64, 128, "
        "128, 128] given; --hidden 8 saved, 128 given)"
    ) in capsys.readouterr().err
    assert main(args[: -len(TINY) - 2] + ["--steps", "6", "--resume", *TINY]) == 0
    assert "stopped after 6 steps" in capsys.readouterr().out
    rgb = tmp_path / "colour.png"
    Image.open(folder / "000000.png").convert("RGB").resize((200, 64)).save(rgb)
    assert (
        main(
            [
                "read",
                "--checkpoint",
                str(out / "checkpoint"),
                str(rgb),
                str(folder / "000001.png"),
                "--plot",
                str(tmp_path / "pics"),
            ]
        )
        == 0
    )
    lines = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith("  wrote")]
    assert len(lines) == 2
    assert sorted(p.name for p in (tmp_path / "pics").iterdir()) == ["line_0.png", "line_1.png"]
    (tmp_path / "empty.png").write_bytes(b"")
    assert main(["read", "--checkpoint", str(out / "checkpoint"), str(tmp_path / "empty.png")]) == 2
    assert "empty.png" in capsys.readouterr().err


def test_attention_head_trains_and_reads_with_beam(tmp_path, capsys):
    folder = write_line_folder(generate_lines(6, seed=2, max_chars=10), tmp_path / "lines").parent
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "ocr",
                "--train",
                str(folder),
                "--out",
                str(out),
                "--steps",
                "2",
                "--eval-every",
                "2",
                "--head",
                "attention",
                "--attention",
                "none",
                "--dec-hidden",
                "8",
                "--teacher-forcing-end",
                "0.5",
                "--ctc-weight",
                "0.3",
                "--sortagrad",
                "1",
                "--plot",
                "1",
                *TINY,
            ]
        )
        == 0
    )
    assert (out / "line_0.png").exists()
    batching = json.loads((out / "checkpoint" / "config.json").read_text())["config"]["batching"]
    assert batching["sortagrad"] == 1 and batching["ctc_weight"] == 0.3
    capsys.readouterr()
    assert (
        main(
            [
                "read",
                "--checkpoint",
                str(out / "checkpoint"),
                "--beam",
                "3",
                str(folder / "000000.png"),
            ]
        )
        == 0
    )


def test_bad_input_gives_messages(tmp_path, capsys):
    folder = write_line_folder(generate_lines(3, seed=1, max_chars=8), tmp_path / "lines").parent
    (folder / "labels.tsv").write_text("000000.png\tok\nmissing.png\tgone\n", encoding="utf-8")
    assert main(["train", "ocr", "--train", str(folder), "--out", str(tmp_path / "r"), *TINY]) == 2
    assert "labels.tsv:2" in capsys.readouterr().err
    (folder / "labels.tsv").write_text("000000.png\t" + "x" * 400 + "\n", encoding="utf-8")
    assert main(["train", "ocr", "--train", str(folder), "--out", str(tmp_path / "r"), *TINY]) == 2
    assert "more characters than the CTC head has steps" in capsys.readouterr().err
    ck = tmp_path / "ck"
    ck.mkdir()
    assert main(["read", "--checkpoint", str(ck), str(folder / "000000.png")]) == 2
    assert "an attnkit checkpoint?" in capsys.readouterr().err


def test_an_image_too_wide_or_too_large_is_refused_before_loading_anything(tmp_path, capsys):
    for name, size, message in (
        ("wide.png", (200_000, 32), "more than max_width=10000"),
        ("bomb.png", (30_000, 30_000), "more pixels than Pillow"),
    ):
        (tmp_path / name).write_bytes(png_header(*size))
        assert main(["read", "--checkpoint", str(tmp_path / "none"), str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
