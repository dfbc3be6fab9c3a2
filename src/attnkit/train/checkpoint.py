"""One checkpoint format for every task: tensors in safetensors, everything else in JSON.

A checkpoint is a directory::

    config.json           {"format": "attnkit-checkpoint", "version": 1, "config": {...}}
    model.safetensors     the model's state dict
    vocab.json            the vocabularies (optional)
    optimizer.safetensors optimizer tensors, keyed "state.<param index>.<name>" (optional)
    optimizer.json        the optimizer's non-tensor state and param groups (optional)
    trainer.json          step, epoch, best score, RNG states, scheduler... (optional)

Nothing is unpickled when loading, so a checkpoint from an untrusted source cannot run code.
Writing is atomic (:func:`attnkit.folders.write_folder`): the files go to a temporary folder
beside ``checkpoint`` (``.checkpoint.attnkit-tmp-XXXXXXXX``), which replaces the previous
checkpoint whole by renames through ``.checkpoint.attnkit-new`` and ``.checkpoint.attnkit-old``,
so a save cut short at any point (a crash, a SIGKILL, a power cut) leaves a complete copy.
:func:`load_checkpoint` reads the newest (``.attnkit-new``, then the checkpoint itself, then
``.attnkit-old``); :func:`recover_checkpoint` puts it back in place and deletes the temporary
folders of saves that were killed (run before a run writes into a folder again). No other
folder is ever deleted.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from attnkit.checks import clipped, quoted
from attnkit.folders import (
    NO_SUCH_FILE,
    folder_copies,
    recover_folder,
    unreadable,
    write_folder,
)

__all__ = [
    "BUILTIN",
    "Checkpoint",
    "CheckpointError",
    "builtin_checkpoints",
    "load_checkpoint",
    "recover_checkpoint",
    "resolve_checkpoint",
    "save_checkpoint",
]

FORMAT, VERSION = "attnkit-checkpoint", 1

BUILTIN = "builtin:"
"""The prefix that names a checkpoint shipped in the package (``builtin:ocr-lines``)."""
PRETRAINED = Path(__file__).resolve().parents[1] / "pretrained"


class CheckpointError(ValueError):
    """A checkpoint that is missing, corrupt or does not fit the model/optimizer."""


@dataclass
class Checkpoint:
    """What :func:`load_checkpoint` returns.

    Attributes:
        config: the model/task configuration saved with it (JSON values).
        model_state: the model's state dict (tensors on CPU).
        vocab: the vocabularies, or None.
        optimizer_state: a state dict for ``optimizer.load_state_dict``, or None.
        trainer_state: step, epoch, RNG states... (JSON values), or None.
    """

    path: Path
    config: dict
    model_state: dict[str, torch.Tensor]
    vocab: Any = None
    optimizer_state: dict | None = None
    trainer_state: dict | None = None

    def check_shapes(self, shapes: dict[str, tuple[int, ...]]) -> None:
        """Check that the weights are those of a model whose state dict has ``shapes``
        (names and shapes), with an error that lists every mismatch."""
        missing = sorted(set(shapes) - set(self.model_state))
        unexpected = sorted(set(self.model_state) - set(shapes))
        wrong = [
            f"{k}: checkpoint {tuple(self.model_state[k].shape)}, model {tuple(v)}"
            for k, v in shapes.items()
            if k in self.model_state and tuple(self.model_state[k].shape) != tuple(v)
        ]
        if missing or unexpected or wrong:
            parts = []
            if missing:
                parts.append(f"missing {', '.join(missing[:10])}")
            if unexpected:
                parts.append(f"unexpected {', '.join(unexpected[:10])}")
            if wrong:
                parts.append("shape mismatch " + "; ".join(wrong[:10]))
            raise CheckpointError(
                f"{self.path}: the weights do not fit this model: " + " | ".join(parts)
            )

    def check_dtypes(self, dtypes: dict[str, torch.dtype]) -> None:
        """Check that each tensor is of the kind of the model's (``dtypes``, by name):
        floating point where the model's is, integer or bool where it is. Another floating
        dtype (float64 for float32) is converted when loading; an integer or bool tensor
        where the model has floats would be converted into garbage weights."""
        wrong = [
            f"{k}: {self.model_state[k].dtype} where the model has {_KIND[_kind(d)]} ({d})"
            for k, d in dtypes.items()
            if k in self.model_state and _kind(self.model_state[k].dtype) != _kind(d)
        ]
        if wrong:
            raise CheckpointError(
                f"{self.path / 'model.safetensors'}: {len(wrong)} tensors of "
                f"another dtype than the model's ({_listed(wrong)})"
            )

    def check_finite(self) -> None:
        """Refuse weights holding NaN or infinity (they would decode garbage)."""
        bad = _non_finite(self.model_state)
        if bad:
            raise CheckpointError(
                f"{self.path}: {len(bad)} weight tensors hold NaN or infinite "
                f"values ({_listed(bad)})"
            )

    def check_optimizer(self) -> None:
        """Refuse optimizer state holding NaN or infinity, or a negative second moment
        (``exp_avg_sq``: its square root is NaN): the first step resumed from it would turn
        the weights into NaN."""
        if self.optimizer_state is None:
            return
        bad = _non_finite(
            {
                f"state.{idx}.{name}": value
                for idx, entry in self.optimizer_state["state"].items()
                for name, value in entry.items()
                if isinstance(value, torch.Tensor)
            }
        )
        if bad:
            raise CheckpointError(
                f"{self.path / 'optimizer.safetensors'}: {len(bad)} optimizer "
                f"tensors hold NaN or infinite values ({_listed(bad)}); "
                "resuming would turn the weights into NaN"
            )
        negative = [
            f"state.{idx}.{name}"
            for idx, entry in self.optimizer_state["state"].items()
            for name, value in entry.items()
            if name.endswith("exp_avg_sq")
            and isinstance(value, torch.Tensor)
            and bool((value < 0).any())
        ]
        if negative:
            raise CheckpointError(
                f"{self.path / 'optimizer.safetensors'}: {len(negative)} "
                f"optimizer tensors hold negative values ({_listed(negative)});"
                " AdamW's running means of squared gradients are >= 0: "
                "resuming would turn the weights into NaN"
            )

    def load_model(self, model: torch.nn.Module) -> None:
        """Load the weights into ``model``: they must fit it (:meth:`check_shapes`), be of
        its dtypes' kinds (:meth:`check_dtypes`) and be finite (:meth:`check_finite`)."""
        self.check_shapes({k: tuple(v.shape) for k, v in model.state_dict().items()})
        self.check_dtypes({k: v.dtype for k, v in model.state_dict().items()})
        self.check_finite()
        model.load_state_dict(self.model_state)


