"""The real-print benchmark on tiny ALTO and PAGE-XML documents written here: documents, what
is unusable (counted, never dropped silently), the scores as given and folded."""

import json

import pytest
import torch
from PIL import Image

from attnkit.data import generate_lines
from attnkit.errors import DataError
from attnkit.tasks import metrics
from benchmarks import real_print
from tests.data.pages import alto, draw_page, line_boxes, page, polygon, write_pages

ALPHABET = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'\"-. ")


@pytest.fixture
def corpus(tmp_path):
    """Three documents: ``letters`` (two ALTO pages, 6 lines), ``notes`` (a PAGE-XML page:
    a line with a curly apostrophe, a line without text, one that is fine) and ``lost`` (an
    ALTO page whose image is missing: its 3 lines)."""
    root = tmp_path / "corpus"
    write_pages(root / "letters", "alto", n=2)
    (root / "notes").mkdir()
    draw_page(root / "notes" / "n1.png", ["It’s 12", "x", "net 4.50"])
    boxes = line_boxes(3)
    lines = [("a", polygon(boxes[0]), "It’s 12"), ("b", polygon(boxes[1]), None)]
    lines.append(("c", polygon(boxes[2]), "net 4.50"))
    (root / "notes" / "n1.xml").write_text(page("n1.png", lines), encoding="utf-8")
    write_pages(root / "lost", "alto", n=1)
    (root / "lost" / "p0.png").unlink()
    return root


def test_documents_are_folders_or_the_pages_of_one_name(corpus, tmp_path):
    assert [name for name, _ in real_print.documents(corpus)] == ["letters", "lost", "notes"]
    flat = tmp_path / "flat"
    flat.mkdir()
    for name in ("LETTER_01", "LETTER_02", "MEMO-1", "report"):
        (flat / f"{name}.xml").write_text(alto(f"{name}.png", []), encoding="utf-8")
    assert [(n, [p.stem for p in pages]) for n, pages in real_print.documents(flat)] == [
        ("LETTER", ["LETTER_01", "LETTER_02"]),
        ("MEMO", ["MEMO-1"]),
        ("report", ["report"]),
    ]
    assert [name for name, _ in real_print.documents(corpus / "letters")] == ["letters"]


def test_unusable_pages_and_lines_are_counted_by_kind(corpus):
    docs = {n: real_print.read_document(n, p) for n, p in real_print.documents(corpus)}
    assert len(docs["letters"].texts) == 6 and not docs["letters"].first
    notes = docs["notes"]
    assert notes.texts == ["It’s 12", "net 4.50"] and notes.ids[1].endswith("n1.xml#c")
    assert notes.unusable_lines == {"no text": 1} and notes.first[0].endswith("#b: no text")
    lost = docs["lost"]
    assert lost.unusable_pages == {"page image missing": 1}
    assert lost.lines_on_unusable_pages == 3 and not lost.texts
    with pytest.raises(DataError, match=r"1 of 4 pages are unusable \(1 page image missing\)"):
        real_print.check_unusable(corpus, list(docs.values()), 0.2)
    real_print.check_unusable(corpus, list(docs.values()), 0.3)


def test_characters_outside_the_alphabet_are_errors_as_given_and_folded_away():
    hypotheses, references = ["It's 12", "net 4.50"], ["It’s 12", "net 4.50"]
    row = real_print.score(hypotheses, references, ALPHABET)
    assert row["cer"] == pytest.approx(1 / 15) and row["cer_folded"] == 0.0
    assert (row["outside_chars"], row["outside_lines"], row["outside"]) == (1, 1, "’")
    assert row["outside_chars_folded"] == 0 and row["exact_folded"] == 1.0
    assert row["wer"] == pytest.approx(1 / 4) and row["lines"] == 2 and row["chars"] == 15
    assert real_print.fold("a – b ¬") == "a - b -"
    assert real_print.score(["£5"], ["£5"], ALPHABET)["outside_folded"] == "£"


