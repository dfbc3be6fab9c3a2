"""Character and word vocabularies, and padding."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence

import torch

from attnkit.checks import quoted
from attnkit.data.vocab.subword import SubwordVocab
from attnkit.tokens import BOS, EOS, PAD, SPECIALS, UNK, content_ids

__all__ = [
    "CharVocab",
    "WordVocab",
    "build_vocab",
    "load_vocab",
    "pad_batch",
    "vocab_settings",
    "words",
]

log = logging.getLogger("attnkit")


class CharVocab:
    """Characters to ids, with ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2, ``<unk>`` = 3.

    A task tag such as ``<fr>`` at the start of a text is one token when ``tags`` lists it.

    Example:
        >>> v = CharVocab.build(["<fr> deux", "12"], tags=["<fr>"])
        >>> v.decode(v.encode("<fr> deux"))
        '<fr> deux'
    """

    def __init__(self, symbols: Sequence[str], tags: Sequence[str] = ()):
        self.symbols = list(SPECIALS) + [s for s in symbols if s not in SPECIALS]
        self.index = {s: i for i, s in enumerate(self.symbols)}
        self.tags = sorted(tags, key=len, reverse=True)
        self._warned = False

    @classmethod
    def build(cls, texts: Iterable[str], tags: Sequence[str] = ()) -> CharVocab:
        chars = set()
        for text in texts:
            chars.update(cls._split(text, tags))
        return cls(sorted(chars - set(tags)) + sorted(tags), tags)

    @staticmethod
    def _split(text: str, tags: Sequence[str]) -> list[str]:
        for tag in sorted(tags, key=len, reverse=True):
            if text.startswith(tag):
                return [tag] + list(text[len(tag) :])
        return list(text)

    def __len__(self) -> int:
        return len(self.symbols)

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        """Ids of ``text``; unseen characters become ``<unk>`` (with one warning per vocab)."""
        ids = [self.index.get(s, UNK) for s in self._split(text, self.tags)]
        if UNK in ids and not self._warned:
            unseen = sorted({s for s in self._split(text, self.tags) if s not in self.index})
            log.warning(
                "characters unseen in training map to <unk>: %s (further ones are not reported)",
                "".join(unseen),
            )
            self._warned = True
        return ([BOS] if bos else []) + ids + ([EOS] if eos else [])

    def piece(self, i: int) -> str:
        """The symbol of id ``i`` (for plot labels)."""
        i = int(i)
        return self.symbols[i] if 0 <= i < len(self.symbols) else SPECIALS[UNK]

    def pieces(self, text: str) -> list[str]:
        """The symbols ``text`` is split into (one per encoded id; a tag is one)."""
        return self._split(text, self.tags)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` up to the first ``<eos>``; ``<pad>``/``<bos>`` dropped."""
        return "".join(self.piece(i) for i in content_ids(ids))

    def to_json(self) -> dict:
        return {"type": "char", "symbols": self.symbols[len(SPECIALS) :], "tags": self.tags}

    @classmethod
    def from_json(cls, data: dict) -> CharVocab:
        """The vocabulary ``to_json()`` wrote.

        Raises:
            ValueError: not a character vocabulary, ``symbols`` / ``tags`` not lists of
                distinct non-empty strings, or a symbol that is neither one character nor
                one of the tags.
        """
        if not isinstance(data, dict) or data.get("type") != "char":
            raise ValueError(f"vocab: expected a character vocabulary, got {quoted(data)}")
        _check_symbols(data, ("symbols", "tags"))
        tags = data.get("tags", [])
        wrong = next((s for s in data.get("symbols", []) if len(s) > 1 and s not in tags), None)
        if wrong is not None:  # text is split into characters: it would never be read
            listed = f" or one of the tags ({', '.join(map(quoted, tags))})" if tags else ""
            raise ValueError(
                f"vocab: 'symbols' holds {quoted(wrong)}: expected one character{listed}"
            )
        return cls(data["symbols"], tags)


def _check_symbols(data: dict, keys: tuple[str, ...]) -> None:
    """Refuse entries ``keys`` of a saved vocabulary that are not lists of distinct non-empty
    strings (an entry left out is an empty list)."""
    for key in keys:
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
            raise ValueError(
                f"vocab: {key!r} must be a list of non-empty strings, got {quoted(value)}"
            )
        if len(set(value)) != len(value):
            raise ValueError(f"vocab: {key!r} lists a symbol twice")


