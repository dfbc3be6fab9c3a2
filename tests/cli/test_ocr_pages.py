"""ALTO and PAGE-XML pages through the command line: train ocr on pages, eval on held-out
pages, read a page into a copy of its XML (never the page itself), --json per line."""

import json

import pytest

from attnkit.cli.common import synthetic_count
from attnkit.cli.main import main
from attnkit.data import read_tsv
from attnkit.data.corpora.page_xml import parse_page
from attnkit.train import load_checkpoint
from tests.cli.test_ocr import TINY
from tests.data.pages import write_pages


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("pages")
    write_pages(root / "train", "alto", n=2)
    write_pages(root / "test", "page", n=1)
    out = root / "run"
    args = ["train", "ocr", "--train", str(root / "train"), "--valid", str(root / "train")]
    assert main([*args, "--out", str(out), "--steps", "2", "--eval-every", "2", *TINY]) == 0
    return root, out / "checkpoint"


def test_eval_on_pages(trained, capsys):
    root, checkpoint = trained
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(checkpoint), "--data", str(root / "test")]) == 0
    assert "test: 3 examples" in capsys.readouterr().out  # the page held out, its 3 lines


@pytest.mark.parametrize("folder,kind", [("train", "alto"), ("test", "page")])
def test_read_writes_a_copy_of_the_page(trained, capsys, folder, kind):
    root, checkpoint = trained
    page = root / folder / "p0.xml"
    before = page.read_bytes()
    read = ["read", "--checkpoint", str(checkpoint), str(page)]
    capsys.readouterr()
    assert main([*read, "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["id"] for r in records] == ["l0_0", "l0_1", "l0_2"]
    assert records[1]["box"] == [8, 44, 200, 72] and records[0]["input"].endswith("p0.xml#l0_0")
    copy = root / folder / "p0.pred.xml"
    assert page.read_bytes() == before
    assert [line.text for line in parse_page(copy).lines] == [
        " ".join(r["text"].split()) for r in records
    ]
    assert parse_page(copy).kind == kind
    assert main(read) == 2  # the copy is there: never replaced without --force
    assert "p0.pred.xml exists; pass --force" in capsys.readouterr().err
    assert main([*read, "--force"]) == 0
    out = root / f"out-{folder}"
    assert main([*read, "--out", str(out), "--format", kind]) == 0
    assert (out / "p0.xml").exists() and page.read_bytes() == before
    other = "page" if kind == "alto" else "alto"
    assert main([*read, "--out", str(out), "--format", other]) == 2
    assert f"expected --format {kind}" in capsys.readouterr().err
    assert main([*read, "--out", str(root / folder), "--force"]) == 2  # the page itself
    assert "is the page" in capsys.readouterr().err
    assert page.read_bytes() == before


def test_read_names_a_page_without_its_image(trained, capsys, tmp_path):
    _, checkpoint = trained
    (page,) = write_pages(tmp_path, "alto", n=1)
    (tmp_path / "p0.png").unlink()
    assert main(["read", "--checkpoint", str(checkpoint), str(page)]) == 2
    assert "p0.xml: page image 'p0.png' not found" in capsys.readouterr().err


def test_synthetic_share_mixes_built_in_lines_with_the_pages(tmp_path, capsys):
    """Half of the training lines built-in with --synthetic-share 0.5 (the 6 lines of two
    pages and 6 rendered ones), validation on the pages alone; refused without --train."""
    write_pages(tmp_path / "train", "alto", n=2)
    out = tmp_path / "run"
    args = ["train", "ocr", "--train", str(tmp_path / "train"), "--valid", str(tmp_path / "train")]
    mix = ["--synthetic-share", "0.5", "--max-chars", "12", "--steps", "1", "--eval-every", "1"]
    assert main([*args, *mix, "--out", str(out), *TINY]) == 0
    data = load_checkpoint(out / "checkpoint").config["data"]
    assert data["n_synthetic"] == 6 and data["synthetic_share"] == 0.5
    rendered = list((out / "lines").iterdir())  # the built-in lines' cache
    assert len(rendered) == 1 and len(read_tsv(rendered[0] / "labels.tsv")) == 6
    assert main(["train", "ocr", *mix, "--out", str(tmp_path / "r2"), *TINY]) == 2
    assert "--synthetic-share: mixes built-in lines with --train's" in capsys.readouterr().err


def test_synthetic_count_makes_the_share():
    assert [synthetic_count(519, p) for p in (0.0, 0.25, 0.5, 0.75)] == [0, 173, 519, 1557]
    with pytest.raises(ValueError, match="expected a share from 0 to below 1, got 1"):
        synthetic_count(10, 1.0)


def test_the_real_print_recipe_needs_its_corpus(tmp_path, capsys):
    assert main(["train", "ocr", "--recipe", "ocr-real", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "attnkit: --recipe ocr-real: give the corpus: --train train.lst --valid valid.lst "
        "(lists of ALTO or PAGE-XML documents: docs/ocr.md)\n"
    )
