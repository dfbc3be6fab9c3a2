"""Attention in export mode: every score traces with torch.export, and its ONNX graph run by
onnxruntime equals PyTorch on other sizes and padded keys."""

import itertools

import numpy as np
import pytest
import torch

from attnkit import Attention
from attnkit.attention import SCORES, lengths_to_mask
from attnkit.ops import export_mode, exporting

ort = pytest.importorskip(
    "onnxruntime", reason="onnxruntime is not installed: pip install 'attnkit[export]'"
)

from attnkit.export import export_graph  # noqa: E402

TOL = 1e-4  # float32
D = 8


def _attention(score: str, heads: int) -> Attention:
    torch.manual_seed(0)
    kw = {}
    if score in ("additive", "location"):
        kw["attn_dim"] = 6
    if score == "location":
        kw.update(location_filters=3, location_kernel=5)
    return Attention(D, score=score, heads=heads, **kw).eval()


class Call(torch.nn.Module):
    """``(query, key, key_lengths[, prev_weights]) -> (context, weights)``."""

    def __init__(self, attn: Attention):
        super().__init__()
        self.attn = attn

    def forward(self, query, key, key_lengths, prev_weights=None):
        out = self.attn(
            query, key, key_lengths=key_lengths, prev_weights=prev_weights, need_weights=True
        )
        return out.context, out.weights


def _inputs(attn: Attention, one_step: bool, b: int, tq: int, tk: int, lengths, seed=1):
    g = torch.Generator().manual_seed(seed)
    query = torch.randn((b, D) if one_step else (b, tq, D), generator=g)
    key = torch.randn(b, tk, D, generator=g)
    args = [query, key, torch.tensor(lengths)]
    if attn.score.needs_prev:
        shape = (b, *((attn.heads,) if attn.heads > 1 else ()), *(() if one_step else (tq,)), tk)
        args.append(torch.softmax(torch.randn(shape, generator=g), -1))
    return args


def _axes(attn: Attention, one_step: bool) -> dict:
    """name -> {dim: axis} of the inputs and outputs."""
    q = {0: "B"} if one_step else {0: "B", 1: "Tq"}
    axes = {"query": q, "key": {0: "B", 1: "Tk"}, "key_lengths": {0: "B"}}
    heads = attn.heads > 1  # weights (B, [H,] [Tq,] Tk)
    rows = {} if one_step else {1 + heads: "Tq"}
    weights = {0: "B", **rows, 1 + heads + (not one_step): "Tk"}
    if attn.score.needs_prev:
        axes["prev_weights"] = weights
    return {**axes, "context": q, "weights": weights}


CASES = list(itertools.product(SCORES, (1, 2), ("one-step", "full")))


@pytest.mark.parametrize("score,heads,query", CASES)
def test_onnx_graph_equals_pytorch(score, heads, query, tmp_path):
    attn, one_step = _attention(score, heads), query == "one-step"
    axes = _axes(attn, one_step)
    names = [n for n in axes if n not in ("context", "weights")]
    path = tmp_path / "attention.onnx"
    example = _inputs(attn, one_step, 2, 3, 5, [5, 3])
    export_graph(Call(attn), example, path, names, ["context", "weights"], list(axes.values()))
    session = ort.InferenceSession(str(path))
    # other sizes; padding, one fully padded row (zero context and weights, never NaN)
    args = _inputs(attn, one_step, 4, 6, 9, [9, 4, 0, 1], seed=2)
    got = session.run(None, {n: a.numpy() for n, a in zip(names, args)})
    with torch.no_grad():
        want = Call(attn)(*args)
    for g, w in zip(got, want):
        assert g.shape == tuple(w.shape)
        torch.testing.assert_close(torch.from_numpy(g), w, atol=TOL, rtol=0)
    assert float(want[0][2].abs().sum()) == 0 and float(want[1][2].abs().sum()) == 0
    assert float(want[0][0].abs().sum()) > 0  # not vacuous


