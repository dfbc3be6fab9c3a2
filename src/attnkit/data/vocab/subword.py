"""SentencePiece subword vocabularies (unigram or BPE), trained on the user's text.

The trained model is kept in memory and saved inside the checkpoint's vocabulary JSON (base64),
so a checkpoint alone decodes. Special ids match :class:`attnkit.data.CharVocab`: ``<pad>`` = 0,
``<bos>`` = 1, ``<eos>`` = 2, ``<unk>`` = 3. Text is kept as is (no Unicode normalisation, no
whitespace folding), so ``decode(encode(text)) == text`` for text made of seen characters.
"""

from __future__ import annotations

import base64
import io
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import sentencepiece as spm

from attnkit.checks import quoted
from attnkit.tokens import BOS, EOS, PAD, UNK, content_ids

__all__ = ["SubwordVocab"]

log = logging.getLogger("attnkit")

MODEL_TYPES = ("unigram", "bpe")


# The segmentations a unigram model's draw chooses among (Kudo 2018's l-best sampling, l = 64)
SAMPLED_NBEST = 64


class SubwordVocab:
    """A SentencePiece model as a vocabulary (same interface as :class:`CharVocab`).

    Example:
        >>> texts = ["<fr> vingt-trois", "<fr> vingt-quatre", "<en> twenty-three"] * 20
        >>> v = SubwordVocab.build(texts, size=40, tags=["<fr>", "<en>"])
        >>> v.decode(v.encode("<fr> vingt-quatre"))
        '<fr> vingt-quatre'
        >>> v.pieces("<fr> vingt")[0]
        '<fr>'
    """

    def __init__(self, model: bytes, *, size: int | None = None):
        self.model = bytes(model)
        self.size = size  # the most pieces asked for when it was built; None: not known
        try:
            self.sp = spm.SentencePieceProcessor(model_proto=self.model)
        except RuntimeError:
            raise ValueError(
                f"model: not a SentencePiece model ({len(self.model)} bytes that do not parse)"
            ) from None
        # each piece's log-probability (unigram), for drawing segmentations
        self._scores = [self.sp.get_score(i) for i in range(self.sp.get_piece_size())]
        if self.sp.get_piece_size() <= UNK:
            raise ValueError(
                f"model: expected a SentencePiece model with the 4 special pieces, "
                f"got {self.sp.get_piece_size()} pieces"
            )
        if [self.sp.pad_id(), self.sp.bos_id(), self.sp.eos_id(), self.sp.unk_id()] != [
            PAD,
            BOS,
            EOS,
            UNK,
        ]:
            raise ValueError(
                "model: expected a SentencePiece model with pad=0, bos=1, eos=2, "
                f"unk=3, got pad={self.sp.pad_id()}, bos={self.sp.bos_id()}, "
                f"eos={self.sp.eos_id()}, unk={self.sp.unk_id()}"
            )
        self._warned = False

    @property
    def model_type(self) -> str | None:
        """``"unigram"`` or ``"bpe"``: the algorithm the model was trained with (None for a
        model of another type)."""
        model_type = _trainer_spec(self.model).get(3)
        return _MODEL_TYPES.get(model_type) if isinstance(model_type, int) else None

    @classmethod
    def build(
        cls,
        texts: Iterable[str],
        *,
        size: int = 1000,
        model_type: str = "unigram",
        tags: Sequence[str] = (),
    ) -> SubwordVocab:
        """Train on ``texts`` with at most ``size`` pieces (fewer when the text has fewer);
        every character of the text is kept (coverage 1.0) and each tag is one piece."""
        if not isinstance(size, int) or isinstance(size, bool) or size < 8:
            raise ValueError(f"size: expected an int >= 8, got {size!r}")
        if model_type not in MODEL_TYPES:
            raise ValueError(
                f"model_type: expected one of {', '.join(MODEL_TYPES)}, got {model_type!r}"
            )
        texts = [t for t in texts if t]
        if not texts:
            raise ValueError("texts: expected at least one non-empty text")
        needed = len(set().union(*map(set, texts))) + 4 + len(tags)
        if size < needed:
            raise ValueError(
                f"size: expected at least {needed} (the texts' distinct characters, "
                f"4 specials and the tags; every character is kept), got {size}"
            )
        out = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts),
            model_writer=out,
            vocab_size=size,
            model_type=model_type,
            character_coverage=1.0,
            hard_vocab_limit=False,
            pad_id=PAD,
            bos_id=BOS,
            eos_id=EOS,
            unk_id=UNK,
            user_defined_symbols=list(tags),
            normalization_rule_name="identity",
            add_dummy_prefix=False,
            remove_extra_whitespaces=False,
            split_digits=True,
            num_threads=1,
            max_sentence_length=1 << 16,
            minloglevel=2,
        )
        return cls(out.getvalue(), size=size)

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        """Ids of ``text``; unseen characters become ``<unk>`` (with one warning per vocab)."""
        ids = self.sp.encode(text)
        if UNK in ids and not self._warned:
            log.warning(
                "characters unseen in training map to <unk> in %r (further ones are not reported)",
                text[:80],
            )
            self._warned = True
        return ([BOS] if bos else []) + ids + ([EOS] if eos else [])

    def encode_sampled(self, texts: Sequence[str], *, alpha: float, seed: int) -> list[list[int]]:
        """Ids of each of ``texts`` by a segmentation drawn at random: subword regularisation
        (Kudo, 2018, arXiv:1804.10959) for a unigram model, one of the text's
        :data:`SAMPLED_NBEST` most likely segmentations drawn with probability proportional
        to its likelihood to the power ``alpha`` (smaller: flatter, more pieces; Kudo's
        l-best sampling); BPE-dropout (Provilkov et al., 2020, arXiv:1910.13267) for a BPE
        model, each merge dropped with probability ``alpha``. A segmentation holding
        ``<unk>`` where the best one holds none is not drawn: every segmentation decodes to
        the text.

        The unigram draws depend on ``seed`` alone (numpy's generator), so a batch encodes
        the same wherever and whenever it is built. SentencePiece's own sampler, which
        BPE-dropout needs, repeats its draws for a seed only within one process (its
        generator mixes in something of the process: measured, five processes, five draws).
        """
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha <= 1:
            raise ValueError(f"alpha: expected a number in (0, 1], got {alpha!r}")
        best = [self.sp.encode(text) for text in texts]
        if self.model_type != "unigram":
            spm.set_random_generator_seed(seed)
            drawn = [
                self.sp.encode(text, enable_sampling=True, alpha=float(alpha), nbest_size=-1)
                for text in texts
            ]
        else:
            rng = np.random.default_rng(seed)
            drawn = []
            for text in texts:
                options = self.sp.nbest_encode_as_ids(text, SAMPLED_NBEST) or [[]]
                loglik = np.array([sum(self._scores[i] for i in ids) for ids in options])
                weights = np.exp(alpha * (loglik - loglik.max()))
                drawn.append(options[rng.choice(len(options), p=weights / weights.sum())])
        return [d if UNK in b or UNK not in d else b for d, b in zip(drawn, best, strict=True)]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` up to the first ``<eos>``; ``<pad>``/``<bos>`` dropped."""
        return self.sp.decode([i if 0 <= i < len(self) else UNK for i in content_ids(ids)])

    def piece(self, i: int) -> str:
        """The piece of id ``i`` (for plot labels)."""
        i = int(i)
        return self.sp.id_to_piece(i) if 0 <= i < len(self) else self.sp.id_to_piece(UNK)

    def pieces(self, text: str) -> list[str]:
        """The pieces ``text`` is split into (one per encoded id)."""
        return [self.piece(i) for i in self.sp.encode(text)]

    def to_json(self) -> dict:
        data = {"type": "sentencepiece", "model": base64.b64encode(self.model).decode("ascii")}
        return data if self.size is None else {**data, "size": self.size}

    @classmethod
    def from_json(cls, data: dict) -> SubwordVocab:
        if not isinstance(data, dict) or data.get("type") != "sentencepiece":
            raise ValueError(f"vocab: expected a SentencePiece vocabulary, got {quoted(data)}")
        encoded: Any = data.get("model")  # b64decode refuses a non-string: TypeError
        try:
            model = base64.b64decode(encoded, validate=True)
        except (TypeError, ValueError):
            raise ValueError(
                "vocab: 'model' must be a base64 string (the SentencePiece model)"
            ) from None
        size = data.get("size")
        if size is not None and (not isinstance(size, int) or isinstance(size, bool)):
            raise ValueError(f"vocab: 'size' must be an int, got {quoted(size)}")
        return cls(model, size=size)


_MODEL_TYPES = {1: "unigram", 2: "bpe"}  # TrainerSpec.ModelType in sentencepiece_model.proto


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """The protobuf varint at ``data[at:]`` and the position after it."""
    value, shift = 0, 0
    while True:
        byte = data[at]
        value, shift, at = value | (byte & 0x7F) << shift, shift + 7, at + 1
        if byte < 0x80:
            return value, at


def _fields(data: bytes) -> dict[int, int | bytes]:
    """The fields of a serialised protobuf message by number (the last of a repeated one):
    varints as ints, length-delimited fields as bytes."""
    fields: dict[int, int | bytes] = {}
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            fields[number], at = _varint(data, at)
        elif wire == 2:
            length, at = _varint(data, at)
            fields[number], at = data[at : at + length], at + length
        else:  # fixed 64 or 32 bits
            at += 8 if wire == 1 else 4
    return fields


def _trainer_spec(model: bytes) -> dict[int, int | bytes]:
    """The fields of a SentencePiece model's TrainerSpec (field 2 of its ModelProto); empty
    when they cannot be read."""
    try:
        spec = _fields(model).get(2, b"")
        return _fields(spec) if isinstance(spec, bytes) else {}
    except IndexError:  # cut short
        return {}