_KIND = {"float": "floating point", "complex": "complex", "bool": "bool", "int": "integer"}


def _kind(dtype: torch.dtype) -> str:
    """What a tensor of ``dtype`` holds (a key of :data:`_KIND`)."""
    if dtype.is_floating_point:
        return "float"
    return "complex" if dtype.is_complex else "bool" if dtype == torch.bool else "int"


def _non_finite(tensors: dict[str, torch.Tensor]) -> list[str]:
    """The names of the floating-point tensors that hold NaN or infinity."""
    return [
        k for k, v in tensors.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())
    ]


def _listed(names: list[str]) -> str:
    return f"{', '.join(names[:5])}{', ...' if len(names) > 5 else ''}"


def _flatten_optimizer(state: dict) -> tuple[dict[str, torch.Tensor], dict]:
    tensors, plain = {}, {"param_groups": state["param_groups"], "state": {}}
    for idx, entry in state["state"].items():
        kept = {}
        for name, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{idx}.{name}"] = value.detach().cpu().clone()
            else:
                kept[name] = value
        plain["state"][str(idx)] = kept
    return tensors, plain


def _unflatten_optimizer(tensors: dict[str, torch.Tensor], plain: dict) -> dict:
    state: dict[int, dict] = {int(k): dict(v) for k, v in plain["state"].items()}
    for key, value in tensors.items():
        _, idx, name = key.split(".", 2)
        state.setdefault(int(idx), {})[name] = value
    return {"state": state, "param_groups": plain["param_groups"]}


def _write_json(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False))


