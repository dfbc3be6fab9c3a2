"""WordVocab: words and punctuation to ids and back, unknown words, saved and loaded."""

import pytest

from attnkit.data import WordVocab, load_vocab
from attnkit.data.vocab.vocabularies import words
from attnkit.tokens import BOS, EOS, UNK


def test_words_split_punctuation_and_lower_case():
    assert words("Is the RED circle left of it?") == [
        "is",
        "the",
        "red",
        "circle",
        "left",
        "of",
        "it",
        "?",
    ]
    assert words("  a,b  ") == ["a", ",", "b"] and words("") == []


def test_encode_decode_round_trip_and_unknown_words():
    vocab = WordVocab.build(["a red circle", "where is it ?"])
    ids = vocab.encode("Where is a red circle?", bos=True, eos=True)
    assert ids[0] == BOS and ids[-1] == EOS and UNK not in ids
    assert vocab.decode(ids) == "where is a red circle ?"
    assert vocab.encode("a blue circle")[1] == UNK
    assert vocab.unknown("a blue, blue square") == ["blue", ",", "square"]
    assert vocab.piece(UNK) == "<unk>" and vocab.piece(10_000) == "<unk>"
    assert vocab.pieces("A red") == ["a", "red"]


def test_saved_and_loaded_by_type():
    vocab = WordVocab.build(["b a", "c"])
    again = load_vocab(vocab.to_json())
    assert isinstance(again, WordVocab) and again.symbols == vocab.symbols
    with pytest.raises(ValueError, match="vocab: expected a word vocabulary"):
        WordVocab.from_json({"type": "char", "symbols": []})


def test_a_character_vocabulary_holds_characters_and_its_tags():
    from attnkit.data import CharVocab

    vocab = CharVocab.build(["<fr> deux", "12"], tags=["<fr>"])
    assert load_vocab(vocab.to_json()).symbols == vocab.symbols  # a tag is one symbol
    data = vocab.to_json()
    data["symbols"][0] = "ab"
    with pytest.raises(
        ValueError,
        match=r"^vocab: 'symbols' holds 'ab': expected one character "
        r"or one of the tags \('<fr>'\)$",
    ):
        load_vocab(data)
    data["symbols"][0] = "x" * 10**6
    with pytest.raises(ValueError) as info:
        load_vocab(data)
    assert len(str(info.value)) < 400
