"""The explorer's examples from a trained model: each task's evaluator decodes the inputs as
``attnkit explore`` asks, and its hypotheses become :class:`attnkit.explore.Example` s.

Translation and speech give every hypothesis (beam's n-best, sampling's draws) with its
score and attention; a Transformer also gives every decoder layer's cross-attention per head,
recorded by replaying each hypothesis through the model's own ``step``. OCR gives the best
reading with its attention over the line's columns (the attention head; the CTC head's
self-attention at the emitted steps). Image captioning gives every caption with its words'
attention over the image's grid of cells, VQA the answer with each hop's attention over it:
the page draws those maps over the picture.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from attnkit.decoding import Decoding, Hypotheses
from attnkit.explore import Example, Hypothesis
from attnkit.models import Transformer
from attnkit.models.las import MIN_FRAMES
from attnkit.tasks.captioning import CaptionEvaluator, decode_images
from attnkit.tasks.ocr import OcrEvaluator, read_lines
from attnkit.tasks.speech import SpeechEvaluator, transcribe
from attnkit.tasks.translation import TranslationEvaluator, translate
from attnkit.tasks.vqa import VqaEvaluator
from attnkit.tokens import BOS, PAD

__all__ = ["explore_examples"]


def explore_examples(evaluator, inputs: Sequence, decoding: Decoding | None = None, *,
                     names: Sequence[str] | None = None,
                     references: Sequence[str | Sequence[str] | None] | None = None,
                     ) -> list[Example]:
    """Decode ``inputs`` with ``evaluator`` (a translation, OCR, speech, captioning or VQA
    :class:`~attnkit.tasks.evaluator.Evaluator`; inputs as its ``decode`` takes them) and
    return one explorer example each, with ``names`` and ``references`` (a text, or several)
    when given.

    Raises:
        ValueError: the evaluator's task has no explorer, or its model has no attention.
    """
    if isinstance(evaluator, TranslationEvaluator):
        examples = _translations(evaluator, inputs, decoding)
    elif isinstance(evaluator, SpeechEvaluator):
        examples = _transcriptions(evaluator, inputs, decoding)
    elif isinstance(evaluator, OcrEvaluator):
        examples = _readings(evaluator, inputs, decoding)
    elif isinstance(evaluator, CaptionEvaluator):
        examples = _captions(evaluator, inputs, decoding)
    elif isinstance(evaluator, VqaEvaluator):
        examples = _answers(evaluator, inputs, decoding)
    else:
        raise ValueError(f"evaluator: expected a translate, ocr, asr, caption or vqa "
                         f"checkpoint's, got task {evaluator.task!r}")
    names = names or [""] * len(examples)
    references = references or [None] * len(examples)
    return [Example(ex.source, ex.hypotheses, name=name, text=ex.text, reference=ref,
                    image=ex.image, grid=ex.grid)
            for ex, name, ref in zip(examples, names, references)]


def _no_attention(evaluator) -> ValueError:
    return ValueError(f"checkpoint: its {type(evaluator.model).__name__} model has no "
                      "attention to explore")


def _hypotheses(hyp: Hypotheses, i: int, steps: int) -> list[tuple[list[int], float,
                                                                    torch.Tensor]]:
    """Example ``i``'s hypotheses in ``hyp``, best first: (tokens with EOS, score, weights
    ``(T, steps)``)."""
    if hyp.weights is None:
        return []
    n_best = hyp.lengths.dim() == 2
    tokens = hyp.tokens[i] if n_best else hyp.tokens[i, None]  # (K, T)
    lengths = hyp.lengths[i] if n_best else hyp.lengths[i, None]  # (K,)
    scores = hyp.scores[i] if n_best else hyp.scores[i, None]
    weights = hyp.weights[i] if n_best else hyp.weights[i, None]  # (K, T, Tk)
    return [(tokens[k, : int(lengths[k])].tolist(), float(scores[k]),
             weights[k, : int(lengths[k]), :steps]) for k in range(tokens.shape[0])]


def _translations(ev: TranslationEvaluator, inputs: Sequence[str], decoding) -> list[Example]:
    _, raws = translate(ev.model, ev.src_vocab, ev.tgt_vocab, inputs, decoding=decoding,
                        max_len_extra=ev.max_len_extra, weights=True)
    examples = []
    for hyp in raws:
        for i in range(hyp.tokens.shape[0]):
            source = inputs[len(examples)]
            pieces = ev.src_vocab.pieces(source)
            found = _hypotheses(hyp, i, len(pieces))
            if not found:
                raise _no_attention(ev)
            heads = (_transformer_heads(ev.model, ev.src_vocab.encode(source) or [PAD],
                                        [tokens for tokens, _, _ in found])
                     if isinstance(ev.model, Transformer) else None)
            hyps = []
            for k, (tokens, score, weights) in enumerate(found):
                maps = {"mean of heads, last layer" if heads else "attention": weights}
                maps.update(heads[k] if heads else {})
                hyps.append(Hypothesis([ev.tgt_vocab.piece(t) for t in tokens], maps, score))
            examples.append(Example(pieces, hyps, text=source))
    return examples


@torch.no_grad()
def _transformer_heads(model: Transformer, source: list[int],
                       hypotheses: list[list[int]]) -> list[dict[str, torch.Tensor]]:
    """Every decoder layer's cross-attention per head ``(T, S)`` for each hypothesis of one
    source, replayed step by step through ``model.step`` with the layers asked for weights."""
    device = next(model.parameters()).device
    k, t_max = len(hypotheses), max(len(h) for h in hypotheses)
    src = torch.tensor([source] * k, device=device)  # (K, S)
    tokens = torch.zeros(k, t_max, dtype=torch.long, device=device)
    for n, hyp in enumerate(hypotheses):
        tokens[n, : len(hyp)] = torch.tensor(hyp, device=device)
    inputs = torch.cat([torch.full((k, 1), BOS, device=device), tokens[:, :-1]], dim=1)
    recorded = {i: [] for i in range(len(model.decoder))}  # layer -> [(K, H, S) per step]

    def ask(module, args, kwargs):
        return args, {**kwargs, "need_weights": True}

    def keep(i):
        return lambda module, args, kwargs, out: recorded[i].append(out.weights)

    hooks = [h for i, layer in enumerate(model.decoder) for h in (
        layer.cross_attn.register_forward_pre_hook(ask, with_kwargs=True),
        layer.cross_attn.register_forward_hook(keep(i), with_kwargs=True))]
    try:
        state = model.start(src, torch.full((k,), len(source), device=device))
        for t in range(t_max):
            _, state, _ = model.step(inputs[:, t], state)
    finally:
        for h in hooks:
            h.remove()
    maps = [{} for _ in range(k)]
    for i, steps in recorded.items():
        weights = torch.stack(steps, dim=2)  # (K, H, T, S)
        for n, hyp in enumerate(hypotheses):
            for h in range(weights.shape[1]):
                maps[n][f"layer {i + 1} / head {h + 1}"] = weights[n, h, : len(hyp)]
    return maps


def _transcriptions(ev: SpeechEvaluator, inputs: Sequence[torch.Tensor],
                    decoding) -> list[Example]:
    _, raws = transcribe(ev.model, ev.char_vocab, inputs, decoding=decoding, weights=True)
    examples = []
    for hyp in raws:
        for i in range(hyp.tokens.shape[0]):
            features = inputs[len(examples)]  # (T, F)
            steps = features.shape[0] // MIN_FRAMES
            found = _hypotheses(hyp, i, steps)
            if not found:
                raise _no_attention(ev)
            hyps = [Hypothesis([ev.char_vocab.piece(t) for t in tokens],
                               {"attention": weights}, score)
                    for tokens, score, weights in found]
            frames = [f"{j * MIN_FRAMES}-{(j + 1) * MIN_FRAMES - 1}" for j in range(steps)]
            spectrogram = features[: steps * MIN_FRAMES].T.flip(0)  # (F, 8 S), low bands last
            text = f"{features.shape[0]} frames ({MIN_FRAMES} a step)"
            examples.append(Example(frames, hyps, text=text, image=spectrogram))
    return examples


def _readings(ev: OcrEvaluator, inputs: Sequence[torch.Tensor], decoding) -> list[Example]:
    eos = ev.model.head_kind == "attention"
    examples = []
    for image, reading in zip(inputs, read_lines(ev.model, ev.chars, inputs,
                                                 decoding=decoding, weights=True)):
        if ev.model.attention is None and not eos:
            raise _no_attention(ev)
        # the CTC head gives no weights when it emits nothing
        weights = torch.zeros(0, reading.steps) if reading.weights is None else reading.weights
        labels = (list(reading.texts[0]) + (["<eos>"] if eos else []))[: weights.shape[0]]
        width = image.shape[1]
        columns = [f"{j * width // reading.steps}-{(j + 1) * width // reading.steps - 1}"
                   for j in range(reading.steps)]
        hyp = Hypothesis(labels, {"attention": weights[: len(labels), : reading.steps]})
        examples.append(Example(columns, [hyp], image=image,
                                text=f"line image {tuple(image.shape)}, columns per step"))
    return examples


def _cells(side: int) -> list[str]:
    """The labels of a ``side x side`` grid's cells, row-major."""
    return [f"({r},{c})" for r in range(side) for c in range(side)]


