"""Visual question answering as a :class:`attnkit.train.Task`: batching, the answer
classifier's loss, accuracy by question type, pictures of each attention hop; and
:class:`VqaEvaluator`, a checkpoint as ``attnkit eval`` and ``explore`` use it.

Data is a list of images ``(3, S, S)`` uint8 and a list of
:class:`attnkit.data.ImageQuestion` (which image, question, answer, type), as
:func:`attnkit.data.read_question_folder` reads the user's and
:func:`attnkit.data.question_set` makes the built-in ones.

The scores, in one place for validation, ``attnkit eval`` and the benchmarks
(:meth:`VqaEvaluator.score`): :func:`vqa_metrics`, accuracy overall, per question type,
relational and not. Words of a question that the model never saw count as ``<unk>``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import NamedTuple, cast

import torch
import torch.nn.functional as F

from attnkit.checks import check_positive_int, quoted
from attnkit.data import (
    DataError,
    ImageFiles,
    ImageQuestion,
    WordVocab,
    load_image,
    pad_batch,
    question_set,
    stack_images,
)
from attnkit.data.corpora.image_folders import QUESTIONS
from attnkit.data.corpora.reading import read_corpus
from attnkit.data.worlds.scenes import QUESTION_TYPES, RELATIONAL, scored_scenes
from attnkit.decoding import Decoding
from attnkit.diagnose.plots import plot_image_attention
from attnkit.models import VQA, build_model
from attnkit.tasks.batching import group_batches, task_config
from attnkit.tasks.evaluator import Evaluator, Example, LazyExamples, Output, score_examples
from attnkit.tasks.explore import answer_example
from attnkit.tasks.route import Route, Text, Upload
from attnkit.tokens import SPECIALS
from attnkit.train import Batches

__all__ = [
    "Answer",
    "VqaEvaluator",
    "VqaTask",
    "answer_questions",
    "check_questions",
    "check_words",
    "plot_answer",
    "plot_answers",
    "question_examples",
    "vqa_metrics",
]

QuestionSet = tuple[Sequence[torch.Tensor], Sequence[ImageQuestion]]


class Answer(NamedTuple):
    """The predicted answer, its probability, and each hop's attention ``weights`` ``(K, L)``
    over the grid's ``L`` cells (None for a model without attention)."""

    answer: str
    probability: float
    weights: torch.Tensor | None


def _images(images: Sequence) -> Sequence:
    """``images`` as a task keeps them: images read when indexed (:class:`ImageFiles`) stay
    so, none read here; others as a list."""
    return images if isinstance(images, ImageFiles) else list(images)


def check_questions(data: QuestionSet, name: str, size: int) -> None:
    """Images ``(3, size, size)`` uint8, and questions naming one of them; else a
    :class:`DataError` naming the image or the question's origin."""
    images, questions = data
    stored = isinstance(images, ImageFiles)  # read when indexed: checked by their size
    if isinstance(images, ImageFiles) and images.size != size:  # as stored, for mypy
        raise DataError(
            f"{name}: images read at ({size}, {size}) are expected (the model's "
            f"image_size), got ({images.size}, {images.size})"
        )
    for i, image in enumerate(() if stored else images):
        if image.dtype != torch.uint8 or tuple(image.shape) != (3, size, size):
            raise DataError(
                f"{name} image {i}: expected a uint8 image (3, {size}, {size}) (the "
                f"model's image_size), got {image.dtype} {tuple(image.shape)}"
            )
    for q in questions:
        if not 0 <= q.image < len(images):
            raise DataError(
                f"{q.origin}: image {q.image} is not one of the {len(images)} {name} images"
            )
        if not q.question.strip() or not q.answer.strip():
            raise DataError(f"{q.origin}: empty question or answer")


