"""What an attention path is: the :class:`Path` interface, the :class:`Inputs` it reads and
the :class:`Plan` dispatch returns.

Each path (:mod:`~attnkit.attention.step`, :mod:`~attnkit.attention.sdpa`,
:mod:`~attnkit.attention.chunked`, :mod:`~attnkit.attention.reference`) is one object that
says what it cannot compute (:meth:`Path.not_supported_reasons`), when ``impl="auto"`` should
take another path though it could serve (:meth:`Path.auto_reasons`), why it is taken
(:meth:`Path.plan`) and computes the call (:meth:`Path.run`). :mod:`attnkit.attention.dispatch`
walks them in order. A new path is one more such object; its checks live with it.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from attnkit.attention.scores import Score

if TYPE_CHECKING:  # core and step import this module
    from attnkit.attention.core import Call
    from attnkit.attention.step import GradSink

__all__ = ["Inputs", "Path", "Plan", "Unavailable"]


@dataclass(frozen=True)
class Plan:
    """The path an attention call takes: ``impl`` in
    :data:`~attnkit.attention.dispatch.IMPLS` (never "auto"), and why.

    ``kernel`` (:data:`attnkit.ops.kernels.KERNELS`) names what computes the additive
    score: on the chunked path its block kernels, on the step path always ``"native"`` (the
    C++ step kernel, :func:`attnkit.attention.step.additive_step`); ``"eager"`` elsewhere.

    ``estimates`` holds, when asked for (:meth:`attnkit.Attention.plan` with
    ``estimate=True``), one :class:`attnkit.attention.planner.PathEstimate` per path: the
    predicted peak memory of each; :attr:`predicted` is that of the path taken.
    """

    impl: str
    reason: str
    kernel: str = "eager"
    estimates: tuple = ()

    @property
    def predicted(self):
        """The :class:`~attnkit.attention.planner.PathEstimate` of ``impl`` (None without
        estimates)."""
        return next((e for e in self.estimates if e.impl == self.impl), None)


class Unavailable(str):
    """A reason about this machine, not the call (a kernel that could not be built): when it
    is a path's only reason, ``impl="auto"`` names it in the plan of the path it takes, unless
    that plan says ``cause`` already."""

    cause: str

    def __new__(cls, text: str, cause: str) -> Unavailable:
        reason = super().__new__(cls, text)
        reason.cause = cause
        return reason


@dataclass(frozen=True, eq=False)
class Inputs:
    """One attention call as the paths see it: its sizes (all that choosing a path reads, so
    a plan needs no tensors) and, to run it, the per-head tensors.

    Attributes:
        score: the :class:`~attnkit.attention.scores.Score`.
        shape: ``(B, H, Tq, Tk)``.
        need_weights: the weights are returned (always for the location score).
        dropout_p: dropout on the weights (0 outside training).
        window: ``(left, right)`` or None.
        device_type: ``"cpu"``, ``"cuda"``, ``"meta"``...
        dtype: the inputs' dtype (None: float32).
        sdpa_mask_elements: the size of the boolean mask SDPA would need (0: none, or SDPA's
            own causal mask).
        plain_keys: each query may see every valid key (no causal mask, no window).
        qf, kf: prepared queries ``(B, H, Tq, F)`` and keys ``(B, H, Tk, F)``; v: values
            ``(B, H, Tk, Dv)``; extra: the score's per-pair features or None.
        call: the validated :class:`~attnkit.attention.core.Call` (its masks).
        sink: a prepared memory's :class:`~attnkit.attention.step.GradSink`, or None.
        sdpa_dtype: the dtype the fused SDPA kernel is fed (None: ``qf``'s).
        grad: autograd records the call (``torch.is_grad_enabled()``): training, or a
            gradient asked of attention; False under ``torch.no_grad`` (decoding).
    """

    score: Score
    shape: tuple[int, int, int, int]
    need_weights: bool
    dropout_p: float = 0.0
    window: tuple[int, int] | None = None
    device_type: str = "cpu"
    dtype: torch.dtype | None = None
    sdpa_mask_elements: int = 0
    plain_keys: bool = False
    qf: torch.Tensor | None = None
    kf: torch.Tensor | None = None
    v: torch.Tensor | None = None
    extra: torch.Tensor | None = None
    call: Call | None = None
    sink: GradSink | None = None
    sdpa_dtype: torch.dtype | None = None
    grad: bool = False

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Call]:
        """``qf``, ``kf``, ``v`` and ``call``, which a path runs on (a plan's inputs lack
        them)."""
        if self.qf is None or self.kf is None or self.v is None or self.call is None:
            raise ValueError("these inputs only plan a call: they hold no tensors to run on")
        return self.qf, self.kf, self.v, self.call

    @property
    def on_cpu(self) -> bool:
        return self.device_type == "cpu"

    @property
    def narrow_band(self) -> bool:
        """A window narrow enough that skipping the key blocks outside it pays."""
        return (
            self.window is not None and 2 * (self.window[0] + self.window[1] + 1) <= (self.shape[3])
        )


class Path(abc.ABC):
    """One way of computing attention. Subclasses set :attr:`name` and implement
    :meth:`plan` and :meth:`run`; :meth:`not_supported_reasons` and :meth:`auto_reasons`
    default to none."""

    name: str = ""

    def not_supported_reasons(self, inp: Inputs) -> list[str]:
        """Why this path cannot compute the call (empty: it can). A forced ``impl`` raises a
        ``ValueError`` joining them; ``impl="auto"`` passes the path by."""
        return []

    def auto_reasons(self, inp: Inputs) -> list[str]:
        """Why ``impl="auto"`` passes this path by though it could serve the call: a later
        path is faster or smaller there. Each is worded as the reason of the path taken
        instead (it becomes that plan's reason)."""
        return []

    @abc.abstractmethod
    def plan(self, inp: Inputs, because: str | None) -> Plan:
        """The plan when this path is taken; ``because``: why (a forced ``impl``, or the
        reason the path before gave), None: this path's own reason under ``impl="auto"``."""

    @abc.abstractmethod
    def run(self, inp: Inputs, plan: Plan) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``context (B, H, Tq, Dv)`` and ``weights (B, H, Tq, Tk)`` (None unless
        ``inp.need_weights``), from the tensors of ``inp``."""

    def __repr__(self) -> str:
        return f"<attention path {self.name!r}>"
