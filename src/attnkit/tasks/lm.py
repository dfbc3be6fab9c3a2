"""A character language model on a recogniser's transcripts, as a :class:`attnkit.train.Task`:
the model that shallow fusion adds to joint decoding (:mod:`attnkit.decoding.ctc_prefix`).

Its characters are the recogniser's (the same ids), so its log-probabilities add up with the
recogniser's token by token.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F

from attnkit.checks import check_positive_int
from attnkit.data import CharVocab, DataError, pad_batch
from attnkit.models import CharLM, build_model
from attnkit.tasks.batching import length_batches
from attnkit.tokens import BOS, EOS, PAD
from attnkit.train import Batches

__all__ = ["CharLMTask"]


class CharLMTask:
    """Batches, loss and metrics of a :class:`attnkit.models.CharLM` on texts.

    Args:
        train, valid: texts (one transcript each); every character must be in ``vocab``.
        vocab: the recogniser's characters.
        model_config: the LM's registry config (``name`` defaults to ``"char_lm"``; ``vocab``
            is set from ``vocab``).
        batch_size: texts per batch (batches group similar lengths).
        origins: where each text of ``train`` and of ``valid`` comes from (e.g.
            ``file:line``), for error messages; default ``train:i`` / ``valid:i``.

    Raises:
        DataError: a character outside ``vocab``, naming the text's origin.
    """

    def __init__(
        self,
        train: Sequence[str],
        valid: Sequence[str],
        *,
        vocab: CharVocab,
        model_config: dict,
        batch_size: int = 64,
        seed: int = 0,
        max_valid: int = 500,
        origins: tuple[Sequence[str], Sequence[str]] | None = None,
        data: dict | None = None,
    ):
        if not train:
            raise ValueError("train: expected at least one text")
        check_positive_int("batch_size", batch_size)
        self.chars = vocab
        self.model_config = {"name": "char_lm", **model_config, "vocab": len(vocab)}
        valid = list(valid)[:max_valid]
        if origins is None:
            origins = (
                [f"train:{i}" for i in range(1, len(train) + 1)],
                [f"valid:{i}" for i in range(1, len(valid) + 1)],
            )
        self.train_ids = _encode(train, vocab, origins[0])
        self.valid_ids = _encode(valid, vocab, origins[1])
        self.batch_size, self.seed, self.data = batch_size, seed, data or {}

    def build_model(self) -> CharLM:
        return cast(CharLM, build_model(self.model_config))  # of model_config's class

    def batches(self, epoch: int) -> Batches:
        """Shuffled (seeded by epoch) batches of texts of similar length, built when indexed."""
        lengths = [len(ids) for ids in self.train_ids]
        return Batches(
            length_batches(lengths, self.batch_size, seed=self.seed, epoch=epoch),
            lambda idx: _batch([self.train_ids[i] for i in idx]),
        )

    def loss(self, model: CharLM, batch: dict, step: int = 0) -> tuple[torch.Tensor, int]:
        target = batch["tgt_out"]
        logits = model(batch["tgt_in"])
        return (
            F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=PAD),
            int((target != PAD).sum()),
        )

    @torch.no_grad()
    def evaluate(self, model: CharLM) -> dict[str, float]:
        """Next-character ``accuracy``, ``loss`` (nats) and ``perplexity`` on the validation
        texts, teacher-forced."""
        device = next(model.parameters()).device
        batch = {k: v.to(device) for k, v in _batch(self.valid_ids).items()}
        logits, target = model(batch["tgt_in"]), batch["tgt_out"]
        real = target != PAD
        loss = float(F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=PAD))
        accuracy = float(((logits.argmax(-1) == target) & real).sum() / real.sum())
        return {"accuracy": accuracy, "loss": loss, "perplexity": math.exp(loss)}

    def config(self) -> dict:
        return {
            "task": "lm",
            "model": self.model_config,
            "data": self.data,
            "batching": {"batch_size": self.batch_size, "seed": self.seed},
        }

    def vocab(self) -> dict:
        return self.chars.to_json()


def _encode(texts: Sequence[str], vocab: CharVocab, origins: Sequence[str]) -> list[list[int]]:
    out = []
    for text, origin in zip(texts, origins):
        unknown = sorted({c for c in text if c not in vocab.index})
        if unknown:
            raise DataError(
                f"{origin}: characters outside the recogniser's alphabet: {''.join(unknown)!r}"
            )
        out.append(vocab.encode(text))
    return out


def _batch(ids: list[list[int]]) -> dict:
    """``tgt_in`` / ``tgt_out`` ``(B, U)``: BOS + text, text + EOS."""
    tgt, _ = pad_batch([[BOS] + x + [EOS] for x in ids])
    return {"tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:]}
