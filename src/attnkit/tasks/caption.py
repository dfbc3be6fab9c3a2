"""Image captioning as a :class:`attnkit.train.Task`: batching, the Show-Attend-Tell loss,
caption scores, pictures of where each word looked; and :class:`CaptionEvaluator`, a
checkpoint as ``attnkit eval``, ``caption`` and ``explore`` use it.

Captioned images are anything with ``.image`` (``(3, S, S)`` uint8) and ``.captions``
(reference texts): the user's :class:`attnkit.data.CaptionedImage` or a built-in
:class:`attnkit.data.Scene`, which also lets the scores check what a caption says against the
scene (:func:`scene_metrics`).

The scores, in one place for validation, ``attnkit eval`` and the benchmarks
(:meth:`CaptionEvaluator.score`): BLEU-4, chrF and exact match against every reference of an
image (:mod:`attnkit.tasks.metrics`), and on built-in scenes the share of true captions and of
object words whose attention peak falls on the object (:func:`scene_metrics`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import NamedTuple, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from attnkit.checks import check_non_negative, check_positive_int, check_probability, quoted
from attnkit.data import (
    CaptionedImages,
    DataError,
    Scene,
    WordVocab,
    load_image,
    pad_batch,
    stack_images,
)
from attnkit.data.corpora.image_folders import CAPTIONS
from attnkit.data.corpora.reading import read_corpus
from attnkit.data.worlds.scenes import (
    caption_is_true,
    matching_objects,
    object_masks,
    parse_caption,
    scored_scenes,
)
from attnkit.decoding import Decoding, Hypotheses, decode_batches
from attnkit.diagnose.plots import plot_image_attention
from attnkit.models import Captioner, build_model, doubly_stochastic
from attnkit.tasks.batching import length_batches
from attnkit.tasks.evaluator import (
    Evaluator,
    Example,
    LazyExamples,
    Output,
    score_examples,
    scores_of,
    tokens_of,
)
from attnkit.tasks.explore import caption_example
from attnkit.tasks.route import Route, Upload
from attnkit.tokens import BOS, EOS, PAD
from attnkit.train import Batches, TeacherForcing

__all__ = [
    "Caption",
    "CaptionEvaluator",
    "CaptionOutput",
    "CaptionTask",
    "attention_on_objects",
    "caption_examples",
    "caption_images",
    "check_images",
    "decode_images",
    "plot_caption",
    "plot_captions",
    "scene_metrics",
]

EXTRA_WORDS = 5  # decoded captions may be this much longer than the longest training caption


class Caption(NamedTuple):
    """One image's captions, best first (one, or beam search's n-best, or the sampled ones
    ranked by model score), and the attention ``weights`` ``(n, L)`` of the best one's ``n``
    words (EOS included) over the grid's ``L`` cells (None without attention, or when decoded
    without ``weights``)."""

    texts: list[str]
    weights: torch.Tensor | None


def _caption_texts(items: Sequence) -> Sequence[tuple[str, ...]]:
    """The captions of each item, without reading images read when indexed."""
    return items.captions if isinstance(items, CaptionedImages) else [x.captions for x in items]


def check_images(items: Sequence, name: str, size: int) -> None:
    """Every ``items[i].image`` is ``(3, size, size)`` uint8 and has a caption; else a
    :class:`DataError` naming the item. Images read when indexed
    (:class:`attnkit.data.CaptionedImages`) are checked by the size they are read at, not
    read here."""
    stored = isinstance(items, CaptionedImages)
    if isinstance(items, CaptionedImages) and items.size != size:  # as stored, for mypy
        raise DataError(
            f"{name}: images read at ({size}, {size}) are expected (the model's "
            f"image_size), got ({items.size}, {items.size})"
        )
    for i, item in enumerate(() if stored else items):
        image = item.image
        if image.dtype != torch.uint8 or tuple(image.shape) != (3, size, size):
            raise DataError(
                f"{name}[{i}]: expected a uint8 image (3, {size}, {size}) (the "
                f"model's image_size), got {image.dtype} {tuple(image.shape)}"
            )
    for i, captions in enumerate(_caption_texts(items)):
        if not captions or not all(c.strip() for c in captions):
            raise DataError(f"{name}[{i}]: expected non-empty captions, got {quoted(captions)}")


@torch.no_grad()
def decode_images(
    model: Captioner,
    images: Sequence[torch.Tensor],
    *,
    max_words: int,
    decoding: Decoding | None = None,
    weights: bool = False,
    batch_size: int = 32,
) -> list[Hypotheses]:
    """Decode images ``(3, S, S)`` uint8 as ``decoding`` says (default greedy), at most
    ``max_words`` words each (EOS included): per batch of ``batch_size`` images, in order, the
    :class:`attnkit.decoding.Hypotheses` (every hypothesis with its score; the attention
    weights ``(n, L)`` over the grid's ``L`` cells only with ``weights``)."""
    return [
        hyp
        for _, hyp in decode_batches(
            model,
            images,
            lambda chunk: (stack_images(chunk), torch.full((len(chunk),), model.cells)),
            max_len=lambda lengths: max_words,
            decoding=decoding,
            batch_size=batch_size,
            weights=weights,
        )
    ]


def caption_images(
    model: Captioner,
    vocab: WordVocab,
    images: Sequence[torch.Tensor],
    *,
    max_words: int,
    decoding: Decoding | None = None,
    weights: bool = False,
    batch_size: int = 32,
) -> list[Caption]:
    """Caption images ``(3, S, S)`` uint8 (:func:`decode_images`): one :class:`Caption` per
    image, in order; its attention weights only with ``weights`` (for pictures and
    :func:`scene_metrics`)."""
    return [
        caption
        for hyp in decode_images(
            model,
            images,
            max_words=max_words,
            decoding=decoding,
            weights=weights,
            batch_size=batch_size,
        )
        for caption in _captions(hyp, vocab)
    ]


def _captions(hyp: Hypotheses, vocab: WordVocab) -> list[Caption]:
    """The :class:`Caption` of each image of a decoded batch ``hyp``."""
    tokens = hyp.tokens if hyp.lengths.dim() == 2 else hyp.tokens[:, None]  # (B, K, T)
    best = hyp.best()
    out = []
    for j in range(tokens.shape[0]):
        n = int(best.lengths[j])
        kept = None if best.weights is None else best.weights[j, :n].cpu()  # (n, L)
        out.append(Caption([vocab.decode(row) for row in tokens[j]], kept))
    return out


def attention_on_objects(scene: Scene, caption: str, weights: torch.Tensor) -> tuple[int, int]:
    """``(hits, words)``: of a caption's words that name an object of the scene (the size,
    colour and shape words of a noun phrase that matches an object), how many were generated
    while the attention's peak cell overlapped the pixels of an object that phrase matches.

    Shape:
        weights ``(n, L)``: one row per word of ``caption`` (and EOS), ``L`` cells of a
        square grid over the image.
    """
    fact = parse_caption(caption)
    if fact is None:
        return 0, 0
    side = round(weights.shape[1] ** 0.5)
    cell = scene.size / side
    masks = None
    hits = words = 0
    for phrase in (fact.subject, fact.other):
        if phrase is None:
            continue
        objects = matching_objects(scene.objects, phrase)
        if not objects:
            continue
        masks = object_masks(scene) if masks is None else masks
        named = np.asarray(masks[objects].any(0))  # (S, S); asarray: an array to mypy
        for t in range(phrase.start + 1, phrase.end):  # the words after "a"
            row, col = divmod(int(weights[t].argmax()), side)
            box = named[
                int(row * cell) : int(np.ceil((row + 1) * cell)),
                int(col * cell) : int(np.ceil((col + 1) * cell)),
            ]
            hits += bool(box.any())
            words += 1
    return hits, words


def scene_metrics(
    scenes: Sequence[Scene],
    captions: Sequence[str],
    weights: Sequence[torch.Tensor | None] | None = None,
) -> dict[str, float]:
    """``true_captions``: the share of ``captions`` (one per scene) whose every stated fact is
    true of their scene (:func:`attnkit.data.worlds.scenes.caption_is_true`); with their attention
    ``weights`` (``(n, L)`` each, as :class:`Caption` holds them; None without attention),
    ``attention_on_object``: the share of words naming an object whose attention peak falls
    on that object (:func:`attention_on_objects`)."""
    if len(captions) != len(scenes) or (weights is not None and len(weights) != len(scenes)):
        raise ValueError(
            f"captions, weights: expected one per scene ({len(scenes)}), got "
            f"{len(captions)} and {'none' if weights is None else len(weights)}"
        )
    out = {
        "true_captions": sum(
            caption_is_true(s.objects, t, size=s.size) for s, t in zip(scenes, captions)
        )
        / max(1, len(captions))
    }
    if weights is not None and all(w is not None for w in weights):
        counts = [
            attention_on_objects(s, t, w)
            for s, t, w in zip(scenes, captions, weights)
            if w is not None  # all are: mypy is told
        ]
        words = sum(n for _, n in counts)
        out["attention_on_object"] = sum(h for h, _ in counts) / words if words else 0.0
    return out


def plot_caption(
    image: torch.Tensor, caption: Caption, path: str | Path, *, title: str | None = None
) -> Path | None:
    """The image, then each word of the best caption (and EOS) with its attention over the
    image; None when the model has no attention."""
    if caption.weights is None:
        return None
    labels = (caption.texts[0].split() + ["<eos>"])[: caption.weights.shape[0]]
    side = round(caption.weights.shape[1] ** 0.5)
    maps = caption.weights[: len(labels)].reshape(len(labels), side, side)
    return plot_image_attention(image, maps, labels, path, title=title or caption.texts[0])


def plot_captions(
    images: Sequence[torch.Tensor], captions: Sequence[Caption], folder: str | Path
) -> list[Path]:
    """:func:`plot_caption` of each image as ``folder/caption_<i>.png``; the paths written
    (none for a model without attention)."""
    drawn = (
        plot_caption(image, caption, Path(folder) / f"caption_{i}.png")
        for i, (image, caption) in enumerate(zip(images, captions))
    )
    return [path for path in drawn if path is not None]


class CaptionTask:
    """Batches, loss and metrics for captioned images.

    Args:
        train, valid: items with ``.image`` ``(3, S, S)`` uint8 (``S``: the model's
            ``image_size``) and ``.captions``; each caption of a training image is one example.
            Built-in :class:`attnkit.data.Scene` items in ``valid`` are also scored by
            :func:`scene_metrics`.
        model_config: the model's registry config (``name`` defaults to ``"captioner"``);
            ``vocab`` is set from the words.
        vocab: the words; default: those of the training captions.
        batch_size: captions per batch (batches group similar lengths).
        doubly_stochastic: ``lambda`` of the attention penalty (0: none). The loss is Xu et
            al.'s ``sum -log p(y) + lambda * sum_i (1 - sum_t alpha_ti)^2`` over the batch's
            captions, divided by its words (so ``lambda`` weighs as in the paper).
        entropy_weight, baseline_decay: hard attention's REINFORCE
            (:meth:`attnkit.models.Captioner.reinforce`).
        max_valid: validation images captioned at each evaluation.
    """

    def __init__(
        self,
        train: Sequence,
        valid: Sequence,
        *,
        model_config: dict,
        vocab: WordVocab | None = None,
        batch_size: int = 32,
        seed: int = 0,
        label_smoothing: float = 0.0,
        teacher_forcing: float | TeacherForcing = 1.0,
        doubly_stochastic: float = 1.0,
        entropy_weight: float = 0.01,
        baseline_decay: float = 0.9,
        max_valid: int = 300,
        data: dict | None = None,
    ):
        if not train:
            raise ValueError("train: expected at least one captioned image")
        check_positive_int("batch_size", batch_size)
        doubly_stochastic = check_non_negative("doubly_stochastic", doubly_stochastic)
        entropy_weight = check_non_negative("entropy_weight", entropy_weight)
        check_probability("baseline_decay", baseline_decay)
        # images read when indexed stay so (CaptionedImages): none is read here
        self.train = train if isinstance(train, CaptionedImages) else list(train)
        self.valid = (valid if isinstance(valid, CaptionedImages) else list(valid))[:max_valid]
        captions = _caption_texts(self.train)
        self.words = vocab or WordVocab.build(c for texts in captions for c in texts)
        self.model_config = {"name": "captioner", **model_config, "vocab": len(self.words)}
        size = self.model_config.get("image_size", 64)
        check_images(self.train, "train", size)
        check_images(self.valid, "valid", size)
        self.pairs = [(i, self.words.encode(c)) for i, texts in enumerate(captions) for c in texts]
        self.max_words = max(len(ids) for _, ids in self.pairs) + EXTRA_WORDS
        if not isinstance(teacher_forcing, TeacherForcing):
            teacher_forcing = TeacherForcing(start=teacher_forcing)
        self.batch_size, self.seed = batch_size, seed
        self.label_smoothing, self.teacher_forcing = label_smoothing, teacher_forcing
        self.doubly_stochastic = float(doubly_stochastic)
        self.entropy_weight, self.baseline_decay = float(entropy_weight), float(baseline_decay)
        self.data = data or {}

    def build_model(self) -> Captioner:
        return cast(Captioner, build_model(self.model_config))  # of model_config's class

    def batches(self, epoch: int) -> Batches:
        """Shuffled (seeded by epoch) batches of captions of similar lengths, built when
        indexed (images float32 in [0, 1])."""
        lengths = [len(ids) for _, ids in self.pairs]
        return Batches(
            length_batches(lengths, self.batch_size, seed=self.seed, epoch=epoch), self._collate
        )

    def _collate(self, idx: list[int]) -> dict:
        images = stack_images([self.train[self.pairs[i][0]].image for i in idx])
        tgt, _ = pad_batch([[BOS] + self.pairs[i][1] + [EOS] for i in idx])
        return {"images": images, "tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:]}

    def loss(self, model, batch: dict, step: int = 0) -> tuple[torch.Tensor, int]:
        out = model(
            batch["images"], batch["tgt_in"], teacher_forcing=self.teacher_forcing.ratio(step)
        )
        target = batch["tgt_out"]
        mask = target != PAD  # (B, T)
        nll = F.cross_entropy(
            out.logits.flatten(0, 1),
            target.flatten(),
            ignore_index=PAD,
            reduction="none",
            label_smoothing=self.label_smoothing,
        )
        total = nll.sum()
        if out.weights is not None and self.doubly_stochastic > 0:
            total = total + self.doubly_stochastic * doubly_stochastic(out.weights, mask).sum()
        if out.location_log_probs is not None:
            core = model.module if isinstance(model, DistributedDataParallel) else model
            log_likelihood = -F.cross_entropy(
                out.logits.transpose(1, 2), target, ignore_index=PAD, reduction="none"
            ).sum(1)
            total = (
                total
                + core.reinforce(
                    log_likelihood,
                    out,
                    mask,
                    entropy_weight=self.entropy_weight,
                    decay=self.baseline_decay,
                ).sum()
            )
        tokens = int(mask.sum())
        return total / max(1, tokens), tokens

    def evaluate(self, model: Captioner) -> dict[str, float]:
        """:meth:`CaptionEvaluator.score` of greedy captions of the validation images."""
        evaluator = CaptionEvaluator(model, self.config(), self.vocab())
        return score_examples(evaluator, caption_examples(self.valid, "valid")).metrics

    def pictures(self, model: Captioner, folder: Path, n: int) -> list[Path]:
        """Attention pictures of the first ``n`` validation images in ``folder``."""
        images = [item.image for item in self.valid[:n]]
        return plot_captions(
            images,
            caption_images(model, self.words, images, max_words=self.max_words, weights=True),
            folder,
        )

    def config(self) -> dict:
        return {
            "task": "caption",
            "model": self.model_config,
            "data": self.data,
            "max_words": self.max_words,
            "batching": {
                "batch_size": self.batch_size,
                "seed": self.seed,
                "label_smoothing": self.label_smoothing,
                "teacher_forcing": asdict(self.teacher_forcing),
            },
            "loss": {
                "doubly_stochastic": self.doubly_stochastic,
                "entropy_weight": self.entropy_weight,
                "baseline_decay": self.baseline_decay,
            },
        }

    def vocab(self) -> dict:
        return self.words.to_json()


def caption_examples(items: Sequence, split: str = "scene") -> Sequence[Example]:
    """Captioned images as labelled examples (every caption a reference): a built-in
    :class:`attnkit.data.Scene`, named ``split[i]``, with the scene as the annotation its
    captions are checked against (:func:`scene_metrics`); the user's
    :class:`attnkit.data.CaptionedImage` named by its file (:class:`LazyExamples` for
    :class:`attnkit.data.CaptionedImages`: each image read when its example is)."""
    if isinstance(items, CaptionedImages):
        return LazyExamples(
            lambda i: Example(items[i].image, items.captions[i], items.origins[i]),
            range(len(items)),
        )
    return [
        Example(item.image, tuple(item.captions), f"{split}[{i}]", item)
        if isinstance(item, Scene)
        else Example(item.image, tuple(item.captions), item.origin)
        for i, item in enumerate(items)
    ]


@dataclass(frozen=True)
class CaptionOutput(Output):
    """An image's captions, best first, as :class:`attnkit.tasks.evaluator.Output` holds
    them, and the attention ``weights`` ``(n, L)`` of the best one's words (EOS included)
    over the grid's ``L`` cells, which :func:`scene_metrics` scores (None for a model without
    attention)."""

    weights: torch.Tensor | None = None


class CaptionEvaluator(Evaluator, task="caption"):
    """A captioning checkpoint's model and words: captions images and scores captions against
    every reference of an image; on built-in scenes (``scenes:test``, ``scenes:heldout``, or
    validation scenes) also the share of true captions and the attention check
    (:func:`scene_metrics`)."""

    data = (
        f"a folder of images with {CAPTIONS} (filename<TAB>caption, several lines per "
        "image), that TSV, COCO captions, Karpathy's split file, hf:PATH[:SPLIT], or "
        "built-in scenes: scenes:test or scenes:heldout"
    )
    metrics = ("bleu", "chrf", "exact")
    route = Route("/caption", "caption an image", upload=Upload("image"))
    labels = {"true_captions": "true captions", "attention_on_object": "attention on object"}
    scores_attention = True

    def __init__(self, model: Captioner, config: dict, vocab: dict):
        super().__init__(model, config, vocab)
        self.words = WordVocab.from_json(vocab)
        self.image_size = model.encoder.image_size  # S: every image is resized to it
        self.max_words = cast(int, config.get("max_words"))  # checked next
        check_positive_int("max_words", self.max_words)

    def read(self, path, **options) -> Sequence[Example]:
        """Built-in scenes (``scenes:test``, ``scenes:heldout``), or the captioned images of
        ``path`` in any captioning corpus format (:mod:`attnkit.data.corpora.image_formats`)."""
        scored = scored_scenes(path, size=self.image_size, trained_on=self.config.get("data"))
        if scored is not None:
            return caption_examples(scored[1], scored[0])
        return caption_examples(
            read_corpus("caption", path, **{"role": "test", "size": self.image_size, **options})
        )

    def load_inputs(self, items: Sequence[str]) -> tuple[list, list[str]]:
        """Images ``(3, S, S)`` from image files, resized to the model's size."""
        return [load_image(Path(p), self.image_size) for p in items], list(items)

    def decode(
        self,
        inputs: Sequence[torch.Tensor],
        decoding: Decoding | None = None,
        *,
        weights: bool = False,
    ) -> list[CaptionOutput]:
        outputs: list[CaptionOutput] = []
        for hyp in decode_images(
            self.model, inputs, max_words=self.max_words, decoding=decoding, weights=weights
        ):
            for i, (c, ranked, tokens) in enumerate(
                zip(_captions(hyp, self.words), scores_of(hyp), tokens_of(hyp, self.words))
            ):
                image = inputs[len(outputs)]
                outputs.append(
                    CaptionOutput(
                        c.texts,
                        partial(plot_caption, image, c),
                        partial(caption_example, self.model, hyp, i, image, self.words)
                        if weights
                        else None,
                        ranked,
                        tokens,
                        weights=c.weights,
                    )
                )
        return outputs

    def score(self, examples: Sequence[Example], outputs: Sequence[Output]) -> dict[str, float]:
        """BLEU-4, chrF and exact match against every reference; with built-in scenes as the
        examples' annotations, :func:`scene_metrics` too."""
        out = super().score(examples, outputs)
        captions = cast(Sequence[CaptionOutput], outputs)  # what decode gives
        scenes = [e.annotation for e in examples]
        if scenes and all(isinstance(scene, Scene) for scene in scenes):
            out.update(
                scene_metrics(scenes, [o.text for o in captions], [o.weights for o in captions])
            )
        return out
