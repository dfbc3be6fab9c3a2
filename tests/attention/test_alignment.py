"""The alignment modules (monotonic, MoChA, local-p, GMM): the vectorised path against the
loop-by-loop equations, step-by-step against all-at-once, masks, saturation, gradcheck, errors."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnkit import plot_attention
from attnkit.attention import (
    ALIGNMENTS,
    Attention,
    MoChA,
    MonotonicAttention,
    make_alignment,
)
from attnkit.attention.monotonic import chunkwise_weights, expected_alignment, hard_stops

F64 = torch.float64
MONOTONIC = ("monotonic", "mocha")


def _options(name, **extra):
    if name in MONOTONIC:
        extra = {"noise": 0.0, "r_init": 0.5, **extra}
    if name == "mocha":
        extra.setdefault("chunk", 2)
    if name == "local_p":
        extra.setdefault("half_width", 2)
    return extra


def _pair(name, seed, mode="train", **extra):
    """The fast module and the loop module with equal parameters, in ``mode``: "train",
    "soft" (eval, expected alignment) or "hard" (eval, discrete stops)."""
    torch.manual_seed(seed)
    fast = make_alignment(name, 4, 3, 5, **_options(name, **extra)).to(F64)
    loop = make_alignment(name, 4, 3, 5, impl="loop", **_options(name, **extra)).to(F64)
    loop.load_state_dict(fast.state_dict())
    for m in (fast, loop):
        m.train(mode == "train")
        if mode != "train":
            m.inference = mode
    return fast, loop


def _inputs(b, tq, tk, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    q = (scale * torch.randn(b, tq, 4, generator=g, dtype=F64)).requires_grad_()
    k = torch.randn(b, tk, 3, generator=g, dtype=F64).requires_grad_()
    v = torch.randn(b, tk, 5, generator=g, dtype=F64).requires_grad_()
    mask = torch.rand(b, tk, generator=g) < 0.8
    mask[0] = False if b > 1 else mask[0]  # a row with no key at all
    return q, k, v, mask


@st.composite
def cases(draw):
    name = draw(st.sampled_from(sorted(ALIGNMENTS)))
    modes = ["train", "soft", "hard"] if name in MONOTONIC else ["train"]
    return dict(
        name=name,
        mode=draw(st.sampled_from(modes)),
        b=draw(st.integers(1, 3)),
        tq=draw(st.integers(1, 4)),
        tk=draw(st.integers(1, 7)),
        seed=draw(st.integers(0, 2**16)),
    )


@given(cases())
def test_fast_equals_loop_with_gradients(c):
    fast, loop = _pair(c["name"], c["seed"], c["mode"])
    q, k, v, mask = _inputs(c["b"], c["tq"], c["tk"], c["seed"])
    outs, grads = [], []
    for m in (fast, loop):
        out = m(q, k, v, key_mask=mask)
        outs.append(out)
        loss = (out.context * torch.linspace(-1, 1, 5, dtype=F64)).sum()
        if out.state is not None:
            loss = loss + (out.state * torch.linspace(0, 1, out.state.shape[-1], dtype=F64)).sum()
        params = [p for p in m.parameters()]
        grads.append(torch.autograd.grad(loss, [q, k, v] + params, allow_unused=True))
    (a, b) = outs
    torch.testing.assert_close(a.weights, b.weights, atol=1e-10, rtol=1e-8)
    torch.testing.assert_close(a.context, b.context, atol=1e-10, rtol=1e-8)
    if a.state is not None:
        torch.testing.assert_close(a.state, b.state, atol=1e-10, rtol=1e-8)
    assert a.weights[~mask[:, None, :].expand_as(a.weights)].eq(0).all()
    for ga, gb in zip(*grads):
        if ga is None or gb is None:
            assert (ga is None or not ga.any()) and (gb is None or not gb.any())
        else:
            torch.testing.assert_close(ga, gb, atol=1e-9, rtol=1e-7)


def test_the_comparison_is_not_vacuous():
    """Weights that differ from the loop's are caught: the fast path with another offset."""
    fast, loop = _pair("monotonic", 0)
    with torch.no_grad():
        fast.energy.offset += 0.1
    q, k, v, _ = _inputs(2, 3, 6, 0)
    assert not torch.allclose(fast(q, k, v).weights, loop(q, k, v).weights, atol=1e-3)


