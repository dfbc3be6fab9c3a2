"""Choosing an attention path, and saying why.

``impl="auto"`` picks the fastest path that computes what was asked for; every other value forces
one path and fails with a ``ValueError`` naming the reason if that path cannot serve the call.
The choice is logged at DEBUG level on the ``attnkit`` logger and returned by
:meth:`attnkit.Attention.plan`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from attnkit.attention.scores import Score

__all__ = ["IMPLS", "Plan", "choose_impl"]

IMPLS = ("auto", "reference", "sdpa")

log = logging.getLogger("attnkit")


@dataclass(frozen=True)
class Plan:
    """The path an attention call takes: ``impl`` in :data:`IMPLS` (never "auto"), and why."""

    impl: str
    reason: str


def _sdpa_blocker(score: Score, need_weights: bool) -> str | None:
    if not score.dot_family:
        return f"score {score.name!r} is not a dot product of prepared features"
    if need_weights:
        return "need_weights=True: SDPA does not return the attention weights"
    return None


def choose_impl(impl: str, *, score: Score, need_weights: bool) -> Plan:
    """Resolve ``impl`` for one call.

    Raises:
        ValueError: ``impl`` is unknown, or the forced path cannot compute this call.
    """
    if impl not in IMPLS:
        raise ValueError(f"impl: expected one of {', '.join(IMPLS)}, got {impl!r}")
    blocker = _sdpa_blocker(score, need_weights)
    if impl == "reference":
        plan = Plan("reference", "impl='reference' was requested")
    elif impl == "sdpa":
        if blocker is not None:
            raise ValueError(f"impl='sdpa' cannot serve this call: {blocker}")
        plan = Plan("sdpa", "impl='sdpa' was requested")
    elif blocker is None:
        plan = Plan("sdpa", f"score {score.name!r} without weights: fused SDPA kernel")
    else:
        plan = Plan("reference", f"SDPA not possible ({blocker}); full-matrix reference path")
    log.debug("attention path %s: %s", plan.impl, plan.reason)
    return plan
