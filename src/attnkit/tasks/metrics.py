"""Scores of output texts against reference texts, one function each, shared by every task's
validation and by ``attnkit eval``: exact match, character and word error rates (jiwer),
BLEU and chrF (sacrebleu).

Example:
    >>> score(("exact", "cer"), ["abc", "abd"], ["abc", "abc"])
    {'exact': 0.5, 'cer': 0.16666666666666666}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jiwer
import sacrebleu

__all__ = ["LABELS", "METRICS", "bleu", "cer", "chrf", "example_cer", "exact_match", "score",
           "wer"]


def _hypotheses(hypotheses: Sequence[str]) -> list[str]:
    return [h if h.strip() else " " for h in hypotheses]  # older jiwer rejects empty outputs


def exact_match(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """The fraction of outputs equal to their reference."""
    return sum(h == r for h, r in zip(hypotheses, references)) / max(1, len(references))


def cer(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Character error rate: character edits over reference characters, whole corpus (jiwer);
    above 1 when the outputs hold more errors than the references hold characters."""
    return float(jiwer.cer(list(references), _hypotheses(hypotheses)))


def wer(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Word error rate: word edits over reference words, whole corpus (jiwer)."""
    return float(jiwer.wer(list(references), _hypotheses(hypotheses)))


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus BLEU (sacrebleu, 0-100) over characters (``tokenize="char"``): meaningful for
    outputs of a few words, such as digits and dates, and in any script."""
    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)],
                                       tokenize="char").score)


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus chrF (sacrebleu, 0-100): the F-score of character n-grams."""
    return float(sacrebleu.corpus_chrf(list(hypotheses), [list(references)]).score)


def example_cer(hypothesis: str, reference: str) -> float:
    """One output's character error rate (how ``attnkit eval`` ranks its worst examples)."""
    return cer([hypothesis], [reference])


METRICS: dict[str, Callable[[Sequence[str], Sequence[str]], float]] = {
    "exact": exact_match, "cer": cer, "wer": wer, "bleu": bleu, "chrf": chrf}
LABELS = {"exact": "exact match", "cer": "CER", "wer": "WER", "bleu": "BLEU (characters)",
          "chrf": "chrF"}


def score(names: Sequence[str], hypotheses: Sequence[str],
          references: Sequence[str]) -> dict[str, float]:
    """``{name: METRICS[name](hypotheses, references)}`` for each of ``names``.

    Raises:
        ValueError: a name that is not in :data:`METRICS`, or lists of different lengths.
    """
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise ValueError(f"names: expected metrics among {', '.join(METRICS)}, got {unknown}")
    if len(hypotheses) != len(references):
        raise ValueError(f"hypotheses: expected one per reference ({len(references)}), got "
                         f"{len(hypotheses)}")
    return {n: METRICS[n](hypotheses, references) for n in names}