def save_checkpoint(
    directory: str | Path,
    *,
    model: torch.nn.Module | dict[str, torch.Tensor],
    config: dict,
    vocab: Any = None,
    optimizer: torch.optim.Optimizer | None = None,
    trainer_state: dict | None = None,
) -> Path:
    """Write a checkpoint directory atomically (see the module docstring); returns its path.

    ``model`` is a module or its state dict; ``config``, ``vocab`` and ``trainer_state`` must
    be JSON-serialisable.

    Raises:
        CheckpointError: weights or optimizer state holding NaN or infinity, or a file that
            cannot be written (a full disk, a read-only folder: the message names the file
            and the cause); nothing is written, a checkpoint already there is kept.
    """
    # clone: tied weights share storage, which safetensors refuses
    weights = model if isinstance(model, dict) else model.state_dict()
    state = {k: v.detach().cpu().clone() for k, v in weights.items()}
    tensors: dict[str, torch.Tensor] = {}
    plain: dict | None = None
    if optimizer is not None:
        tensors, plain = _flatten_optimizer(optimizer.state_dict())
    for what, found in (("weight", state), ("optimizer", tensors)):
        bad = _non_finite(found)
        if bad:
            raise CheckpointError(
                f"{directory}: not saved: {len(bad)} {what} tensors hold NaN "
                f"or infinite values ({_listed(bad)}); a checkpoint already "
                "there is kept"
            )
    files = [
        (
            "config.json",
            lambda path: _write_json(
                path, {"format": FORMAT, "version": VERSION, "config": config}
            ),
        ),
        ("model.safetensors", lambda path: save_file(state, str(path))),
    ]
    if vocab is not None:
        files.append(("vocab.json", lambda path: _write_json(path, vocab)))
    if optimizer is not None:
        files += [
            ("optimizer.safetensors", lambda path: save_file(tensors, str(path))),
            ("optimizer.json", lambda path: _write_json(path, plain)),
        ]
    if trainer_state is not None:
        files.append(("trainer.json", lambda path: _write_json(path, trainer_state)))
    where = Path(directory)
    try:
        with write_folder(directory) as tmp:
            for name, write in files:
                where = Path(directory) / name
                write(tmp / name)
            where = Path(directory)
    except (OSError, SafetensorError) as exc:  # a full disk, a read-only folder...
        kept = "; the checkpoint already there is kept" if folder_copies(directory) else ""
        raise CheckpointError(f"{where}: not saved ({_cause(exc)}){kept}") from None
    return Path(directory)