def words(text: str) -> list[str]:
    """``text`` lower-cased and split into words and punctuation marks.

    Example:
        >>> words("Where is the red circle?")
        ['where', 'is', 'the', 'red', 'circle', '?']
    """
    return re.findall(r"[^\W_]+|[^\w\s]|_", text.lower())


class WordVocab:
    """Words (see :func:`words`) to ids, with ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2,
    ``<unk>`` = 3; decoded texts are the words joined by spaces.

    Example:
        >>> v = WordVocab.build(["a red circle", "a blue square ."])
        >>> v.decode(v.encode("A red square."))
        'a red square .'
        >>> v.unknown("a green circle")
        ['green']
    """

    def __init__(self, symbols: Sequence[str]):
        self.symbols = list(SPECIALS) + [s for s in symbols if s not in SPECIALS]
        self.index = {s: i for i, s in enumerate(self.symbols)}

    @classmethod
    def build(cls, texts: Iterable[str]) -> WordVocab:
        return cls(sorted({w for text in texts for w in words(text)}))

    def __len__(self) -> int:
        return len(self.symbols)

    def unknown(self, text: str) -> list[str]:
        """The words of ``text`` outside the vocabulary, in order, each once."""
        return list(dict.fromkeys(w for w in words(text) if w not in self.index))

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        """Ids of the words of ``text``; unknown words become ``<unk>``."""
        ids = [self.index.get(w, UNK) for w in words(text)]
        return ([BOS] if bos else []) + ids + ([EOS] if eos else [])

    def piece(self, i: int) -> str:
        """The word of id ``i`` (for plot labels)."""
        i = int(i)
        return self.symbols[i] if 0 <= i < len(self.symbols) else SPECIALS[UNK]

    def pieces(self, text: str) -> list[str]:
        """The words ``text`` is split into (one per encoded id)."""
        return words(text)

    def decode(self, ids: Iterable[int]) -> str:
        """Words of ``ids`` up to the first ``<eos>``, joined by spaces; ``<pad>``/``<bos>``
        dropped."""
        return " ".join(self.piece(i) for i in content_ids(ids))

    def to_json(self) -> dict:
        return {"type": "word", "symbols": self.symbols[len(SPECIALS) :]}

    @classmethod
    def from_json(cls, data: dict) -> WordVocab:
        if not isinstance(data, dict) or data.get("type") != "word":
            raise ValueError(f"vocab: expected a word vocabulary, got {quoted(data)}")
        _check_symbols(data, ("symbols",))
        return cls(data.get("symbols", []))


def build_vocab(
    texts: Sequence[str], *, kind: str = "char", size: int = 1000, tags: Sequence[str] = ()
):
    """A :class:`CharVocab` (``kind="char"``) or a SentencePiece
    :class:`attnkit.data.SubwordVocab` (``"unigram"`` or ``"bpe"``, at most ``size`` pieces)."""
    if kind == "char":
        return CharVocab.build(texts, tags=tags)
    if kind in ("unigram", "bpe"):
        return SubwordVocab.build(texts, size=size, model_type=kind, tags=tags)
    raise ValueError(f"kind: expected char, unigram or bpe, got {kind!r}")


def load_vocab(data: dict):
    """The vocabulary saved by ``to_json()``: character, word or SentencePiece."""
    if isinstance(data, dict) and data.get("type") == "sentencepiece":
        return SubwordVocab.from_json(data)
    if isinstance(data, dict) and data.get("type") == "word":
        return WordVocab.from_json(data)
    return CharVocab.from_json(data)


def vocab_settings(vocab) -> dict:
    """The :func:`build_vocab` arguments a vocabulary was built with, as far as it keeps
    them: ``{"kind": "char"}``, ``{"kind": "bpe", "size": 1000}`` (SentencePiece: ``size``
    when it was saved), ``{"kind": "word"}`` for a :class:`WordVocab`."""
    if isinstance(vocab, SubwordVocab):
        return {"kind": vocab.model_type, **({} if vocab.size is None else {"size": vocab.size})}
    return {"kind": "word" if isinstance(vocab, WordVocab) else "char"}


def pad_batch(seqs: Sequence[Sequence[int]], pad: int = PAD) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens (B, T), lengths (B,))`` with ``T`` the longest sequence, padded with ``pad``."""
    if not seqs:
        raise ValueError("seqs: expected at least one sequence")
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    out = torch.full((len(seqs), int(lengths.max())), pad, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return out, lengths
