"""Teacher-forced unrolling of a step-by-step decoder, shared by the RNN decoders."""

from __future__ import annotations

import torch

__all__ = ["unroll"]


def unroll(
    step,
    state,
    tgt_in: torch.Tensor,
    *,
    teacher_forcing: float = 1.0,
    generator: torch.Generator | None = None,
):
    """Run ``step(tokens (B,), state) -> (logits (B, V), state, weights (B, S) | None)`` over
    ``tgt_in`` ``(B, T)`` (which starts with BOS); returns logits ``(B, T, V)`` and weights
    ``(B, T, S)`` (None when the step gives none). A step may give a dict of ``(B, ...)``
    tensors instead of weights (weights and what else it computes): each comes back stacked,
    ``(B, T, ...)``.

    With ``teacher_forcing < 1`` each example feeds back its own greedy prediction at a step
    with probability ``1 - teacher_forcing`` (scheduled sampling, Bengio et al. 2015); padding
    positions stay padding.
    """
    logits, weights = [], []
    tokens = tgt_in[:, 0]
    for t in range(tgt_in.shape[1]):
        step_logits, state, w = step(tokens, state)
        logits.append(step_logits)
        weights.append(w)
        if t + 1 < tgt_in.shape[1]:
            tokens = tgt_in[:, t + 1]
            if teacher_forcing < 1.0:
                own = torch.rand(tokens.shape, generator=generator, device=tokens.device)
                use_own = (own >= teacher_forcing) & (tokens != 0)
                tokens = torch.where(use_own, step_logits.argmax(-1), tokens)
    if isinstance(weights[0], dict):
        return torch.stack(logits, dim=1), {
            k: torch.stack([w[k] for w in weights], dim=1) for k in weights[0]
        }
    stacked = None if weights[0] is None else torch.stack(weights, dim=1)
    return torch.stack(logits, dim=1), stacked
