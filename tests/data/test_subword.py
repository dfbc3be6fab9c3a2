"""SentencePiece vocabularies: special ids, exact round trips, JSON, tags, errors."""

import base64
import json
import subprocess
import sys

import pytest

from attnkit.data import SubwordVocab, build_vocab, generate_pairs, load_vocab
from attnkit.tokens import BOS, EOS, PAD, UNK

PAIRS = generate_pairs(600, seed=1)


@pytest.mark.parametrize("kind", ["unigram", "bpe"])
def test_round_trip_specials_and_json(kind):
    sources = [s for s, _ in PAIRS]
    tags = sorted({s.split(" ", 1)[0] for s in sources})
    v = build_vocab(sources, kind=kind, size=700, tags=tags)
    assert isinstance(v, SubwordVocab) and 300 < len(v) <= 700
    assert [v.piece(i) for i in (PAD, BOS, EOS, UNK)] == ["<pad>", "<s>", "</s>", "<unk>"]
    for s in sources[:50]:
        ids = v.encode(s, bos=True, eos=True)
        assert ids[0] == BOS and ids[-1] == EOS and UNK not in ids
        assert v.decode(ids + [7, 9]) == s  # stops at EOS
        assert v.pieces(s)[0] == s.split(" ", 1)[0]  # the tag is one piece
        assert len(v.pieces(s)) == len(ids) - 2
    assert sum(len(v.encode(s)) for s in sources) < 0.7 * sum(len(s) for s in sources)
    again = load_vocab(v.to_json())
    assert again.encode(sources[0]) == v.encode(sources[0]) and len(again) == len(v)


def test_unseen_characters_map_to_unk_with_one_warning(caplog):
    v = SubwordVocab.build(["abc abc", "cab"] * 10, size=20)
    with caplog.at_level("WARNING", logger="attnkit"):
        assert UNK in v.encode("abz") and UNK in v.encode("zzz")
    assert len(caplog.records) == 1 and "unseen" in caplog.records[0].message


def test_training_is_deterministic():
    texts = [t for _, t in PAIRS]
    assert SubwordVocab.build(texts, size=100).model == SubwordVocab.build(texts, size=100).model


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: SubwordVocab.build(["abc"], size=4), "size: expected an int >= 8, got 4"),
        (lambda: SubwordVocab.build(["abcdefgh"], size=10), "size: expected at least 12 .*got 10"),
        (lambda: SubwordVocab.build(["abc"], model_type="word"), "model_type: expected one of"),
        (lambda: SubwordVocab.build(["", ""]), "texts: expected at least one non-empty text"),
        (lambda: build_vocab(["abc"], kind="wordpiece"), "kind: expected char, unigram or bpe"),
        (lambda: SubwordVocab.from_json({"type": "char"}), "expected a SentencePiece vocabulary"),
    ],
)
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_the_settings_a_vocabulary_was_built_with_are_kept():
    from attnkit.data import CharVocab, WordVocab, vocab_settings

    texts = ["<en> twenty-three", "<en> forty-two", "<fr> vingt-trois"] * 10
    for kind in ("unigram", "bpe"):
        vocab = SubwordVocab.build(texts, size=300, model_type=kind)
        again = load_vocab(vocab.to_json())
        assert vocab_settings(vocab) == vocab_settings(again) == {"kind": kind, "size": 300}
        older = {k: v for k, v in vocab.to_json().items() if k != "size"}  # saved without it
        assert vocab_settings(load_vocab(older)) == {"kind": kind}
    assert vocab_settings(CharVocab.build(texts)) == {"kind": "char"}
    assert vocab_settings(WordVocab.build(texts)) == {"kind": "word"}


@pytest.mark.parametrize("kind", ["unigram", "bpe"])
def test_sampled_segmentations_vary_decode_to_the_text_and_repeat_by_seed(kind):
    sources = [s for s, _ in PAIRS]
    v = build_vocab(sources, kind=kind, size=700)
    texts = sources[:40]
    drawn = v.encode_sampled(texts, alpha=0.3, seed=5)
    assert [v.decode(ids) for ids in drawn] == texts
    assert UNK not in {i for ids in drawn for i in ids}
    # the one best segmentation is one of many: a draw over 40 sentences differs from it,
    # and has more pieces (the draws reach the pieces of a few characters)
    assert drawn != [v.encode(t) for t in texts]
    assert sum(map(len, drawn)) > sum(len(v.encode(t)) for t in texts)
    assert v.encode_sampled(texts, alpha=0.3, seed=5) == drawn
    assert v.encode_sampled(texts, alpha=0.3, seed=6) != drawn


@pytest.mark.parametrize("alpha", [0, -0.1, 1.5, True, "0.1"])
def test_sampling_refuses_an_alpha_outside_0_1(alpha):
    v = SubwordVocab.build(["abc abc", "cab"] * 10, size=20)
    with pytest.raises(ValueError, match=r"alpha: expected a number in \(0, 1\], got"):
        v.encode_sampled(["abc"], alpha=alpha, seed=0)


def test_a_unigram_draw_is_the_same_in_another_process():
    """What resuming a run or a data worker relies on: the draw of a seed does not depend on
    the process (SentencePiece's own sampler mixes in something of the process)."""
    v = build_vocab([s for s, _ in PAIRS], kind="unigram", size=700)
    texts = [s for s, _ in PAIRS][:20]
    code = (
        "import base64, json, sys\n"
        "from attnkit.data.vocab.subword import SubwordVocab\n"
        "v = SubwordVocab(base64.b64decode(sys.argv[1]))\n"
        "print(json.dumps(v.encode_sampled(json.loads(sys.argv[2]), alpha=0.3, seed=11)))\n"
    )
    model = base64.b64encode(v.model).decode()
    other = subprocess.run(
        [sys.executable, "-c", code, model, json.dumps(texts)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(other.stdout) == v.encode_sampled(texts, alpha=0.3, seed=11)