@torch.no_grad()
def answer_questions(
    model: VQA,
    words: WordVocab,
    answers: Sequence[str],
    asked: Sequence[tuple[torch.Tensor, str]],
    *,
    batch_size: int = 64,
) -> list[Answer]:
    """Answer ``(image (3, S, S) uint8, question)`` pairs: one :class:`Answer` each, in order.
    Words of a question outside ``words`` count as ``<unk>``; a question without words is a
    ``ValueError`` naming it. Questions of a batch that share an image tensor (the same
    object, as the questions of one scene do) share its encoding."""
    ids = [words.encode(q) for _, q in asked]
    empty = [i for i, x in enumerate(ids) if not x]
    if empty:
        raise ValueError(
            f"asked[{empty[0]}]: expected a question with words, got {quoted(asked[empty[0]][1])}"
        )
    model.eval()
    device = next(model.parameters()).device
    out = []
    for s in range(0, len(asked), batch_size):
        chunk = asked[s : s + batch_size]
        tokens, lengths = pad_batch(ids[s : s + batch_size])
        slot: dict[int, int] = {}  # id(image) -> its row among the chunk's distinct images
        index = [slot.setdefault(id(image), len(slot)) for image, _ in chunk]
        distinct = list({id(image): image for image, _ in chunk}.values())
        result = model(
            stack_images(distinct).to(device),
            tokens.to(device),
            lengths.to(device),
            torch.tensor(index, device=device),
        )
        probs = result.logits.float().softmax(-1)
        best = probs.argmax(-1)
        for j in range(len(chunk)):
            weights = None if result.weights is None else result.weights[j].cpu()
            out.append(Answer(answers[int(best[j])], float(probs[j, best[j]]), weights))
    return out


def check_words(words: WordVocab, questions) -> None:
    """Refuse a question asked on the command line that holds words the model never saw, or
    no word: a :class:`DataError` naming them and listing the words the model knows."""
    known = words.symbols[len(SPECIALS) :]
    for question in questions:
        unknown = words.unknown(question)
        if unknown or not words.encode(question):
            problem = (
                f"words this model never saw: {', '.join(map(repr, unknown))}"
                if unknown
                else "no words"
            )
            raise DataError(
                f"question {quoted(question)}: {problem} (it knows {len(known)}: "
                f"{' '.join(known[:40])}{' ...' if len(known) > 40 else ''})"
            )


def vqa_metrics(
    predicted: Sequence[str], answers: Sequence[str], types: Sequence[str]
) -> dict[str, float]:
    """``accuracy`` over all questions, ``accuracy_<type>`` for each question type, and when
    the types include built-in relational ones (:data:`attnkit.data.worlds.scenes.RELATIONAL`),
    ``accuracy_relational`` and ``accuracy_non_relational``."""
    if not len(predicted) == len(answers) == len(types) or not answers:
        raise ValueError(
            f"predicted, answers, types: expected one each per question, got "
            f"{len(predicted)}, {len(answers)} and {len(types)}"
        )
    right = [p == a for p, a in zip(predicted, answers)]

    def share(keep) -> float:
        picked = [r for r, t in zip(right, types) if keep(t)]
        return sum(picked) / len(picked)

    out = {"accuracy": sum(right) / len(right)}
    for kind in sorted(set(types)):
        out[f"accuracy_{kind}"] = share(lambda t, kind=kind: t == kind)
    if any(t in RELATIONAL for t in types):
        out["accuracy_relational"] = share(lambda t: t in RELATIONAL)
        if not all(t in RELATIONAL for t in types):
            out["accuracy_non_relational"] = share(lambda t: t not in RELATIONAL)
    return out


def plot_answer(
    image: torch.Tensor,
    question: str,
    answer: Answer,
    path: str | Path,
    *,
    title: str | None = None,
) -> Path | None:
    """The image, then each hop's attention over it (``title`` default: question -> answer);
    None for a model without attention."""
    if answer.weights is None:
        return None
    hops, cells = answer.weights.shape
    side = round(cells**0.5)
    return plot_image_attention(
        image,
        answer.weights.reshape(hops, side, side),
        [f"hop {k + 1}" for k in range(hops)],
        path,
        title=title or f"{question} -> {answer.answer}",
    )


def plot_answers(
    asked: Sequence[tuple[torch.Tensor, str]], answers: Sequence[Answer], folder: str | Path
) -> list[Path]:
    """:func:`plot_answer` of each ``(image, question)`` as ``folder/answer_<i>.png``; the paths
    written (none for a model without attention)."""
    drawn = (
        plot_answer(image, question, answer, Path(folder) / f"answer_{i}.png")
        for i, ((image, question), answer) in enumerate(zip(asked, answers))
    )
    return [path for path in drawn if path is not None]


