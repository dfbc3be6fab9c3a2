"""Every bad input fails early with a ValueError/TypeError whose message names the argument.

Each error case is paired, where it is cheap, with the nearest *valid* input so that a check which
fires too eagerly fails a test as well.
"""

from __future__ import annotations

import re

import pytest
import torch

from attnkit import Attention, SelfAttention, attend, lengths_to_mask
from attnkit.ops import native

B, TQ, TK, D = 2, 4, 5, 8


def _inputs(dtype=torch.float32):
    torch.manual_seed(0)
    query = torch.randn(B, TQ, D, dtype=dtype)
    key = torch.randn(B, TK, D, dtype=dtype)
    return query, key


# --------------------------------------------------------------------------------------------
# Attention(...) constructor
# --------------------------------------------------------------------------------------------

CONSTRUCTOR_ERRORS = [
    # unknown score / impl
    (
        dict(score="bahdanau"),
        ValueError,
        r"^score: expected one of dot, scaled_dot, .*got 'bahdanau'",
    ),
    (dict(score=None), ValueError, r"^score: expected one of .*got None"),
    (
        dict(impl="flash"),
        ValueError,
        r"^impl: expected one of auto, reference, sdpa, chunked, step, got 'flash'",
    ),
    # heads / head_dim
    (dict(heads=3), ValueError, r"^heads: 3 does not divide query_dim=8; pass head_dim"),
    (dict(heads=5), ValueError, r"^heads: 5 does not divide query_dim=8"),
    (dict(head_dim=4), ValueError, r"^head_dim: only used with heads > 1, got head_dim=4"),
    (dict(heads=1, head_dim=8), ValueError, r"^head_dim: only used with heads > 1"),
    # window
    (
        dict(window=(-1, 2)),
        ValueError,
        r"^window: expected non-negative sizes \(left, right\), got \(-1, 2\)",
    ),
    (dict(window=(0, -3)), ValueError, r"^window: expected non-negative sizes .*got \(0, -3\)"),
    (dict(window=(1,)), TypeError, r"^window: expected a pair of ints \(left, right\), got \(1,\)"),
    (dict(window=(1, 2, 3)), TypeError, r"^window: expected a pair of ints .*got \(1, 2, 3\)"),
    (dict(window=3), TypeError, r"^window: expected a pair of ints .*got 3"),
    (dict(window=(1.0, 2)), TypeError, r"^window: expected a pair of ints .*got \(1\.0, 2\)"),
    (dict(window=(True, 1)), TypeError, r"^window: expected a pair of ints .*got \(True, 1\)"),
    (dict(window="ab"), TypeError, r"^window: expected a pair of ints .*got 'ab'"),
    # dropout
    (dict(dropout=-0.1), ValueError, r"^dropout: expected a probability in \[0, 1\), got -0\.1"),
    (dict(dropout=1.0), ValueError, r"^dropout: expected a probability in \[0, 1\), got 1\.0"),
    (dict(dropout=1.5), ValueError, r"^dropout: expected a probability in \[0, 1\), got 1\.5"),
    (
        dict(dropout=float("nan")),
        ValueError,
        r"^dropout: expected a probability in \[0, 1\), got nan",
    ),
    # attn_dim only for additive / location
    (
        dict(score="dot", attn_dim=4),
        ValueError,
        r"^attn_dim: only the 'additive' and 'location' scores .*score='dot'",
    ),
    (
        dict(score="scaled_dot", attn_dim=4),
        ValueError,
        r"^attn_dim: .*got attn_dim=4 with score='scaled_dot'",
    ),
    (dict(score="general", attn_dim=4), ValueError, r"^attn_dim: .*score='general'"),
    (dict(score="cosine", attn_dim=4), ValueError, r"^attn_dim: .*score='cosine'"),
    (dict(score="cosine", heads=2, attn_dim=4), ValueError, r"^attn_dim: .*score='cosine'"),
    # location conv sizes
    (
        dict(score="location", location_kernel=4),
        ValueError,
        r"^location_kernel: expected a positive odd int, got 4",
    ),
    (
        dict(score="location", location_kernel=0),
        ValueError,
        r"^location_kernel: expected a positive odd int, got 0",
    ),
    (
        dict(score="location", location_kernel=-3),
        ValueError,
        r"^location_kernel: expected a positive odd int, got -3",
    ),
    (
        dict(score="location", heads=2, location_kernel=30),
        ValueError,
        r"^location_kernel: .*got 30",
    ),
    (
        dict(score="location", location_filters=0),
        ValueError,
        r"^location_filters: expected a positive int, got 0",
    ),
    # non-positive / non-int dims
    (dict(query_dim=0), ValueError, r"^query_dim: expected a positive int, got 0"),
    (dict(query_dim=-8), ValueError, r"^query_dim: expected a positive int, got -8"),
    (dict(query_dim=8.0), ValueError, r"^query_dim: expected a positive int, got 8\.0"),
    (dict(key_dim=0), ValueError, r"^key_dim: expected a positive int, got 0"),
    (dict(key_dim=-1), ValueError, r"^key_dim: expected a positive int, got -1"),
    (dict(value_dim=0), ValueError, r"^value_dim: expected a positive int, got 0"),
    (dict(heads=0), ValueError, r"^heads: expected a positive int, got 0"),
    (dict(heads=-2), ValueError, r"^heads: expected a positive int, got -2"),
    (dict(heads=True), ValueError, r"^heads: expected a positive int, got True"),
    (dict(heads=2, head_dim=0), ValueError, r"^head_dim: expected a positive int, got 0"),
    (dict(score="additive", attn_dim=0), ValueError, r"^attn_dim: expected a positive int, got 0"),
    (
        dict(score="location", attn_dim=-4),
        ValueError,
        r"^attn_dim: expected a positive int, got -4",
    ),
]


