"""Gradients of gradients (``create_graph=True``, a gradient penalty): exact on the reference
path for every score, refused with an error naming ``impl="reference"`` on the paths whose
backward has no derivative of its own (chunked, SDPA), never missing or wrong."""

import pytest
import torch

from attnkit import SCORES, Attention

B, TQ, TK, D = 2, 3, 5, 6


def _module(score: str, impl: str) -> Attention:
    torch.manual_seed(0)
    return Attention(D, score=score, impl=impl).double()


def _inputs():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(B, TQ, D, dtype=torch.double, generator=g, requires_grad=True)
    k = torch.randn(B, TK, D, dtype=torch.double, generator=g, requires_grad=True)
    return q, k, torch.tensor([TK, TK - 2])


def _penalty(module: Attention, q, k, lengths, params: dict | None = None) -> torch.Tensor:
    """A gradient penalty: the squared norm of the output's gradient with respect to the query
    (``params``: the module's parameters to use instead of its own)."""
    context = torch.func.functional_call(
        module, params or {}, (q, k, k), {"key_lengths": lengths}
    ).context
    (g,) = torch.autograd.grad(context.square().sum(), q, create_graph=True)
    return g.square().sum()


@pytest.mark.parametrize("score", SCORES)
def test_the_reference_path_differentiates_its_gradients_exactly(score):
    module = _module(score, "reference")
    q, k, lengths = _inputs()
    names, params = zip(*module.named_parameters()) if list(module.parameters()) else ((), ())

    def penalty(q, k, *ps):
        return _penalty(module, q, k, lengths, dict(zip(names, ps)))

    assert torch.autograd.gradcheck(penalty, (q, k, *params))  # the penalty's own gradients
    grads = torch.autograd.grad(_penalty(module, q, k, lengths), [k, *params])
    assert all(torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads)  # every input reached


@pytest.mark.parametrize("impl", ["chunked", "auto"])
@pytest.mark.parametrize("score", SCORES)
def test_fast_paths_refuse_a_second_derivative_by_name(score, impl):
    module = _module(score, impl)
    q, k, lengths = _inputs()
    with pytest.raises(
        RuntimeError,
        match=r"its backward cannot be differentiated again .*"
        r"impl='reference'",
    ):
        _penalty(module, q, k, lengths)


@pytest.mark.parametrize("impl", ["chunked", "auto"])
def test_fast_paths_still_give_first_order_gradients(impl):
    """The refusal is only for create_graph: an ordinary backward (grad mode off inside it) is
    unchanged and equals the reference's."""
    q, k, lengths = _inputs()
    got = torch.autograd.grad(
        _module("additive", impl)(q, k, k, key_lengths=lengths).context.square().sum(), [q, k]
    )
    want = torch.autograd.grad(
        _module("additive", "reference")(q, k, k, key_lengths=lengths).context.square().sum(),
        [q, k],
    )
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
