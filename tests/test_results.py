"""results/: every file says what measured it and when, and every file the docs cite exists."""

import json
import re
from itertools import product
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = sorted((ROOT / "results").glob("*.json"))
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "results/README.md"]


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
    """The results/ files a page names, ``{a,b}`` alternatives spelled out; not where a
    command writes (``--json results/...``: a run may have been split into several files)."""
    names = set()
    for found in re.findall(r"(?<!--json )results/([\w{},]+\.json)", text):
        parts = re.split(r"\{([^}]*)\}", found)
        choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
        names.update("".join(c) for c in product(*choices))
    return names


def test_every_results_file_the_docs_cite_exists():
    missing = {(page.name, name) for page in PAGES for name in cited(page.read_text())
               if not (ROOT / "results" / name).exists()}
    assert not missing