@pytest.mark.parametrize(
    "kwargs, exc, match",
    CONSTRUCTOR_ERRORS,
    ids=[",".join(f"{k}={v!r}" for k, v in c[0].items()) for c in CONSTRUCTOR_ERRORS],
)
def test_constructor_rejects(kwargs, exc, match):
    kwargs = dict(kwargs)
    query_dim = kwargs.pop("query_dim", D)
    with pytest.raises(exc, match=match):
        Attention(query_dim, **kwargs)


@pytest.mark.parametrize("score", ["dot", "scaled_dot", "cosine"])
def test_direct_scores_need_equal_query_and_key_dims_with_one_head(score):
    with pytest.raises(
        ValueError,
        match=rf"^score='{score}' compares queries with keys directly and needs "
        r"query_dim == key_dim "
        r"\(per head\), got query_dim=8, key_dim=6; use 'general' or 'additive', or heads > 1",
    ):
        Attention(8, 6, score=score)
    # The suggested ways out are accepted and run: heads > 1 projects both sides to head_dim.
    torch.manual_seed(0)
    query, key = torch.randn(B, TQ, 8), torch.randn(B, TK, 6)
    out = Attention(8, 6, score=score, heads=2)(query, key, need_weights=True)
    assert out.context.shape == (B, TQ, 6)
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(B, 2, TQ))


@pytest.mark.parametrize("score", ["general", "additive", "location"])
def test_scores_with_parameters_accept_different_query_and_key_dims(score):
    torch.manual_seed(0)
    query, key = torch.randn(B, TQ, 8), torch.randn(B, TK, 6)
    out = Attention(8, 6, score=score)(query, key, need_weights=True)
    assert out.context.shape == (B, TQ, 6)
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(B, TQ))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(heads=2),
        dict(heads=3, head_dim=4),
        dict(window=(0, 0)),
        dict(window=[2, 1]),
        dict(dropout=0.0),
        dict(dropout=0.999),
        dict(score="additive", attn_dim=3),
        dict(score="location", attn_dim=3, location_kernel=1, location_filters=1),
        dict(impl="reference"),
        dict(impl="sdpa"),
    ],
    ids=repr,
)
def test_constructor_accepts_boundary_values(kwargs):
    attn = Attention(D, **kwargs)
    if "window" in kwargs:
        assert attn.window == tuple(kwargs["window"])
    query, key = _inputs()
    attn.eval()
    out = attn(query, key)
    assert out.context.shape == (B, TQ, D)
    assert torch.isfinite(out.context).all()


# --------------------------------------------------------------------------------------------
# Attention.forward
# --------------------------------------------------------------------------------------------

LONG = torch.int64

