"""Checkpoints written before the model registry (attnkit 0.1), read as today's.

Their ``config["model"]`` has no ``name``: the keys tell which model it is (``src_vocab``: a
translation model, ``kind="transformer"`` or a :class:`Seq2Seq` kind; ``channels``: a CRNN;
``listener_hidden``: LAS). CRNN and Transformer configs carried a ``kind`` that only named the
model. The Seq2Seq of then had a GRU over packed sequences (``encoder.rnn``, ``_reverse`` for
the backward direction) and its decoder's layers at the top level; today's has a BiRNN encoder
(``encoder.rnns.0.fwd`` / ``.bwd``) and the layers under ``decoder.``, with the same values.
"""

from __future__ import annotations

import torch

__all__ = ["upgrade"]

SEQ2SEQ_DECODER = (
    "embed.",
    "init.",
    "attention.",
    "cell.",
    "rnn.",
    "combine.",
    "out.",
    "key_proj.",
)


def _name(config: dict) -> str | None:
    if "src_vocab" in config:
        return "transformer" if config.get("kind") == "transformer" else "seq2seq"
    if "channels" in config:
        return "crnn"
    if "listener_hidden" in config:
        return "las"
    return None


def _seq2seq_key(key: str) -> str:
    if key.startswith("encoder.rnn."):
        name = key[len("encoder.rnn.") :]
        direction = "bwd" if name.endswith("_reverse") else "fwd"
        return f"encoder.rnns.0.{direction}.{name.removesuffix('_reverse')}"
    if key.startswith(SEQ2SEQ_DECODER):
        return f"decoder.{key}"
    return key


def upgrade(config: dict, state: dict[str, torch.Tensor]):
    """``(config, state)`` of a model as the registry builds it today: unchanged when
    ``config`` names its model, else converted from the attnkit 0.1 layout (the module
    docstring). A config that is neither is returned as it is, for the registry to refuse."""
    if not isinstance(config, dict) or "name" in config or _name(config) is None:
        return config, state
    name = _name(config)
    config = {"name": name, **config}
    if name in ("transformer", "crnn"):
        config.pop("kind", None)
    if name == "seq2seq":
        state = {_seq2seq_key(k): v for k, v in state.items()}
    return config, state
