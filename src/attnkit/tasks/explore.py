"""The explorer's examples from a trained model: each task's evaluator decodes the inputs, and
each :class:`~attnkit.tasks.evaluator.Output` gives its :class:`attnkit.diagnose.explorer.Example`
through ``output.explore`` (built by the functions here), so ``attnkit explore`` and the
``--html`` of the decoding commands show the same page of the same decoding.

Translation and speech give every hypothesis (beam's n-best, sampling's draws) with its
score and attention; a Transformer also gives every decoder layer's cross-attention per head,
recorded by replaying each hypothesis through the model's own ``step``. OCR gives the best
reading with its attention over the line's columns (the attention head; the CTC head's
self-attention at the emitted steps) and the self-attention layer's map over the line, per
head. Image captioning gives every caption with its words' attention over the image's grid of
cells, VQA the answer with each hop's attention over it: the page draws those maps over the
picture.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from typing import Any

import torch

from attnkit.decoding import Decoding, Hypotheses
from attnkit.diagnose.explorer import Example, Hypothesis
from attnkit.models import Transformer
from attnkit.models.las import MIN_FRAMES
from attnkit.tokens import BOS, PAD

__all__ = [
    "answer_example",
    "caption_example",
    "examples_of",
    "explore_examples",
    "line_example",
    "speech_example",
    "translation_example",
]

SELF_ATTENTION = "encoder self-attention"  # the name of a CRNN's self-attention map


def explore_examples(
    evaluator,
    inputs: Sequence,
    decoding: Decoding | None = None,
    *,
    names: Sequence[str] | None = None,
    references: Sequence[str | Sequence[str] | None] | None = None,
) -> list[Example]:
    """Decode ``inputs`` with ``evaluator`` (a translation, OCR, speech, captioning or VQA
    :class:`~attnkit.tasks.evaluator.Evaluator`; inputs as its ``decode`` takes them) keeping
    the weights, and return one explorer example each (:func:`examples_of`).

    Raises:
        ValueError: the evaluator's task has no explorer, or its model has no attention.
    """
    return examples_of(
        evaluator.decode(inputs, decoding, weights=True), names=names, references=references
    )


def examples_of(
    outputs: Sequence,
    *,
    names: Sequence[str] | None = None,
    references: Sequence[str | Sequence[str] | None] | None = None,
) -> list[Example]:
    """The explorer examples of ``outputs`` as an evaluator's ``decode(..., weights=True)``
    gave them, with ``names`` and ``references`` (a text, or several) when given.

    Raises:
        ValueError: outputs of a task without an explorer or decoded without weights, or of
            a model without attention.
    """
    if any(o.explore is None for o in outputs):
        raise ValueError(
            "outputs: expected outputs decoded with weights=True by a translate, "
            "ocr, asr, caption or vqa checkpoint's evaluator"
        )
    names = names or [""] * len(outputs)
    references = references or [None] * len(outputs)
    return [o.explore(name=name, reference=ref) for o, name, ref in zip(outputs, names, references)]


def _no_attention(model) -> ValueError:
    return ValueError(f"checkpoint: its {type(model).__name__} model has no attention to explore")


def _hypotheses(hyp: Hypotheses, i: int, steps: int) -> list[tuple[list[int], float, torch.Tensor]]:
    """Example ``i``'s hypotheses in ``hyp``, best first: (tokens with EOS, score, weights
    ``(T, steps)``)."""
    if hyp.weights is None:
        return []
    n_best = hyp.lengths.dim() == 2
    tokens = hyp.tokens[i] if n_best else hyp.tokens[i, None]  # (K, T)
    lengths = hyp.lengths[i] if n_best else hyp.lengths[i, None]  # (K,)
    scores = hyp.scores[i] if n_best else hyp.scores[i, None]
    weights = hyp.weights[i] if n_best else hyp.weights[i, None]  # (K, T, Tk)
    return [
        (
            tokens[k, : int(lengths[k])].tolist(),
            float(scores[k]),
            weights[k, : int(lengths[k]), :steps],
        )
        for k in range(tokens.shape[0])
    ]


def translation_example(
    model,
    hyp: Hypotheses,
    i: int,
    source: str,
    src_vocab,
    tgt_vocab,
    *,
    name: str = "",
    reference: str | None = None,
) -> Example:
    """Example ``i`` of the decoded batch ``hyp``: every hypothesis of ``source`` over its
    pieces; a Transformer's cross-attention per layer and head too."""
    pieces = src_vocab.pieces(source)
    found = _hypotheses(hyp, i, len(pieces))
    if not found:
        raise _no_attention(model)
    heads = (
        _transformer_heads(
            model, src_vocab.encode(source) or [PAD], [tokens for tokens, _, _ in found]
        )
        if isinstance(model, Transformer)
        else None
    )
    hyps = []
    for k, (tokens, score, weights) in enumerate(found):
        maps = {"mean of heads, last layer" if heads else "attention": weights}
        maps.update(heads[k] if heads else {})
        hyps.append(Hypothesis([tgt_vocab.piece(t) for t in tokens], maps, score))
    return Example(pieces, hyps, name=name, text=source, reference=reference)