FORWARD_ERRORS = [
    # query rank / dtype / type
    (
        "query 4-D",
        {},
        lambda a, q, k: a(q[None], k),
        ValueError,
        r"^query: expected a 2-D or 3-D tensor, got tensor of shape \(1, 2, 4, 8\)",
    ),
    (
        "query 1-D",
        {},
        lambda a, q, k: a(q[0, 0], k),
        ValueError,
        r"^query: expected a 2-D or 3-D tensor, got tensor of shape \(8,\)",
    ),
    (
        "query int",
        {},
        lambda a, q, k: a(q.long(), k.long()),
        TypeError,
        r"^query: expected a floating-point tensor, got tensor of shape \(2, 4, 8\) "
        r"and dtype torch.int64",
    ),
    (
        "query bool",
        {},
        lambda a, q, k: a(q > 0, k),
        TypeError,
        r"^query: expected a floating-point tensor, .*torch.bool",
    ),
    (
        "query list",
        {},
        lambda a, q, k: a(q.tolist(), k),
        TypeError,
        r"^query: expected a torch.Tensor, got list",
    ),
    (
        "key 2-D",
        {},
        lambda a, q, k: a(q, k[0]),
        ValueError,
        r"^key: expected a 3-D tensor, got tensor of shape \(5, 8\)",
    ),
    (
        "key int",
        {},
        lambda a, q, k: a(q, k.int()),
        TypeError,
        r"^key: expected a floating-point tensor, .*torch.int32",
    ),
    ("value 2-D", {}, lambda a, q, k: a(q, k, k[0]), ValueError, r"^value: expected a 3-D tensor"),
    # batch sizes
    (
        "key batch",
        {},
        lambda a, q, k: a(q, k[:1]),
        ValueError,
        r"^key: expected batch size B \(from query\) = 2 .*got tensor of shape \(1, 5, 8\)",
    ),
    (
        "value batch",
        {},
        lambda a, q, k: a(q, k, torch.cat([k, k])),
        ValueError,
        r"^value: expected batch size B \(from query\) = 2 .*got tensor of shape \(4, 5, 8\)",
    ),
    (
        "one-step key batch",
        {},
        lambda a, q, k: a(q[:1, 0], k),
        ValueError,
        r"^key: expected batch size B \(from query\) = 1",
    ),
    # feature sizes
    (
        "query features",
        {},
        lambda a, q, k: a(q[..., :6], k),
        ValueError,
        r"^query: expected feature size query_dim = 8 .*got tensor of shape \(2, 4, 6\)",
    ),
    (
        "one-step query features",
        {},
        lambda a, q, k: a(q[:, 0, :6], k),
        ValueError,
        r"^query: expected feature size query_dim = 8 .*got tensor of shape \(2, 6\)",
    ),
    (
        "key features",
        {},
        lambda a, q, k: a(q, k[..., :6]),
        ValueError,
        r"^key: expected feature size key_dim = 8 .*got tensor of shape \(2, 5, 6\)",
    ),
    (
        "value features",
        {},
        lambda a, q, k: a(q, k, k[..., :6]),
        ValueError,
        r"^value: expected feature size value_dim = 8 .*got tensor of shape \(2, 5, 6\)",
    ),
    (
        "value features, explicit dims",
        dict(key_dim=8, value_dim=4),
        lambda a, q, k: a(q, k, k),
        ValueError,
        r"^value: expected feature size value_dim = 4",
    ),
    (
        "value left out, explicit dims",
        dict(key_dim=8, value_dim=4),
        lambda a, q, k: a(q, k),
        ValueError,
        r"^value \(defaults to key\): expected feature size value_dim = 4",
    ),
    # Tk
    (
        "value Tk",
        {},
        lambda a, q, k: a(q, k, k[:, :3]),
        ValueError,
        r"^value: expected Tk \(from key\) = 5 .*got tensor of shape \(2, 3, 8\)",
    ),
    # dtypes
    (
        "key dtype",
        {},
        lambda a, q, k: a(q, k.double()),
        TypeError,
        r"^key: expected dtype torch.float32 \(the query's\), got .*torch.float64",
    ),
    (
        "value dtype",
        {},
        lambda a, q, k: a(q, k, k.half()),
        TypeError,
        r"^value: expected dtype torch.float32 \(the query's\), got .*torch.float16",
    ),
    (
        "params dtype general",
        dict(score="general"),
        lambda a, q, k: a(q.double(), k.double()),
        TypeError,
        r"^query: dtype torch.float64 differs from the module's parameters \(torch.float32\); "
        r"convert one of them, e.g. attn.to\(torch.float64\)",
    ),
    (
        "params dtype heads",
        dict(heads=2),
        lambda a, q, k: a(q.double(), k.double()),
        TypeError,
        r"^query: dtype torch.float64 differs from the module's parameters",
    ),
    (
        "params dtype cosine",
        dict(score="cosine"),
        lambda a, q, k: a(q.double(), k.double()),
        TypeError,
        r"^query: dtype torch.float64 differs",
    ),
    # key_lengths
    (
        "key_lengths float",
        {},
        lambda a, q, k: a(q, k, key_lengths=torch.tensor([5.0, 3.0])),
        TypeError,
        r"^key_lengths: expected an integer tensor, got .*torch.float32",
    ),
    (
        "key_lengths bool",
        {},
        lambda a, q, k: a(q, k, key_lengths=torch.tensor([True, False])),
        TypeError,
        r"^key_lengths: expected an integer tensor, got .*torch.bool",
    ),
    (
        "key_lengths list",
        {},
        lambda a, q, k: a(q, k, key_lengths=[5, 3]),
        TypeError,
        r"^key_lengths: expected an integer torch.Tensor, got list",
    ),
    (
        "key_lengths 2-D",
        {},
        lambda a, q, k: a(q, k, key_lengths=torch.tensor([[5, 3]])),
        ValueError,
        r"^key_lengths: expected a 1-D tensor, got tensor of shape \(1, 2\)",
    ),
    (
        "key_lengths batch",
        {},
        lambda a, q, k: a(q, k, key_lengths=torch.tensor([5, 3, 1])),
        ValueError,
        r"^key_lengths: expected batch size B \(from query\) = 2 .*got tensor of shape \(3,\)",
    ),
    # NOTE: the range errors currently say "lengths: ..." (the name inside lengths_to_mask), not
    # "key_lengths: ..."; the pattern below accepts both, see the report.
    (
        "key_lengths > Tk",
        {},
        lambda a, q, k: a(q, k, key_lengths=torch.tensor([6, 3])),
        ValueError,
        r"^key_lengths: expected values in \[0, 5\], got min 3 and max 6",
    ),
    (
        "key_lengths < 0",
        {},
        lambda a, q, k: a(q, k, key_lengths=torch.tensor([5, -1])),
        ValueError,
        r"^key_lengths: expected values in \[0, 5\], got min -1 and max 5",
    ),
    # key_mask
    (
        "key_mask int",
        {},
        lambda a, q, k: a(q, k, key_mask=torch.ones(B, TK, dtype=LONG)),
        TypeError,
        r"^key_mask: expected a bool tensor \(True = may attend\), got .*torch.int64",
    ),
    (
        "key_mask float",
        {},
        lambda a, q, k: a(q, k, key_mask=torch.ones(B, TK)),
        TypeError,
        r"^key_mask: expected a bool tensor .*torch.float32",
    ),
    (
        "key_mask list",
        {},
        lambda a, q, k: a(q, k, key_mask=[[True] * TK] * B),
        TypeError,
        r"^key_mask: expected a bool tensor .*got list",
    ),
    (
        "key_mask Tk",
        {},
        lambda a, q, k: a(q, k, key_mask=torch.ones(B, TK - 1, dtype=torch.bool)),
        ValueError,
        r"^key_mask: expected shape \(B, Tk\) = \(2, 5\), got tensor of shape \(2, 4\)",
    ),
    (
        "key_mask 3-D",
        {},
        lambda a, q, k: a(q, k, key_mask=torch.ones(B, TQ, TK, dtype=torch.bool)),
        ValueError,
        r"^key_mask: expected shape \(B, Tk\) = \(2, 5\), got tensor of shape \(2, 4, 5\)",
    ),
    # prev_weights
    (
        "prev_weights non-location",
        dict(score="additive"),
        lambda a, q, k: a(q, k, prev_weights=torch.full((B, TQ, TK), 0.2)),
        ValueError,
        r"^prev_weights: only the 'location' score uses them, score is 'additive'",
    ),
    (
        "prev_weights scaled_dot",
        {},
        lambda a, q, k: a(q, k, prev_weights=torch.full((B, TQ, TK), 0.2)),
        ValueError,
        r"^prev_weights: only the 'location' score uses them, score is 'scaled_dot'",
    ),
    (
        "prev_weights shape",
        dict(score="location"),
        lambda a, q, k: a(q, k, prev_weights=torch.full((B, TQ, TK + 1), 0.2)),
        ValueError,
        r"^prev_weights: expected shape \(2, 4, 5\) \(like the weights\), "
        r"got tensor of shape \(2, 4, 6\)",
    ),
    (
        "prev_weights heads shape",
        dict(score="location", heads=2),
        lambda a, q, k: a(q, k, prev_weights=torch.full((B, TQ, TK), 0.2)),
        ValueError,
        r"^prev_weights: expected shape \(2, 2, 4, 5\) .*got tensor of shape \(2, 4, 5\)",
    ),
    (
        "prev_weights one-step shape",
        dict(score="location"),
        lambda a, q, k: a(q[:, 0], k, prev_weights=torch.full((B, TQ, TK), 0.2)),
        ValueError,
        r"^prev_weights: expected shape \(2, 5\) .*got tensor of shape \(2, 4, 5\)",
    ),
    (
        "prev_weights list",
        dict(score="location"),
        lambda a, q, k: a(q, k, prev_weights=[[0.2] * TK]),
        ValueError,
        r"^prev_weights: expected shape \(2, 4, 5\) \(like the weights\), got list",
    ),
    (
        "prev_weights dtype",
        dict(score="location"),
        lambda a, q, k: a(q, k, prev_weights=torch.full((B, TQ, TK), 0.2, dtype=torch.float64)),
        TypeError,
        r"^prev_weights: expected dtype torch.float32, got .*torch.float64",
    ),
    # positions
    (
        "one-step causal, no positions",
        dict(causal=True),
        lambda a, q, k: a(q[:, 0], k),
        ValueError,
        r"^positions: a one-step query with causal=True or a window needs the aligned key position",
    ),
    (
        "one-step window, no positions",
        dict(window=(1, 1)),
        lambda a, q, k: a(q[:, 0], k),
        ValueError,
        r"^positions: a one-step query with causal=True or a window needs .* shape \(B,\)",
    ),
    (
        "positions without causal/window",
        {},
        lambda a, q, k: a(q, k, positions=torch.zeros(B, TQ, dtype=LONG)),
        ValueError,
        r"^positions: only used with causal=True or a window; got neither",
    ),
    (
        "one-step positions without causal/window",
        {},
        lambda a, q, k: a(q[:, 0], k, positions=torch.zeros(B, dtype=LONG)),
        ValueError,
        r"^positions: only used with causal=True or a window",
    ),
    (
        "positions Tq",
        dict(causal=True),
        lambda a, q, k: a(q, k, positions=torch.zeros(B, TQ - 1, dtype=LONG)),
        ValueError,
        r"^positions: expected shape \(2, 4\), got tensor of shape \(2, 3\)",
    ),
    (
        "positions batch",
        dict(window=(1, 1)),
        lambda a, q, k: a(q, k, positions=torch.zeros(B + 1, TQ, dtype=LONG)),
        ValueError,
        r"^positions: expected shape \(2, 4\), got tensor of shape \(3, 4\)",
    ),
    (
        "positions 1-D for a sequence",
        dict(causal=True),
        lambda a, q, k: a(q, k, positions=torch.zeros(TQ, dtype=LONG)),
        ValueError,
        r"^positions: expected a 2-D tensor, got tensor of shape \(4,\)",
    ),
    (
        "positions 2-D for one step",
        dict(causal=True),
        lambda a, q, k: a(q[:, 0], k, positions=torch.zeros(B, 1, dtype=LONG)),
        ValueError,
        r"^positions: expected a 1-D tensor, got tensor of shape \(2, 1\)",
    ),
    (
        "one-step positions batch",
        dict(causal=True),
        lambda a, q, k: a(q[:, 0], k, positions=torch.zeros(B + 1, dtype=LONG)),
        ValueError,
        r"^positions: expected shape \(2,\), got tensor of shape \(3,\)",
    ),
    (
        "positions float",
        dict(causal=True),
        lambda a, q, k: a(q, k, positions=torch.zeros(B, TQ)),
        TypeError,
        r"^positions: expected an integer tensor, got .*torch.float32",
    ),
    # forced SDPA path that cannot serve the call
    (
        "sdpa need_weights",
        dict(impl="sdpa"),
        lambda a, q, k: a(q, k, need_weights=True),
        ValueError,
        r"^impl='sdpa' cannot serve this call: need_weights=True: "
        r"SDPA does not return the attention weights",
    ),
    (
        "sdpa need_weights heads",
        dict(impl="sdpa", heads=2, score="general"),
        lambda a, q, k: a(q, k, need_weights=True),
        ValueError,
        r"^impl='sdpa' cannot serve this call: need_weights=True",
    ),
]


