"""Training losses beside cross-entropy.

:func:`token_unlikelihood` is the token-level unlikelihood objective of Welleck et al. (2020,
"Neural text generation with unlikelihood training"): at each target position ``t`` the
tokens of the target written before it (``y_1 .. y_{t-1}``, each counted once), other than
``y_t``, are negative candidates, and the loss ``-log(1 - p_t(c))`` pushes their probability
down. Cross-entropy alone never says "not the token you just wrote"; a decoder whose
distribution is flat (a rare word it cannot spell) then repeats its last piece. Welleck et
al. add it to cross-entropy with a weight ``alpha`` (1.0 in their experiments).
:func:`token_unlikelihood_reference` is the same sum written as loops, for the tests.

Beside cross-entropy, both losses should read one log-softmax: :func:`smoothed_cross_entropy`
is PyTorch's label-smoothed cross-entropy computed from log-probabilities, and
``token_unlikelihood(log_probs, ..., normalized=True)`` takes the same ones. Each pass over
``(B, T, V)`` counts at a vocabulary of thousands: the unlikelihood term computing its own
log-normaliser costs several such passes forward and backward, sharing it almost none
(measured in docs/translation.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnkit.checks import check_tensor

__all__ = [
    "MIN_ONE_MINUS_P",
    "cross_entropy_and_unlikelihood",
    "smoothed_cross_entropy",
    "token_unlikelihood",
    "token_unlikelihood_reference",
]

# 1 - p is floored here before its log: a candidate the model is sure of (p -> 1 in float32)
# contributes at most -log(1e-5) = 11.5 instead of inf (Welleck et al.'s code floors it so too).
MIN_ONE_MINUS_P = 1e-5


def _compute_dtype(logits: torch.Tensor) -> torch.Tensor:
    """``logits`` in float32 at least (float64 stays)."""
    return logits if logits.dtype == torch.float64 else logits.float()


def _check_target(logits: torch.Tensor, target: torch.Tensor) -> None:
    check_tensor("logits", logits, ndim=3)
    if target.dim() != 2 or tuple(target.shape) != tuple(logits.shape[:2]):
        raise ValueError(
            f"target: expected shape (B, T) = {tuple(logits.shape[:2])}, got {tuple(target.shape)}"
        )


def smoothed_cross_entropy(
    log_probs: torch.Tensor, target: torch.Tensor, pad: int, smoothing: float = 0.0
) -> torch.Tensor:
    """``F.cross_entropy(logits, target, ignore_index=pad, label_smoothing=smoothing)`` over
    ``(B, T, V)`` logits, from their ``log_probs = log_softmax(logits, -1)``: the mean over
    the positions whose target is not ``pad`` of ``(1 - smoothing) * -log p(target) +
    smoothing * mean_v(-log p(v))``; 0 when every target is ``pad``. For a caller that needs
    the log-probabilities for another loss too (:func:`token_unlikelihood`).

    Raises:
        ValueError: ``log_probs`` not 3-D, or ``target`` not of shape ``(B, T)``.
    """
    _check_target(log_probs, target)
    real = target != pad  # (B, T)
    nll = -log_probs.gather(2, target[..., None])[..., 0]  # (B, T)
    loss = nll if not smoothing else (1 - smoothing) * nll - smoothing * log_probs.mean(-1)
    return (loss * real).sum() / real.sum().clamp_min(1)


def cross_entropy_and_unlikelihood(
    logits: torch.Tensor, target: torch.Tensor, pad: int, smoothing: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`smoothed_cross_entropy` and the summed :func:`token_unlikelihood` of ``logits
    (B, T, V)`` for ``target (B, T)``, both read from one log-softmax (in float32 at least)."""
    log_probs = F.log_softmax(_compute_dtype(logits), dim=-1)
    return (
        smoothed_cross_entropy(log_probs, target, pad, smoothing),
        token_unlikelihood(log_probs, target, pad, normalized=True),
    )


def token_unlikelihood(
    logits: torch.Tensor, target: torch.Tensor, pad: int, *, normalized: bool = False
) -> torch.Tensor:
    """The summed token-level unlikelihood loss of ``logits (B, T, V)`` for ``target (B, T)``
    (the tokens each position should write; ``pad`` where there is none): over every position
    ``t`` with a target and every distinct token ``c`` of ``target[b, :t]`` (not ``pad``) other
    than ``target[b, t]``, the sum of ``-log(max(1 - p_t(c), MIN_ONE_MINUS_P))``. Divide by the
    target tokens for a mean per token. ``O(B * T^2)`` memory besides the logits.
    ``normalized``: ``logits`` are already log-probabilities (a log-softmax the caller shares
    with :func:`smoothed_cross_entropy`), so no log-normaliser is computed.

    Raises:
        ValueError: ``logits`` not 3-D, or ``target`` not of shape ``(B, T)``.
    """
    _check_target(logits, target)
    b, t, _ = logits.shape
    x = _compute_dtype(logits)
    # cand[b, i, j]: log p_i(target[b, j]), the probability at position i of the token that
    # position j should write: the T scores it needs, less the log-normaliser (computed here
    # unless ``normalized``), without a (B, T, V) tensor of log-probabilities of its own
    cand = x.gather(2, target[:, None, :].expand(b, t, t))
    if not normalized:
        cand = cand - x.logsumexp(-1, keepdim=True)
    same = target[:, :, None] == target[:, None, :]  # (B, T, T)
    earlier = torch.ones(t, t, dtype=torch.bool, device=target.device).tril(-1)  # j < i
    # position j holds the first occurrence of its token: no k < j writes the same token
    first = ~(same & earlier).any(-1)  # (B, T)
    real = target != pad  # (B, T)
    negative = earlier & ~same & (first & real)[:, None, :] & real[:, :, None]  # (B, T, T)
    one_minus = (-torch.expm1(cand)).clamp_min(MIN_ONE_MINUS_P)
    return -(one_minus.log() * negative).sum()


def token_unlikelihood_reference(
    logits: torch.Tensor, target: torch.Tensor, pad: int
) -> torch.Tensor:
    """:func:`token_unlikelihood` written as loops over examples and positions."""
    log_p = F.log_softmax(_compute_dtype(logits), dim=-1)
    total = log_p.new_zeros(())
    for b in range(target.shape[0]):
        for t in range(target.shape[1]):
            now = int(target[b, t])
            if now == pad:
                continue
            for c in {int(x) for x in target[b, :t]} - {pad, now}:
                p = log_p[b, t, c].exp()
                total = total - torch.clamp(1 - p, min=MIN_ONE_MINUS_P).log()
    return total
