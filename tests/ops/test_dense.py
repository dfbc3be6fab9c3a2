"""linear / Linear: oneDNN's products against F.linear, the reference; which one runs."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from attnkit.ops import Linear, dense, export_mode, linear
from attnkit.ops.dense import OneDnnLinear, onednn_is_faster, uses_onednn
from tests.float32_bounds import gamma

onednn = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="PyTorch built without oneDNN"
)


@pytest.fixture(autouse=True, scope="module")
def onednn_on_every_cpu():
    """These tests check the oneDNN path, which the import turns off where MKL is faster
    (an Intel processor): turned on here, whatever the processor."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dense, "ONEDNN_DENSE", True)
        yield


def grads(fn, x, w, b, g):
    inputs = [t for t in (x, w, b) if t is not None]
    return torch.autograd.grad(fn(x, w, b), inputs, g)


def linear_bounds(x, w, b, g):
    """Componentwise bounds on how far two float32 computations of ``y = x w^T + b`` and of
    its gradients (``g w``, ``g^T x``, ``sum g``) may lie apart, whatever order or vector
    width each sums in: twice ``gamma_n`` times the sum of the terms' magnitudes, ``n`` the
    terms a sum (tests/float32_bounds.py). oneDNN picks its kernels by CPU, so
    its order differs between AVX2 and AVX-512 machines."""
    x, w, g = (t.detach().abs().double() for t in (x, w, g))
    din, dout, rows = w.shape[1], w.shape[0], x[..., 0].numel()
    y = x @ w.T + (b.detach().abs().double() if b is not None else 0)
    bounds = [
        2 * gamma(din + 1) * y,
        2 * gamma(dout) * g @ w,
        2 * gamma(rows) * g.reshape(-1, dout).T @ x.reshape(-1, din),
    ]
    if b is not None:
        bounds.append(2 * gamma(rows) * g.reshape(-1, dout).sum(0))
    return bounds


def assert_within(got, want, bound):
    assert ((got.double() - want.double()).abs() <= bound).all(), float(
        ((got.double() - want.double()).abs() - bound).max()
    )


