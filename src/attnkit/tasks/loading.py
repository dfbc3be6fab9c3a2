"""Loading what training wrote: a task's checkpoint, its model, its evaluator, the run to resume.

Every command that reads a checkpoint, the benchmarks and Python users load through these, so a
checkpoint is checked the same way everywhere: its task, its vocabularies against the model's
config, the config's types and values and the shapes they imply against the weights, before
any model is built (:func:`load_task_model`). A path may be a checkpoint folder or a built-in
model's name (``builtin:translate-dates``, :func:`attnkit.train.load_checkpoint`).

Raises :class:`attnkit.train.CheckpointError` naming the folder or the file for anything a
checkpoint gets wrong.
"""

from __future__ import annotations

from pathlib import Path

import torch

from attnkit.checks import MESSAGE, clipped, got, quoted
from attnkit.data import load_vocab, vocab_settings
from attnkit.folders import folder_copies
from attnkit.models import build_model, complete_config, legacy, model_shapes
from attnkit.tasks.evaluator import EVALUATORS, evaluator_for
from attnkit.train import (
    Checkpoint,
    CheckpointError,
    distributed,
    load_checkpoint,
    recover_checkpoint,
)
from attnkit.train.averaging import TRAINING_MODEL

__all__ = [
    "VOCAB_OPTIONS",
    "existing_run",
    "initial_checkpoint",
    "load_evaluator",
    "load_lm",
    "load_task_checkpoint",
    "load_task_model",
]


def load_task_checkpoint(directory: Path, task: str) -> Checkpoint:
    """A checkpoint written by a run of ``task`` (``config["task"]``), with its model config
    and its vocabularies, each readable and as long as the model's config says (a shorter
    one would turn the model's outputs into ``<unk>``); anything else is a
    :class:`CheckpointError` naming the folder or the file.

    ``vocab.json`` holds one vocabulary, sized by the model config's ``vocab``, or several by
    name (those the task's evaluator reads, :attr:`Evaluator.vocabularies`, must be there),
    each sized by ``NAME_vocab`` (``src_vocab``) or ``NAME`` (VQA's ``words``, and its
    ``answers``: a list of class names); an entry the model config does not size is the
    task's own and is not checked here."""
    ck = load_checkpoint(directory)
    if ck.config.get("task") != task or not isinstance(ck.config.get("model"), dict):
        raise CheckpointError(
            f"{directory}: not a checkpoint of task {task} (task {quoted(ck.config.get('task'))})"
        )
    path = ck.path / "vocab.json"
    if ck.vocab is None:
        raise CheckpointError(f"{path}: missing (a {task} checkpoint keeps its vocabulary there)")
    names = EVALUATORS[task].vocabularies if task in EVALUATORS else ()
    if names and not isinstance(ck.vocab, dict):
        raise CheckpointError(
            f"{path}: expected an object holding {' and '.join(names)}, got {got(ck.vocab)}"
        )
    for name in names:
        if name not in ck.vocab:
            raise CheckpointError(
                f"{path}: {name}: missing (a {task} checkpoint's vocab.json "
                f"holds {' and '.join(names)})"
            )
    single = not names and isinstance(ck.vocab, dict) and "type" in ck.vocab
    vocabs = {"": ck.vocab} if single else ck.vocab if isinstance(ck.vocab, dict) else {"": None}
    model = ck.config["model"]
    for name, data in vocabs.items():
        key = next((k for k in (f"{name}_vocab", name) if k in model), None) if name else "vocab"
        if key is None:
            continue
        try:
            # load_vocab refuses whatever is not a vocabulary object (None too) with the
            # ValueError caught here; its annotation names only the object
            size = len(data) if isinstance(data, list) else len(load_vocab(data))  # type: ignore[arg-type]
        except ValueError as exc:  # "vocab: ..." (the argument): here, the file and entry
            reason = str(exc).removeprefix("vocab: ")
            raise CheckpointError(
                f"{path}: {name + ' vocabulary: ' if name else ''}{reason}"
            ) from None
        expected = model.get(key)  # not an int: refused by load_task_model
        if isinstance(expected, int) and expected != size:
            raise CheckpointError(
                f"{ck.path}: the {name + ' ' if name else ''}vocabulary has "
                f"{size} entries, the model's config says "
                f"{key}={quoted(expected)}"
            )
    return ck