def test_the_benchmark_scores_every_line_per_document_and_corpus(corpus, tmp_path, capsys):
    out, lines = tmp_path / "real.json", tmp_path / "lines.jsonl"
    argv = ["--data", str(corpus), "--json", str(out), "--lines", str(lines)]
    assert real_print.main(argv) == 0
    table = capsys.readouterr().out
    assert "| builtin:ocr-lines |" in table and "| all |" in table
    rows = {r["document"]: r for r in json.loads(out.read_text())["rows"]}
    assert {n: r["lines"] for n, r in rows.items()} == {
        "letters": 6,
        "lost": 0,
        "notes": 2,
        "all": 8,
    }
    assert rows["all"]["unusable_lines"] == {"no text": 1}
    assert rows["all"]["lines_on_unusable_pages"] == 3 and rows["all"]["pages"] == 4
    assert rows["all"]["outside_chars"] == 1 and "cer" not in rows["lost"]
    read = [json.loads(line) for line in lines.read_text().splitlines()]
    assert len(read) == 8
    for name in ("letters", "notes"):  # each figure is the metric over its lines
        mine = [r for r in read if r["document"] == name]
        refs, texts = [r["reference"] for r in mine], [r["text"] for r in mine]
        assert rows[name]["cer"] == metrics.cer(texts, refs)
    every = ([r["text"] for r in read], [real_print.fold(r["reference"]) for r in read])
    assert rows["all"]["cer_folded"] == metrics.cer(*every)
    assert rows["all"]["wer_folded"] == metrics.wer(*every)


def test_a_beam_decodes_the_ctc_head_by_its_prefix_beam(corpus, tmp_path):
    out = tmp_path / "real.json"
    assert (
        real_print.main(["--data", str(corpus / "letters"), "--beam", "2", "--json", str(out)]) == 0
    )
    rows = json.loads(out.read_text())["rows"]
    assert [r["lines"] for r in rows] == [6, 6] and all("error" not in r for r in rows)
    assert all(0 <= r["cer"] for r in rows)


def _write_lines(folder, names_texts) -> None:
    """Line images rendered by attnkit's generator, each beside its ``.gt.txt``."""
    images = generate_lines(len(names_texts), seed=5, min_chars=4, max_chars=8)
    for (image, _), (name, text) in zip(images, names_texts):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image.numpy(), "L").save(path.with_suffix(".png"))
        if text is not None:
            path.with_suffix(".gt.txt").write_text(text, encoding="utf-8")


def test_line_corpora_are_documents_by_folder_or_by_name_less_its_numbers(tmp_path):
    books = tmp_path / "books"
    _write_lines(
        books, [("1476/GT/0001", "ſyn rede"), ("1476/GT/0002", "loeff"), ("1509/GT/0001", "ok")]
    )
    (books / "1509/GT/0002.gt.txt").write_text("no image", encoding="utf-8")
    docs = real_print.read_corpus(books)
    assert [(d.name, d.texts) for d in docs] == [
        ("1476/GT", ["ſyn rede", "loeff"]),
        ("1509/GT", ["ok"]),
    ]
    assert docs[1].unusable_lines == {"not read": 1} and not docs[0].unusable_lines
    assert all(image.shape[0] == 32 and image.dtype == torch.uint8 for image in docs[0].images)
    flat = tmp_path / "flat"
    lines = [("alexis_ruhe01_1852_0018_022", "Frau"), ("alexis_ruhe01_1852_0035_019", "ſelige")]
    _write_lines(flat, [*lines, ("heine_lieder_1827_0101_003", "Lieder")])
    assert [(d.name, len(d.texts)) for d in real_print.read_corpus(flat)] == [
        ("alexis_ruhe01", 2),
        ("heine_lieder", 1),
    ]
    assert real_print.fold("ſelige ꝛ") == "selige r"


def test_the_benchmark_scores_a_line_corpus_with_no_pages(tmp_path):
    flat, out = tmp_path / "flat", tmp_path / "real.json"
    _write_lines(flat, [("a_0001_01", "Total 12"), ("a_0001_02", "net"), ("b_0002_01", "ſo")])
    assert real_print.main(["--data", str(flat), "--json", str(out)]) == 0
    rows = {r["document"]: r for r in json.loads(out.read_text())["rows"]}
    assert {n: r["lines"] for n, r in rows.items()} == {"a": 2, "b": 1, "all": 3}
    assert rows["all"]["pages"] == 0 and rows["all"]["outside"] == "ſ"
    assert rows["all"]["outside_chars_folded"] == 0
    assert real_print.table_cells(rows["all"])[3] == ""
