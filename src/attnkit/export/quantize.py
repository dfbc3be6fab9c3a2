"""int8 weights for an exported graph (``attnkit export --quantize int8``).

Two kinds, by what onnxruntime runs fastest on a CPU:

- **Dynamic quantisation** (onnxruntime's ``quantize_dynamic``) of the operators in
  :data:`DYNAMIC_OPS` (but not the per-head products of :func:`per_head_products`): matrix
  multiplications and LSTMs compute in int8 (the activations are
  quantised on the fly, one scale per tensor), and embedding tables (``Gather`` of a weight)
  are looked up in int8 and the rows dequantised. The weights take 7 bits (``reduce_range``):
  on x86 CPUs without VNNI, onnxruntime multiplies uint8 activations by int8 weights with
  ``vpmaddubsw``, which adds pairs of products in int16 and saturates with full-range weights
  (a small GRU-and-linear graph was off by 20% of its outputs' range with 8 bits, by 1% with 7).
- **Weight-only int8** for the operators in :data:`WEIGHT_ONLY`: their weights are stored as
  int8 with one scale per output channel (symmetric, zero point 0) and a ``DequantizeLinear``
  node turns them back into float32 as the graph runs, so they compute in float32. onnxruntime
  has no dynamically quantised GRU, and its ``ConvInteger`` ran the OCR encoder 2.2 times slower
  than float32 on an AVX2 CPU; dequantising a weight costs one pass over it per run.

The weight-only rounding error of a weight is at most half its channel's step
``max |w| / 127``.

A session should be made with :data:`SESSION_CONFIG` (``attnkit.json``'s ``session_config``):
with onnxruntime's QDQ handling on (its default), the ``DequantizeLinear`` of a constant weight
is not folded when the graph loads; the weight is dequantised at every run, and a convolution
whose weight is not a constant loses its prepacked layout (the OCR encoder ran 1.2-1.5 times
slower than float32). With the entry, the weights are dequantised once, at load: the file holds
int8, the session's memory float32.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

__all__ = [
    "DYNAMIC_OPS",
    "MIN_WEIGHT_ONLY",
    "SESSION_CONFIG",
    "WEIGHT_ONLY",
    "per_head_products",
    "quantize_int8",
    "weight_only_int8",
]

DYNAMIC_OPS = ("MatMul", "Gemm", "LSTM", "Gather")
# operator -> (the inputs holding weights, the axis of their output channels)
WEIGHT_ONLY = {"GRU": ((1, 2), 1), "Conv": ((1,), 0), "ConvTranspose": ((1,), 1)}
MIN_WEIGHT_ONLY = 256  # weights with fewer elements stay float32: their int8 saves nothing
# onnxruntime.SessionOptions.add_session_config_entry(key, value) for an int8 graph
SESSION_CONFIG = {"session.disable_quant_qdq": "1"}


def quantize_int8(path: str | Path) -> None:
    """Replace the ONNX graph at ``path`` by its int8 version (see the module's docstring).

    Needs ``onnxruntime`` (a ValueError says so when it is missing).
    """
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        raise ValueError("quantize: int8 needs onnxruntime: pip install onnxruntime") from None
    import onnx

    path = Path(path)
    quantized = path.with_name(f"{path.stem}.int8{path.suffix}")
    logging.disable(logging.WARNING)  # its notes on every tensor it leaves in float
    try:
        quantize_dynamic(
            path,
            quantized,
            weight_type=QuantType.QInt8,
            reduce_range=True,
            op_types_to_quantize=list(DYNAMIC_OPS),
            nodes_to_exclude=per_head_products(onnx.load(path)),
        )
    finally:
        logging.disable(logging.NOTSET)
    model = onnx.load(quantized)
    weight_only_int8(model)
    onnx.save(model, quantized)
    os.replace(quantized, path)


def per_head_products(model) -> list[str]:
    """The names of the ``MatMul`` nodes of ``model`` (an ``onnx.ModelProto``) whose constant
    operand is not a matrix: an attention score's per-head contraction with a broadcast weight
    (additive attention's ``v``, ``(H, 1, A, 1)``; the location term's ``(H, 1, F, A)``) over
    activations as large as the memory. Quantising those activations at every step costs more
    than the int8 product saves (a LAS decoder step ran slower), so they stay float32."""
    constants = {init.name: len(init.dims) for init in model.graph.initializer}
    return [
        node.name
        for node in model.graph.node
        if node.op_type == "MatMul" and any(constants.get(name, 2) != 2 for name in node.input)
    ]


def weight_only_int8(model) -> int:
    """Store the float32 weights of :data:`WEIGHT_ONLY`'s operators in ``model`` (an
    ``onnx.ModelProto``, changed in place) as int8 with a scale per output channel, each read
    through a ``DequantizeLinear`` node. A weight is left as it is when it has fewer than
    :data:`MIN_WEIGHT_ONLY` elements or when another node reads it too.

    Returns:
        How many weights were quantised.
    """
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    initializers = {init.name: init for init in graph.initializer}
    dequantize = []
    for node in graph.node:
        if node.op_type not in WEIGHT_ONLY:
            continue
        slots, axis = WEIGHT_ONLY[node.op_type]
        for slot in slots:
            if slot >= len(node.input) or node.input[slot] not in initializers:
                continue
            name = node.input[slot]
            init = initializers[name]
            if (
                init.data_type != TensorProto.FLOAT
                or readers[name] != 1
                or np.prod(init.dims) < MIN_WEIGHT_ONLY
            ):
                continue
            weight = numpy_helper.to_array(init)
            q, scale = _symmetric_int8(weight, axis)
            graph.initializer.remove(init)
            graph.initializer.extend(
                [
                    numpy_helper.from_array(q, f"{name}_int8"),
                    numpy_helper.from_array(scale, f"{name}_int8_scale"),
                    numpy_helper.from_array(
                        np.zeros_like(scale, dtype=np.int8), f"{name}_int8_zero_point"
                    ),
                ]
            )
            dequantize.append(
                helper.make_node(
                    "DequantizeLinear",
                    [f"{name}_int8", f"{name}_int8_scale", f"{name}_int8_zero_point"],
                    [name],
                    axis=axis,
                    name=f"{name}_dequantize",
                )
            )
    # the weights are graph inputs of their readers: dequantising them first keeps the order
    for position, node in enumerate(dequantize):
        graph.node.insert(position, node)
    return len(dequantize)


def _symmetric_int8(weight: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """``weight`` as int8 in [-127, 127] and its float32 scale per index of ``axis``
    (a channel of zeros gets scale 1)."""
    others = tuple(d for d in range(weight.ndim) if d != axis)
    peak = np.abs(weight).max(axis=others)
    scale = np.where(peak > 0, peak / 127, 1.0).astype(np.float32)
    shape = [1] * weight.ndim
    shape[axis] = -1
    q = np.clip(np.rint(weight / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale
