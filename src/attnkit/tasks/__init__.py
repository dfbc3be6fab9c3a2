"""Tasks: the glue between a data source, a model and the shared training loop, and each
task's :class:`~attnkit.tasks.evaluator.Evaluator` (importing a task module registers it)."""

from attnkit.tasks import captioning, ocr, speech, translation, vqa
from attnkit.tasks.evaluator import EVALUATORS, Evaluator, evaluate, evaluator_for

__all__ = ["EVALUATORS", "Evaluator", "captioning", "evaluate", "evaluator_for", "ocr", "speech",
           "translation", "vqa"]
