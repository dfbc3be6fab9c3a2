"""The graphs an export writes, as modules the exporter traces.

Every token decoder (:class:`attnkit.models.Seq2Seq`, :class:`attnkit.models.Transformer`,
:class:`attnkit.models.LAS`, :class:`attnkit.models.CRNN` with the attention head) becomes two
graphs: :class:`EncoderGraph` (``model.start``: the inputs and their lengths to the decoder's
initial state, flattened by :func:`attnkit.export.decoder_state.flatten`) and :class:`StepGraph`
(``model.step``: the previous tokens and the state to the log-probabilities, the step's
attention weights and the state entries the step changes). A CTC model
(:class:`attnkit.models.CRNN` with ``head="ctc"``) becomes one, :class:`CTCGraph`.

Axes: ``B`` batch, ``L`` input length (source tokens, feature frames or image columns), ``S``
encoder steps (the attention memory), ``T`` output steps decoded so far (the Transformer's
self-attention cache).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnkit.export.decoder_state import PREFIX, flatten, unflatten
from attnkit.models import CRNN, LAS, Seq2Seq, Transformer, model_config

__all__ = ["AXES", "CTCGraph", "EncoderGraph", "Inputs", "StepGraph", "model_inputs", "next_name"]

AXES = {
    "B": "batch",
    "L": "input length (source tokens, feature frames or image columns)",
    "S": "encoder steps (the attention memory)",
    "T": "output steps decoded so far (self-attention cache)",
}


@dataclass(frozen=True)
class Inputs:
    """What a model's ``start`` (or a CTC model's forward) takes: two tensors, the inputs
    ``(B, L, ...)`` and their lengths ``(B,)``."""

    names: tuple[str, str]
    shapes: tuple[tuple, tuple]  # axis names or sizes
    dtypes: tuple[str, str]
    meanings: tuple[str, str]
    low: float | int  # token ids from low to high (exclusive); float inputs in [low, high)
    high: float | int

    def example(self, batch: int, length: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Random inputs (``shapes[0]`` with ``B = batch``, ``L = length``) and lengths from
        ``length`` down to about half of it (padding in every example but the first)."""
        g = torch.Generator().manual_seed(seed)
        shape = tuple({"B": batch, "L": length}.get(d, d) for d in self.shapes[0])
        if self.dtypes[0] == "int64":
            x = torch.randint(int(self.low), int(self.high), shape, generator=g)
        else:
            x = self.low + (self.high - self.low) * torch.rand(shape, generator=g)
        lengths = torch.linspace(length, (length + 1) // 2, batch).round().long()
        return x, lengths


def model_inputs(model: nn.Module) -> Inputs:
    """The :class:`Inputs` of a model of the registry that can be exported.

    Raises:
        ValueError: a model of another kind.
    """
    if not isinstance(model, (Seq2Seq, Transformer, LAS, CRNN)):
        raise ValueError(
            f"model: expected Seq2Seq, Transformer, LAS or CRNN, got {type(model).__name__}"
        )
    config = model_config(model)
    if isinstance(model, (Seq2Seq, Transformer)):
        return Inputs(
            ("src", "src_len"),
            (("B", "L"), ("B",)),
            ("int64", "int64"),
            ("source token ids, padded with 0", "source tokens of each example"),
            4,
            config["src_vocab"],
        )
    if isinstance(model, LAS):
        return Inputs(
            ("features", "lengths"),
            (("B", "L", config["features"]), ("B",)),
            ("float32", "int64"),
            (
                "raw log-mel frames (the encoder normalises them), padded with zeros"
                if model.normalises_input
                else "log-mel frames normalised per utterance, padded with zeros",
                "frames of each example (>= 8)",
            ),
            -1.0,
            1.0,
        )
    return Inputs(
        ("images", "widths"),
        (("B", 1, 32, "L"), ("B",)),
        ("float32", "int64"),
        (
            "line images in [0, 1] (paper 1, ink 0), padded on the right",
            "width of each image in pixels (>= 2)",
        ),
        0.0,
        1.0,
    )


def next_name(name: str) -> str:
    """The step's output name of the state entry ``name``: ``state.h`` -> ``next.h``."""
    return "next" + name[len(PREFIX) :]


class EncoderGraph(nn.Module):
    """``(inputs, lengths) -> the decoder's initial state``, its tensors in ``names`` order."""

    def __init__(self, model: nn.Module, names: list[str]):
        super().__init__()
        # Any: the model's start and step, which nn.Module's attributes would type as tensors
        self.model: Any = model
        self.names = names

    def forward(self, inputs: torch.Tensor, lengths: torch.Tensor):
        flat = flatten(self.model.start(inputs, lengths))
        return tuple(flat[n] for n in self.names)


class StepGraph(nn.Module):
    """``(tokens (B,), *state) -> (log_probs (B, V), [weights (B, S),] *changed state)``.

    ``template``: a state of the model (its structure, attention memories' owners and sizes);
    ``names``: the state's tensors in input order; ``changed``: those the step returns.
    """

    def __init__(
        self, model: nn.Module, template, names: list[str], changed: list[str], weights: bool
    ):
        super().__init__()
        self.model: Any = model  # as EncoderGraph's
        self.template = template
        self.names, self.changed, self.weights = names, changed, weights

    def forward(self, tokens: torch.Tensor, *state: torch.Tensor):
        state = unflatten(self.template, dict(zip(self.names, state)))
        log_probs, state, weights = self.model.step(tokens, state)
        flat = flatten(state)
        return (log_probs, *((weights,) if self.weights else ()), *(flat[n] for n in self.changed))


class CTCGraph(nn.Module):
    """``(images, widths) -> (log_probs (B, T, V), steps (B,))`` of a CTC CRNN."""

    def __init__(self, model: CRNN):
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor, widths: torch.Tensor):
        return self.model(images, widths)
