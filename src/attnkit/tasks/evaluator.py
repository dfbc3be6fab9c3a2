"""A trained model of any task, as the command line uses it: decode inputs (every hypothesis
and a picture of the best), read labelled data, score outputs against references.

A task joins by subclassing :class:`Evaluator` with the name its checkpoints carry in
``config["task"]``, in its own module (imported by ``attnkit/tasks/__init__.py``)::

    class TranslateEvaluator(Evaluator, task="translate"):
        data = "a TSV of source<TAB>reference lines"
        metrics = ("exact", "cer", "bleu", "chrf")      # names in tasks.metrics.METRICS
        route = Route("/translate", "translate one text", texts=(Text("text"),))


        def __init__(self, model, config, vocab): ...   # the checkpoint's config and vocab
        def read(self, path) -> list[Example]: ...      # labelled data, DataError if unfit
        def decode(self, inputs, decoding=None, *, weights=False) -> list[Output]: ...

``attnkit eval`` then scores checkpoints of that task with no change to the command line:
:func:`evaluator_for` finds the class by name and :func:`evaluate` decodes and scores; and
``attnkit serve`` serves them at the endpoint its ``route`` declares
(:mod:`attnkit.tasks.route`; a task without one is not served).

A task whose scores need more than one reference text per output (several captions of an
image: give ``Example.reference`` as a tuple and use metrics of
:data:`~attnkit.tasks.metrics.MULTI_REFERENCE`), or more than texts (a scene's objects, a
question's type: ``Example.annotation``; the attention weights: ``scores_attention = True``
and its own :class:`Output`), extends :meth:`Evaluator.score` and names its own scores in
``labels``.
"""

from __future__ import annotations

import inspect
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import attnkit.tasks.metrics as scores
from attnkit.checks import quoted
from attnkit.decoding import Decoding, Hypotheses
from attnkit.errors import DataError
from attnkit.tasks.metrics import Reference
from attnkit.tasks.route import Route

__all__ = [
    "EVALUATORS",
    "TASK_BEAM",
    "Evaluation",
    "Evaluator",
    "Example",
    "LazyExamples",
    "Output",
    "evaluate",
    "evaluator_for",
    "pictures",
    "read_examples",
    "score_examples",
    "scores_of",
    "served_tasks",
    "texts_of",
]

# Each task's default beam width when a command or a server is not given one (1: greedy).
TASK_BEAM = {"translate": 5, "asr": 5, "ocr": 1, "caption": 5}


@dataclass(frozen=True)
class Example:
    """One labelled input: ``input`` as the task's :meth:`Evaluator.decode` takes it (a source
    text, a line image ``(32, W)``, log-mel features ``(T, F)``, an image ``(3, S, S)``, an
    image and a question), its ``reference`` text (or several, a tuple: an image's captions),
    ``origin``, where it came from (a file, ``file:line``, or ``split[index]``), and
    ``annotation``, what else the task's scores know of it (a built-in scene, a question's
    type; None when nothing)."""

    input: Any
    reference: Reference
    origin: str
    annotation: Any = None


@dataclass(frozen=True)
class Output:
    """One input's outputs, best first: one text, or beam search's n-best, or sampling's draws
    ranked by model score. ``draw(path, title=None)`` pictures the best one's attention over
    its input and returns the path, or None when the model has no attention to draw or the
    input was decoded without ``weights``. ``explore(name="", reference=None)`` gives the
    explorer's :class:`attnkit.diagnose.explorer.Example` of this input, every output with its
    attention (:mod:`attnkit.tasks.explore`); None for a task without an explorer, or when
    decoded without ``weights``. ``scores``: each text's score, in the order of ``texts``
    (:attr:`attnkit.decoding.Hypotheses.scores`: the summed log-probability, or beam search's
    ranking score; a classifier's answer: its log-probability), or None for a task whose
    decoding gives none. ``tokens``: each text's tokens as ``(piece, log-probability)``, its
    EOS included (:func:`tokens_of`), or None where the decoding keeps none (CTC heads, a
    classifier)."""

    texts: list[str]
    draw: Callable[..., Path | None]
    explore: Callable[..., Any] | None = None
    scores: list[float] | None = None
    tokens: list[list[tuple[str, float]]] | None = None

    @property
    def text(self) -> str:
        return self.texts[0]

    def records(self) -> list[dict]:
        """Each text as JSON holds it, best first: ``{"text", "score", "tokens"}``, ``tokens``
        a list of ``{"token", "log_prob"}`` or None; an infinite or NaN score or
        log-probability (a masked choice) is None, as JSON has no infinity."""
        none = [None] * len(self.texts)
        scores: Sequence[float | None] = self.scores or none
        tokens: Sequence[list[tuple[str, float]] | None] = self.tokens or none
        return [
            {
                "text": text,
                "score": _finite(score),
                "tokens": None
                if pieces is None
                else [{"token": piece, "log_prob": _finite(logp)} for piece, logp in pieces],
            }
            for text, score, pieces in zip(self.texts, scores, tokens)
        ]


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