@pytest.mark.parametrize("score", ["additive", "location"])
def test_sdpa_with_a_non_dot_score_is_refused_at_construction(score):
    with pytest.raises(
        ValueError, match=rf"^impl: 'sdpa' computes dot-product scores only, not score='{score}'"
    ):
        Attention(D, score=score, impl="sdpa")


@pytest.mark.parametrize(
    "kwargs, call, exc, match",
    [c[1:] for c in FORWARD_ERRORS],
    ids=[c[0] for c in FORWARD_ERRORS],
)
def test_forward_rejects(kwargs, call, exc, match):
    attn = Attention(D, **kwargs)
    query, key = _inputs()
    with pytest.raises(exc, match=match):
        call(attn, query, key)


def test_plan_reports_the_same_sdpa_errors():
    query, key = _inputs()
    with pytest.raises(ValueError, match=r"^impl='sdpa' cannot serve this call: need_weights=True"):
        Attention(D, impl="sdpa").plan(query, key, need_weights=True)
    # Without those blockers the forced path is taken.
    assert Attention(D, impl="sdpa").plan(query, key).impl == "sdpa"


def test_reference_path_serves_what_sdpa_refuses():
    query, key = _inputs()
    lengths = torch.tensor([5, 2])
    out = Attention(D, score="additive", impl="reference")(
        query, key, key_lengths=lengths, need_weights=True
    )
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(B, TQ))
    assert out.weights[1, :, 2:].eq(0).all()