@pytest.mark.parametrize("name", sorted(ALIGNMENTS))
@pytest.mark.parametrize("mode", ["train", "soft", "hard"])
def test_steps_equal_all_at_once(name, mode):
    if mode != "train" and name not in MONOTONIC:
        pytest.skip("one mode only")
    fast, _ = _pair(name, 1, mode)
    q, k, v, mask = _inputs(3, 5, 9, 1)
    memory = fast.prepare(k, v)
    whole = fast(q, memory, key_mask=mask)
    state = fast.initial_state(memory)
    for i in range(q.shape[1]):
        out = fast(q[:, i], memory, key_mask=mask, prev_state=state)
        torch.testing.assert_close(out.weights, whole.weights[:, i])
        torch.testing.assert_close(out.context, whole.context[:, i])
        state = out.state
    if state is not None:
        torch.testing.assert_close(state, whole.state)


@pytest.mark.parametrize("name", sorted(ALIGNMENTS))
def test_padding_changes_nothing_even_nan_and_empty_rows_are_zero(name):
    fast, _ = _pair(name, 2, "soft" if name in MONOTONIC else "train")
    q, k, v, _ = _inputs(2, 3, 5, 2)
    lengths = torch.tensor([5, 0])
    garbage = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e30], dtype=F64)
    padded_k = torch.cat([k, garbage[None, :, None].expand(2, 4, 3)], 1)  # NaN, inf, huge
    padded_v = torch.cat([v, garbage[None, :, None].expand(2, 4, 5)], 1)
    short = fast(q[:1], k[:1], v[:1])
    long = fast(q, padded_k, padded_v, key_lengths=lengths)
    torch.testing.assert_close(long.context[:1], short.context)
    torch.testing.assert_close(long.weights[:1, :, :5], short.weights)
    assert long.weights[:, :, 5:].eq(0).all()
    assert long.context[1].eq(0).all() and long.weights[1].eq(0).all()
    grads = torch.autograd.grad(
        long.context.sum(), [q, padded_k, padded_v] + list(fast.parameters()), allow_unused=True
    )
    assert all(g is None or torch.isfinite(g).all() for g in grads)
    assert grads[0][1].eq(0).all()  # the query with no key learns nothing


@pytest.mark.parametrize("name", sorted(ALIGNMENTS))
def test_no_keys_at_all(name):
    fast, _ = _pair(name, 3)
    out = fast(
        torch.randn(2, 3, 4, dtype=F64),
        torch.randn(2, 0, 3, dtype=F64),
        torch.randn(2, 0, 5, dtype=F64),
    )
    assert out.context.eq(0).all() and out.weights.shape == (2, 3, 0)


# ---------------------------------------------------------------- monotonic in particular


def _naive_loop(e, prev, valid):
    """The recurrence with plain sigmoids, row by row (what expected_alignment must equal)."""
    out = torch.zeros_like(e)
    for n in range(e.shape[0]):
        q, p_before = 0.0, 0.0
        for j in range(e.shape[1]):
            p = torch.sigmoid(e[n, j]).item() if valid[n, j] else 0.0
            q = (1 - p_before) * q + prev[n, j].item()
            out[n, j] = p * q
            p_before = p
    return out


