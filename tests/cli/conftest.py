import pytest

from attnkit.cli.main import main

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven"]


@pytest.fixture(scope="session")
def tiny_translator(tmp_path_factory):
    """A translate checkpoint trained for 2 steps on 8 number words (hidden size 8); copy it
    before changing it."""
    folder = tmp_path_factory.mktemp("tiny_translator")
    tsv = folder / "pairs.tsv"
    tsv.write_text("".join(f"<en> {w}\t{n}\n" for n, w in enumerate(WORDS)), encoding="utf-8")
    assert main(["train", "translate", "--train", str(tsv), "--out", str(folder / "run"),
                 "--steps", "2", "--batch-size", "4", "--hidden", "8", "--emb", "8",
                 "--no-progress", "--plot", "0"]) == 0
    return folder / "run" / "checkpoint"