class VqaTask:
    """Batches, loss and metrics for questions about images.

    Args:
        train, valid: ``(images, questions)``: images ``(3, S, S)`` uint8 (``S``: the model's
            ``image_size``) and :class:`attnkit.data.ImageQuestion` about them.
        model_config: the model's registry config (``name`` defaults to ``"vqa"``); ``words``
            and ``answers`` are set from the vocabularies.
        words: the question words (default: those of the training questions).
        answers: the answer classes (default: the training answers, sorted); a validation
            answer outside them is never predicted.
        batch_size: questions per batch (the questions about whole images: this many or a
            few more; the last batch of an epoch fewer).
        max_valid: validation questions answered at each evaluation.
    """

    def __init__(
        self,
        train: QuestionSet,
        valid: QuestionSet,
        *,
        model_config: dict,
        words: WordVocab | None = None,
        answers: Sequence[str] | None = None,
        batch_size: int = 64,
        seed: int = 0,
        label_smoothing: float = 0.0,
        max_valid: int = 1000,
        data: dict | None = None,
    ):
        if not train[1]:
            raise ValueError("train: expected at least one question")
        check_positive_int("batch_size", batch_size)
        self.words = words or WordVocab.build(q.question for q in train[1])
        self.answers = list(answers or sorted({q.answer for q in train[1]}))
        self.answer_ids = {a: i for i, a in enumerate(self.answers)}
        unknown = sorted({q.answer for q in train[1]} - set(self.answers))
        if unknown:
            raise DataError(f"train: answers outside the model's answers: {unknown[:10]}")
        self.model_config = {
            "name": "vqa",
            **model_config,
            "words": len(self.words),
            "answers": len(self.answers),
        }
        size = self.model_config.get("image_size", 64)
        check_questions(train, "train", size)
        check_questions(valid, "valid", size)
        self.images, self.questions = _images(train[0]), list(train[1])
        self.valid = (_images(valid[0]), list(valid[1])[:max_valid])
        self._ids = [self.words.encode(q.question) for q in self.questions]
        empty = [q.origin for q, ids in zip(self.questions, self._ids) if not ids]
        if empty:
            raise DataError(f"{empty[0]}: a question without words")
        self.batch_size, self.seed, self.label_smoothing = batch_size, seed, label_smoothing
        self.data = data or {}

    def build_model(self) -> VQA:
        return cast(VQA, build_model(self.model_config))  # of model_config's class

    def batches(self, epoch: int) -> Batches:
        """Shuffled (seeded by epoch) batches of the questions about whole images, each image
        in a batch once and encoded once for all its questions, built when indexed (images
        float32 in [0, 1])."""
        groups = [q.image for q in self.questions]
        return Batches(
            group_batches(groups, self.batch_size, seed=self.seed, epoch=epoch), self._collate
        )

    def _collate(self, idx: list[int]) -> dict:
        tokens, lengths = pad_batch([self._ids[i] for i in idx])
        asked = [self.questions[i].image for i in idx]
        images = list(dict.fromkeys(asked))  # each image once, in order of first question
        index = {image: k for k, image in enumerate(images)}
        return {
            "images": stack_images([self.images[i] for i in images]),
            "image_index": torch.tensor([index[i] for i in asked]),
            "questions": tokens,
            "lengths": lengths,
            "answers": torch.tensor([self.answer_ids[self.questions[i].answer] for i in idx]),
        }

    def loss(self, model, batch: dict, step: int = 0) -> tuple[torch.Tensor, int]:
        out = model(batch["images"], batch["questions"], batch["lengths"], batch["image_index"])
        loss = F.cross_entropy(out.logits, batch["answers"], label_smoothing=self.label_smoothing)
        return loss, len(batch["answers"])

    def evaluate(self, model: VQA) -> dict[str, float]:
        """:meth:`VqaEvaluator.score` of the answers to the validation questions."""
        evaluator = VqaEvaluator(model, self.config(), self.vocab())
        return score_examples(evaluator, question_examples(*self.valid)).metrics

    def pictures(self, model: VQA, folder: Path, n: int) -> list[Path]:
        """Attention pictures of the first ``n`` validation questions in ``folder``."""
        images, questions = self.valid
        asked = [(images[q.image], q.question) for q in questions[:n]]
        return plot_answers(asked, answer_questions(model, self.words, self.answers, asked), folder)

    def config(self) -> dict:
        return task_config("vqa", self)

    def vocab(self) -> dict:
        return {"words": self.words.to_json(), "answers": self.answers}


def question_examples(
    images: Sequence[torch.Tensor], questions: Sequence[ImageQuestion]
) -> Sequence[Example]:
    """Questions about ``images`` as labelled examples: the input ``(image, question)``, the
    answer as the reference and the question's type as the annotation
    (:func:`vqa_metrics` scores per type); :class:`LazyExamples` for images read when indexed
    (:class:`attnkit.data.ImageFiles`)."""

    def example(q: ImageQuestion) -> Example:
        return Example((images[q.image], q.question), q.answer, q.origin, q.type)

    if isinstance(images, ImageFiles):
        return LazyExamples(lambda i: example(questions[i]), range(len(questions)))
    return [example(q) for q in questions]