def test_valid_key_lengths_and_mask_at_the_bounds():
    """0 and Tk are valid lengths; an all-masked row gives zero weights, not an error or NaN."""
    query, key = _inputs()
    attn = Attention(D, impl="reference")
    out = attn(query, key, key_lengths=torch.tensor([TK, 0]), need_weights=True)
    torch.testing.assert_close(out.weights[0].sum(-1), torch.ones(TQ))
    assert out.weights[1].eq(0).all()
    assert out.context[1].eq(0).all()
    mask = torch.tensor([[True, False, True, False, True]] * B)
    out = attn(query, key, key_mask=mask, need_weights=True)
    assert out.weights[..., ~mask[0]].eq(0).all()
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(B, TQ))


def test_location_accepts_prev_weights_of_the_right_shape():
    query, key = _inputs()
    attn = Attention(D, score="location", location_kernel=3)
    first = attn(query[:, 0], key)
    # The returned weights are exactly what the next step accepts.
    second = attn(query[:, 1], key, prev_weights=first.weights)
    assert second.weights.shape == (B, TK)
    torch.testing.assert_close(second.weights.sum(-1), torch.ones(B))


def test_one_step_with_positions_is_accepted_and_masks():
    query, key = _inputs()
    attn = Attention(D, causal=True, impl="reference")
    out = attn(query[:, 0], key, positions=torch.tensor([0, 2]), need_weights=True)
    assert out.weights.shape == (B, TK)
    assert out.weights[0, 1:].eq(0).all()
    torch.testing.assert_close(out.weights[0, 0], torch.tensor(1.0))
    assert out.weights[1, 3:].eq(0).all()
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(B))