def load_task_model(directory: Path, task: str, device: torch.device | str = "cpu"):
    """The model of a ``task`` checkpoint, built by the registry with its weights loaded, on
    ``device``, and the checkpoint (for the vocabulary and the task's settings). Checkpoints
    of attnkit 0.1 load too (:mod:`attnkit.models.legacy`).

    Nothing is built before the checkpoint has been checked (:func:`load_task_checkpoint`),
    its model config's types and values (:func:`attnkit.models.check_config`) and the shapes
    it implies against those of the weights (:func:`attnkit.models.model_shapes`, on the
    ``meta`` device), so a config asking for a huge model is refused, not allocated; weights
    holding NaN or infinity are refused too.
    """
    ck = load_task_checkpoint(directory, task)
    config, ck.model_state = legacy.upgrade(ck.config["model"], ck.model_state)
    try:
        shapes = model_shapes(config)
    except ValueError as exc:
        raise CheckpointError(f"{ck.path / 'config.json'}: {exc}") from None
    ck.check_shapes(shapes)
    model = build_model(config)
    ck.load_model(model)  # refuses NaN or infinite weights
    return model.to(device), ck


VOCAB_OPTIONS = {"kind": "--vocab", "size": "--vocab-size"}
"""The option of each :func:`attnkit.data.build_vocab` setting (:func:`existing_run`)."""


def existing_run(
    out: Path,
    task: str,
    *,
    resume: bool = False,
    pending: Path | None = None,
    model: dict | None = None,
    options: dict[str, str] | None = None,
    vocab: dict | None = None,
) -> Checkpoint | None:
    """The ``task`` checkpoint to resume from the run folder ``out`` (``resume``: the
    command line's ``--resume``), None for a new run; refuses to overwrite a run, and to
    resume one with other model settings.

    A copy left by a save that was cut short counts as a checkpoint (a run without
    ``resume`` is refused, and nothing in the folder changes); once the run is accepted, the
    checkpoints are recovered (:func:`attnkit.train.recover_checkpoint`: a checkpoint left
    aside or half replaced is put back, the temporary folders of killed saves deleted).
    ``pending``: the folder of a run that comes before the main one (a pre-training): it is
    not overwritten either, and ``--resume`` with its checkpoint but none of the main run's
    gives None (the pre-training resumes, then the main run starts).
    ``model``: the model config the options ask for; with ``--resume``, each of its keys must
    equal the checkpoint's ``config["model"]``, else a :class:`CheckpointError` names the
    options (``options``: the option of a config key, by default ``--key-with-dashes``).
    ``vocab``: the :func:`attnkit.data.build_vocab` settings the options ask for (``kind``,
    ``size``); with ``--resume``, each that the checkpoint's vocabularies keep
    (:func:`attnkit.data.vocab_settings`) must be the same, else the error names the options
    (:data:`VOCAB_OPTIONS`).
    """
    existing = out / "checkpoint"
    paths = [existing] + ([pending / "checkpoint"] if pending else [])
    for path in paths:
        if folder_copies(path) and not resume:  # refused: nothing changed
            raise CheckpointError(
                f"{path}: already holds a checkpoint; pass --resume to "
                "continue it, or choose another --out"
            )
    if distributed.is_main():  # the one process that writes (and holds the lock)
        for path in paths:
            recover_checkpoint(path)
    if not resume or (
        pending is not None and not existing.exists() and (pending / "checkpoint").exists()
    ):
        return None
    ck = load_task_checkpoint(existing, task)
    if model is not None:
        _check_same_model(ck, model, options or {}, _RESUME_ADVICE)
    if vocab is not None:
        _check_same_vocab(ck, vocab, _RESUME_ADVICE)
    return ck


_RESUME_ADVICE = "resume with the settings it was started with, or start a new run in another --out"
_INIT_ADVICE = (
    "--init keeps the checkpoint's model and vocabulary: give the settings it was trained with"
)


def initial_checkpoint(
    init: Path | None,
    task: str,
    *,
    model: dict | None = None,
    options: dict[str, str] | None = None,
    vocab: dict | None = None,
) -> Checkpoint | None:
    """The ``task`` checkpoint whose weights start a new run (``--init``: a checkpoint folder
    or ``builtin:NAME``), None without one: fine-tuning.

    The new run has the checkpoint's model and vocabularies: ``model``, ``options`` and
    ``vocab`` are checked as :func:`existing_run` checks them for ``--resume``, but for the
    settings of :data:`TRAINING_MODEL` (dropout), which the new run takes from ``model`` (a
    None there keeps the checkpoint's). Its optimizer and trainer state are dropped, so the
    run starts at step 0 with a fresh optimizer, warm-up and schedule. A checkpoint of
    attnkit 0.1 is upgraded (:mod:`attnkit.models.legacy`), and the model arguments its config
    leaves out are set to their defaults; its weights are checked against the model when they
    are loaded (:meth:`attnkit.train.Checkpoint.load_model`).
    """
    if init is None:
        return None
    ck = load_task_checkpoint(init, task)
    config, ck.model_state = legacy.upgrade(ck.config["model"], ck.model_state)
    try:
        ck.config["model"] = complete_config(config)
    except ValueError as exc:
        raise CheckpointError(f"{ck.path / 'config.json'}: {exc}") from None
    if model is not None:
        _check_same_model(
            ck,
            {k: v for k, v in model.items() if k not in TRAINING_MODEL},
            options or {},
            _INIT_ADVICE,
        )
        ck.config["model"].update({k: model[k] for k in TRAINING_MODEL if model.get(k) is not None})
    if vocab is not None:
        _check_same_vocab(ck, vocab, _INIT_ADVICE)
    ck.optimizer_state = ck.trainer_state = None
    return ck