class LazyExamples(Sequence):
    """Examples made when indexed: ``make(i)`` for each ``i`` of ``indices``. A corpus whose
    inputs are read when indexed (:class:`attnkit.data.CaptionedImages`) gives these, so that
    ``evaluate``'s ``[:limit]`` slices it before any input is read."""

    def __init__(self, make: Callable[[int], Example], indices: range):
        self.make, self.indices = make, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return LazyExamples(self.make, self.indices[i])
        return self.make(self.indices[i])


def texts_of(hyp: Hypotheses, vocab) -> list[list[str]]:
    """Each example's decoded texts, best first, from ``hyp`` with or without an n-best dim."""
    tokens = hyp.tokens if hyp.lengths.dim() == 2 else hyp.tokens[:, None]  # (B, K, T)
    return [[vocab.decode(row) for row in rows] for rows in tokens]


def scores_of(hyp: Hypotheses) -> list[list[float]]:
    """Each example's scores, in the order of :func:`texts_of`'s texts."""
    values = hyp.scores if hyp.lengths.dim() == 2 else hyp.scores[:, None]  # (B, K)
    return values.float().tolist()


def tokens_of(hyp: Hypotheses, vocab) -> list[list[list[tuple[str, float]]] | None]:
    """Each example's texts, in the order of :func:`texts_of`'s, as their tokens'
    ``(piece, log-probability)`` (:attr:`attnkit.decoding.Hypotheses.token_scores`) up to and
    including EOS; None for each example when the search kept no token scores."""
    if hyp.token_scores is None:
        return [None] * hyp.tokens.shape[0]
    ranked = hyp.lengths.dim() == 2
    tokens, scores, lengths = (
        x if ranked else x[:, None] for x in (hyp.tokens, hyp.token_scores, hyp.lengths)
    )
    return [
        [
            [(vocab.piece(t), s) for t, s in zip(row[:n].tolist(), logp[:n].float().tolist())]
            for row, logp, n in zip(rows, lps, ns.tolist())
        ]
        for rows, lps, ns in zip(tokens, scores, lengths)
    ]


EVALUATORS: dict[str, type[Evaluator]] = {}


class Evaluator(ABC):
    """A trained ``model`` of one task with its checkpoint's ``config`` and ``vocab`` (JSON).
    ``lm``: the language model that decodings with ``lm_weight`` fuse (shallow fusion), None
    until it is set.

    Class attributes: ``task`` (the registered name), ``data`` (what labelled data looks
    like, for help texts and errors), ``metrics`` (names in
    :data:`attnkit.tasks.metrics.METRICS`: the text metrics :meth:`score` reports first, in
    this order), ``labels`` (how to print the names of the task's own scores, which
    :meth:`score` adds after them) and ``scores_attention`` (True when :meth:`score` reads
    the outputs' attention weights, so that :func:`score_examples` keeps them) and
    ``vocabularies`` (the entries of ``vocab.json`` it reads, by name; empty when the file is
    one vocabulary: :func:`attnkit.tasks.loading.load_task_checkpoint` refuses a checkpoint
    without them), and ``route`` (the endpoint ``attnkit serve`` answers its requests at,
    :class:`~attnkit.tasks.route.Route`; None: not served).
    """

    task: ClassVar[str]
    data: ClassVar[str]
    metrics: ClassVar[tuple[str, ...]]
    labels: ClassVar[dict[str, str]] = {}
    scores_attention: ClassVar[bool] = False
    vocabularies: ClassVar[tuple[str, ...]] = ()
    route: ClassVar[Route | None] = None

    def __init_subclass__(cls, *, task: str | None = None, **kwargs):
        super().__init_subclass__(**kwargs)
        if task is not None:
            _register(cls, task)

    def __init__(self, model, config: dict, vocab):
        self.model, self.config, self.vocab = model, config, vocab
        self.lm = None

    @abstractmethod
    def read(self, path: Path | str, **options) -> Sequence[Example]:
        """The labelled examples in ``path``; a :class:`DataError` naming the file when it
        cannot be read as :attr:`data`. ``options``: for a task whose data comes in several
        corpus formats, the format (``format``) and its options
        (:func:`attnkit.data.corpora.reading.read_corpus`), and ``limit``: at least the first
        ``limit`` examples are wanted (:func:`read_examples` passes it to a ``read`` that
        takes options, and slices what it returns)."""

    @abstractmethod
    def decode(
        self, inputs: Sequence, decoding: Decoding | None = None, *, weights: bool = False
    ) -> Sequence[Output]:
        """One :class:`Output` per input, in order, decoded as ``decoding`` says; the
        attention weights its ``draw`` pictures and its ``explore`` shows are kept only with
        ``weights``."""

    def load_inputs(self, items: Sequence[str]) -> tuple[list, list[str]]:
        """The inputs :meth:`decode` takes, from what a command line gives (texts, or paths
        of the task's input files), and a name for each input."""
        return list(items), list(items)

    def score(self, examples: Sequence[Example], outputs: Sequence[Output]) -> dict[str, float]:
        """The scores of the best ``outputs`` of ``examples`` (one each, in order): the
        :attr:`metrics` against the references. A task with scores of its own adds them
        here."""
        return scores.score(
            self.metrics, [o.text for o in outputs], [e.reference for e in examples]
        )

    def label(self, name: str) -> str:
        """How a table prints the score ``name``."""
        return self.labels.get(name) or scores.LABELS.get(name, name)


