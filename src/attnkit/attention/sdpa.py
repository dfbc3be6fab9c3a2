"""Fast path for the dot family: PyTorch's fused ``F.scaled_dot_product_attention``.

The scores of dot, scaled_dot, general and cosine attention are ``scale * qf @ kf^T`` on prepared
features (:mod:`attnkit.attention.scores`), so SDPA with that scale computes them without the
``(Tq, Tk)`` matrix on backends that have a flash/memory-efficient kernel (CPU included).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnkit.attention.chunked import band_reason
from attnkit.attention.path import Inputs, Path, Plan
from attnkit.attention.reference import check_single_backward

__all__ = ["SDPA", "SDPA_MASK_LIMIT", "SdpaPath", "sdpa_attention"]

# Largest boolean mask (elements) handed to SDPA; beyond it a masked call goes to "chunked",
# which builds its mask one block at a time.
SDPA_MASK_LIMIT = 1 << 26


class _SingleBackward(torch.autograd.Function):
    """The identity, whose backward refuses create_graph (:func:`check_single_backward`):
    PyTorch's fused SDPA kernels have no second derivative, and their own error names an
    internal operator."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        check_single_backward("sdpa")
        return grad


def _guarded(context: torch.Tensor) -> torch.Tensor:
    return _SingleBackward.apply(context) if context.requires_grad else context


def sdpa_attention(
    qf: torch.Tensor,
    kf: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    scale: float = 1.0,
    dropout_p: float = 0.0,
    is_causal: bool = False,
) -> torch.Tensor:
    """``softmax(scale * qf @ kf^T) @ value`` through SDPA, with fully masked rows giving zeros.

    Args:
        qf: ``(B, H, Tq, F)``; kf: ``(B, H, Tk, F)``; value: ``(B, H, Tk, Dv)``.
        mask: bool, broadcastable to ``(B, H, Tq, Tk)``, **True = may attend**, or ``None``.
        is_causal: SDPA's own causal mask (``j <= i``), built inside its kernel; no ``mask``.

    Returns:
        ``context (B, H, Tq, Dv)``.
    """
    if mask is None:
        return _guarded(
            F.scaled_dot_product_attention(
                qf, kf, value, dropout_p=dropout_p, is_causal=is_causal, scale=scale
            )
        )
    # A row with no allowed key would be NaN in SDPA: let it see every key, then zero it, so its
    # output and its gradients are exactly zero.
    empty = ~mask.any(dim=-1, keepdim=True)  # (B, 1|H, Tq, 1)
    context = F.scaled_dot_product_attention(
        qf, kf, value, attn_mask=mask | empty, dropout_p=dropout_p, scale=scale
    )
    return _guarded(context.masked_fill(empty, 0.0))


class SdpaPath(Path):
    """The SDPA path as dispatch sees it: dot-family scores without weights; ``auto`` leaves
    narrow windows, dropout on CPU and masks over :data:`SDPA_MASK_LIMIT` to chunked."""

    name = "sdpa"

    def not_supported_reasons(self, inp: Inputs) -> list[str]:
        reasons = []
        if not inp.score.dot_family:
            reasons.append(f"score {inp.score.name!r} is not a dot product of prepared features")
        if inp.need_weights:
            reasons.append("need_weights=True: SDPA does not return the attention weights")
        return reasons

    def auto_reasons(self, inp: Inputs) -> list[str]:
        reasons = [band_reason(inp)] if inp.narrow_band else []
        if inp.dropout_p > 0 and inp.on_cpu:
            reasons.append("dropout on CPU: SDPA would fall back to its full-matrix math path")
        if inp.sdpa_mask_elements > SDPA_MASK_LIMIT:
            reasons.append(
                f"SDPA would need a {inp.sdpa_mask_elements:,}-element mask; "
                "chunked builds it block by block"
            )
        return reasons

    def plan(self, inp: Inputs, because: str | None) -> Plan:
        return Plan(
            "sdpa", because or f"score {inp.score.name!r} without weights: fused SDPA kernel"
        )

    def run(self, inp: Inputs, plan: Plan) -> tuple[torch.Tensor, None]:
        qf, kf, v, call = inp.tensors()
        scale = inp.score.scale
        fq, fk, fv = (x.to(inp.sdpa_dtype or x.dtype) for x in (qf, kf, v))
        if call.layout.pure_causal:
            context = sdpa_attention(
                fq, fk, fv, None, scale=scale, dropout_p=inp.dropout_p, is_causal=True
            )
        else:
            context = sdpa_attention(fq, fk, fv, call.mask(), scale=scale, dropout_p=inp.dropout_p)
        return context.to(qf.dtype), None


SDPA = SdpaPath()
