"""Additive block kernels: the compiled versions equal the eager ones, and the eager fallback
split into pieces equals it whole."""

import torch

from attnkit.ops import kernels
from tests.float32_bounds import U32, additive_block_bounds


def exp_tanh_bound(x: torch.Tensor) -> torch.Tensor:
    """The float32 error ``1 - 2 / (exp(2x) + 1)`` may make at ``x``, from its arithmetic
    (in float64): with ``E = exp(2x)`` off by ``2u E`` (one ulp: torch's exp, vectorised by
    Sleef or scalar, is within that), ``y = 2 / (E + 1)`` moves by ``2E / (E + 1)^2 * 2u``,
    the sum and the division round it by ``2u y``, and ``1 - y`` rounds by ``u |t|``;
    ``2x`` is exact. The second-order terms are below ``16 u^2``."""
    e = torch.exp(2 * x.double())
    y = 2 / (e + 1)
    return 2 * e / (e + 1) ** 2 * 2 * U32 + 2 * U32 * y + U32 * (1 - y).abs() + 16 * U32**2


def test_exp_tanh_is_accurate_to_float32_rounding_and_saturates():
    """Every value within the bound its arithmetic allows (at most 5 u = 3.0e-7, above the
    2.4e-7 this machine's exp happened to meet), on any CPU and build."""
    x = torch.linspace(-20, 20, 400_001)
    err = (kernels.exp_tanh(x).double() - torch.tanh(x.double())).abs()
    bound = exp_tanh_bound(x)
    assert (err <= bound).all(), float((err - bound).max())
    assert float(bound.max()) < 6 * U32  # not vacuous: a few float32 roundings
    ends = kernels.exp_tanh(torch.tensor([-1e30, -80.0, 80.0, 1e30, float("inf"), -float("inf")]))
    assert torch.equal(ends, torch.tensor([-1.0, -1.0, 1.0, 1.0, 1.0, -1.0]))


def _block(b=2, h=2, bq=5, bk=7, a=16, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, bq, a, generator=g, dtype=dtype)
    k = torch.randn(b, h, bk, a, generator=g, dtype=dtype)
    v = torch.randn(h, a, generator=g, dtype=dtype)
    grad = torch.randn(b, h, bq, bk, generator=g, dtype=dtype)
    return q, k, v, grad


def test_eager_kernels_equal_autograd_of_the_equation():
    q, k, v, grad = _block(dtype=torch.float64)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    s = torch.einsum("bhqka,ha->bhqk", torch.tanh(q.unsqueeze(-2) + k.unsqueeze(-3)), v)
    expected = torch.autograd.grad(s, [q, k, v], grad)
    torch.testing.assert_close(kernels.additive_scores(q.detach(), k.detach(), v.detach()), s)
    got = kernels.additive_backward(q.detach(), k.detach(), v.detach(), grad)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)


def test_compiled_kernels_equal_eager_kernels():
    """The compiled kernels (Inductor's code for this CPU: its vectors, FMA or not) and the
    eager ones, against the equation in float64: every element of ``s, dq, dk, dv`` within
    its a-priori float32 bound (tests/float32_bounds.py), so the two agree on any
    CPU. Other shapes too, the one-query block (a decoder step) included."""
    for shape in [
        {},
        {"b": 1, "h": 2, "bq": 3, "bk": 11, "a": 8},
        {"b": 1, "h": 2, "bq": 1, "bk": 11, "a": 8},
    ]:
        q, k, v, grad = _block(**shape)
        want = [
            kernels.additive_scores(q.double(), k.double(), v.double()),
            *kernels.additive_backward(q.double(), k.double(), v.double(), grad.double()),
        ]
        bounds = additive_block_bounds(q, k, v, grad)
        for kind in ("compiled", "eager"):
            got = [
                kernels.additive_scores(q, k, v, kernel=kind),
                *kernels.additive_backward(q, k, v, grad, kernel=kind),
            ]
            for name, g, w, bound in zip(["s", "dq", "dk", "dv"], got, want, bounds):
                over = (g.double() - w).abs() - bound
                assert over.max() <= 0, f"{kind} {name} {shape}: {over.max():.3g} over its bound"
                assert bound.max() < 1e-3 * w.abs().max(), name  # not vacuous
    # Compiling works on a machine with a C++ compiler; where it fails, the eager fallback ran
    # above and the reason is reported.
    assert kernels.compile_status() == "available" or "failed" in kernels.compile_status()


def test_eager_fallback_splits_blocks_sized_for_fused_kernels(monkeypatch):
    monkeypatch.setattr(kernels, "_EAGER_PAIR_BUDGET", 64)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 1, 9, 4, generator=g), torch.randn(2, 1, 5, 4, generator=g)
    v, grad = torch.randn(1, 4, generator=g), torch.randn(2, 1, 9, 5, generator=g)
    whole = kernels._scores(q, k, v, tanh=torch.tanh)
    torch.testing.assert_close(kernels._in_pieces(kernels._scores, q, k, v), whole)
    torch.testing.assert_close(
        kernels._in_pieces(kernels._row_grad, q, k, v, grad),
        kernels._row_grad(q, k, v, grad, tanh=torch.tanh),
    )