def _check_same_model(ck: Checkpoint, model: dict, options: dict[str, str], advice: str) -> None:
    saved = ck.config["model"]
    changed: dict[str, str] = {}
    for key, value in model.items():
        if saved.get(key) != value:
            option = options.get(key, "--" + key.replace("_", "-"))
            changed.setdefault(
                option, f"{option} {quoted(saved.get(key))} saved, {quoted(value)} given"
            )
    if changed:
        raise CheckpointError(
            f"{ck.path}: saved with other model settings ({'; '.join(changed.values())}); {advice}"
        )


def _check_same_vocab(ck: Checkpoint, wanted: dict, advice: str) -> None:
    single = isinstance(ck.vocab, dict) and "type" in ck.vocab
    saved = (
        [ck.vocab]
        if single
        else [v for v in ck.vocab.values() if isinstance(v, dict) and "type" in v]
    )
    changed: dict[str, str] = {}
    for data in saved:  # readable: load_task_checkpoint loaded each
        settings = vocab_settings(load_vocab(data))
        for key, value in settings.items():
            if (
                key in wanted
                and wanted[key] != value
                and (key == "kind" or settings["kind"] == wanted.get("kind"))
            ):
                option = VOCAB_OPTIONS.get(key, f"--vocab-{key}")
                changed.setdefault(
                    option, f"{option} {quoted(value)} saved, {quoted(wanted[key])} given"
                )
    if changed:
        raise CheckpointError(
            f"{ck.path}: saved with other vocabulary settings "
            f"({'; '.join(changed.values())}); {advice}"
        )


def load_evaluator(directory: Path, device: torch.device | str = "cpu", task: str | None = None):
    """The :class:`attnkit.tasks.evaluator.Evaluator` of a checkpoint, its model on ``device``:
    of ``task`` (any other task's checkpoint is refused), or of the task the checkpoint names.

    Raises:
        CheckpointError: naming the folder, when no evaluator is registered for its task, or
            ``config.json`` when the evaluator refuses a task setting in it.
    """
    if task is None:
        task = load_checkpoint(directory).config.get("task")
        if task not in EVALUATORS:
            raise CheckpointError(
                f"{directory}: a checkpoint of task {quoted(task)}; expected "
                f"one of {', '.join(sorted(EVALUATORS))}"
            )
    model, ck = load_task_model(directory, task, device)
    try:
        return evaluator_for(task)(model, ck.config, ck.vocab)
    except ValueError as exc:  # a task setting, perhaps quoted whole: cut
        raise CheckpointError(f"{ck.path / 'config.json'}: {clipped(str(exc), MESSAGE)}") from None


def load_lm(
    path: Path | None, vocab: dict, device, recogniser: Path | str = "the recogniser"
) -> torch.nn.Module | None:
    """The character LM checkpoint at ``path`` (``--lm``; None without it) on ``device``,
    checked to read the characters ``vocab`` of the checkpoint ``recogniser``.

    Raises:
        ValueError: naming ``--lm`` and both checkpoints when its characters are not the
            recogniser's.
    """
    if path is None:
        return None
    lm, ck = load_task_model(path, "lm", device)
    if ck.vocab != vocab:
        theirs, ours = (
            v.get("symbols", []) if isinstance(v, dict) else [] for v in (ck.vocab, vocab)
        )
        only = [c for c in theirs if c not in ours][:5] or [c for c in ours if c not in theirs][:5]
        raise ValueError(
            f"--lm: {path} reads other characters ({len(theirs)}) than --checkpoint "
            f"{recogniser} ({len(ours)})"
            + (f", e.g. {quoted(''.join(only))} in one only" if only else ", in another order")
            + f"; train it with --vocab-from {recogniser}"
        )
    return lm.eval()
