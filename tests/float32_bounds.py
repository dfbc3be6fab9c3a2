"""Error bounds for float32 results, derived from the arithmetic (operation counts x unit
roundoff), never from what one machine's float32 happens to produce: they hold on any x86-64 CPU
and build (AVX2 or AVX-512 vectors, FMA contraction or not, any number of threads), since they
bound every order in which a sum can be taken (Higham, *Accuracy and Stability of Numerical
Algorithms*, 2nd ed., 3.1 and 3.5)."""

from __future__ import annotations

import re

import torch

from attnkit.ops import native

# float32's unit roundoff
U32 = 2.0**-24


def gamma(n: int) -> float:
    """``gamma_n = n u / (1 - n u)``: a sum of ``n`` products computed in float32 lies within
    ``gamma_n * sum |term|`` of the exact sum, whatever the order of the additions."""
    return n * U32 / (1 - n * U32)


def additive_block_bounds(q, k, v, grad):
    """Componentwise bounds on the float32 error of ``s, dq, dk, dv`` of the additive block
    (:func:`attnkit.ops.kernels.additive_scores`, ``additive_backward``), computed in float64.

    With ``x = fl(q + k)`` (off by at most ``u |q + k|``) and tanh's own error, each computed
    ``t' = tanh(x)`` is off by ``e <= u |q + k| + TANH_ERR`` (``|tanh'| <= 1``), and ``1 - t'^2``
    by ``2e + e^2 + 3u``. A sum of ``n`` products ``sum c_m t'_m`` is then within
    ``gamma(n + 2) sum |c_m t'_m| + sum |c_m| e_m`` of the exact sum (the ``+ 2`` covers the
    factor ``v`` applied inside or outside the sum).

    Shape:
        q ``(B, H, bq, A)``, k ``(B, H, bk, A)``, v ``(H, A)``, grad ``(B, H, bq, bk)``;
        returns bounds shaped ``(B, H, bq, bk)``, ``(B, H, bq, A)``, ``(B, H, bk, A)``, ``(H, A)``.
    """
    q, k, v, grad = (x.double() for x in (q, k, v, grad))
    x = q.unsqueeze(-2) + k.unsqueeze(-3)  # (B, H, bq, bk, A)
    t = torch.tanh(x)
    e = U32 * x.abs() + TANH_ERR
    one_minus = (1 - t * t).abs()
    e_one_minus = 2 * e + e * e + 3 * U32
    va, g = v.abs()[:, None, None, :], grad.abs().unsqueeze(-1)  # (H, 1, 1, A), (B, H, bq, bk, 1)
    b, _, bq, a = q.shape
    bk = k.shape[2]
    s = gamma(a + 2) * (va * t.abs()).sum(-1) + (va * e).sum(-1)
    dq = gamma(bk + 2) * (g * va * one_minus).sum(3) + (g * va * e_one_minus).sum(3)
    dk = gamma(bq + 2) * (g * va * one_minus).sum(2) + (g * va * e_one_minus).sum(2)
    dv = gamma(b * bq * bk + 2) * (g * t.abs()).sum((0, 2, 3)) + (g * e).sum((0, 2, 3))
    return s, dq, dk, dv


def normwise_bound(want: torch.Tensor, operations: int) -> float:
    """A normwise bound on the float32 error of a result whose longest chain of dependent
    roundings has ``operations`` steps (score sums, the softmax's sum and its gradient's, the
    weighted sum, the batch sums of parameter gradients, added along the chain):
    ``4 gamma(operations) max |want|``. The factor 4 is the growth of the softmax gradient
    ``p_j (dp_j - sum_k p_k dp_k)``, whose two terms may each reach twice the result's scale
    before they cancel; tanh's few ulps are within the count's slack."""
    return 4 * gamma(operations) * float(want.detach().abs().max())


def _tanh_coefficients() -> tuple[list[float], list[float]]:
    """The float tanh's P and Q coefficients (monomials in ``s = x^2``, highest degree first),
    read from csrc/tanh.h, so the bound follows a refit."""
    header = (native.SOURCES[0].parent / "tanh.h").read_text()
    body = header[header.index("inline float fast_tanh") : header.index("inline double")]
    found: dict[str, list[float]] = {"p": [], "q": []}
    for name, sign, value in re.findall(
        r"\b([pq]) = (?:[pq] \* s ([+-]) )?(-?[\d.]+(?:e[+-]?\d+)?)f;", body
    ):
        found[name].append(-float(value) if sign == "-" else float(value))
    return found["p"], found["q"]


