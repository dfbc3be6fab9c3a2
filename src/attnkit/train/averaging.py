"""Checkpoint averaging: the mean of the weights of several checkpoints of one model.

Averaging the weights of the last or best few checkpoints of a run smooths the noise of the
last updates and usually scores a little better than any one of them (Vaswani et al. 2017, 6.1;
fairseq's ``average_checkpoints.py``, ESPnet's ``average_nbest_models``); the weights of runs
fine-tuned from one model with other settings can be averaged too (a "model soup", Wortsman et
al. 2022). The checkpoints must be of the same task, model and vocabulary: their configs may
differ only in the settings of training alone (:data:`TRAINING_ONLY`: the augmentation and the
batching; :data:`TRAINING_DATA`: which examples it was trained on, never how it reads an
input; :data:`TRAINING_MODEL`: the model's dropout), and the average keeps the first one's;
floating-point tensors (weights and running statistics) are averaged in float64 and stored in
their own dtype; an integer tensor (a BatchNorm's ``num_batches_tracked``) takes its largest
value.

    >>> import torch
    >>> from attnkit.train import save_checkpoint
    >>> from attnkit.train.averaging import average_checkpoints
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> for i, w in enumerate((1.0, 3.0)):
    ...     _ = save_checkpoint(folder / f"ck{i}", model={"w": torch.full((2,), w)},
    ...                         config={"task": "demo"})
    >>> average_checkpoints([folder / "ck0", folder / "ck1"]).model_state["w"]
    tensor([2., 2.])
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch

from attnkit.checks import quoted
from attnkit.train.checkpoint import Checkpoint, CheckpointError, load_checkpoint
from attnkit.train.loop import KEPT_DIR, kept_models

__all__ = [
    "TRAINING_DATA",
    "TRAINING_MODEL",
    "TRAINING_ONLY",
    "average_checkpoints",
    "best_checkpoints",
]

# config entries that say how a model was trained, not what it is or how it reads its inputs
TRAINING_ONLY = ("augment", "batching")
# entries of a config's "data" that name the training examples (corpora, built-in kinds,
# engines and their voices, counts, lengths), not how the model reads its inputs ("normalize"
# stays compared)
TRAINING_DATA = (
    "train",
    "valid",
    "format",
    "built_in",
    "engines",
    "espeak_consonants",
    "n_train",
    "n_valid",
    "min_chars",
    "max_chars",
    "prose",
)
# entries of a config's "model" that shape no weight: regularisation while training
TRAINING_MODEL = ("dropout",)


def average_checkpoints(paths: Sequence[str | Path]) -> Checkpoint:
    """The checkpoint whose weights are the mean of those of ``paths`` (its ``path`` is the
    first one's; no optimizer state; ``trainer_state`` lists what was averaged).

    Raises:
        CheckpointError: no path, or checkpoints of another task, model or vocabulary (a
            config that differs in more than :data:`TRAINING_ONLY`, :data:`TRAINING_DATA`
            and :data:`TRAINING_MODEL`), or whose tensors differ in names, shapes or dtypes
            (the message names both).
    """
    if not paths:
        raise CheckpointError("average: expected at least one checkpoint, got none")
    cks = [load_checkpoint(p) for p in paths]
    first = cks[0]
    for ck in cks[1:]:
        for what, a, b in (
            ("config", _model_config(first.config), _model_config(ck.config)),
            ("vocabulary", first.vocab, ck.vocab),
        ):
            if a != b:
                raise CheckpointError(
                    f"{ck.path}: another {what} than {first.path} "
                    f"({quoted(json.dumps(b))} against "
                    f"{quoted(json.dumps(a))}); only checkpoints of one "
                    "model can be averaged"
                )
        if ck.model_state.keys() != first.model_state.keys():
            extra = sorted(ck.model_state.keys() ^ first.model_state.keys())[:3]
            raise CheckpointError(f"{ck.path}: other tensors than {first.path} ({extra})")
        for name, tensor in ck.model_state.items():
            mine = first.model_state[name]
            if tensor.shape != mine.shape or tensor.dtype != mine.dtype:
                raise CheckpointError(
                    f"{ck.path}: tensor {name} is {tuple(tensor.shape)} {tensor.dtype}, in "
                    f"{first.path} {tuple(mine.shape)} {mine.dtype}"
                )
    state = {}
    for name, tensor in first.model_state.items():
        stacked = torch.stack([ck.model_state[name] for ck in cks])
        if tensor.is_floating_point():
            state[name] = stacked.double().mean(0).to(tensor.dtype)
        else:
            state[name] = stacked.amax(0)
    steps = [ck.trainer_state.get("step") if ck.trainer_state else None for ck in cks]
    return Checkpoint(
        path=first.path,
        config=first.config,
        model_state=state,
        vocab=first.vocab,
        optimizer_state=None,
        trainer_state={"averaged": [str(ck.path) for ck in cks], "steps": steps},
    )


def _model_config(config: dict) -> dict:
    """``config`` without the entries of :data:`TRAINING_ONLY`, :data:`TRAINING_DATA` and
    :data:`TRAINING_MODEL`."""
    out = {k: v for k, v in config.items() if k not in TRAINING_ONLY}
    for part, names in (("data", TRAINING_DATA), ("model", TRAINING_MODEL)):
        if isinstance(out.get(part), dict):
            out[part] = {k: v for k, v in out[part].items() if k not in names}
    return out


def best_checkpoints(run: str | Path, n: int | None = None) -> list[Path]:
    """The checkpoints a run kept of its best validations (``RUN/best/step-*``, written with
    ``keep_best`` > 1), best first, at most ``n`` (None: all); one that cannot be read is
    skipped with a warning (:func:`attnkit.train.loop.kept_models`).

    Raises:
        CheckpointError: the run kept none.
    """
    found = kept_models(run)
    if not found:
        raise CheckpointError(
            f"{Path(run, KEPT_DIR)}: no checkpoints of best validations "
            "(train with --keep-best N, N > 1)"
        )
    found.sort(key=lambda pair: pair[0], reverse=True)  # tied values: tiebreak, then latest
    return [folder for _, folder in found[:n]]
