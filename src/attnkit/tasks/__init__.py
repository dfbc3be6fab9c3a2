"""Tasks: the glue between a data source, a model and the shared training loop, and each
task's :class:`~attnkit.tasks.evaluator.Evaluator` (importing a task module registers it).
Each task's module is named by the word its checkpoints store: ``translate``, ``ocr``, ``asr``,
``caption``, ``vqa`` and ``lm``; :mod:`~attnkit.tasks.loading` loads checkpoints and models."""

from attnkit.tasks import asr, caption, ocr, translate, vqa
from attnkit.tasks.evaluator import EVALUATORS, Evaluator, evaluate, evaluator_for

__all__ = [
    "EVALUATORS",
    "Evaluator",
    "asr",
    "caption",
    "evaluate",
    "evaluator_for",
    "ocr",
    "translate",
    "vqa",
]