def test_dtype_error_goes_away_after_converting_the_module():
    query, key = _inputs(torch.float64)
    attn = Attention(D, score="general")
    with pytest.raises(TypeError, match=re.escape("attn.to(torch.float64)")):
        attn(query, key)
    out = attn.to(torch.float64)(query, key)
    assert out.context.dtype == torch.float64


# --------------------------------------------------------------------------------------------
# functional attention
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("score", ["general", "additive", "location"])
def test_functional_rejects_scores_with_parameters_and_points_to_the_module(score):
    query, key = _inputs()
    with pytest.raises(
        ValueError,
        match=rf"^score: expected one of dot, scaled_dot, cosine, got '{score}' "
        r"\(it has parameters: use attnkit.Attention\)",
    ):
        attend(query, key, score=score)


def test_functional_unknown_score_has_no_module_hint():
    query, key = _inputs()
    with pytest.raises(
        ValueError, match=r"^score: expected one of dot, scaled_dot, cosine, got 'bogus'$"
    ):
        attend(query, key, score="bogus")


FUNCTIONAL_ERRORS = [
    (
        "dropout_p 1",
        dict(dropout_p=1.0),
        ValueError,
        r"^dropout_p: expected a probability in \[0, 1\), got 1\.0",
    ),
    (
        "dropout_p < 0",
        dict(dropout_p=-0.5),
        ValueError,
        r"^dropout_p: expected a probability in \[0, 1\), got -0\.5",
    ),
    (
        "impl",
        dict(impl="flash"),
        ValueError,
        r"^impl: expected one of auto, reference, sdpa, chunked, step, got 'flash'",
    ),
    (
        "sdpa weights",
        dict(impl="sdpa", need_weights=True),
        ValueError,
        r"^impl='sdpa' cannot serve this call: need_weights=True",
    ),
    (
        "step many queries",
        dict(impl="step"),
        ValueError,
        rf"^impl='step' cannot serve this call: {TQ} queries per row; the step takes one",
    ),
    ("window", dict(window=(2, -1)), ValueError, r"^window: expected non-negative sizes"),
    ("window type", dict(window=2), TypeError, r"^window: expected a pair of ints"),
    (
        "key_lengths",
        dict(key_lengths=torch.tensor([1.0, 2.0])),
        TypeError,
        r"^key_lengths: expected an integer tensor",
    ),
    ("key_mask", dict(key_mask=torch.ones(B, TK)), TypeError, r"^key_mask: expected a bool tensor"),
    (
        "positions",
        dict(positions=torch.zeros(B, TQ, dtype=LONG)),
        ValueError,
        r"^positions: only used with causal=True",
    ),
]


@pytest.mark.parametrize(
    "kwargs, exc, match", [c[1:] for c in FUNCTIONAL_ERRORS], ids=[c[0] for c in FUNCTIONAL_ERRORS]
)
def test_functional_rejects(kwargs, exc, match):
    query, key = _inputs()
    with pytest.raises(exc, match=match):
        attend(query, key, **kwargs)