def _cause(exc: Exception) -> str:
    """Why a file could not be written, in words: the system's (safetensors puts its error
    number in the message)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    code = re.search(r"os error (\d+)", str(exc))
    return os.strerror(int(code.group(1))) if code else str(exc)


def recover_checkpoint(directory: str | Path) -> Path | None:
    """Finish what an interrupted save left at ``directory``: the newest complete copy
    (``.attnkit-new``, the checkpoint, ``.attnkit-old``) becomes the checkpoint, the others
    and the temporary folders of killed saves are deleted
    (:func:`attnkit.folders.recover_folder`). Returns the checkpoint's path, or None when
    there is none. Call it only where no other process is saving into the same folder."""
    return recover_folder(directory)


MAX_DEPTH = 32
"""The deepest nesting of arrays and objects a checkpoint's JSON file may have; the files
attnkit writes nest at most a few levels (``trainer.json``'s random states: 4)."""


def _depth(value) -> int:
    """How deeply arrays and objects nest in the JSON value ``value`` (a number: 0), found
    without recursion, stopping past :data:`MAX_DEPTH`."""
    deepest, level = 0, [value]
    while deepest <= MAX_DEPTH:
        level = [item for item in level if isinstance(item, (list, dict))]
        if not level:
            break
        deepest += 1
        level = [v for item in level for v in (item.values() if isinstance(item, dict) else item)]
    return deepest


def _there(path: Path, missing: str | None) -> bool:
    """Whether the checkpoint file ``path`` is there to be read, checked before anything
    opens it: a regular file (links followed), not a folder, a FIFO (reading it would block
    for ever) or a device. ``missing``: why a missing file is refused (None: it may be)."""
    why = unreadable(path)
    if why == NO_SUCH_FILE and missing is None:
        return False
    if why is not None:
        raise CheckpointError(f"{path}: " + (f"missing{missing}" if why == NO_SUCH_FILE else why))
    return True


def _read_json(path: Path, required: bool = True):
    if not _there(path, f" (is {path.parent} an attnkit checkpoint?)" if required else None):
        return None
    deep = f"{path}: JSON nested deeper than {MAX_DEPTH} levels (attnkit writes at most a few)"
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:  # Python's reader gives up near its recursion limit (~1000 levels)
        raise CheckpointError(deep) from None
    except (UnicodeDecodeError, ValueError) as exc:  # ValueError: JSON, ints of > 4300 digits
        raise CheckpointError(f"{path}: not valid JSON ({clipped(str(exc))})") from None
    if _depth(value) > MAX_DEPTH:
        raise CheckpointError(deep)
    return value


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    _there(path, "")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(
            f"{path}: not a readable safetensors file ({clipped(str(exc))})"
        ) from None


def builtin_checkpoints() -> dict[str, Path]:
    """The checkpoints shipped in the package (docs/models.md), by name: their folders."""
    if not PRETRAINED.is_dir():
        return {}
    return {d.name: d for d in sorted(PRETRAINED.iterdir()) if (d / "config.json").is_file()}


def resolve_checkpoint(directory: str | Path) -> Path:
    """The folder of a checkpoint: ``directory`` itself, or for ``builtin:NAME`` the shipped
    checkpoint of that name.

    Raises:
        CheckpointError: an unknown builtin name (the message lists the shipped ones).
    """
    text = str(directory)
    if not text.startswith(BUILTIN):
        return Path(directory)
    name, shipped = text[len(BUILTIN) :], builtin_checkpoints()
    if name not in shipped:
        raise CheckpointError(
            f"checkpoint: no built-in model {quoted(name)}; expected one of "
            + (", ".join(BUILTIN + n for n in shipped) or "(none shipped)")
        )
    return shipped[name]


def load_checkpoint(directory: str | Path) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint` (no pickle involved): a folder, or
    ``builtin:NAME`` for one shipped in the package (:func:`builtin_checkpoints`); of a folder,
    the newest complete copy, when a save was cut short (see the module docstring).

    Raises:
        CheckpointError: missing directory or file, corrupt JSON or safetensors, another format
            or version, an unknown builtin name.
    """
    directory = resolve_checkpoint(directory)
    copies = folder_copies(directory)
    directory = copies[0] if copies else directory  # the newest, if a save was cut short
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: no such checkpoint directory")
    head = _read_json(directory / "config.json")
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        found = head.get("format") if isinstance(head, dict) else None
        raise CheckpointError(
            f"{directory / 'config.json'}: not an attnkit checkpoint (format {quoted(found)})"
        )
    if head.get("version") != VERSION:
        raise CheckpointError(
            f"{directory}: checkpoint version {quoted(head.get('version'))} is "
            f"not supported by this attnkit (reads version {VERSION})"
        )
    config = head.get("config", {})
    if not isinstance(config, dict):
        raise CheckpointError(
            f"{directory / 'config.json'}: 'config' must be a JSON object, "
            f"got {type(config).__name__}"
        )
    optimizer_state = None
    if _there(directory / "optimizer.json", None):
        tensors = _read_tensors(directory / "optimizer.safetensors")
        plain = _read_json(directory / "optimizer.json")
        try:
            optimizer_state = _unflatten_optimizer(tensors, plain)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(
                f"{directory}: optimizer state not in the attnkit layout "
                f"({clipped(f'{type(exc).__name__}: {exc}')})"
            ) from None
    trainer_state = _read_json(directory / "trainer.json", required=False)
    if trainer_state is not None and not isinstance(trainer_state, dict):
        raise CheckpointError(
            f"{directory / 'trainer.json'}: must be a JSON object, got "
            f"{type(trainer_state).__name__}"
        )
    return Checkpoint(
        path=directory,
        config=config,
        model_state=_read_tensors(directory / "model.safetensors"),
        vocab=_read_json(directory / "vocab.json", required=False),
        optimizer_state=optimizer_state,
        trainer_state=trainer_state,
    )
