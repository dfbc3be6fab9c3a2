"""Additive block kernels: the compiled versions equal the eager ones, and the eager fallback
split into pieces equals it whole."""

import torch

from attnkit.ops import kernels


def test_exp_tanh_is_accurate_to_float32_rounding_and_saturates():
    x = torch.linspace(-20, 20, 400_001)
    err = (kernels.exp_tanh(x).double() - torch.tanh(x.double())).abs().max()
    assert err < 2.4e-7
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
    q, k, v, grad = _block()
    eager_s = kernels.additive_scores(q, k, v)
    eager_g = kernels.additive_backward(q, k, v, grad)
    fast_s = kernels.additive_scores(q, k, v, kernel="compiled")
    fast_g = kernels.additive_backward(q, k, v, grad, kernel="compiled")
    torch.testing.assert_close(fast_s, eager_s, atol=2e-5, rtol=1e-5)
    for a, b in zip(fast_g, eager_g):
        torch.testing.assert_close(a, b, atol=5e-5, rtol=1e-5)
    # Other shapes, the one-query block (a decoder step) included.
    for bq in (3, 1):
        q, k, v, grad = _block(b=1, h=2, bq=bq, bk=11, a=8)
        torch.testing.assert_close(kernels.additive_scores(q, k, v, kernel="compiled"),
                                   kernels.additive_scores(q, k, v), atol=2e-5, rtol=1e-5)
        for a, b in zip(kernels.additive_backward(q, k, v, grad, kernel="compiled"),
                        kernels.additive_backward(q, k, v, grad)):
            torch.testing.assert_close(a, b, atol=5e-5, rtol=1e-5)
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
    torch.testing.assert_close(kernels._in_pieces(kernels._row_grad, q, k, v, grad),
                               kernels._row_grad(q, k, v, grad, tanh=torch.tanh))