def test_functional_checks_tensors():
    query, key = _inputs()
    with pytest.raises(ValueError, match=r"^key: expected feature size key_dim = 8 .*\(2, 5, 6\)"):
        attend(query, key[..., :6])
    with pytest.raises(TypeError, match=r"^query: expected a torch.Tensor, got list"):
        attend(query.tolist(), key)
    with pytest.raises(TypeError, match=r"^key: expected dtype torch.float32"):
        attend(query, key.double())
    with pytest.raises(ValueError, match=r"^value: expected Tk \(from key\) = 5"):
        attend(query, key, key[:, :2])
    with pytest.raises(ValueError, match=r"^positions: a one-step query"):
        attend(query[:, 0], key, causal=True)
    # value may have its own feature size in the functional form.
    out = attend(query, key, torch.randn(B, TK, 3))
    assert out.context.shape == (B, TQ, 3)


# --------------------------------------------------------------------------------------------
# lengths_to_mask
# --------------------------------------------------------------------------------------------


def test_lengths_to_mask_valid_values():
    mask = lengths_to_mask(torch.tensor([0, 2, 3]), 3)
    expected = torch.tensor([[False, False, False], [True, True, False], [True, True, True]])
    assert torch.equal(mask, expected)
    assert torch.equal(
        lengths_to_mask(torch.tensor([1, 2])), torch.tensor([[True, False], [True, True]])
    )


@pytest.mark.parametrize(
    "lengths, max_len, exc, match",
    [
        (
            torch.tensor([1, 5]),
            3,
            ValueError,
            r"^lengths: expected values in \[0, 3\], got min 1 and max 5",
        ),
        (
            torch.tensor([4]),
            3,
            ValueError,
            r"^lengths: expected values in \[0, 3\], got min 4 and max 4",
        ),
        (
            torch.tensor([-1, 2]),
            3,
            ValueError,
            r"^lengths: expected values in \[0, 3\], got min -1 and max 2",
        ),
        (
            torch.tensor([-2, 2]),
            None,
            ValueError,
            r"^lengths: expected non-negative values, got min -2",
        ),
        (
            torch.tensor([1.0, 2.0]),
            3,
            TypeError,
            r"^lengths: expected an integer tensor, got .*torch.float32",
        ),
        (
            torch.tensor([1.0, 2.0], dtype=torch.float64),
            None,
            TypeError,
            r"^lengths: expected an integer tensor",
        ),
        (
            torch.tensor([True, False]),
            3,
            TypeError,
            r"^lengths: expected an integer tensor, got .*torch.bool",
        ),
        ([1, 2], 3, TypeError, r"^lengths: expected an integer torch.Tensor, got list"),
        (
            torch.tensor([[1, 2]]),
            3,
            ValueError,
            r"^lengths: expected a 1-D tensor, got tensor of shape \(1, 2\)",
        ),
        (torch.tensor([1, 2]), -1, ValueError, r"^max_len: expected a non-negative int, got -1"),
        (torch.tensor([1, 2]), 3.0, ValueError, r"^max_len: expected a non-negative int, got 3\.0"),
    ],
    ids=[
        "over",
        "over-single",
        "negative",
        "negative-default-max",
        "float",
        "float64-default-max",
        "bool",
        "list",
        "2-D",
        "max_len-negative",
        "max_len-float",
    ],
)
def test_lengths_to_mask_rejects(lengths, max_len, exc, match):
    with pytest.raises(exc, match=match):
        lengths_to_mask(lengths, max_len)


# --------------------------------------------------------------------------------------------
# SelfAttention
# --------------------------------------------------------------------------------------------


def _x(t=6, dim=8):
    torch.manual_seed(0)
    return torch.randn(B, t, dim)


def test_self_attention_rejects_wrong_feature_size():
    with pytest.raises(
        ValueError, match=r"^x: expected feature size dim = 8, got tensor of shape \(2, 6, 4\)"
    ):
        SelfAttention(8)(_x(dim=4))


def test_self_attention_rejects_bad_x():
    with pytest.raises(
        ValueError, match=r"^x: expected a 3-D tensor, got tensor of shape \(6, 8\)"
    ):
        SelfAttention(8)(_x()[0])
    with pytest.raises(TypeError, match=r"^x: expected a floating-point tensor"):
        SelfAttention(8)(_x().long())


def test_self_attention_rejects_lengths_of_wrong_batch_size():
    with pytest.raises(
        ValueError,
        match=r"^lengths: expected shape \(2,\) \(batch size\), got tensor of shape \(3,\)",
    ):
        SelfAttention(8)(_x(), torch.tensor([6, 5, 4]))
    # Time-major input: the batch is dim 1, so (T=6, B=2) needs 2 lengths, not 6.
    layer = SelfAttention(8, batch_first=False)
    with pytest.raises(ValueError, match=r"^lengths: expected shape \(2,\)"):
        layer(_x().transpose(0, 1), torch.arange(6))
    assert layer(_x().transpose(0, 1), torch.tensor([6, 3])).shape == (6, B, 8)