def tanh_relative_bound(x: torch.Tensor) -> torch.Tensor:
    """A bound on the relative error of the kernels' float tanh at ``x`` (csrc/tanh.h:
    ``x P(s) / Q(s)``, ``s = x^2``, ``|x|`` clamped at 9), computed in float64:

    * the rational function's own error against tanh (the fit, and the clamp beyond 9);
    * Horner's rule in float32 for P (degree n) and Q (degree m): at most ``gamma(2n)
      Ptilde(s) / |P(s)|`` and ``gamma(2m) Qtilde(s) / Q(s)`` (tilde: absolute coefficients;
      two roundings a step without FMA, one with: Higham 5.1);
    * ``s = fl(a a)``, off by ``u s``: moves ``P/Q`` by ``|s (P'/P - Q'/Q)| u``;
    * the product ``a p`` and the division: ``2 u``.
    """
    pc, qc = _tanh_coefficients()
    a = x.double().abs().clamp(max=9.0)
    sq = a * a
    p, q, pt, qt, dp, dq = (torch.zeros_like(sq) for _ in range(6))
    for c in pc:
        dp, p, pt = dp * sq + p, p * sq + c, pt * sq + abs(c)
    for c in qc:
        dq, q, qt = dq * sq + q, q * sq + c, qt * sq + abs(c)
    exact = torch.tanh(x.double().abs())
    fit = torch.where(a > 0, (a * p / q / exact.clamp(min=1e-300) - 1).abs(), torch.zeros_like(a))
    moved = (sq * (dp / p - dq / q)).abs() * U32
    rounding = gamma(2 * (len(pc) - 1)) * pt / p.abs() + gamma(2 * (len(qc) - 1)) * qt / q.abs()
    return fit + moved + rounding + 2 * U32


def _tanh_err() -> float:
    """The largest :func:`tanh_relative_bound` over every float32 input (it is even in ``x``
    and its rounding terms are constant beyond 9, where only tanh itself still moves: 30 stands
    for the rest; the grid is fine enough that the bound's own variation between points is far
    below its value)."""
    grid = torch.cat([torch.linspace(0, 9.5, 400_001), torch.tensor([30.0])])
    return float(tanh_relative_bound(grid).max())


# The kernels' tanh error, relative and so absolute too (|tanh| <= 1)
TANH_ERR = _tanh_err()


# Roundings of one LSTM step besides its gate sums: the bias, the gate's sigmoid or tanh,
# c = f c + i g (three), tanh(c) and h = o tanh(c), with a spare
LSTM_STEP = 8


def lstm_operations(steps: int, inputs: int, hidden: int) -> int:
    """The longest chain of dependent roundings through an LSTM (or LSTM cell) layer run over
    ``steps`` steps, for :func:`normwise_bound`: at each step a gate's sum over ``inputs +
    hidden`` products, then :data:`LSTM_STEP` more, each step fed the last (a bidirectional
    layer's two directions run side by side, not one after the other)."""
    return steps * (inputs + hidden + LSTM_STEP)


def assert_within_normwise(want, operations: int, scales=None, **paths) -> None:
    """Every float32 computation in ``paths`` (a name -> results in the order of ``want``)
    within :func:`normwise_bound` ``(w, operations)`` of ``w``, the same result computed in
    float64 (``None`` results are skipped). A result that cancels to (near) zero whatever its
    terms (a bias whose gradient an invariance removes) is judged on its terms' scale instead,
    ``scales[i]``, where that is larger. The bound is checked not to be vacuous first:
    ``4 gamma(operations)``, its part of the values' scale, stays under 1%."""
    assert 4 * gamma(operations) < 0.01, f"{operations} operations: a vacuous bound"
    for i, w in enumerate(want):
        if w is None or w.numel() == 0:
            continue
        bound = normwise_bound(w, operations)
        if scales and i in scales:
            bound = max(bound, 4 * gamma(operations) * scales[i])
        for name, got in paths.items():
            err = float((got[i].detach().double() - w.detach()).abs().max())
            assert err <= bound, f"{name}, result {i}: error {err:.3g} over its bound {bound:.3g}"


def key_bias_scales(module64, attention64, first: int):
    """Dot scores are unchanged when every key moves by one vector (the softmax's invariance),
    so the gradient of a multi-head Attention's key-projection bias is exactly zero, and float32
    keeps the rounding of its terms: the keys' gradients ``dK``, summed over every row and key,
    each with its own error. Judged on their scale, ``B Tk max |dK|`` (``scales`` of
    :func:`assert_within_normwise`). Call before the float64 run of ``module64`` (which holds
    ``attention64``, applied once to the keys), and the function returned after it; ``first``:
    the index of ``module64``'s first parameter among the results."""
    if attention64.heads == 1 or not attention64.score.dot_family:
        return lambda: None
    kept = []

    def keep(module, inputs, out):
        out.retain_grad()
        kept.append(out)

    handle = attention64.k_proj.register_forward_hook(keep)

    def scales():
        handle.remove()
        dk = kept[-1].grad  # (B, Tk, H * Dh)
        index = [p is attention64.k_proj.bias for p in module64.parameters()].index(True)
        return {first + index: dk[..., 0].numel() * float(dk.abs().max())}

    return scales


