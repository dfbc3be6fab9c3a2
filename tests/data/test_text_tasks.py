"""Built-in tasks, vocabularies and TSV files."""

import datetime
import logging
import random
import warnings

import pytest
import torch
from num2words import num2words

from attnkit.data import (
    DATE_LOCALES,
    NUMBER_LANGUAGES,
    CharVocab,
    DataError,
    generate_pairs,
    pad_batch,
    read_tsv,
)
from attnkit.data.worlds.text_tasks import split_of


def test_generation_is_deterministic_and_correct():
    a = generate_pairs(300, seed=3)
    assert a == generate_pairs(300, seed=3)
    assert a != generate_pairs(300, seed=4)
    assert len({s for s, _ in a}) == 300
    tasks = {"numbers": 0, "dates": 0}
    for source, target in a:
        tag, _, text = source.partition(" ")
        lang = tag[1:-1]
        if target.isdigit():
            tasks["numbers"] += 1
            assert lang in NUMBER_LANGUAGES and num2words(int(target), lang=lang) == text
        else:
            tasks["dates"] += 1
            assert lang in DATE_LOCALES and datetime.date.fromisoformat(target)
    assert min(tasks.values()) > 100


def test_splits_never_share_an_example():
    train = {s for s, _ in generate_pairs(3000, split="train", seed=0)}
    valid = generate_pairs(300, split="valid", seed=0)
    test = generate_pairs(300, split="test", seed=0)
    assert not train & {s for s, _ in valid} and not train & {s for s, _ in test}
    assert not {s for s, _ in valid} & {s for s, _ in test}
    assert all(split_of(s) == "valid" for s, _ in valid)


def test_reverse_direction_has_one_target_per_source():
    pairs = generate_pairs(500, seed=1, direction="reverse")
    sources = {}
    for s, t in pairs:
        assert sources.setdefault(s, t) == t
    forward = generate_pairs(500, seed=1)
    assert [t for _, t in pairs] == [s.partition(" ")[2] for s, _ in forward]


def test_vetted_number_languages_are_deterministic_and_unambiguous():
    rng = random.Random(0)
    nums = [rng.randrange(0, 10**7) for _ in range(150)] + list(range(0, 40))
    for lang in NUMBER_LANGUAGES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = [num2words(n, lang=lang) for n in nums]
            b = [num2words(n, lang=lang) for n in reversed(nums)][::-1]
        assert a == b, f"{lang}: stateful"
        assert len(set(a)) == len(set(nums)), f"{lang}: two numbers share their words"


def test_char_vocab_round_trip_and_unknown_characters(caplog):
    pairs = generate_pairs(200, seed=2)
    tags = sorted({s.split(" ")[0] for s, _ in pairs})
    vocab = CharVocab.build([s for s, _ in pairs] + [t for _, t in pairs], tags=tags)
    for s, _ in pairs[:50]:
        ids = vocab.encode(s, bos=True, eos=True)
        assert ids[0] == 1 and ids[-1] == 2 and vocab.decode(ids) == s
    again = CharVocab.from_json(vocab.to_json())
    assert again.symbols == vocab.symbols and again.encode(pairs[0][0]) == vocab.encode(pairs[0][0])
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        ids = vocab.encode("☃x☃")
        vocab.encode("☄")
    assert ids[0] == 3 and ids[2] == 3
    assert len([r for r in caplog.records if "unseen" in r.message]) == 1
    with pytest.raises(ValueError, match="^vocab: expected a character vocabulary"):
        CharVocab.from_json({"type": "sentencepiece"})


def test_pad_batch():
    tokens, lengths = pad_batch([[5, 6, 7], [8]])
    assert torch.equal(tokens, torch.tensor([[5, 6, 7], [8, 0, 0]]))
    assert lengths.tolist() == [3, 1]


def test_read_tsv_reports_file_and_line(tmp_path, caplog):
    good = tmp_path / "good.tsv"
    good.write_text("un\t1\n\ndeux\t2\r\n", encoding="utf-8")
    assert read_tsv(good) == [("un", "1"), ("deux", "2")]
    cases = [
        (b"un\t1\ntrois 3\n", r"bad.tsv:2: expected source<TAB>target, found 0 tabs"),
        (b"un\t1\nx\ty\tz\n", r"bad.tsv:2: expected source<TAB>target, found 2 tabs"),
        (b"\t1\n", r"bad.tsv:1: empty source"),
        (b"un\t \n", r"bad.tsv:1: empty target"),
        (b"un\t1\n\xff\xfe\t2\n", r"bad.tsv:2: not valid UTF-8"),
    ]
    bad = tmp_path / "bad.tsv"
    for data, match in cases:
        bad.write_bytes(data)
        with pytest.raises(DataError, match=match):
            read_tsv(bad)
    bad.write_bytes(b"un\t1\ntrois 3\n\xff\t2\ndeux\t2\n")
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        assert read_tsv(bad, skip_bad_lines=True) == [("un", "1"), ("deux", "2")]
    assert "skipped 2 bad lines (first at line 2)" in caplog.text
    with pytest.raises(DataError, match="missing.tsv: cannot read"):
        read_tsv(tmp_path / "missing.tsv")


def test_read_tsv_drops_a_byte_order_mark_and_reports_tab_only_lines(tmp_path):
    f = tmp_path / "bom.tsv"
    f.write_bytes("\ufeff<fr> un\t1\n".encode("utf-8"))
    assert read_tsv(f) == [("<fr> un", "1")]
    f.write_bytes(b"un\t1\n\t\n")
    with pytest.raises(DataError, match=r"bom.tsv:2: empty source"):
        read_tsv(f)


def test_other_versions_of_the_data_s_libraries_are_named_once(monkeypatch, caplog):
    """num2words and babel are ranges in the dependencies; the built-in translation data is
    defined by the exact versions of text_tasks.DATA_VERSIONS, and another one is named in
    a warning (once), since its words or formats may differ."""
    from attnkit.data.worlds import text_tasks

    text_tasks.check_data_versions.cache_clear()
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        generate_pairs(2)
    assert "defined with" not in caplog.text  # the versions installed here are the data's
    monkeypatch.setitem(text_tasks.DATA_VERSIONS, "babel", "0.1")
    text_tasks.check_data_versions.cache_clear()
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        generate_pairs(2)
        generate_pairs(2, split="valid")
    assert caplog.text.count("babel") == 1
    assert "the built-in translation data is defined with babel 0.1" in caplog.text
    text_tasks.check_data_versions.cache_clear()


def test_the_dependency_ranges_hold_the_data_s_versions():
    from pathlib import Path

    from packaging.requirements import Requirement  # pytest's own dependency

    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11")

    from attnkit.data.worlds.text_tasks import DATA_VERSIONS

    project = Path(__file__).resolve().parents[2] / "pyproject.toml"
    wanted = {
        Requirement(r).name: Requirement(r).specifier
        for r in tomllib.loads(project.read_text())["project"]["dependencies"]
    }
    for name, version in DATA_VERSIONS.items():
        assert version in wanted[name], (name, version, wanted[name])