def _picture(image: torch.Tensor) -> torch.Tensor:
    """An image ``(3, S, S)`` as the page draws it: ``(S, S, 3)``."""
    return image.permute(1, 2, 0)


def _captions(ev: CaptionEvaluator, inputs: Sequence[torch.Tensor], decoding) -> list[Example]:
    side = ev.model.encoder.side
    examples = []
    for hyp in decode_images(ev.model, inputs, max_words=ev.max_words, decoding=decoding,
                             weights=True):
        for i in range(hyp.tokens.shape[0]):
            image = inputs[len(examples)]
            found = _hypotheses(hyp, i, side * side)
            if not found:
                raise _no_attention(ev)
            hyps = [Hypothesis([ev.words.piece(t) for t in tokens], {"attention": weights},
                               score) for tokens, score, weights in found]
            examples.append(Example(_cells(side), hyps, image=_picture(image), grid=(side, side),
                                    text=f"image {ev.image_size} x {ev.image_size} px, a "
                                    f"{side} x {side} grid of cells"))
    return examples


def _answers(ev: VqaEvaluator, inputs: Sequence[tuple[torch.Tensor, str]],
             decoding) -> list[Example]:
    side = ev.model.encoder.side
    examples = []
    for (image, question), answer in zip(inputs, ev.answer(inputs, decoding)):
        if answer.weights is None:
            raise _no_attention(ev)
        hops = [f"hop {k + 1}" for k in range(answer.weights.shape[0])]
        hyp = Hypothesis(hops, {"attention": answer.weights}, math.log(answer.probability),
                         text=answer.answer)
        examples.append(Example(_cells(side), [hyp], image=_picture(image), grid=(side, side),
                                text=question))
    return examples