def _absolute_terms(node):
    """A hook making ``node``'s gradients the sum of its terms' absolute values: those of most
    nodes are products of saved values (made absolute) and the incoming gradient, and need only
    their sign dropped; sigmoid's ``g y (1 - y)`` and tanh's ``g (1 - y^2)`` subtract inside
    the node (``1 - y`` loses all of ``y``'s relative precision when ``y`` saturates near 1),
    so their terms are ``|g| y (1 + y)`` and ``|g| (1 + y^2)``; softmax's ``p_j (g_j - sum_k
    p_k g_k)`` subtracts too (and sums over its dimension), so its terms are ``p_j (|g_j| +
    sum_k p_k |g_k|)``."""
    name = node.name()
    if name.startswith("SoftmaxBackward"):
        p, dim = node._saved_result, node._saved_dim  # p made absolute (it is) by the pack hook
        dim = dim - 2**64 if dim >= 2**63 else dim  # read back as an unsigned int64

        def softmax_hook(grad_inputs, grad_outputs):
            g = grad_outputs[0].abs()
            return (p * (g + (p * g).sum(dim, keepdim=True)),)

        return softmax_hook
    if name.startswith(("SigmoidBackward", "TanhBackward")):
        y = node._saved_result  # made absolute by the pack hook
        local = y * (1 + y) if name.startswith("Sigmoid") else 1 + y * y

        def hook(grad_inputs, grad_outputs):
            return (grad_outputs[0].abs() * local,)

        return hook
    return lambda grad_inputs, grad_outputs: tuple(
        None if g is None else g.abs() for g in grad_inputs
    )


def backward_term_scales(fn, inputs, grads):
    """The size of the terms of the gradients of ``fn(*inputs)`` (outputs weighted by
    ``grads``), computed in float64: the gradients with every sum of the backward pass taken
    over the absolute values of its terms, so none cancels. Each result bounds the gradient's
    rounding error where the gradient itself may cancel to (near) zero: a sum of ``n`` terms is
    within ``gamma(n) sum |term|`` of the exact sum, and each term's own error is relative to
    the same absolute values one step further back (Higham 3.1, applied node by node).

    Computed by autograd on ``fn``'s graph with every tensor saved for the backward replaced by
    its absolute value (``saved_tensors_hooks``) and every node's output gradients made
    absolute, from ``|grads|`` (:func:`_absolute_terms`): a node whose backward multiplies the
    incoming gradient by saved values (linear maps, products, views, sums and differences)
    then adds up its terms' absolute values, and sigmoid's, tanh's and softmax's take their
    derivative's terms. Not for other nodes whose backward subtracts inside the node
    (log-softmax, normalisations): their own sums would still cancel.

    The forward values saved carry their own errors, relative to their forward terms rather
    than to themselves (the tanh of a gate sum that cancels): so judge a gradient normwise on
    its largest term scale (``scales`` of :func:`assert_within_normwise`, with the forward
    chain counted in ``operations`` with the backward's), where the errors of every saved
    value are within the bound's share of that scale. ``inputs``: float64 tensors that
    require grad, each given its term scales (a tensor of its shape) in the returned list."""

    def pack(t):
        return t.detach().abs() if t.is_floating_point() else t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        outputs = fn(*inputs)
    outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    handles, seen = [], set()
    stack = [o.grad_fn for o in outputs if o.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        handles.append(node.register_hook(_absolute_terms(node)))
        stack.extend(next_node for next_node, _ in node.next_functions)
    try:
        return list(
            torch.autograd.grad(
                outputs, inputs, [g.detach().abs() for g in grads], allow_unused=True
            )
        )
    finally:
        for handle in handles:
            handle.remove()


def forward_term_scales(fn, inputs):
    """The size of the terms of each output element of ``fn(*inputs)``, computed in float64:
    ``|y_k| + sum_j s_kj |x_j|`` over every input element ``x_j``, with ``s_kj`` the
    :func:`backward_term_scales` of ``y_k`` (its derivative with no sum cancelling). A rounding
    anywhere in the forward pass, ``u`` times the value rounded, reaches ``y_k`` through these
    derivatives; every value rounded is a sum of products of the inputs whose terms' sizes the
    products ``s_kj |x_j|`` add up (each term at least once), and ``|y_k|`` covers the last
    rounding and a bounded function's (sigmoid's, tanh's) own. Returns one tensor per output,
    of its shape; ``inputs`` as for :func:`backward_term_scales` (small outputs only: one
    backward pass per element)."""
    outputs = fn(*inputs)
    outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    scales = []
    for i, out in enumerate(outputs):
        flat = torch.zeros(out.numel(), dtype=torch.float64)
        for k in range(out.numel()):
            grads = [torch.zeros_like(o) for o in outputs]
            grads[i].view(-1)[k] = 1.0
            terms = backward_term_scales(fn, inputs, grads)
            flat[k] = sum(
                float((s * x.detach().abs()).sum()) for s, x in zip(terms, inputs) if s is not None
            )
        scales.append(out.detach().abs() + flat.view(out.shape))
    return scales
