"""Scores of output texts against reference texts, one function each, shared by every task's
validation and by ``attnkit eval``: exact match, character and word error rates (jiwer), BLEU
(sacreBLEU's standard corpus BLEU-4 over words, its ``13a`` tokenizer), BLEU over characters
and chrF (sacrebleu).

Every metric first normalises outputs and references the same way (:func:`normalize`):
Unicode NFC, surrounding white space removed, runs of white space made one space. Case and
punctuation count.

A reference is one text, or for the metrics that take several (exact match, BLEU, chrF:
:data:`MULTI_REFERENCE`) a tuple of texts, e.g. an image's captions; examples may have
different numbers of them.

Example:
    >>> score(("exact", "cer"), ["abc", "abd"], ["abc", " abc "])
    {'exact': 0.5, 'cer': 0.16666666666666666}
    >>> got = score(("exact", "bleu"), ["a red circle at the top"],
    ...             [("a red circle above a square", "a red circle at the top")])
    >>> got["exact"], round(got["bleu"], 6)
    (1.0, 100.0)
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from typing import Any

import jiwer
from sacrebleu.metrics import BLEU, CHRF

__all__ = [
    "LABELS",
    "METRICS",
    "MULTI_REFERENCE",
    "Reference",
    "bleu",
    "bleu_char",
    "cer",
    "chrf",
    "closest_reference",
    "example_cer",
    "exact_match",
    "normalize",
    "score",
    "signature",
    "wer",
]

Reference = str | Sequence[str]  # one reference text, or several


def normalize(text: str) -> str:
    """The form every metric compares: Unicode NFC, no surrounding white space, each run of
    white space one space.

    Example:
        >>> normalize(" 3  March\t2001 ")
        '3 March 2001'
    """
    return " ".join(unicodedata.normalize("NFC", text).split())


def _several(reference: Reference) -> tuple[str, ...]:
    return tuple(map(normalize, (reference,) if isinstance(reference, str) else reference))


def _one_each(references: Sequence[Reference], metric: str) -> list[str]:
    """``references`` as one normalised text each; a ``ValueError`` for an example with
    several."""
    texts = []
    for i, ref in enumerate(references):
        if not isinstance(ref, str):
            raise ValueError(
                f"references[{i}]: {metric} scores against one reference text, got {len(ref)}"
            )
        texts.append(normalize(ref))
    return texts


def _streams(references: Sequence[Reference]) -> list[list[str | None]]:
    """sacrebleu's reference streams: stream ``k`` holds each example's ``k``-th reference
    (None where an example has fewer)."""
    refs = [_several(r) for r in references]
    return [
        [r[k] if k < len(r) else None for r in refs] for k in range(max(map(len, refs), default=1))
    ]


def _hypotheses(hypotheses: Sequence[str]) -> list[str]:
    """The outputs normalised, an empty one as a space (older jiwer rejects empty outputs)."""
    return [normalize(h) or " " for h in hypotheses]


def exact_match(hypotheses: Sequence[str], references: Sequence[Reference]) -> float:
    """The fraction of outputs equal to their reference (to one of them)."""
    return sum(normalize(h) in _several(r) for h, r in zip(hypotheses, references)) / max(
        1, len(references)
    )


def cer(hypotheses: Sequence[str], references: Sequence[Reference]) -> float:
    """Character error rate: character edits over reference characters, whole corpus (jiwer);
    above 1 when the outputs hold more errors than the references hold characters."""
    return float(jiwer.cer(_one_each(references, "cer"), _hypotheses(hypotheses)))


def wer(hypotheses: Sequence[str], references: Sequence[Reference]) -> float:
    """Word error rate: word edits over reference words, whole corpus (jiwer)."""
    return float(jiwer.wer(_one_each(references, "wer"), _hypotheses(hypotheses)))


# sacreBLEU's metrics as attnkit computes them: BLEU with its defaults (the standard corpus
# BLEU-4, 13a tokenizer, exponential smoothing), BLEU over characters, chrF.
_SACREBLEU = {
    "bleu": lambda: BLEU(),
    "bleu_char": lambda: BLEU(tokenize="char"),
    "chrf": lambda: CHRF(),
}


def bleu(hypotheses: Sequence[str], references: Sequence[Reference]) -> float:
    """Corpus BLEU (sacrebleu, 0-100): the standard BLEU-4 over words with sacreBLEU's
    defaults (``13a`` tokenizer), against every reference of each output; its signature is
    :func:`signature` ``("bleu")``. The captioning figure of Xu et al. (2015) too."""
    # None where an example has fewer references: sacrebleu reads it, its annotation omits it
    streams: list[Any] = _streams(references)
    return float(_SACREBLEU["bleu"]().corpus_score(list(map(normalize, hypotheses)), streams).score)


def bleu_char(hypotheses: Sequence[str], references: Sequence[Reference]) -> float:
    """Corpus BLEU (sacrebleu, 0-100) over characters (``tokenize="char"``): meaningful for
    outputs of a few words, such as digits and dates, and in any script."""
    return float(
        _SACREBLEU["bleu_char"]()
        .corpus_score(list(map(normalize, hypotheses)), [_one_each(references, "bleu_char")])
        .score
    )


def chrf(hypotheses: Sequence[str], references: Sequence[Reference]) -> float:
    """Corpus chrF (sacrebleu, 0-100): the F-score of character n-grams, against every
    reference of each output."""
    # None where an example has fewer references: sacrebleu reads it, its annotation omits it
    streams: list[Any] = _streams(references)
    return float(_SACREBLEU["chrf"]().corpus_score(list(map(normalize, hypotheses)), streams).score)


def signature(name: str) -> str | None:
    """sacreBLEU's signature of the metric ``name`` (what to report beside a BLEU figure so
    that it can be compared), None for a metric that is not sacreBLEU's.

    Example:
        >>> signature("bleu").split("|")[:4]
        ['nrefs:1', 'case:mixed', 'eff:no', 'tok:13a']
    """
    if name not in _SACREBLEU:
        return None
    metric = _SACREBLEU[name]()
    metric.corpus_score(["a"], [["a"]])  # the signature names the references' count once scored
    return str(metric.get_signature())


def closest_reference(hypothesis: str, reference: Reference) -> str:
    """Of one output's references, the one with the lowest character error rate against it
    (the first of equals)."""
    return min(_several(reference), key=lambda r: cer([hypothesis], [r]))


def example_cer(hypothesis: str, reference: Reference) -> float:
    """One output's character error rate against its closest reference (how ``attnkit eval``
    ranks its worst examples)."""
    return cer([hypothesis], [closest_reference(hypothesis, reference)])


METRICS: dict[str, Callable[[Sequence[str], Sequence[Reference]], float]] = {
    "exact": exact_match,
    "cer": cer,
    "wer": wer,
    "bleu": bleu,
    "bleu_char": bleu_char,
    "chrf": chrf,
}
MULTI_REFERENCE = ("exact", "bleu", "chrf")  # the metrics that take several references
LABELS = {
    "exact": "exact match",
    "cer": "CER",
    "wer": "WER",
    "bleu": "BLEU",
    "bleu_char": "BLEU (characters)",
    "chrf": "chrF",
}


def score(
    names: Sequence[str], hypotheses: Sequence[str], references: Sequence[Reference]
) -> dict[str, float]:
    """``{name: METRICS[name](hypotheses, references)}`` for each of ``names``.

    Raises:
        ValueError: a name that is not in :data:`METRICS`, lists of different lengths, or
            several references of one example for a metric outside :data:`MULTI_REFERENCE`.
    """
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise ValueError(f"names: expected metrics among {', '.join(METRICS)}, got {unknown}")
    if len(hypotheses) != len(references):
        raise ValueError(
            f"hypotheses: expected one per reference ({len(references)}), got {len(hypotheses)}"
        )
    return {n: METRICS[n](hypotheses, references) for n in names}