def test_self_attention_rejects_bad_lengths_values():
    with pytest.raises(TypeError, match=r"^lengths: expected an integer tensor"):
        SelfAttention(8)(_x(), torch.tensor([6.0, 3.0]))
    with pytest.raises(ValueError, match=r"^lengths: expected a 1-D tensor"):
        SelfAttention(8)(_x(), torch.tensor([[6, 3]]))
    with pytest.raises(
        ValueError, match=r"lengths: expected values in \[0, 6\], got min 3 and max 7"
    ):
        SelfAttention(8)(_x(), torch.tensor([7, 3]))


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        (
            (8, 4),
            dict(combine="residual"),
            r"^out_dim: combine='residual' adds to the input and needs out_dim == dim = 8, got 4",
        ),
        ((8, 16), dict(combine="residual"), r"^out_dim: combine='residual' .*got 16"),
        ((8,), dict(combine="sum"), r"^combine: expected one of concat, residual, got 'sum'"),
        ((8,), dict(combine=None), r"^combine: expected one of concat, residual, got None"),
        ((0,), {}, r"^dim: expected a positive int, got 0"),
        ((8, 0), {}, r"^out_dim: expected a positive int, got 0"),
        ((8,), dict(score="nope"), r"^score: expected one of"),
        ((8,), dict(heads=3), r"^heads: 3 does not divide query_dim=8"),
        ((8,), dict(window=(-1, 1)), r"^window: expected non-negative sizes"),
        ((8,), dict(dropout=1.0), r"^dropout: expected a probability"),
    ],
    ids=[
        "residual-smaller",
        "residual-larger",
        "combine-unknown",
        "combine-none",
        "dim-0",
        "out_dim-0",
        "score",
        "heads",
        "window",
        "dropout",
    ],
)
def test_self_attention_constructor_rejects(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        SelfAttention(*args, **kwargs)


@pytest.mark.parametrize("kwargs", [dict(location_kernel=3), dict(key_dim=4), dict(bogus=1)])
def test_self_attention_refuses_arguments_it_does_not_pass_on(kwargs):
    (name,) = kwargs
    with pytest.raises(
        TypeError,
        match=rf"^{name}: not an argument of SelfAttention \(it passes "
        r"on attn_dim, heads, head_dim, window, causal, dropout, "
        r"impl to Attention\)",
    ):
        SelfAttention(8, **kwargs)


def test_self_attention_passes_its_attention_arguments_on():
    layer = SelfAttention(
        8,
        score="additive",
        attn_dim=6,
        heads=2,
        head_dim=3,
        window=(1, 2),
        causal=True,
        dropout=0.25,
        impl="chunked",
    )
    attn = layer.attention
    assert (attn.score.name, attn.score.v.shape, attn.heads, attn.head_dim) == (
        "additive",
        (2, 6),
        2,
        3,
    )
    assert (attn.window, attn.causal, attn.dropout, attn.impl) == ((1, 2), True, 0.25, "chunked")


def test_self_attention_valid_combines_and_padding():
    x, lengths = _x(), torch.tensor([6, 2])
    out = SelfAttention(8, 5)(x, lengths)
    assert out.shape == (B, 6, 5)
    assert out[1, 2:].eq(0).all() and out[1, :2].ne(0).any()
    out = SelfAttention(8, 8, combine="residual")(x, lengths)
    assert out.shape == (B, 6, 8)
    assert out[1, 2:].eq(0).all()


def test_prepare_validates_values_and_dtypes():
    attn = Attention(8, 8, 6, score="additive")
    key = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"^value: expected batch size B \(from key\) = 2"):
        attn.prepare(key, torch.randn(3, 5, 6))
    with pytest.raises(ValueError, match=r"^value: expected Tk \(from key\) = 5"):
        attn.prepare(key, torch.randn(2, 7, 6))
    with pytest.raises(
        ValueError,
        match=r"^value \(defaults to key\): expected feature size "
        r"value_dim = 6",
    ):
        attn.prepare(key)
    with pytest.raises(TypeError, match=r"^key: dtype torch.float64 differs from the module's"):
        attn.prepare(key.double(), torch.randn(2, 5, 6).double())
    memory = attn.prepare(key, torch.randn(2, 5, 6))
    q = torch.randn(2, 8)
    assert attn.plan(q, memory).impl == ("step" if native.available() else "chunked")
    attn.double()
    with pytest.raises(
        ValueError, match="^key: the Memory was prepared for torch.float32.*prepare it again"
    ):
        attn(q.double(), memory)
