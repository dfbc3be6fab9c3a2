"""int8 weights of an exported graph (attnkit/export/quantize.py): the weight-only int8 of
convolutions and GRUs on a small graph traced from PyTorch, against the float32 graph and
against the bound on its rounding. Whole models are tested in tests/cli/test_export.py."""

import numpy as np
import pytest
import torch

from attnkit.export.quantize import per_head_products, quantize_int8, weight_only_int8

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
numpy_helper = onnx.numpy_helper


class ConvGRU(torch.nn.Module):
    """(B, C, T) -> conv -> GRU -> linear: (B, T, 5); a second, tiny conv (fewer weights than
    MIN_WEIGHT_ONLY) and a GRU, a conv and a linear layer of real size."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(8, 16, 3, padding=1)
        self.tiny = torch.nn.Conv1d(16, 2, 1)
        self.gru = torch.nn.GRU(18, 24, batch_first=True, bidirectional=True)
        self.out = torch.nn.Linear(48, 5)

    def forward(self, x):
        h = torch.relu(self.conv(x))
        h = torch.cat([h, self.tiny(h)], dim=1).transpose(1, 2)
        return self.out(self.gru(h)[0])


def _export(tmp_path):
    torch.manual_seed(0)
    model = ConvGRU().eval()
    path = tmp_path / "graph.onnx"
    x = torch.randn(2, 8, 11)
    with torch.no_grad():
        torch.onnx.export(
            model,
            (x,),
            str(path),
            dynamo=False,
            input_names=["x"],
            output_names=["y"],
            dynamic_axes={"x": {0: "B", 2: "T"}},
        )
    return model, path


def _run(path, x):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _float_weights(path) -> dict:
    return {
        i.name: numpy_helper.to_array(i)
        for i in onnx.load(path).graph.initializer
        if i.data_type == onnx.TensorProto.FLOAT
    }


def test_conv_and_gru_weights_are_stored_as_int8_within_half_a_step(tmp_path):
    _, path = _export(tmp_path)
    before = _float_weights(path)
    model = onnx.load(path)
    assert weight_only_int8(model) == 3  # the conv's weight, the GRU's W and R; not the tiny conv
    stored = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    dequantized = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    assert len(dequantized) == 3
    for node in dequantized:
        name = node.output[0]
        q, scale, zero = (stored[n] for n in node.input)
        axis = next(a.i for a in node.attribute if a.name == "axis")
        assert q.dtype == np.int8 and not zero.any() and name not in stored
        shape = [1] * q.ndim
        shape[axis] = -1
        error = np.abs(q * scale.reshape(shape) - before[name])
        assert (error <= scale.reshape(shape) / 2 + 1e-7).all()
        # one scale per output channel: the largest weight of each channel is +-127
        others = tuple(d for d in range(q.ndim) if d != axis)
        assert (np.abs(q).max(axis=others) == 127).all()
    tiny = [
        i
        for i in model.graph.initializer
        if i.data_type == onnx.TensorProto.FLOAT and tuple(i.dims) == (2, 16, 1)
    ]
    assert len(tiny) == 1  # left in float32


def test_quantized_graph_computes_what_the_float_one_does_at_a_fraction_of_the_size(tmp_path):
    model, path = _export(tmp_path)
    x = np.random.default_rng(0).standard_normal((3, 8, 17)).astype(np.float32)
    expected = _run(path, x)
    size = path.stat().st_size
    quantize_int8(path)
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert {"DequantizeLinear", "GRU", "Conv"} <= ops
    assert ops & {"MatMulInteger", "DynamicQuantizeMatMul"}  # the linear layer: dynamic
    assert path.stat().st_size < 0.5 * size
    got = _run(path, x)
    assert got.shape == expected.shape == (3, 17, 5)
    assert np.abs(got - expected).max() < 0.05 * np.abs(expected).max()
    with torch.no_grad():
        torch_out = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(expected, torch_out, atol=1e-5)


def test_a_weight_another_node_reads_too_stays_float(tmp_path):
    _, path = _export(tmp_path)
    model = onnx.load(path)
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    model.graph.node.append(onnx.helper.make_node("Identity", [conv.input[1]], ["shared"]))
    model.graph.output.append(
        onnx.helper.make_tensor_value_info("shared", onnx.TensorProto.FLOAT, None)
    )
    assert weight_only_int8(model) == 2  # the GRU's W and R only
    assert conv.input[1] in _float_weights_of(model)


def _float_weights_of(model) -> set:
    return {i.name for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT}


def test_per_head_products_of_attention_stay_float(tmp_path):
    """An additive score's contraction with ``v (H, 1, A, 1)`` is a MatMul of a 4-D constant:
    left float32, while the layer's 2-D weight is quantised."""
    helper = onnx.helper
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["B", 1, "S", 6])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    weights = [
        numpy_helper.from_array(
            np.random.default_rng(0).standard_normal(shape).astype(np.float32), name
        )
        for name, shape in (("w", (6, 32)), ("v", (1, 1, 32, 1)))
    ]
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="layer"),
            helper.make_node("Tanh", ["h"], ["t"], name="tanh"),
            helper.make_node("MatMul", ["t", "v"], ["y"], name="score"),
        ],
        "g",
        [x],
        [y],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert per_head_products(model) == ["score"]
    path = tmp_path / "g.onnx"
    onnx.save(model, path)
    quantize_int8(path)
    ops = {n.name: n.op_type for n in onnx.load(path).graph.node}
    assert ops["score"] == "MatMul" and "layer" not in ops  # the layer's now runs in int8
    feed = {"x": np.random.default_rng(1).standard_normal((2, 1, 5, 6)).astype(np.float32)}
    got = ort.InferenceSession(str(path)).run(None, feed)[0]
    want = np.tanh(feed["x"] @ numpy_helper.to_array(weights[0])) @ numpy_helper.to_array(
        weights[1]
    )
    np.testing.assert_allclose(got, want, rtol=0.05, atol=0.1)  # 7-bit weights
