"""Translation as a :class:`attnkit.train.Task`: batching, masked loss, held-out metrics.

Sources and targets are character sequences (:class:`attnkit.data.CharVocab`) or SentencePiece
subwords (:class:`attnkit.data.SubwordVocab`); the model is a :class:`attnkit.models.Seq2Seq`
or :class:`attnkit.models.Transformer` built by the model registry from its config
(``{"name": "seq2seq" | "transformer", ...}``), so a checkpoint alone rebuilds it.
"""

from __future__ import annotations

import functools
import math
import re
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F

import attnkit.tasks.metrics as scores
from attnkit.checks import check_positive_int, quoted
from attnkit.data import MAX_CHARS, CharVocab, SubwordVocab, build_vocab, load_vocab, pad_batch
from attnkit.data.corpora.reading import read_corpus
from attnkit.data.corpora.text_pairs import TextPairs
from attnkit.decoding import MAX_OUTPUT_TOKENS, Decoding, Hypotheses, decode_batches
from attnkit.diagnose.plots import plot_attention
from attnkit.models import Seq2Seq, Transformer, build_model
from attnkit.tasks.batching import length_batches, task_config, token_batches
from attnkit.tasks.evaluator import (
    Evaluator,
    Example,
    Output,
    pictures,
    scores_of,
    texts_of,
    tokens_of,
)
from attnkit.tasks.explore import translation_example
from attnkit.tasks.route import Route, Text
from attnkit.tokens import BOS, EOS, PAD
from attnkit.train import Batches, TeacherForcing, cross_entropy_and_unlikelihood

__all__ = [
    "BEST_BY",
    "MAX_LEN_RATIO",
    "MAX_OUTPUT_TOKENS",
    "TranslateEvaluator",
    "TranslateTask",
    "metrics",
    "plot_translation",
    "translate_texts",
]


