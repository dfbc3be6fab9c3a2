"""An ONNX export run as a model: ``attnkit export``'s graphs (float32 or int8) behind the
``start`` / ``step`` of the model they were exported from.

:class:`ExportedModel` lets everything attnkit decodes a model with work on an export: the
decoding front door (greedy, beam search, sampling, n-best, scores, per-token
log-probabilities, the loop stop; :mod:`attnkit.decoding`) and the task evaluators, so that
``attnkit serve`` serves an int8 export with per-request decoding options. The graphs run in
onnxruntime sessions; the rest of the model (its output length rule ``steps``, ``head_kind``,
``normalises_input``) comes from the model's class, built from ``attnkit.json``'s ``model`` on
PyTorch's ``meta`` device, with no weights.

The decoder state is a flat dict ``{name: (N, ...) tensor}`` of the names ``attnkit.json``'s
``state`` lists (``state.h``, ``state.memory.values``...): the searches reorder any dict of
tensors, and the entries a step does not change are handed back as the same tensors.

Only the CPU runs an export here (onnxruntime's ``CPUExecutionProvider``); the joint CTC and
language-model decoding of a LAS or an attention OCR model needs the PyTorch model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

from attnkit.export.writer import FORMAT, JSON_FILE
from attnkit.models import build_model

__all__ = ["ExportedModel", "is_export", "read_export"]


def is_export(folder: str | Path) -> bool:
    """Whether ``folder`` holds an ONNX export (its ``attnkit.json``)."""
    return (Path(folder) / JSON_FILE).is_file()


def read_export(folder: str | Path) -> dict:
    """The ``attnkit.json`` of the export in ``folder``, checked to be one.

    Raises:
        ValueError: naming the file: missing, unreadable, not JSON or not an export's.
    """
    path = Path(folder) / JSON_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(
            f"{path}: cannot read an export's description ({getattr(exc, 'strerror', None) or exc})"
        ) from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise ValueError(
            f"{path}: expected format {FORMAT!r} (attnkit export --format onnx), got {got!r}"
        )
    for key in ("task", "model", "encoder", "decoding", "vocab"):
        if key not in meta:
            raise ValueError(f"{path}: {key}: missing")
    return meta


class ExportedModel(nn.Module):
    """The export in ``folder`` as a model: ``start(inputs, lengths) -> state``,
    ``step(tokens, state) -> (log_probs, state, weights)``, and for a CTC model
    ``forward(images, widths) -> (log_probs, steps)``, each run by onnxruntime; any other
    attribute is the model class's (its arithmetic, never its weights).

    Tensors in and out are on the CPU: ``inputs (B, L, ...)``, ``lengths (B,)``,
    ``tokens (N,)``, ``log_probs (N, V)``, ``weights (N, S)`` (None when the step has no
    attention weights); a CTC model's ``log_probs (B, S, V)`` and ``steps (B,)``.

    Args:
        folder: written by ``attnkit export --format onnx`` (``--quantize int8`` or not).
        threads: onnxruntime's intra-op threads (None: its default, every core).

    Raises:
        ValueError: naming the file, when the folder is not a readable export or onnxruntime
            is missing.
    """

    def __init__(self, folder: str | Path, *, threads: int | None = None):
        super().__init__()
        try:
            import onnxruntime
        except ImportError:
            raise ValueError(
                "an ONNX export runs with onnxruntime: pip install 'attnkit[export]'"
            ) from None
        self.folder = Path(folder)
        self.meta = read_export(self.folder)
        options = onnxruntime.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
        for key, value in self.meta.get("session_config", {}).items():
            options.add_session_config_entry(key, value)

        def session(graph: str):
            path = self.folder / self.meta[graph]["file"]
            try:
                return onnxruntime.InferenceSession(
                    str(path), options, providers=["CPUExecutionProvider"]
                )
            except Exception as exc:  # onnxruntime's own errors: a missing or corrupt graph
                raise ValueError(f"{path}: cannot load the graph ({exc})") from None

        self.encoder = session("encoder")
        self.decoder_step = session("decoder_step") if "decoder_step" in self.meta else None
        with torch.device("meta"):  # the class's arithmetic and flags; no weights allocated
            self.skeleton = build_model(self.meta["model"])
        # an empty parameter: where the decoding front door finds the device (the CPU)
        self.anchor = nn.Parameter(torch.empty(0), requires_grad=False)
        self._inputs = [i["name"] for i in self.meta["encoder"]["inputs"]]
        self._outputs = [o["name"] for o in self.meta["encoder"]["outputs"]]
        self._state = [s["name"] for s in self.meta.get("state", [])]
        if self.decoder_step is not None:
            step = self.meta["decoder_step"]
            self._step_inputs = [i["name"] for i in step["inputs"]]
            self._step_outputs = [o["name"] for o in step["outputs"]]
            self._next = {s["name"]: s["next"] for s in self.meta["state"] if s["next"]}

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)  # parameters, buffers, modules
        except AttributeError:
            if name == "skeleton" or "skeleton" not in self._modules:
                raise
            return getattr(self._modules["skeleton"], name)

    def _encode(self, inputs: torch.Tensor, lengths: torch.Tensor) -> dict[str, torch.Tensor]:
        feed = dict(zip(self._inputs, (_array(inputs), _array(lengths))))
        return {
            n: torch.from_numpy(np.asarray(x))
            for n, x in zip(self._outputs, self.encoder.run(None, feed))
        }

    def start(self, inputs: torch.Tensor, lengths: torch.Tensor) -> dict[str, torch.Tensor]:
        """The decoder's initial state ``{name: (B, ...)}`` for ``inputs`` and their
        ``lengths (B,)``."""
        out = self._encode(inputs, lengths)
        return {name: out[name] for name in self._state}

    def step(self, tokens: torch.Tensor, state: dict[str, torch.Tensor]):
        """``(log_probs (N, V), state, weights (N, S) or None)`` after feeding ``tokens (N,)``;
        the state's entries the step changes replaced by its ``next.*`` outputs."""
        assert self.decoder_step is not None  # an export with a decoder: never a CTC head's
        feed = {
            n: _array(tokens.long()) if n == "tokens" else _array(state[n])
            for n in self._step_inputs
        }
        out = dict(zip(self._step_outputs, self.decoder_step.run(None, feed)))
        state = {
            **state,
            **{name: torch.from_numpy(np.asarray(out[n])) for name, n in self._next.items()},
        }
        weights = out.get("weights")
        return (
            torch.from_numpy(np.asarray(out["log_probs"], dtype=np.float32)),
            state,
            None if weights is None else torch.from_numpy(np.asarray(weights)),
        )

    def forward(self, inputs: torch.Tensor, lengths: torch.Tensor):
        """A CTC model's ``(log_probs (B, S, V), steps (B,))``."""
        if self.decoder_step is not None:
            raise TypeError("forward: an export with a decoder step decodes with start and step")
        decoding = self.meta["decoding"]
        out = self._encode(inputs, lengths)
        return out[decoding["log_probs"]], out[decoding["lengths"]]


def _array(x: torch.Tensor) -> np.ndarray:
    return x.detach().cpu().contiguous().numpy()
