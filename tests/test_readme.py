"""Every Python example in README.md runs; every attnkit command in it is one the command line
takes (its options exist, their values parse, decoding options combine)."""

import re
import shlex
from pathlib import Path

import pytest

from attnkit.cli import common
from attnkit.cli.main import build_parser

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
SHELL = re.findall(r"```sh\n(.*?)```", README.read_text(), flags=re.S)
ENTRY = {"attnkit", "attnkit)", "attnkit.cli.main"}  # attnkit, $(which attnkit), python -m


def _commands() -> list[list[str]]:
    commands = []
    for block in SHELL:
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            starts = [i for i, w in enumerate(words) if w in ENTRY]
            if starts:
                commands.append(words[starts[0] + 1 :])
    return commands


def test_readme_has_examples():
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(BLOCKS[index], f"README.md block {index}", "exec"), {})


def test_readme_shows_every_command():
    verbs = {tuple(c[:2]) if c[0] == "train" else (c[0],) for c in _commands()}
    assert {("train", "translate"), ("train", "ocr"), ("train", "asr"), ("translate",),
            ("read",), ("transcribe",), ("eval",), ("export",)} <= verbs


@pytest.mark.parametrize("command", _commands(), ids=" ".join)
def test_readme_command_parses(command):
    args = build_parser().parse_args(command)
    if hasattr(args, "default_beam"):
        if args.default_beam is None:  # export: the checkpoint's task's, known when it is read
            args.default_beam = common.TASK_BEAM["translate"]
        common.decoding(args)
