"""Best-path decoding of CTC outputs (Graves et al. 2006)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from attnkit.tokens import BOS, EOS, PAD

__all__ = ["CTCPaths", "ctc_greedy"]


class CTCPaths(NamedTuple):
    """Per example: the decoded ``ids`` and the ``steps`` at which each one was emitted."""

    ids: list[list[int]]
    steps: list[list[int]]


def ctc_greedy(
    log_probs: torch.Tensor,
    lengths: torch.Tensor,
    *,
    blank: int = PAD,
    drop: tuple[int, ...] = (BOS, EOS),
) -> CTCPaths:
    """The most likely id per step, repeats merged, ``blank`` and the ids in ``drop`` removed.

    Args:
        log_probs: ``(B, T, V)`` per-step scores (any monotone transform of probabilities).
        lengths: ``(B,)`` valid steps of each example; steps past them are ignored.

    Example:
        >>> lp = torch.log(torch.tensor([[[.1, .9], [.1, .9], [.9, .1], [.1, .9]]]))
        >>> ctc_greedy(lp, torch.tensor([4]), drop=())
        CTCPaths(ids=[[1, 1]], steps=[[0, 3]])
    """
    if log_probs.dim() != 3:
        raise ValueError(f"log_probs: expected (B, T, V), got shape {tuple(log_probs.shape)}")
    if lengths.shape != log_probs.shape[:1]:
        raise ValueError(
            f"lengths: expected shape ({log_probs.shape[0]},), got {tuple(lengths.shape)}"
        )
    best = log_probs.argmax(-1)  # (B, T)
    skip = {blank, *drop}
    ids, steps = [], []
    for row, n in zip(best.tolist(), lengths.tolist()):
        out, at, prev = [], [], blank
        for t, i in enumerate(row[:n]):
            if i != prev and i not in skip:
                out.append(i)
                at.append(t)
            prev = i
        ids.append(out)
        steps.append(at)
    return CTCPaths(ids, steps)