@torch.no_grad()
def _transformer_heads(
    model: Transformer, source: list[int], hypotheses: list[list[int]]
) -> list[dict[str, torch.Tensor]]:
    """Every decoder layer's cross-attention per head ``(T, S)`` for each hypothesis of one
    source, replayed step by step through ``model.step`` with the layers asked for weights."""
    device = next(model.parameters()).device
    k, t_max = len(hypotheses), max(len(h) for h in hypotheses)
    src = torch.tensor([source] * k, device=device)  # (K, S)
    tokens = torch.zeros(k, t_max, dtype=torch.long, device=device)
    for n, hyp in enumerate(hypotheses):
        tokens[n, : len(hyp)] = torch.tensor(hyp, device=device)
    inputs = torch.cat([torch.full((k, 1), BOS, device=device), tokens[:, :-1]], dim=1)
    with ExitStack() as stack:
        # layer -> [(K, H, S) per step]
        layers: Iterable[Any] = model.decoder  # nn.Module types the layers' attributes as tensors
        recorded = [stack.enter_context(layer.cross_attn.recording_weights()) for layer in layers]
        state = model.start(src, torch.full((k,), len(source), device=device))
        for t in range(t_max):
            _, state, _ = model.step(inputs[:, t], state)
    maps: list[dict[str, torch.Tensor]] = [{} for _ in range(k)]
    for i, steps in enumerate(recorded):
        weights = torch.stack(steps, dim=2)  # (K, H, T, S)
        for n, hyp in enumerate(hypotheses):
            for h in range(weights.shape[1]):
                maps[n][f"layer {i + 1} / head {h + 1}"] = weights[n, h, : len(hyp)]
    return maps


def speech_example(
    model,
    hyp: Hypotheses,
    i: int,
    features: torch.Tensor,
    vocab,
    *,
    name: str = "",
    reference: str | None = None,
) -> Example:
    """Example ``i`` of the decoded batch ``hyp``: every hypothesis of the utterance
    ``features`` ``(T, F)`` over its listener steps (``MIN_FRAMES`` frames each), with the
    spectrogram under them."""
    steps = features.shape[0] // MIN_FRAMES
    found = _hypotheses(hyp, i, steps)
    if not found:
        raise _no_attention(model)
    hyps = [
        Hypothesis([vocab.piece(t) for t in tokens], {"attention": weights}, score)
        for tokens, score, weights in found
    ]
    frames = [f"{j * MIN_FRAMES}-{(j + 1) * MIN_FRAMES - 1}" for j in range(steps)]
    spectrogram = features[: steps * MIN_FRAMES].T.flip(0)  # (F, 8 S), low bands last
    return Example(
        frames,
        hyps,
        name=name,
        reference=reference,
        image=spectrogram,
        text=f"{features.shape[0]} frames ({MIN_FRAMES} a step)",
    )


def line_example(
    model, image: torch.Tensor, reading, *, name: str = "", reference: str | None = None
) -> Example:
    """The best text of ``reading`` (an :class:`attnkit.tasks.ocr.Reading` of ``image``
    ``(32, W)``) over the line's columns, and the self-attention layer's map over the line
    (:data:`SELF_ATTENTION`, its mean over heads, then each head)."""
    eos = model.head_kind == "attention"
    if reading.weights is None and reading.self_attention is None:
        raise _no_attention(model)
    steps = reading.steps
    weights = torch.zeros(0, steps) if reading.weights is None else reading.weights
    labels = (list(reading.texts[0]) + (["<eos>"] if eos else []))[: weights.shape[0]]
    width = image.shape[1]
    columns = [f"{j * width // steps}-{(j + 1) * width // steps - 1}" for j in range(steps)]
    hyp = Hypothesis(labels, {"attention": weights[: len(labels), :steps]})
    own = reading.self_attention  # (H, T, T) or None
    input_maps = {} if own is None else {SELF_ATTENTION: own.mean(0)}
    if own is not None and own.shape[0] > 1:
        input_maps.update({f"{SELF_ATTENTION} / head {h + 1}": own[h] for h in range(own.shape[0])})
    return Example(
        columns,
        [hyp],
        name=name,
        reference=reference,
        image=image,
        text=f"line image {tuple(image.shape)}, columns per step",
        input_maps=input_maps,
    )


def _cells(side: int) -> list[str]:
    """The labels of a ``side x side`` grid's cells, row-major."""
    return [f"({r},{c})" for r in range(side) for c in range(side)]


def _picture(image: torch.Tensor) -> torch.Tensor:
    """An image ``(3, S, S)`` as the page draws it: ``(S, S, 3)``."""
    return image.permute(1, 2, 0)


def caption_example(
    model,
    hyp: Hypotheses,
    i: int,
    image: torch.Tensor,
    words,
    *,
    name: str = "",
    reference: str | Sequence[str] | None = None,
) -> Example:
    """Example ``i`` of the decoded batch ``hyp``: every caption of ``image`` ``(3, S, S)``
    with its words' attention over the captioner's grid of cells, drawn over the picture."""
    side = model.encoder.side
    found = _hypotheses(hyp, i, side * side)
    if not found:
        raise _no_attention(model)
    hyps = [
        Hypothesis([words.piece(t) for t in tokens], {"attention": weights}, score)
        for tokens, score, weights in found
    ]
    size = image.shape[-1]
    return Example(
        _cells(side),
        hyps,
        name=name,
        reference=reference,
        image=_picture(image),
        grid=(side, side),
        text=f"image {size} x {size} px, a {side} x {side} grid of cells",
    )


def answer_example(
    model,
    image: torch.Tensor,
    question: str,
    answer,
    *,
    name: str = "",
    reference: str | None = None,
) -> Example:
    """The ``answer`` (an :class:`attnkit.tasks.vqa.Answer`) to ``question`` about ``image``
    ``(3, S, S)``: each hop's attention over the model's grid of cells, drawn over the
    picture."""
    if answer.weights is None:
        raise _no_attention(model)
    side = model.encoder.side
    hops = [f"hop {k + 1}" for k in range(answer.weights.shape[0])]
    hyp = Hypothesis(
        hops, {"attention": answer.weights}, math.log(answer.probability), text=answer.answer
    )
    return Example(
        _cells(side),
        [hyp],
        name=name,
        reference=reference,
        image=_picture(image),
        grid=(side, side),
        text=question,
    )
