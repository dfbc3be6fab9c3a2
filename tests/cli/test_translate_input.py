"""What `attnkit translate`, `eval` and `train translate` do with unusual input files."""

import logging

from attnkit.cli.main import main


def test_a_byte_order_mark_in_the_file_is_not_part_of_the_first_sentence(
    tiny_translator, tmp_path, capsys, caplog
):
    f = tmp_path / "in.txt"
    f.write_bytes("\ufeff<en> three\n<en> three\n".encode("utf-8"))
    capsys.readouterr()
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        assert (
            main(
                ["translate", "--checkpoint", str(tiny_translator), "--file", str(f), "--beam", "1"]
            )
            == 0
        )
    first, second = capsys.readouterr().out.splitlines()
    assert first == second
    assert "<unk>" not in caplog.text


def test_a_sentence_longer_than_the_limit_is_refused_at_once(tiny_translator, capsys):
    assert main(["translate", "--checkpoint", str(tiny_translator), "<en> " + "x" * 100_000]) == 2
    err = capsys.readouterr().err
    assert "texts[0]: 100005 characters, more than max_chars=1000" in err
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                str(tiny_translator),
                "--max-chars",
                "100",
                "<en> " + "x" * 100,
            ]
        )
        == 2
    )
    assert "more than max_chars=100" in capsys.readouterr().err


def test_training_files_with_a_huge_line_or_only_a_header_are_refused(tmp_path, capsys):
    huge = tmp_path / "huge.tsv"
    huge.write_text(f"un\t1\n{'x' * 100_000}\t2\n", encoding="utf-8")
    assert main(["train", "translate", "--train", str(huge), "--out", str(tmp_path / "a")]) == 2
    assert (
        "huge.tsv:2: source of 100000 characters, more than the limit of 1000"
        in capsys.readouterr().err
    )
    header = tmp_path / "header.tsv"
    header.write_text("source\ttarget\n", encoding="utf-8")
    assert main(["train", "translate", "--train", str(header), "--out", str(tmp_path / "b")]) == 2
    assert "header.tsv: no usable source<TAB>target lines" in capsys.readouterr().err


def test_one_output_line_per_input_line_blank_in_blank_out(tiny_translator, tmp_path, capsys):
    f = tmp_path / "in.txt"
    f.write_text("<en> three\n\n   \n<en> three\n", encoding="utf-8")
    capsys.readouterr()
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                str(tiny_translator),
                "<en> three",
                "",
                "--file",
                str(f),
                "--beam",
                "1",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.split("\n")[:-1]
    assert len(lines) == 6  # the two texts given, then the file's four lines, in order
    assert lines[1] == lines[3] == lines[4] == ""
    assert lines[0] == lines[2] == lines[5] != ""
