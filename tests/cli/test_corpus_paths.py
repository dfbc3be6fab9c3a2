"""``attnkit train`` and ``attnkit eval`` read what the user's own corpus names: absolute paths
and paths outside its folder, in every format that names files (the miniature corpora of
tests/data/test_paths.py); ``--confine`` reads only inside the folder and its refusals name
it; ``--anywhere``, the old way to allow them, is still taken."""

import json

import pytest

from attnkit.cli.main import main
from tests.cli.test_asr import TINY
from tests.data.test_paths import FORMATS, corpus_naming

pytestmark = pytest.mark.usefixtures("one_thread")

CHECKPOINTS = {"asr": "builtin:asr-digits", "ocr": "builtin:ocr-lines"}


def _eval(checkpoint, path, *options) -> int:
    return main(["eval", "--checkpoint", str(checkpoint), "--data", str(path), "--json", *options])


@pytest.mark.parametrize("fmt", ["kaldi", "nemo", "manifest", "commonvoice", "labels", "coco"])
def test_eval_reads_a_corpus_naming_its_files_elsewhere_and_confine_refuses_it(
    tmp_path, fmt, capsys, request
):
    *_, task, name, _ = FORMATS[fmt]
    checkpoint = CHECKPOINTS.get(task) or request.getfixturevalue("tiny_captioner")
    capsys.readouterr()  # what training the captioner printed
    path, named, folder = corpus_naming(tmp_path, fmt, "absolute elsewhere")
    assert _eval(checkpoint, path, "--format", name) == 0
    assert json.loads(capsys.readouterr().out)["examples"] == 1
    assert _eval(checkpoint, path, "--format", name, "--confine") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{named!r} is outside the data folder {folder}" in err
    assert "leave out --confine (confine=True) to read it" in err


def test_eval_confined_reads_absolute_names_inside_the_folder(tmp_path, capsys):
    path, _, _ = corpus_naming(tmp_path, "kaldi", "absolute inside")
    assert _eval("builtin:asr-digits", path, "--confine") == 0
    assert json.loads(capsys.readouterr().out)["examples"] == 1


def test_anywhere_is_still_taken_and_contradicts_confine(tmp_path, capsys):
    path, _, _ = corpus_naming(tmp_path, "nemo", "absolute elsewhere")
    assert _eval("builtin:asr-digits", path, "--anywhere") == 0
    assert json.loads(capsys.readouterr().out)["examples"] == 1
    assert _eval("builtin:asr-digits", path, "--anywhere", "--confine") == 2
    assert (
        "--anywhere: reads files wherever the corpus names them, as --confine forbids; "
        "give one" in capsys.readouterr().err
    )


def test_train_reads_a_manifest_of_absolute_paths(tmp_path, capsys):
    path, _, _ = corpus_naming(tmp_path, "manifest", "absolute elsewhere")
    assert (
        main(
            [
                "train",
                "asr",
                "--train",
                str(path),
                "--out",
                str(tmp_path / "run"),
                "--steps",
                "1",
                *TINY,
            ]
        )
        == 0
    )
    assert "stopped after 1 steps" in capsys.readouterr().out
    assert (
        main(
            [
                "train",
                "asr",
                "--train",
                str(path),
                "--out",
                str(tmp_path / "run2"),
                "--steps",
                "1",
                "--confine",
                *TINY,
            ]
        )
        == 2
    )
    assert "leave out --confine" in capsys.readouterr().err
