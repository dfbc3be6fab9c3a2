"""Translation corpora as Moses, OPUS and WMT ship them (two aligned text files, often
gzipped): the same pairs as attnkit's own TSV, the awkward texts (BOM, CRLF, gzip, NFD),
training and eval through the command line, bad input named, and the pairs kept on disk."""

import gc
import gzip
import json
import logging
import pickle
import unicodedata

import pytest

from attnkit.cli.main import main
from attnkit.data import DataError, read_tsv
from attnkit.data.corpora.reading import choose_format, read_corpus
from attnkit.data.corpora.text_formats import read_moses, read_pairs
from attnkit.data.corpora.text_pairs import TextPairs

PAIRS = [
    ("Guten Morgen.", "Good morning."),
    ("Wie geht's?", "How are you?"),
    ("Ein Café, bitte.", "A coffee, please."),
    ("Viele Grüße", "Best wishes"),
    ("Danke!", "Thanks!"),
    ("Bis morgen.", "See you tomorrow."),
]
TINY = ["--hidden", "8", "--emb", "8", "--batch-size", "4", "--no-progress", "--plot", "0"]


def _corpora(root):
    """PAIRS as a Moses corpus (corpus.de gzipped with a BOM and CRLF, corpus.en plain with
    one line in NFD) and as attnkit's TSV."""
    de = "\ufeff" + "".join(f"{s}\r\n" for s, _ in PAIRS)
    (root / "corpus.de.gz").write_bytes(gzip.compress(de.encode("utf-8")))
    en = [t for _, t in PAIRS]
    en[0] = unicodedata.normalize("NFD", "Góod morning.")
    (root / "corpus.en").write_text("\n".join(en), encoding="utf-8")  # no last line end
    pairs = list(PAIRS)
    pairs[0] = (PAIRS[0][0], "Góod morning.")
    (root / "pairs.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return root / "corpus", root / "pairs.tsv", pairs


def test_moses_gives_the_pairs_of_the_native_tsv(tmp_path, caplog):
    prefix, tsv, pairs = _corpora(tmp_path)
    with caplog.at_level(logging.INFO, logger="attnkit"):
        found = read_corpus("translate", prefix, src_lang="de", tgt_lang="en")
    assert f"{prefix}: read as moses" in caplog.text
    assert isinstance(found, TextPairs) and found == read_tsv(tsv) == pairs
    assert found.origin(2) == f"{tmp_path / 'corpus.de.gz'}:3"
    assert read_moses(tmp_path / "corpus.de.gz", target=tmp_path / "corpus.en") == pairs
    assert read_corpus("translate", tsv) == pairs
    assert choose_format("translate", tsv).name == "tsv"


def test_train_and_eval_on_moses_through_the_command_line(tmp_path, capsys, one_thread):
    prefix, tsv, pairs = _corpora(tmp_path)
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "translate",
                "--train",
                str(prefix),
                "--src-lang",
                "de",
                "--tgt-lang",
                "en",
                "--valid",
                str(tmp_path / "corpus.de.gz"),
                str(tmp_path / "corpus.en"),
                "--out",
                str(out),
                "--steps",
                "3",
                "--eval-every",
                "3",
                *TINY,
            ]
        )
        == 0
    )
    assert "stopped after 3 steps" in capsys.readouterr().out
    config = json.loads((out / "checkpoint" / "config.json").read_text())["config"]
    assert config["data"]["valid"] == f"{tmp_path / 'corpus.de.gz'} {tmp_path / 'corpus.en'}"
    found = []
    for data in (
        ["--data", str(tsv)],
        ["--data", str(prefix), "--src-lang", "de", "--tgt-lang", "en"],
        ["--data", str(tmp_path / "corpus.de.gz"), str(tmp_path / "corpus.en")],
    ):
        assert main(["eval", "--checkpoint", str(out / "checkpoint"), "--json", *data]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["examples"] == len(pairs)
        found.append(result["metrics"])
    assert found[0] == found[1] == found[2]


def test_line_counts_that_differ_name_both_files(tmp_path):
    prefix, _, _ = _corpora(tmp_path)
    (tmp_path / "corpus.en").write_text("one\ntwo\n", encoding="utf-8")
    with pytest.raises(
        DataError,
        match=r"corpus.de.gz has 6 lines but .*corpus.en has 2: a "
        r"Moses corpus holds one sentence per line",
    ):
        read_moses(prefix, src_lang="de", tgt_lang="en")
    (tmp_path / "corpus.en").write_text("".join(f"{i}\n" for i in range(9)), encoding="utf-8")
    with pytest.raises(DataError, match=r"corpus.de.gz has 6 lines but .*corpus.en has 9"):
        read_moses(prefix, src_lang="de", tgt_lang="en")
    assert list(tmp_path.glob("attnkit-pairs-*")) == []


def test_a_prefix_needs_its_languages_and_its_files(tmp_path, capsys):
    prefix, tsv, _ = _corpora(tmp_path)
    with pytest.raises(
        DataError,
        match=r"corpus: a Moses corpus prefix; name its languages "
        r"with --src-lang and --tgt-lang \(found beside it: "
        r"corpus.de.gz, corpus.en\)",
    ):
        read_corpus("translate", prefix)
    with pytest.raises(
        DataError,
        match=r"corpus.fr: not found \(the target side of the Moses "
        r"corpus .*corpus; also looked for .gz, .xz, .bz2\)",
    ):
        read_corpus("translate", prefix, src_lang="de", tgt_lang="fr")
    with pytest.raises(
        ValueError,
        match=r"--src-lang: not an option of the translate format "
        r"tsv",
    ):
        read_corpus("translate", tsv, src_lang="de")
    assert (
        main(
            [
                "train",
                "translate",
                "--train",
                str(prefix),
                "--src-lang",
                "de",
                "--tgt-lang",
                "en",
                "--columns",
                "source=de,target=en",
                "--out",
                str(tmp_path / "r"),
            ]
        )
        == 2
    )
    assert "--columns: not an option of the translate format moses" in capsys.readouterr().err
    assert (
        main(
            [
                "train",
                "translate",
                "--train",
                str(tsv),
                str(tsv),
                str(tsv),
                "--out",
                str(tmp_path / "r"),
            ]
        )
        == 2
    )
    assert "expected one path or two files (moses), got 3" in capsys.readouterr().err


def test_unusable_pairs_are_named_and_blank_pairs_left_out(tmp_path, caplog):
    src, tgt = tmp_path / "a.de", tmp_path / "a.en"
    src.write_bytes(b"eins\n\nzw\xffei\ndrei\n\nvier\n")
    tgt.write_bytes(b"one\n\ntwo\n \nfive\nfour\n")
    with pytest.raises(DataError) as caught:
        read_moses(src, target=tgt)
    assert str(caught.value) == (
        f"{src} + {tgt}: 3 of 5 pairs are unusable (1 not UTF-8, 1 empty target, 1 empty "
        f"source), more than max_unusable=0.01 allows (--max-unusable): {src}:3: not valid "
        f"UTF-8 (byte 2); {tgt}:4: empty target; {src}:5: empty source"
    )
    with caplog.at_level(logging.INFO, logger="attnkit"):
        pairs = read_moses(src, target=tgt, max_unusable=0.6)
    assert list(pairs) == [("eins", "one"), ("vier", "four")]
    assert [pairs.origin(i) for i in range(2)] == [f"{src}:1", f"{src}:6"]
    assert "dropped 3 of 5 pairs as unusable" in caplog.text
    assert "1 lines blank on both sides left out" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="attnkit"):
        assert list(read_moses(src, target=tgt, skip_bad_lines=True)) == list(pairs)
    assert "dropped 3 of 5 pairs as unusable (1 not UTF-8, 1 empty target" in caplog.text
    src.write_text("kurz\n" + "x" * 20 + "\n", encoding="utf-8")
    tgt.write_text("short\nlong\n", encoding="utf-8")
    with pytest.raises(
        DataError,
        match=r"a.de:2: source of 20 characters, more than the limit "
        r"of 10",
    ):
        read_moses(src, target=tgt, max_chars=10)


def test_pairs_on_disk_slice_pickle_and_go_away(tmp_path):
    _, tsv, pairs = _corpora(tmp_path)
    found = read_pairs(tsv)
    assert found[1:4] == pairs[1:4] and found[-1] == pairs[-1]
    assert found[::2].origin(1) == f"{tsv}:3"
    copy = pickle.loads(pickle.dumps(found[2:]))
    assert list(copy) == pairs[2:]
    path = found.path
    assert path.exists()
    del found, copy
    gc.collect()
    assert not path.exists()
