"""results/ (what the docs and the model cards cite) and experiments/results/ (one-off
studies): every file says what measured it and when, every file a page cites exists, and every
experiment's file is in the experiments' index."""

import json
import re
from itertools import product
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
RESULTS = sorted([*(ROOT / "results").glob("*.json"), *(EXPERIMENTS / "results").glob("*.json")])
CARDS = sorted((ROOT / "src/attnkit/pretrained").glob("*/MODEL_CARD.md"))
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    ROOT / "results/README.md",
    *CARDS,
    *sorted(EXPERIMENTS.rglob("*.md")),
]


def runs_of(path: Path) -> list[dict]:
    data = json.loads(path.read_text())
    return data["runs"] if "runs" in data else [data]


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_each_run_names_its_commit_and_date(path):
    runs = runs_of(path)
    assert runs
    for run in runs:
        assert re.fullmatch(r"[0-9a-f]{7,40}(-dirty)?", run["commit"]), run.get("commit")
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", run["date"]), run.get("date")


def test_no_result_name_carries_a_commit_or_a_repeat_number():
    for path in RESULTS:
        assert not re.search(r"_[0-9a-f]{7}$|_\d$", path.stem), path.name


def cited(text: str) -> set[str]:
    """The results files a page names (``results/NAME.json`` or
    ``experiments/results/NAME.json``, from the repository's root), ``{a,b}`` alternatives
    spelled out; not where a command writes (``--json results/...``: a run may have been split
    into several files, or moved since)."""
    names = set()
    for folder, found in re.findall(
        r"(?<!--json )(?<![\w/-])((?:experiments/)?results/)([\w{},]+\.json)", text
    ):
        parts = re.split(r"\{([^}]*)\}", found)
        choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
        names.update(folder + "".join(c) for c in product(*choices))
    return names


def test_cited_reads_both_folders_and_skips_where_commands_write():
    text = (
        "(results/a.json, experiments/results/b_{x,y}.json; --json results/c.json; "
        "build/results/d.json)"
    )
    assert cited(text) == {
        "results/a.json",
        "experiments/results/b_x.json",
        "experiments/results/b_y.json",
    }


def test_every_results_file_the_docs_cite_exists():
    missing = {
        (str(page.relative_to(ROOT)), name)
        for page in PAGES
        for name in cited(page.read_text())
        if not (ROOT / name).exists()
    }
    assert not missing


def test_every_experiment_file_is_in_the_index():
    index = cited((EXPERIMENTS / "README.md").read_text())
    files = {str(p.relative_to(ROOT)) for p in (EXPERIMENTS / "results").glob("*.json")}
    assert files and files <= index, sorted(files - index)