def test_saturated_probabilities_give_the_exact_alignment_not_nan():
    """Energies of +-1e4 make p exactly 0 or 1: the cumulative-product formula of the paper
    divides by 0 there; the log-space form gives the recurrence's exact answer."""
    e = torch.tensor(
        [
            [-1e4, -1e4, 1e4, 1e4, -1e4],
            [1e4, -1e4, -1e4, -1e4, -1e4],
            [-1e4, -1e4, -1e4, -1e4, -1e4],
        ],
        dtype=F64,
        requires_grad=True,
    )
    prev = torch.tensor([[1.0, 0, 0, 0, 0], [0, 0.5, 0, 0.5, 0], [0, 0, 1.0, 0, 0]], dtype=F64)
    valid = torch.ones(3, 5, dtype=torch.bool)
    alpha = expected_alignment(e, prev, valid)
    torch.testing.assert_close(alpha, _naive_loop(e.detach(), prev, valid))
    torch.testing.assert_close(
        alpha.detach(),
        torch.tensor([[0, 0, 1.0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=F64),
    )
    cumprod = torch.cumprod(1 - torch.sigmoid(e.detach()), -1)
    assert not torch.isfinite(prev / cumprod).all()  # the paper's form divides by 0 here
    (g,) = torch.autograd.grad(alpha.sum(), e)
    assert torch.isfinite(g).all()


@given(st.integers(1, 3), st.integers(1, 40), st.floats(0.1, 30.0), st.integers(0, 2**16))
def test_expected_alignment_equals_the_recurrence(b, tk, scale, seed):
    g = torch.Generator().manual_seed(seed)
    e = scale * torch.randn(b, tk, generator=g, dtype=F64)
    prev = torch.rand(b, tk, generator=g, dtype=F64) * (torch.rand(b, tk, generator=g) < 0.5)
    valid = torch.rand(b, tk, generator=g) < 0.8
    alpha = expected_alignment(e, prev, valid)
    torch.testing.assert_close(alpha, _naive_loop(e, prev, valid), atol=1e-12, rtol=1e-9)
    assert (alpha.sum(-1) <= prev.sum(-1) + 1e-12).all()


def test_expected_alignment_float32_keeps_its_accuracy_on_long_inputs():
    g = torch.Generator().manual_seed(0)
    e = 8 * torch.randn(2, 3000, generator=g)
    prev = torch.zeros(2, 3000)
    prev[:, 1500] = 1.0
    valid = torch.ones(2, 3000, dtype=torch.bool)
    ref = _naive_loop(e.double(), prev.double(), valid)
    torch.testing.assert_close(
        expected_alignment(e, prev, valid).double(), ref, atol=1e-6, rtol=1e-5
    )


def test_gradcheck_of_the_expected_alignment_and_chunkwise_weights():
    g = torch.Generator().manual_seed(0)
    e = torch.randn(2, 6, generator=g, dtype=F64, requires_grad=True)
    prev = torch.rand(2, 6, generator=g, dtype=F64).requires_grad_()
    valid = torch.tensor([[1, 1, 0, 1, 1, 1], [1, 0, 1, 1, 1, 0]], dtype=torch.bool)
    assert torch.autograd.gradcheck(lambda e, p: expected_alignment(e, p, valid), (e, prev))
    u = torch.randn(2, 6, generator=g, dtype=F64, requires_grad=True)
    alpha = torch.rand(2, 6, generator=g, dtype=F64).requires_grad_()
    for chunk in (1, 2, 4):
        assert torch.autograd.gradcheck(
            lambda a, u, chunk=chunk: chunkwise_weights(a, u, valid, chunk), (alpha, u)
        )


@pytest.mark.parametrize("name", sorted(ALIGNMENTS))
def test_gradcheck_of_the_modules(name):
    extra = {"half_width": 9} if name == "local_p" else {}  # a window that holds every key
    fast, _ = _pair(name, 4, **extra)
    q, k, v, _ = _inputs(2, 2, 5, 4, scale=0.5)
    lengths = torch.tensor([5, 3])
    assert torch.autograd.gradcheck(
        lambda q, k, v: fast(q, k, v, key_lengths=lengths).context, (q, k, v)
    )


def test_mocha_with_chunk_1_is_monotonic_attention():
    torch.manual_seed(5)
    mono = MonotonicAttention(4, 3, 5, noise=0.0).double()
    mocha = MoChA(4, 3, 5, noise=0.0, chunk=1).double()
    mocha.load_state_dict({**mocha.state_dict(), **mono.state_dict()})
    q, k, v, mask = _inputs(2, 3, 6, 5)
    for mode in ("train", "soft", "hard"):
        for m in (mono, mocha):
            m.train(mode == "train")
            m.inference = "hard" if mode == "hard" else "soft"
        torch.testing.assert_close(
            mocha(q, k, v, key_mask=mask).weights, mono(q, k, v, key_mask=mask).weights
        )


def test_hard_decoding_reads_each_key_a_bounded_number_of_times():
    """Linear time: over a whole output the scan scores at most Tk + Tq * block keys."""
    tk, tq, block = 400, 60, 4
    stops = torch.sort(torch.randperm(tk)[:tq]).values
    energies = torch.full((tq, tk), -1.0)
    energies[torch.arange(tq), stops] = 1.0
    scored = []

    def energy_at(i):
        def at(rows, idx):
            scored.append(idx.numel())
            return energies[i][idx]

        return at

    start = torch.zeros(1, dtype=torch.long)
    valid = torch.ones(1, tk, dtype=torch.bool)
    found = []
    for i in range(tq):
        stop = hard_stops(energy_at(i), start, torch.ones(1, dtype=torch.bool), valid, block)
        found.append(int(stop))
        start = stop
    assert found == stops.tolist()
    assert sum(scored) <= tk + tq * block


def test_hard_attention_stops_for_good_when_no_key_stops_it():
    attn = MonotonicAttention(4, 3, noise=0.0).eval()
    with torch.no_grad():
        attn.energy.offset.fill_(-100.0)  # p = 0 everywhere
    out = attn(torch.randn(2, 3, 4), torch.randn(2, 6, 3))
    assert out.weights.eq(0).all() and out.context.eq(0).all() and out.state.eq(0).all()


def test_noise_only_in_training():
    attn = MonotonicAttention(4, 3, noise=1.0, inference="soft")
    q, k = torch.randn(2, 3, 4), torch.randn(2, 6, 3)
    torch.manual_seed(0)
    a = attn(q, k).weights
    torch.manual_seed(1)
    b = attn(q, k).weights
    assert not torch.allclose(a, b)
    attn.eval()
    torch.testing.assert_close(attn(q, k).weights, attn(q, k).weights)


def _toy(seed, steps=300):
    """Train monotonic attention alone to stop at the key holding the query's symbol:
    keys are random symbols, queries the symbols of an increasing choice of them."""
    torch.manual_seed(seed)
    symbols, dim = 12, 16
    embed = torch.nn.Embedding(symbols, dim)
    attn = MonotonicAttention(dim, dim, attn_dim=32, noise=1.0)
    opt = torch.optim.Adam(list(embed.parameters()) + list(attn.parameters()), lr=0.03)

    def batch(n):
        keys = torch.stack([torch.randperm(symbols)[:10] for _ in range(n)])  # distinct
        picks = torch.stack([torch.sort(torch.randperm(10)[:4]).values for _ in range(n)])
        return keys, picks, keys.gather(1, picks)

    for _ in range(steps):
        keys, picks, queries = batch(32)
        alpha = attn(embed(queries), embed(keys)).weights  # (B, 4, 10)
        loss = -alpha.gather(2, picks[..., None]).clamp_min(1e-9).log().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return embed, attn, batch


@pytest.fixture(scope="module")
def trained_toy():
    """The toy of :func:`_toy` trained once (one torch thread) for the tests that read it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield _toy(0)
    finally:
        torch.set_num_threads(threads)


def test_expected_alignment_and_hard_decoding_agree_on_a_trained_toy(trained_toy):
    embed, attn, batch = trained_toy
    keys, picks, queries = batch(200)
    attn.eval()
    with torch.no_grad():
        attn.inference = "soft"
        soft = attn(embed(queries), embed(keys)).weights
        attn.inference = "hard"
        hard = attn(embed(queries), embed(keys)).weights
    soft_pos, hard_pos = soft.argmax(-1), hard.argmax(-1)
    assert hard.sum(-1).eq(1).float().mean() > 0.95  # it stops, at one key
    assert (soft_pos == picks).float().mean() > 0.9  # it learnt the alignment
    assert (hard_pos == soft_pos).float().mean() > 0.95  # and hard decoding reads it
    assert soft.amax(-1).mean() > 0.5  # trained with noise: the expectation is peaked


@pytest.mark.parametrize("name", sorted(ALIGNMENTS))
def test_weights_can_be_plotted(name, tmp_path):
    fast, _ = _pair(name, 6)
    out = fast(
        torch.randn(1, 4, 4, dtype=F64),
        torch.randn(1, 7, 3, dtype=F64),
        torch.randn(1, 7, 5, dtype=F64),
    )
    path = plot_attention(out.weights[0], list("abcdefg"), list("wxyz"), tmp_path / "w.png")
    assert path.stat().st_size > 0


def test_local_p_with_half_width_0_reads_the_key_nearest_its_centre():
    """A window of ``|j - p| <= 0`` around a real centre holds no key: every query read
    nothing. With ``D = 0`` the window is the key nearest the centre, on both paths."""
    fast, loop = _pair("local_p", 4, half_width=0)
    q, k, v, _ = _inputs(2, 3, 6, 4)
    out = fast(q, k, v)
    nearest = fast.centres(q, torch.ones(2, 6, dtype=torch.bool)).round().long()  # (B, Tq)
    assert (out.weights > 0).sum(-1).eq(1).all()
    assert out.weights.argmax(-1).eq(nearest).all()
    torch.testing.assert_close(out.weights, loop(q, k, v).weights)


# ---------------------------------------------------------------- bad input


def test_errors_name_the_argument():
    attn = MonotonicAttention(4, 3)
    k = torch.randn(2, 5, 3)
    with pytest.raises(ValueError, match="alignment: expected one of"):
        make_alignment("nope", 4)
    with pytest.raises(ValueError, match=r"prev_state: expected shape \(2, 5\)"):
        attn(torch.randn(2, 4), k, prev_state=torch.zeros(2, 4))
    with pytest.raises(ValueError, match="prev_state: alignment 'local_p' has no state"):
        make_alignment("local_p", 4, 3)(torch.randn(2, 4), k, prev_state=torch.zeros(2, 5))
    for noise in (-1, float("inf"), True):
        with pytest.raises(
            ValueError, match=f"noise: expected a non-negative number, got {noise!r}"
        ):
            MonotonicAttention(4, noise=noise)
    with pytest.raises(ValueError, match="inference: expected one of hard, soft"):
        MonotonicAttention(4, inference="greedy")
    with pytest.raises(ValueError, match="impl: expected one of fast, loop"):
        MoChA(4, impl="reference")
    with pytest.raises(ValueError, match="chunk: expected a positive int"):
        MoChA(4, chunk=0)
    with pytest.raises(ValueError, match="score: expected one of .* got 'location'"):
        make_alignment("local_p", 4, score="location")
    with pytest.raises(ValueError, match="half_width: expected a non-negative int"):
        make_alignment("local_p", 4, half_width=-1)
    with pytest.raises(ValueError, match="key: this Memory was prepared by another module"):
        attn(torch.randn(2, 4), MonotonicAttention(4, 3).prepare(k))
    with pytest.raises(ValueError, match="key_lengths: expected values in"):
        attn(torch.randn(2, 4), k, key_lengths=torch.tensor([6, 1]))
    with pytest.raises(ValueError, match="query: expected feature size query_dim = 4"):
        attn(torch.randn(2, 5), k)
    with pytest.raises(ValueError, match="key: this Memory was prepared by another"):
        Attention(4, 3, score="additive")(torch.randn(2, 4), attn.prepare(k))


@pytest.mark.parametrize("name", sorted(ALIGNMENTS))
def test_values_default_to_keys_and_memory_equals_tensors(name):
    attn = make_alignment(name, 4, 3)
    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 3)
    torch.manual_seed(0)
    a = attn(q, k)
    torch.manual_seed(0)
    b = attn(q, attn.prepare(k, k))
    torch.testing.assert_close(a.context, b.context)
    torch.testing.assert_close(a.context, a.weights @ k)


@pytest.mark.parametrize("name", sorted(ALIGNMENTS))
def test_nan_padding_of_a_memory_reaches_no_output_and_no_gradient(name):
    """prepare() zeroes keys holding NaN or inf before its projection: the gradients of every
    parameter are those of zero padding."""
    fast, _ = _pair(name, 7, "soft" if name in MONOTONIC else "train")
    q, k, v, _ = _inputs(2, 3, 5, 7)
    results = []
    for fill in (0.0, float("nan")):
        pk, pv = k.detach().clone(), v.detach().clone()
        pk[1, 3:], pv[1, 3:] = fill, (float("inf") if fill else 0.0)
        pk.requires_grad_(), pv.requires_grad_()
        torch.manual_seed(0)
        out = fast(q, fast.prepare(pk, pv), key_lengths=torch.tensor([5, 3]))
        grads = torch.autograd.grad(
            out.context.square().sum(), [q, pk, pv] + list(fast.parameters()), allow_unused=True
        )
        results.append((out, grads))
    (clean, clean_grads), (out, grads) = results
    assert torch.isfinite(out.context).all() and out.weights[1, :, 3:].eq(0).all()
    torch.testing.assert_close(out.context, clean.context)
    torch.testing.assert_close(out.weights, clean.weights)
    for got, want in zip(grads, clean_grads):
        assert (got is None) == (want is None)
        if got is not None:
            assert torch.isfinite(got).all()
            torch.testing.assert_close(got, want)


@pytest.mark.parametrize("name", sorted(ALIGNMENTS))
def test_nan_in_a_real_key_of_a_memory_gives_nan_rows(name):
    fast, _ = _pair(name, 7, "soft" if name in MONOTONIC else "train")
    q, k, v, _ = _inputs(2, 3, 5, 7)
    k = k.detach().clone()
    k[1, 2] = float("nan")  # a key every query of batch row 1 may see
    out = fast(q, fast.prepare(k, v), key_lengths=torch.tensor([5, 3]))
    assert out.context[1].isnan().all() and out.weights[1].isnan().all()
    assert torch.isfinite(out.context[0]).all()


def test_inputs_that_are_not_tensors_are_named():
    attn = make_alignment("gmm", 4, 3)
    with pytest.raises(TypeError, match="query: expected a torch.Tensor, got list"):
        attn([1.0], torch.randn(2, 5, 3))
    with pytest.raises(TypeError, match="key: expected a torch.Tensor, got str"):
        attn(torch.randn(2, 4), "keys")


# ---------------------------------------------------------------- a memory that grows


@pytest.mark.parametrize("name", sorted(ALIGNMENTS))
def test_an_extended_memory_equals_the_memory_of_all_keys(name):
    attn = make_alignment(name, 4, 3, 5)
    k, v = torch.randn(2, 9, 3), torch.randn(2, 9, 5)
    memory = None
    for a, b in [(0, 4), (4, 5), (5, 9)]:
        memory = attn.extend(memory, k[:, a:b], v[:, a:b])
    whole = attn.prepare(k, v)
    for grown, full in zip(memory[:4], whole[:4]):  # key, value, key_features, values
        torch.testing.assert_close(grown, full)
    with pytest.raises(
        ValueError,
        match=f"memory: this Memory was prepared by another {type(attn).__name__} module",
    ):
        attn.extend(make_alignment(name, 4, 3, 5).prepare(k, v), k, v)
    with pytest.raises(ValueError, match=r"key: expected batch size 2 \(the memory's\)"):
        attn.extend(whole, k[:1], v[:1])


def test_only_hard_monotonic_alignments_stream_and_their_state_grows_with_zeros():
    assert MonotonicAttention(4).streaming and MoChA(4).streaming
    assert not MonotonicAttention(4, inference="soft").streaming
    assert not any(make_alignment(n, 4).streaming for n in ("local_p", "gmm"))
    state = torch.tensor([[0.0, 1.0, 0.0]])
    grown = MoChA(4).extend_state(state, 5)
    assert torch.equal(grown, torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0]]))
    gmm = make_alignment("gmm", 4, components=2)
    kappa = torch.ones(1, 2)
    assert (
        gmm.extend_state(kappa, 9) is kappa
        and make_alignment("local_p", 4).extend_state(None, 9) is None
    )


def test_a_hard_step_over_the_keys_so_far_stops_where_it_does_over_all_keys(trained_toy):
    """The trained toy, its keys given one at a time: a step that finds its stop among the
    keys so far stops where it stops over all of them; one that finds none has zero weights
    and is taken again once more keys are in."""
    embed, attn, batch = trained_toy
    torch.manual_seed(1)
    keys, _, queries = batch(20)
    attn.eval()
    with torch.no_grad():
        k, q = embed(keys), embed(queries)
        full = attn(q, k).weights  # (B, Tq, Tk)
        tq, tk, waited = q.shape[1], k.shape[1], 0
        for row in range(20):
            memory, state, i = None, None, 0
            for a in range(tk):
                memory = attn.extend(memory, k[row : row + 1, a : a + 1])
                state = (
                    attn.initial_state(memory) if state is None else attn.extend_state(state, a + 1)
                )
                while i < tq:
                    out = attn(q[row : row + 1, i], memory, prev_state=state)
                    if out.weights.sum() == 0:  # no stop among the keys so far
                        waited += 1
                        break
                    torch.testing.assert_close(out.weights[0], full[row, i, : a + 1])
                    assert full[row, i, a + 1 :].eq(0).all()
                    state, i = out.state, i + 1
            assert full[row, i:].eq(0).all()  # a step not taken found no stop over all keys
    assert waited >= 20 * tq // 2  # most steps waited for their key


def test_a_self_attention_cache_keeps_its_keys_as_its_values():
    """Keys that are their values stay one tensor as the cache grows (one copy per step, and
    one for beam search to reorder); distinct values stay distinct."""
    torch.manual_seed(0)
    attn = Attention(8, heads=2)
    h = torch.randn(3, 4, 8)
    cache = None
    for t in range(4):
        cache = attn.extend(cache, h[:, t : t + 1])
    assert cache.value is cache.key and torch.equal(cache.key, h)
    values = torch.randn(3, 4, 8)
    other = attn.extend(attn.extend(None, h[:, :2], values[:, :2]), h[:, 2:], values[:, 2:])
    assert other.value is not other.key and torch.equal(other.value, values)
