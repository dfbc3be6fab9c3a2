"""Every Python example in README.md and in the site's pages that a reader runs as written
(Getting started, Using attention) runs; every attnkit command in README.md, in the guides and
in the model cards is one the command line takes (its options exist, their values parse,
decoding options combine)."""

import re
import shlex
from pathlib import Path

import pytest

from attnkit.cli import common
from attnkit.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
RUN = ["README.md", "docs/index.md", "docs/attention.md"]  # their Python blocks run
PARSE = (
    RUN
    + [
        f"docs/{name}.md"
        for name in (  # their commands parse
            "translation",
            "ocr",
            "speech",
            "caption",
            "vqa",
            "lm",
            "images",
            "training",
            "decoding",
            "tools",
            "deploy",
            "models",
        )
    ]
    + sorted(  # and the model cards, shipped in the package
        str(card.relative_to(ROOT))
        for card in (ROOT / "src/attnkit/pretrained").glob("*/MODEL_CARD.md")
    )
)
ENTRY = {"attnkit", "attnkit)", "attnkit.cli.main"}  # attnkit, $(which attnkit), python -m


def _blocks(name: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (ROOT / name).read_text(), flags=re.S)


BLOCKS = [(name, i, block) for name in RUN for i, block in enumerate(_blocks(name, "python"))]


def _commands(name: str) -> list[list[str]]:
    commands = []
    for block in _blocks(name, "sh"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            cuts = [-1] + [i for i, w in enumerate(words) if w in ("&&", "||", ";", "|")]
            for start, end in zip(cuts, cuts[1:] + [len(words)]):  # each command of the line
                part = words[start + 1 : end]
                starts = [i for i, w in enumerate(part) if w in ENTRY]
                if starts and part[starts[0] + 1 :]:
                    commands.append(part[starts[0] + 1 :])
    return commands


COMMANDS = [(name, c) for name in PARSE for c in _commands(name)]


@pytest.mark.parametrize("name", RUN)
def test_each_page_has_examples(name):
    assert _blocks(name, "python")


@pytest.mark.parametrize("name, index, block", BLOCKS, ids=[f"{n} {i}" for n, i, _ in BLOCKS])
def test_example_runs(name, index, block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(block, f"{name} block {index}", "exec"), {})


def test_readme_shows_every_command():
    verbs = {tuple(c[:2]) if c[0] == "train" else (c[0],) for c in _commands("README.md")}
    assert {
        ("train", "translate"),
        ("train", "ocr"),
        ("train", "asr"),
        ("translate",),
        ("read",),
        ("transcribe",),
        ("eval",),
        ("export",),
    } <= verbs


@pytest.mark.parametrize(
    "name, command", COMMANDS, ids=[f"{n}: {' '.join(c)}" for n, c in COMMANDS]
)
def test_command_parses(name, command):
    args = build_parser().parse_args(command)
    if hasattr(args, "default_beam"):
        if args.default_beam is None:  # export: the checkpoint's task's, known when it is read
            args.default_beam = common.TASK_BEAM["translate"]
        common.decoding(args)


def test_readme_lists_every_corpus_format_with_a_two_line_example():
    from attnkit.data.corpora.reading import FORMATS

    rows = re.findall(
        r"^\| (\w+) \| `([\w-]+)` \| [^|]+ \| (.+) \|$",
        (ROOT / "README.md").read_text(),
        flags=re.M,
    )
    listed = {(task, name): example for task, name, example in rows if task != "task"}
    assert set(listed) == set(FORMATS)
    assert all(example.count("<br>") == 1 for example in listed.values())