@pytest.mark.parametrize(
    "score,heads,query", [c for c in CASES if (c[1], c[2]) in ((1, "one-step"), (2, "full"))]
)
def test_torch_export_traces_every_score(score, heads, query):
    """torch.export records the whole call (it refuses Python branches on tensor values) with
    dynamic batch and lengths; the program equals eager on other sizes."""
    attn, one_step = _attention(score, heads), query == "one-step"
    example = _inputs(attn, one_step, 2, 3, 5, [5, 3])
    dims = {a: torch.export.Dim(a, min=1) for a in ("B", "Tq", "Tk")}
    axes = _axes(attn, one_step)
    names = ["query", "key", "key_lengths", "prev_weights"][: len(example)]
    shapes = tuple({d: dims[a] for d, a in axes[n].items()} for n in names)
    with torch.no_grad():
        program = torch.export.export(Call(attn), tuple(example), dynamic_shapes=shapes)
        args = _inputs(attn, one_step, 3, 4, 7, [7, 2, 5], seed=3)
        for got, want in zip(program.module()(*args), Call(attn)(*args)):
            torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


def test_export_mode_takes_the_reference_path_and_says_why():
    query, key = torch.randn(2, 8), torch.randn(2, 5, 8)
    for impl in ("auto", "step", "chunked", "sdpa"):
        attn = Attention(8, score="scaled_dot" if impl == "sdpa" else "additive", impl=impl)
        with export_mode():
            assert exporting()
            plan = attn.plan(query, key, key_lengths=torch.tensor([5, 2]))
        assert plan.impl == "reference" and f"export mode (impl={impl!r})" in plan.reason
    assert not exporting()


def test_export_mode_skips_the_checks_that_read_lengths_only():
    lengths = torch.tensor([2, 7])
    with pytest.raises(ValueError, match=r"key_lengths: expected values in \[0, 5\]"):
        lengths_to_mask(lengths, 5, name="key_lengths")
    with export_mode():
        mask = lengths_to_mask(lengths, 5, name="key_lengths")  # not read: not checked
        assert mask.tolist() == [[True, True, False, False, False], [True] * 5]
        with pytest.raises(ValueError, match="max_len: required while exporting"):
            lengths_to_mask(lengths)
        with pytest.raises(TypeError, match="key_lengths: expected an integer tensor"):
            lengths_to_mask(lengths.float(), 5, name="key_lengths")


class Prepared(torch.nn.Module):
    """``(query (B, D), key, key_lengths) -> (context, weights)`` through a prepared Memory."""

    def __init__(self, attn: Attention):
        super().__init__()
        self.attn = attn

    def forward(self, query, key, key_lengths):
        out = self.attn(query, self.attn.prepare(key), key_lengths=key_lengths, need_weights=True)
        return out.context, out.weights


@pytest.mark.parametrize("score", ["additive", "scaled_dot"])
def test_an_exported_memory_checks_its_keys_once_in_the_graph(score, tmp_path):
    """Exported, ``prepare`` zeroes and marks the keys holding NaN or inf in the graph (as an
    eager one does by reading them): padding of NaN or inf changes nothing, a valid key of NaN
    gives its queries a NaN row."""
    attn = _attention(score, 1)
    path = tmp_path / "prepared.onnx"
    example = _inputs(attn, True, 2, 1, 5, [5, 3])
    export_graph(
        Prepared(attn),
        example,
        path,
        ["query", "key", "key_lengths"],
        ["context", "weights"],
        [{0: "B"}, {0: "B", 1: "Tk"}, {0: "B"}, {0: "B"}, {0: "B", 1: "Tk"}],
    )
    session = ort.InferenceSession(str(path))
    query, key, lengths = _inputs(attn, True, 3, 1, 6, [6, 4, 2], seed=2)
    with torch.no_grad():
        want = Prepared(attn)(query, key, lengths)
    key[1, 4], key[2, 2:] = float("nan"), float("inf")  # padding
    got = session.run(
        None, {"query": query.numpy(), "key": key.numpy(), "key_lengths": lengths.numpy()}
    )
    for g, w in zip(got, want):
        torch.testing.assert_close(torch.from_numpy(g), w, atol=TOL, rtol=0)
    key[0, 1, 0] = float("nan")  # a valid key
    context, weights = session.run(
        None, {"query": query.numpy(), "key": key.numpy(), "key_lengths": lengths.numpy()}
    )
    assert np.isnan(context[0]).all() and np.isnan(weights[0]).all()
    torch.testing.assert_close(torch.from_numpy(context[1:]), want[0][1:], atol=TOL, rtol=0)