@onednn
@given(
    lead=st.lists(st.integers(0, 5), min_size=1, max_size=3),
    din=st.integers(1, 40),
    dout=st.integers(1, 40),
    bias=st.booleans(),
    strided=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_matches_f_linear_outputs_and_gradients(lead, din, dout, bias, strided, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*lead, 2 * din if strided else din, generator=gen)
    if strided:  # every other feature: a non-contiguous input
        x = x[..., ::2]
    x.requires_grad_(True)
    w = torch.randn(dout, din, generator=gen).requires_grad_(True)
    b = torch.randn(dout, generator=gen).requires_grad_(True) if bias else None
    assert uses_onednn(x, w) == (x.numel() > 0)  # empty: F.linear
    y = linear(x, w, b)
    if x.numel():
        assert "OneDnnLinear" in type(y.grad_fn).__name__
    g = torch.randn(y.shape, generator=gen)
    bound_y, *bound_grads = linear_bounds(x, w, b, g)
    assert_within(y, F.linear(x, w, b), bound_y)
    for got, want, bound in zip(
        grads(linear, x, w, b, g), grads(F.linear, x, w, b, g), bound_grads
    ):
        assert_within(got, want, bound)


@pytest.mark.parametrize("dout", [4, 6])  # fewer or more outputs than inputs: both orders
def test_gradcheck_and_double_backward_float64(dout):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(dout, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(dout, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(OneDnnLinear.apply, (x, w, b))
    assert torch.autograd.gradgradcheck(OneDnnLinear.apply, (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w: OneDnnLinear.apply(x, w, None), (x, w))


@onednn
def test_double_backward_float32_matches_f_linear():
    torch.manual_seed(0)
    x = torch.randn(6, 5, requires_grad=True)
    w = torch.randn(3, 5, requires_grad=True)

    def penalty(fn):  # a gradient penalty: the norm of dy/dx, differentiated again
        (gx,) = torch.autograd.grad(fn(x, w).tanh().sum(), x, create_graph=True)
        return torch.autograd.grad(gx.square().sum(), (x, w))

    for got, want in zip(penalty(linear), penalty(F.linear)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@onednn
def test_without_gradients_no_graph():
    x, w = torch.randn(4, 3), torch.randn(2, 3, requires_grad=True)
    with torch.no_grad():
        y = linear(x, w)
    assert y.grad_fn is None
    torch.testing.assert_close(y, x @ w.detach().T)


@pytest.mark.parametrize("case", ["float64", "bfloat16", "autocast", "export", "vector"])
def test_reference_path_is_f_linear_exactly(case):
    torch.manual_seed(0)
    dtype = {"float64": torch.float64, "bfloat16": torch.bfloat16}.get(case, torch.float32)
    x = torch.randn(3) if case == "vector" else torch.randn(4, 3, dtype=dtype)
    w, b = torch.randn(2, 3, dtype=x.dtype), torch.randn(2, dtype=x.dtype)
    if case == "autocast":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not uses_onednn(x, w)
            y, want = linear(x, w, b), F.linear(x, w, b)
        assert y.dtype == torch.bfloat16
    elif case == "export":
        with export_mode():
            assert not uses_onednn(x, w)
            y, want = linear(x, w, b), F.linear(x, w, b)
    else:
        assert not uses_onednn(x, w)
        y, want = linear(x, w, b), F.linear(x, w, b)
    assert torch.equal(y, want)


def test_linear_module_is_a_drop_in_nn_linear():
    torch.manual_seed(0)
    plain = nn.Linear(7, 5)
    ours = Linear(7, 5)
    assert isinstance(ours, nn.Linear)
    assert ours.state_dict().keys() == plain.state_dict().keys()
    ours.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 7)
    torch.testing.assert_close(ours(x), plain(x), atol=1e-6, rtol=1e-5)
    assert Linear(7, 5, bias=False).bias is None


@pytest.mark.parametrize(
    "x_shape, w_shape, b_shape, match",
    [
        ((4, 3), (2, 5), None, "same Din"),
        ((4, 3), (2, 3, 1), None, "same Din"),
        ((), (2, 3), None, "same Din"),
        ((4, 3), (2, 3), (3,), r"bias of shape \(2,\)"),
    ],
)
def test_bad_shapes_name_the_argument(x_shape, w_shape, b_shape, match):
    b = None if b_shape is None else torch.randn(b_shape)
    with pytest.raises(ValueError, match=match):
        linear(torch.randn(x_shape), torch.randn(w_shape), b)


@onednn
@pytest.mark.filterwarnings("ignore:There is a performance drop")  # vmap's per-example loop
def test_torch_func_grad_and_vmap_match_nn_linear():
    from torch.func import functional_call, grad, vmap

    torch.manual_seed(0)
    ours, plain = Linear(5, 3), nn.Linear(5, 3)
    plain.load_state_dict(ours.state_dict())
    x = torch.randn(4, 2, 5)

    def per_example(module):
        def loss(params, xb):
            return functional_call(module, params, (xb,)).square().sum()

        return vmap(grad(loss), in_dims=(None, 0))(dict(module.named_parameters()), x)

    got, want = per_example(ours), per_example(plain)
    assert got.keys() == want.keys()
    for k in got:
        assert got[k].shape == (4, *want[k].shape[1:])
        torch.testing.assert_close(got[k], want[k], atol=1e-5, rtol=1e-5)


def test_under_torch_compile_it_is_f_linear():
    torch.manual_seed(0)
    layer = Linear(6, 4)
    seen = []

    def f(x):
        seen.append(uses_onednn(x, layer.weight))  # traced once, while compiling
        return layer(x).tanh()

    x = torch.randn(3, 6, requires_grad=True)
    y = torch.compile(f, backend="aot_eager")(x)
    assert seen == [False]
    torch.testing.assert_close(y, F.linear(x, layer.weight, layer.bias).tanh())
    y.sum().backward()
    assert x.grad is not None


@pytest.mark.parametrize(
    "choice, vendor, want",
    [
        ("", "GenuineIntel", not torch.backends.mkl.is_available()),
        ("", "AuthenticAMD", True),
        ("", "", True),
        ("onednn", "GenuineIntel", True),
        ("blas", "AuthenticAMD", False),
    ],
)
def test_onednn_chosen_unless_mkl_on_intel_or_told(choice, vendor, want):
    assert onednn_is_faster(choice, vendor) is want


def test_bad_choice_names_the_variable():
    with pytest.raises(ValueError, match=r"ATTNKIT_DENSE: expected 'onednn', 'blas'.*'mkl'"):
        onednn_is_faster("mkl", "GenuineIntel")


def test_blas_chosen_it_is_f_linear_exactly(monkeypatch):
    monkeypatch.setattr(dense, "ONEDNN_DENSE", False)
    torch.manual_seed(0)
    x, w, b = torch.randn(5, 3, requires_grad=True), torch.randn(2, 3), torch.randn(2)
    y = linear(x, w, b)
    assert "OneDnnLinear" not in type(y.grad_fn).__name__
    assert torch.equal(y, F.linear(x, w, b))
