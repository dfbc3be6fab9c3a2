"""Dense layers on the faster of PyTorch's BLAS and oneDNN on CPU: :func:`linear`, :class:`Linear`.

PyTorch's float32 ``F.linear`` on CPU calls the BLAS it was built with, MKL in the official
wheels. MKL picks its AVX-512 kernels on Intel processors only; on AMD processors with AVX-512
it runs AVX2 code, half the width. oneDNN, which PyTorch already uses for convolutions and
LSTMs, picks kernels by the instructions a processor has. Measured with torch 2.13, one core,
32 to 12,800 rows of 128 to 1,024 features (``docs/performance.md``): on an AMD EPYC (Zen 5)
about 110 GFLOP/s through ``F.linear`` and 170-260 through oneDNN; on an Intel Xeon with
AVX-512 the other way round, oneDNN at 0.70-1.06x MKL's speed forward and 0.61-0.98x in
training (it re-lays out the weight at every call, which costs most at few rows).

:func:`linear` is ``F.linear`` computed by oneDNN's inner product (the operator that
``torch.compile`` uses for linear layers on CPU) when :func:`uses_onednn` holds and
:data:`ONEDNN_DENSE` says oneDNN is the faster one here, with its gradients computed the same
way (:class:`OneDnnLinear`). Everywhere else (CUDA, other dtypes, autocast, export,
``torch.compile``, MKL on an Intel processor) it is ``F.linear`` itself, the reference the tests
compare it with. Both accumulate in float32; results agree to float32 rounding, not bit for bit.
"""

from __future__ import annotations

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from attnkit.checks import describe
from attnkit.ops.precision import autocast_enabled
from attnkit.ops.tracing import exporting

__all__ = ["ONEDNN_DENSE", "Linear", "OneDnnLinear", "linear", "onednn_is_faster", "uses_onednn"]

_HAS_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(
    torch.ops.mkldnn, "_linear_pointwise"
)


def _cpu_vendor() -> str:
    """The CPU's vendor string (``GenuineIntel``, ``AuthenticAMD``), or "" where the system
    does not say (no ``/proc/cpuinfo``)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def onednn_is_faster(choice: str | None = None, vendor: str | None = None) -> bool:
    """Whether float32 dense layers run faster on oneDNN than on PyTorch's BLAS here.

    ``choice`` (default: the ``ATTNKIT_DENSE`` environment variable) decides when it is
    ``"onednn"`` or ``"blas"``; unset or empty, oneDNN is chosen unless PyTorch's BLAS is MKL
    and the processor an Intel one (``vendor``, default read from ``/proc/cpuinfo``), where
    MKL runs its widest kernels (module docstring).

    Raises:
        ValueError: ``choice`` is something else.
    """
    choice = os.environ.get("ATTNKIT_DENSE", "") if choice is None else choice
    if choice not in ("", "onednn", "blas"):
        raise ValueError(f"ATTNKIT_DENSE: expected 'onednn', 'blas' or unset, got {choice!r}")
    if choice:
        return choice == "onednn"
    vendor = _cpu_vendor() if vendor is None else vendor
    return not (torch.backends.mkl.is_available() and vendor == "GenuineIntel")


# Whether :func:`linear` computes on oneDNN where it can (:func:`uses_onednn`); decided once,
# at import (:func:`onednn_is_faster`).
ONEDNN_DENSE = onednn_is_faster()


def uses_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether :func:`linear` computes ``x W^T`` with oneDNN: PyTorch built with oneDNN; both
    float32, on the CPU and not empty (oneDNN fails on a product with an empty sum); ``x`` with
    at least one dimension besides the features; and neither autocast (which casts
    ``F.linear``'s inputs), exporting nor ``torch.compile`` (which need the operator they know)
    in force."""
    return (
        _HAS_ONEDNN
        and x.device.type == "cpu"
        and weight.device.type == "cpu"
        and x.dtype == torch.float32
        and weight.dtype == torch.float32
        and x.dim() >= 2
        and x.numel() > 0
        and weight.numel() > 0
        and not autocast_enabled(x.device)
        and not exporting()
        and not torch.compiler.is_compiling()
    )


class OneDnnLinear(torch.autograd.Function):
    """``y = x W^T + b`` with each product of the forward and backward on oneDNN (float32):
    ``x (..., Din)``, ``weight (Dout, Din)``, ``bias (Dout,)`` or None -> ``(..., Dout)``.

    The backward is written with :func:`linear`, so it is differentiable again (double
    backward). Other dtypes compute the same formulas with ``F.linear`` (gradcheck)."""

    generate_vmap_rule = True  # torch.func.vmap: the forward and backward per example

    @staticmethod
    def forward(x, weight, bias):
        if x.dtype == torch.float32:
            return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
        return F.linear(x, weight, bias)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, bias = inputs
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = linear(grad, weight.t())  # (..., Din)
        rows = grad.reshape(-1, grad.shape[-1])  # (N, Dout)
        if ctx.needs_input_grad[1]:  # (Dout, Din) = rows^T x, with the larger of Dout and
            # Din as oneDNN's output channels: 1.2-1.4x faster than the other way round
            inputs = x.reshape(-1, x.shape[-1])  # (N, Din)
            if weight.shape[0] > weight.shape[1]:
                grad_w = linear(inputs.t(), rows.t()).t()
            else:
                grad_w = linear(rows.t(), inputs.t())
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = rows.sum(0)
        return grad_x, grad_w, grad_b


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``: ``x (..., Din)``, ``weight (Dout, Din)``, ``bias (Dout,)``
    -> ``(..., Dout)``, on oneDNN where :func:`uses_onednn` and :data:`ONEDNN_DENSE` hold.

    Example:
        >>> x, w = torch.randn(4, 3), torch.randn(2, 3)
        >>> exact = x.double() @ w.double().T  # float32 products are exact in float64, sums nearly

        Each entry, a sum of three products, lies within ``gamma_3 < 4u`` of the size of its
        terms (``u = 2^-24``), whatever order and vectors the kernel uses:

        >>> terms = x.double().abs() @ w.double().abs().T
        >>> bool(((linear(x, w) - exact).abs() <= 4 * 2**-24 * terms).all())
        True
    """
    if x.dim() == 0 or weight.dim() != 2 or x.shape[-1] != weight.shape[1]:
        raise ValueError(
            "linear: expected x (..., Din) and weight (Dout, Din) with the same Din, "
            f"got x: {describe(x)}, weight: {describe(weight)}"
        )
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(
            f"linear: expected bias of shape ({weight.shape[0]},) = (Dout,), got {describe(bias)}"
        )
    if (
        not ONEDNN_DENSE
        or not uses_onednn(x, weight)
        or (bias is not None and bias.dtype != torch.float32)
    ):
        return F.linear(x, weight, bias)
    if torch.is_grad_enabled() and (
        x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    ):
        return OneDnnLinear.apply(x, weight, bias)
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class Linear(nn.Linear):
    """``nn.Linear`` computed by :func:`linear`: the same parameters, initialisation and state
    dict keys; ``(..., in_features)`` -> ``(..., out_features)``."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # nn.Linear's argument name
        return linear(input, self.weight, self.bias)