def metrics(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """Validation: ``accuracy`` (exact match), character error rate, BLEU (sacreBLEU's standard),
    BLEU over characters and chrF (:mod:`attnkit.tasks.metrics`)."""
    return {
        "accuracy": scores.exact_match(hypotheses, references),
        "cer": scores.cer(hypotheses, references),
        "bleu": scores.bleu(hypotheses, references),
        "bleu_char": scores.bleu_char(hypotheses, references),
        "chrf": scores.chrf(hypotheses, references),
    }


# --best-by NAME: the validation metric that picks checkpoint-best and drives early stopping,
# and the one that breaks its ties (attnkit.train.TrainConfig's metric and tiebreak; "-NAME" is
# minimised). BLEU for real text, as its users read it; exact match for the built-in worlds,
# whose outputs are short enough to be right or wrong.
BEST_BY = {
    "bleu": ("bleu", "chrf"),
    "chrf": ("chrf", "bleu"),
    "loss": ("-loss", None),
    "exact": ("accuracy", "-cer"),
}


TAG = re.compile(r"^<[\w:-]+>$")
# Output tokens at most: ceil(MAX_LEN_RATIO * source tokens) + the task's max_len_extra, and
# never more than MAX_OUTPUT_TOKENS (every task's cap, attnkit.decoding.MAX_OUTPUT_TOKENS).
MAX_LEN_RATIO = 3.0


def _encode_batch(vocab: CharVocab | SubwordVocab, texts: Sequence[str]):
    return pad_batch([vocab.encode(t) or [PAD] for t in texts])  # (B, S), (B,)


@torch.no_grad()
def translate_texts(
    model: Seq2Seq | Transformer,
    src_vocab: CharVocab | SubwordVocab,
    tgt_vocab: CharVocab | SubwordVocab,
    texts: Sequence[str],
    *,
    decoding: Decoding | None = None,
    max_len_ratio: float = MAX_LEN_RATIO,
    max_len_extra: int = 10,
    max_chars: int | None = MAX_CHARS,
    weights: bool = False,
    batch_size: int = 128,
) -> tuple[list[str], list[Hypotheses]]:
    """Decode ``texts`` as ``decoding`` says (default greedy); returns the outputs (the best
    hypothesis of each) and, per batch, the raw hypotheses (tokens, all ``n_best``, and with
    ``weights`` the attention weights for plots). Output length is capped at
    ``ceil(max_len_ratio * source length) + max_len_extra`` tokens (EOS included), and at
    :data:`MAX_OUTPUT_TOKENS`; pass ``max_len_extra`` from the longest training target when
    outputs can be much longer than their sources (:attr:`TranslateTask.max_len_extra`).

    Raises:
        ValueError: a text longer than ``max_chars`` characters (None: no limit; the default
            is the longest line :func:`attnkit.data.read_tsv` reads).
    """
    for i, text in enumerate(texts):
        if max_chars is not None and len(text) > max_chars:
            raise ValueError(
                f"texts[{i}]: {len(text)} characters, more than max_chars="
                f"{max_chars} ({text[:40]!r}...)"
            )
    outs, raws = [], []
    for _, hyp in decode_batches(
        model,
        texts,
        lambda chunk: _encode_batch(src_vocab, chunk),
        max_len=lambda n: ((n.float() * max_len_ratio).ceil().long() + max_len_extra).clamp(
            max=MAX_OUTPUT_TOKENS
        ),
        decoding=decoding,
        batch_size=batch_size,
        weights=weights,
    ):
        outs += [tgt_vocab.decode(row) for row in hyp.best().tokens]
        raws.append(hyp)
    return outs, raws


def plot_translation(
    hyp: Hypotheses, i: int, source: str, src_vocab, tgt_vocab, path, *, title: str | None = None
):
    """Heat-map of example ``i`` of decoded ``hyp``: output pieces (EOS included) against the
    pieces of ``source`` (``title`` default: source -> output). Returns the path written, or
    None when the model has no attention (or ``hyp`` was decoded without ``weights``)."""
    hyp = hyp.best()
    if hyp.weights is None:
        return None
    src_labels = src_vocab.pieces(source)
    n = int(hyp.lengths[i])
    out_labels = [tgt_vocab.piece(t) for t in hyp.tokens[i, :n]]
    output = tgt_vocab.decode(hyp.tokens[i])
    return plot_attention(
        hyp.weights[i, :n, : len(src_labels)],
        src_labels,
        out_labels,
        path,
        title=title or f"{source}  ->  {output}",
    )


Vocab = CharVocab | SubwordVocab


def check_subword_sampling(alpha: float, src_vocab: Vocab, tgt_vocab: Vocab) -> None:
    """Refuse subword regularisation that cannot be: ``alpha`` outside (0, 1], or a vocabulary
    that is not a SentencePiece model."""
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha <= 1:
        raise ValueError(f"subword_sampling: expected 0 (off) or a number in (0, 1], got {alpha!r}")
    kinds = [type(v).__name__ for v in (src_vocab, tgt_vocab) if not isinstance(v, SubwordVocab)]
    if kinds:
        raise ValueError(
            "subword_sampling: expected subword vocabularies (vocab 'unigram' or 'bpe'), "
            f"got {kinds[0]}"
        )


def _batch(sources: Sequence[list[int]], targets: Sequence[list[int]]) -> dict:
    """A training batch of token ids: ``src`` (B, S) with ``src_len`` (B,); ``tgt_in`` and
    ``tgt_out`` (B, T): the targets behind ``<bos>`` and before ``<eos>``."""
    src, src_len = pad_batch([ids or [PAD] for ids in sources])
    tgt, _ = pad_batch([[BOS, *ids, EOS] for ids in targets])
    return {"src": src, "src_len": src_len, "tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:]}


class TranslateTask:
    """Batches, loss and metrics for (source, target) text pairs.

    Args:
        train, valid: sequences of (source, target): lists, or a
            :class:`attnkit.data.corpora.text_pairs.TextPairs` as the corpus formats read (kept on
            disk, each batch reading its own pairs).
        model_config: the model's registry config: ``name`` ``"seq2seq"`` (the default) or
            ``"transformer"``, and its arguments; the vocabulary sizes are set from the data.
        batch_size: sentences per batch (batches group similar lengths); with ``max_tokens``,
            per validation batch only.
        max_tokens: None, or training batches of at most this many padded tokens each
            (:func:`token_batches`, by the longer of a pair's source and target), in place of
            ``batch_size`` sentences.
        label_smoothing: of the masked cross-entropy.
        teacher_forcing: probability of feeding the reference token (1.0: always), or a
            :class:`attnkit.train.TeacherForcing` schedule over training steps.
        vocab, vocab_size: vocabularies built from ``train`` when not given: ``"char"``, or
            SentencePiece ``"unigram"`` / ``"bpe"`` with at most ``vocab_size`` pieces.
        shared_vocab: one vocabulary built from sources and targets together, for both sides
            (with a Transformer's ``shared_embeddings``, one embedding for both).
        max_valid: validation sentences decoded at each evaluation.
        subword_sampling: 0 (off), or the ``alpha`` of subword regularisation: each training
            batch segments its sources and targets by a draw (:meth:`SubwordVocab.encode_sampled`,
            seeded by the batch's pairs), so rare words seen as pieces of a few characters are
            seen in training; subword vocabularies only. Validation keeps the one best
            segmentation.
        unlikelihood: 0 (off), or the weight ``alpha`` of the token-level unlikelihood loss
            added to the cross-entropy (:func:`attnkit.train.losses.token_unlikelihood`, per
            target token): the target's earlier tokens, other than the one due, made
            unlikely.
    """

    def __init__(
        self,
        train: Sequence[tuple[str, str]],
        valid: Sequence[tuple[str, str]],
        *,
        model_config: dict,
        src_vocab: Vocab | None = None,
        tgt_vocab: Vocab | None = None,
        vocab: str = "char",
        vocab_size: int = 1000,
        shared_vocab: bool = False,
        batch_size: int = 64,
        seed: int = 0,
        label_smoothing: float = 0.1,
        teacher_forcing: float | TeacherForcing = 1.0,
        max_valid: int = 500,
        data: dict | None = None,
        subword_sampling: float = 0.0,
        max_tokens: int | None = None,
        unlikelihood: float = 0.0,
    ):
        if not train:
            raise ValueError("train: expected at least one (source, target) pair")
        check_positive_int("batch_size", batch_size)
        # A corpus read from disk (a TextPairs) stays there: each pass below reads it a pair
        # at a time, and a batch encodes its own pairs, so memory holds 4 bytes per pair.
        self.train = train if isinstance(train, TextPairs) else list(train)
        self.valid = list(valid[:max_valid])
        tags = sorted({tag for s, _ in self.train if TAG.match(tag := s.split(" ", 1)[0])})
        # build_vocab reads its texts once, as its builders' Iterable allows; its Sequence
        # annotation is narrower than that, and a list here would hold the corpus in memory
        if shared_vocab and src_vocab is None and tgt_vocab is None:
            src_vocab = tgt_vocab = build_vocab(
                (text for pair in self.train for text in pair),  # type: ignore[arg-type]
                kind=vocab,
                size=vocab_size,
                tags=tags,
            )
        self.src_vocab = src_vocab or build_vocab(
            (s for s, _ in self.train),  # type: ignore[arg-type]
            kind=vocab,
            size=vocab_size,
            tags=tags,
        )
        self.tgt_vocab = tgt_vocab or build_vocab(
            (t for _, t in self.train),  # type: ignore[arg-type]
            kind=vocab,
            size=vocab_size,
        )
        self.batch_size, self.seed = batch_size, seed
        if subword_sampling:
            check_subword_sampling(subword_sampling, self.src_vocab, self.tgt_vocab)
        self.subword_sampling = float(subword_sampling)
        if max_tokens is not None:
            check_positive_int("max_tokens", max_tokens)
        self.max_tokens = max_tokens
        if not (isinstance(unlikelihood, (int, float)) and 0 <= unlikelihood < math.inf):
            raise ValueError(f"unlikelihood: expected a finite weight >= 0, got {unlikelihood!r}")
        self.unlikelihood = float(unlikelihood)
        if not isinstance(teacher_forcing, TeacherForcing):
            teacher_forcing = TeacherForcing(start=teacher_forcing)
        self.label_smoothing, self.teacher_forcing = label_smoothing, teacher_forcing
        self.model_config = {
            "name": "seq2seq",
            **model_config,
            "src_vocab": len(self.src_vocab),
            "tgt_vocab": len(self.tgt_vocab),
        }
        self.data = data or {}
        lengths, longest = array("i"), 0
        for s, t in self.train:
            target = len(self.tgt_vocab.encode(t)) + 1  # and <eos> (or <bos>)
            # the longer side of each pair, for batches of similar lengths on both sides: by
            # the source alone, Multi30k's targets were padded to 1.61x their tokens (the
            # decoder and the output layer, most of a step, ran on the padding); by the
            # longer side, 1.07x (and the sources 1.17x instead of 1.04x)
            lengths.append(max(len(self.src_vocab.encode(s)), target))
            longest = max(longest, target - 1)
        self._lengths = lengths
        # Room for the longest training target, in tokens, whatever the source length (digits
        # -> words): a cap on outputs that run on, not a length any output should reach.
        self.max_len_extra = 10 + int(1.5 * longest)

    def build_model(self) -> Seq2Seq | Transformer:
        # of model_config's class
        return cast("Seq2Seq | Transformer", build_model(self.model_config))

    def batches(self, epoch: int) -> Batches:
        """Shuffled (seeded by epoch) batches of pairs of similar lengths (the longer side of
        each), built when indexed."""
        if self.max_tokens is not None:
            plan = token_batches(self._lengths, self.max_tokens, seed=self.seed, epoch=epoch)
        else:
            plan = length_batches(self._lengths, self.batch_size, seed=self.seed, epoch=epoch)
        return Batches(plan, self._collate)

    def _collate(self, idx: list[int]) -> dict:
        pairs = [self.train[i] for i in idx]
        if not self.subword_sampling:
            return self._encode(pairs)
        # the draws are seeded by the batch's pairs, so a resumed run or a worker process
        # builds the same batch
        seed = zlib.crc32(array("q", idx).tobytes(), self.seed & 0xFFFFFFFF)
        sources, targets = zip(*pairs, strict=True)
        src_vocab, tgt_vocab = cast("tuple[SubwordVocab, SubwordVocab]", self.vocabs)
        alpha = self.subword_sampling
        return _batch(
            src_vocab.encode_sampled(sources, alpha=alpha, seed=seed),
            tgt_vocab.encode_sampled(targets, alpha=alpha, seed=seed ^ 0xFFFFFFFF),
        )

    @property
    def vocabs(self) -> tuple[Vocab, Vocab]:
        """The source and target vocabularies."""
        return self.src_vocab, self.tgt_vocab

    def _encode(self, pairs: Sequence[tuple[str, str]]) -> dict:
        return _batch(
            [self.src_vocab.encode(s) for s, _ in pairs],
            [self.tgt_vocab.encode(t) for _, t in pairs],
        )

    def loss(
        self, model: Seq2Seq | Transformer, batch: dict, step: int = 0
    ) -> tuple[torch.Tensor, int]:
        logits, _ = model(
            batch["src"],
            batch["src_len"],
            batch["tgt_in"],
            teacher_forcing=self.teacher_forcing.ratio(step),
        )
        target = batch["tgt_out"]
        tokens = int((target != PAD).sum())
        if self.unlikelihood:
            loss, unlikely = cross_entropy_and_unlikelihood(
                logits, target, PAD, self.label_smoothing
            )
            return loss + self.unlikelihood * unlikely / max(tokens, 1), tokens
        loss = F.cross_entropy(
            logits.flatten(0, 1),
            target.flatten(),
            ignore_index=PAD,
            label_smoothing=self.label_smoothing,
        )
        return loss, tokens

    def translate(
        self, model: Seq2Seq | Transformer, sources: Sequence[str], *, weights: bool = False
    ) -> tuple[list[str], list[Hypotheses]]:
        """:func:`translate_texts` (greedy) of ``sources`` with this task's vocabularies and
        output length limit, at any source length (they come from the task's own data)."""
        return translate_texts(
            model,
            self.src_vocab,
            self.tgt_vocab,
            sources,
            max_len_extra=self.max_len_extra,
            max_chars=None,
            weights=weights,
        )

    def evaluate(self, model: Seq2Seq | Transformer) -> dict[str, float]:
        """:func:`metrics` of greedy outputs, and ``loss``: the validation pairs' mean
        cross-entropy per target token (teacher-forced, without label smoothing)."""
        outs, _ = self.translate(model, [s for s, _ in self.valid])
        return {**metrics(outs, [t for _, t in self.valid]), "loss": self._valid_loss(model)}

    def _valid_loss(self, model: Seq2Seq | Transformer) -> float:
        total, tokens = 0.0, 0
        device = next(model.parameters()).device
        for start in range(0, len(self.valid), self.batch_size):
            batch = self._encode(self.valid[start : start + self.batch_size])
            batch = {k: v.to(device) for k, v in batch.items()}
            logits, _ = model(batch["src"], batch["src_len"], batch["tgt_in"])
            target = batch["tgt_out"]
            total += float(
                F.cross_entropy(
                    logits.flatten(0, 1), target.flatten(), ignore_index=PAD, reduction="sum"
                )
            )
            tokens += int((target != PAD).sum())
        return total / max(tokens, 1)

    def pictures(self, model, folder: Path, n: int) -> list[Path]:
        """Attention pictures of the first ``n`` validation examples in ``folder``."""
        evaluator = TranslateEvaluator(model, self.config(), self.vocab())
        evaluator.max_chars = None  # validation sources were read with their own limit
        return pictures(evaluator, [source for source, _ in self.valid[:n]], folder)

    def config(self) -> dict:
        return task_config(
            "translate",
            self,
            # subword_sampling, unlikelihood and max_tokens only when on: a run saved before
            # them resumes
            batching={
                "teacher_forcing": asdict(self.teacher_forcing),
                **({"subword_sampling": self.subword_sampling} if self.subword_sampling else {}),
                **({"unlikelihood": self.unlikelihood} if self.unlikelihood else {}),
                **({"max_tokens": self.max_tokens} if self.max_tokens is not None else {}),
            },
            max_len_extra=self.max_len_extra,
        )

    def vocab(self) -> dict:
        return {"src": self.src_vocab.to_json(), "tgt": self.tgt_vocab.to_json()}


class TranslateEvaluator(Evaluator, task="translate"):
    """A translation checkpoint's model and vocabularies: decodes source texts and reads
    ``source<TAB>reference`` TSV files (:mod:`attnkit.tasks.evaluator`)."""

    vocabularies = ("src", "tgt")
    data = (
        "a TSV of source<TAB>reference lines, or a Moses corpus (PREFIX with --src-lang "
        "and --tgt-lang, or its two files), or hf:PATH[:SPLIT]"
    )
    metrics = ("exact", "cer", "bleu", "bleu_char", "chrf")
    route = Route(
        "/translate",
        "translate one text",
        texts=(
            Text(
                "text",
                "a text to translate (with its task tag when the model has several, <en> ...)",
            ),
        ),
    )
    # The longest source read and decoded, in characters (None: no limit).
    max_chars: int | None = MAX_CHARS

    def __init__(self, model: Seq2Seq | Transformer, config: dict, vocab: dict):
        super().__init__(model, config, vocab)
        self.src_vocab, self.tgt_vocab = load_vocab(vocab["src"]), load_vocab(vocab["tgt"])
        extra = config.get("max_len_extra", 10)
        if not isinstance(extra, int) or isinstance(extra, bool) or extra < 0:
            raise ValueError(f"max_len_extra: expected a non-negative int, got {quoted(extra)}")
        self.max_len_extra = extra

    def read(self, path, **options) -> list[Example]:
        """The pairs of ``path`` in any translation corpus format
        (:mod:`attnkit.data.corpora.text_formats`), each source's line its origin."""
        pairs = read_corpus(
            "translate", path, **{"role": "test", "max_chars": self.max_chars, **options}
        )
        return [
            Example(source, reference, pairs.origin(i))
            for i, (source, reference) in enumerate(pairs)
        ]

    def decode(
        self, inputs: Sequence[str], decoding: Decoding | None = None, *, weights: bool = False
    ) -> list[Output]:
        _, raws = translate_texts(
            self.model,
            self.src_vocab,
            self.tgt_vocab,
            inputs,
            decoding=decoding,
            max_len_extra=self.max_len_extra,
            max_chars=self.max_chars,
            weights=weights,
        )
        outputs: list[Output] = []
        for hyp in raws:
            for i, (texts, ranked, tokens) in enumerate(
                zip(texts_of(hyp, self.tgt_vocab), scores_of(hyp), tokens_of(hyp, self.tgt_vocab))
            ):
                source = inputs[len(outputs)]
                vocabs = (self.src_vocab, self.tgt_vocab)
                outputs.append(
                    Output(
                        texts,
                        functools.partial(plot_translation, hyp, i, source, *vocabs),
                        functools.partial(translation_example, self.model, hyp, i, source, *vocabs)
                        if weights
                        else None,
                        ranked,
                        tokens,
                    )
                )
        return outputs