def _known_words(evaluator: VqaEvaluator, question: str) -> None:
    """A question sent to a server: refused as :func:`check_words` refuses one."""
    check_words(evaluator.words, [question])


class VqaEvaluator(Evaluator, task="vqa"):
    """A VQA checkpoint's model, question words and answers: answers ``(image, question)``
    pairs and scores accuracy overall and per question type (:func:`vqa_metrics`); the user's
    questions are all of type ``user``."""

    vocabularies = ("words", "answers")
    data = (
        f"a folder of images with {QUESTIONS} (filename<TAB>question<TAB>answer), that "
        "TSV, VQA v2 questions (with their annotations), hf:PATH[:SPLIT], or built-in "
        "scenes: scenes:test or scenes:heldout"
    )
    metrics = ()  # accuracy per question type instead of text metrics: see score
    route = Route(
        "/ask",
        "answer a question about an image",
        upload=Upload("image"),
        texts=(
            Text(
                "question",
                "a question about the image, in words the model knows",
                check=_known_words,
            ),
        ),
        no_decoding="a VQA model answers with its most probable class",
    )
    labels = {
        "accuracy_relational": "accuracy, relational",
        "accuracy_non_relational": "accuracy, non-relational",
        **{f"accuracy_{t}": f"accuracy, {t}" for t in (*QUESTION_TYPES, "user")},
    }

    def __init__(self, model: VQA, config: dict, vocab: dict):
        super().__init__(model, config, vocab)
        self.words, self.answers = WordVocab.from_json(vocab["words"]), list(vocab["answers"])
        self.image_size = model.encoder.image_size  # S: every image is resized to it

    def read(self, path, **options) -> Sequence[Example]:
        """Built-in scenes (``scenes:test``, ``scenes:heldout``), or the questions of ``path``
        in any VQA corpus format (:mod:`attnkit.data.corpora.image_formats`)."""
        scored = scored_scenes(path, size=self.image_size, trained_on=self.config.get("data"))
        if scored is not None:
            return question_examples(*question_set(scored[1], scored[0]))
        return question_examples(
            *read_corpus("vqa", path, **{"role": "test", "size": self.image_size, **options})
        )

    def answer(
        self, inputs: Sequence[tuple[torch.Tensor, str]], decoding: Decoding | None = None
    ) -> list[Answer]:
        """The :class:`Answer` to each ``(image (3, S, S) uint8, question)``: the most
        probable class, its probability and each hop's attention.

        Raises:
            ValueError: ``decoding`` other than greedy: an answer is one class, not decoded
                token by token.
        """
        if decoding is not None and decoding != Decoding():
            raise ValueError(
                f"decoding: a VQA model answers with its most probable class; "
                f"decoding options do not apply, got {decoding.describe()}"
            )
        return answer_questions(self.model, self.words, self.answers, inputs)

    def load_inputs(self, items: Sequence[str]) -> tuple[list, list[str]]:
        """``(image, question)`` pairs from an image file followed by questions about it;
        each question names its input."""
        if len(items) < 2:
            raise ValueError(
                f"INPUT: a vqa checkpoint takes an image file, then questions "
                f"about it, got {len(items)} INPUT"
            )
        check_words(self.words, items[1:])
        image = load_image(Path(items[0]), self.image_size)
        return [(image, q) for q in items[1:]], list(items[1:])

    def decode(
        self,
        inputs: Sequence[tuple[torch.Tensor, str]],
        decoding: Decoding | None = None,
        *,
        weights: bool = False,
    ) -> list[Output]:
        """:meth:`answer`, each drawn and explored with its hops' attention (the weights are
        small: always kept)."""
        return [
            Output(
                [a.answer],
                partial(plot_answer, image, question, a),
                partial(answer_example, self.model, image, question, a),
                [math.log(a.probability)],
            )  # the argmax: at least 1 / answers
            for (image, question), a in zip(inputs, self.answer(inputs, decoding))
        ]

    def score(self, examples: Sequence[Example], outputs: Sequence[Output]) -> dict[str, float]:
        """:func:`vqa_metrics` of the answers, with the examples' annotations as the types."""
        return vqa_metrics(
            [o.text for o in outputs],
            [cast(str, e.reference) for e in examples],  # one answer each: question_examples
            [e.annotation for e in examples],
        )