def _register(cls: type[Evaluator], task: str) -> None:
    """``EVALUATORS[task] = cls``, refusing a second evaluator of a task and unknown metrics."""
    unknown = [m for m in cls.metrics if m not in scores.METRICS]
    if unknown:
        raise ValueError(
            f"metrics: expected names among {', '.join(scores.METRICS)}, got {unknown}"
        )
    if cls.route is not None and not isinstance(cls.route, Route):
        raise ValueError(f"route: expected a Route or None, got {type(cls.route).__name__}")
    if task in EVALUATORS:
        raise ValueError(
            f"task: an evaluator for {quoted(task)} is already registered "
            f"({EVALUATORS[task].__qualname__})"
        )
    cls.task = task
    EVALUATORS[task] = cls


def evaluator_for(task: str) -> type[Evaluator]:
    """The evaluator registered for checkpoints of ``task``.

    Raises:
        ValueError: naming the task and the registered ones.
    """
    if task not in EVALUATORS:
        raise ValueError(
            f"task: expected one of {', '.join(sorted(EVALUATORS))}, got {quoted(task)}"
        )
    return EVALUATORS[task]


def served_tasks() -> dict[str, Route]:
    """The route of each registered task that declares one, by task name, in name order."""
    return {
        task: route for task in sorted(EVALUATORS) if (route := EVALUATORS[task].route) is not None
    }


@dataclass(frozen=True)
class Evaluation:
    """The result of :func:`evaluate`: the examples, their outputs and the scores."""

    examples: list[Example]
    outputs: Sequence[Output]
    metrics: dict[str, float]

    def worst(self, n: int) -> list[int]:
        """Indices of the ``n`` examples with the highest character error rate against their
        closest reference, worst first (ties in data order)."""
        errors = [
            scores.example_cer(o.text, e.reference) for e, o in zip(self.examples, self.outputs)
        ]
        return sorted(range(len(errors)), key=lambda i: -errors[i])[:n]


def score_examples(
    evaluator: Evaluator,
    examples: Sequence[Example],
    decoding: Decoding | None = None,
    *,
    weights: bool = False,
) -> Evaluation:
    """Decode the inputs of ``examples`` and score the best outputs (what ``attnkit eval``,
    a task's validation and the benchmarks report), keeping the attention weights for
    pictures and the explorer with ``weights`` (and always for an evaluator that scores
    them)."""
    outputs = evaluator.decode(
        [e.input for e in examples], decoding, weights=weights or evaluator.scores_attention
    )
    return Evaluation(list(examples), outputs, evaluator.score(examples, outputs))


def read_examples(
    evaluator: Evaluator, path: Path | str, limit: int | None = None, options: dict | None = None
) -> Sequence[Example]:
    """The first ``limit`` labelled examples of ``path`` (all of them: None), read with the
    corpus ``options``; ``limit`` reaches a ``read`` that takes options, so that a corpus
    reader that takes it reads no more than those examples need (``eval --limit`` on a
    COCO file checks only their images)."""
    options = dict(options or {})
    if limit is not None and any(
        p.kind is p.VAR_KEYWORD or p.name == "limit"
        for p in inspect.signature(evaluator.read).parameters.values()
    ):
        options["limit"] = limit
    return (evaluator.read(path, **options) if options else evaluator.read(path))[:limit]


def evaluate(
    evaluator: Evaluator,
    path: Path | str,
    decoding: Decoding | None = None,
    *,
    weights: bool = False,
    limit: int | None = None,
    options: dict | None = None,
) -> Evaluation:
    """Read the labelled data in ``path`` (a file or folder, or a name the evaluator knows,
    such as ``scenes:test``; its first ``limit`` examples, or all; ``options``: the corpus
    format and its options, :meth:`Evaluator.read`), decode its inputs and score the best
    outputs (:func:`score_examples`).

    Raises:
        DataError: ``path`` does not hold :attr:`Evaluator.data` (the message says what a
            checkpoint of this task is scored on) or holds no example.
    """
    expected = f"a checkpoint of task {evaluator.task!r} is scored on {evaluator.data}"
    try:
        examples = read_examples(evaluator, path, limit, options)
    except DataError as exc:
        raise DataError(f"{exc} ({expected})") from None
    if not examples:
        raise DataError(f"{path}: no labelled examples ({expected})")
    return score_examples(evaluator, examples, decoding, weights=weights)


def pictures(evaluator: Evaluator, inputs: Sequence, folder: Path) -> list[Path]:
    """Decode ``inputs`` greedily and picture each best output's attention as
    ``folder/example_{i}.png``; returns the paths written (none for a model without
    attention). A task's ``pictures(model, folder, n)`` for TensorBoard calls it."""
    outputs = evaluator.decode(inputs, weights=True)
    paths = [o.draw(Path(folder) / f"example_{i}.png") for i, o in enumerate(outputs)]
    return [path for path in paths if path is not None]
