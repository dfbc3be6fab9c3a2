"""Export to ONNX: a model's encoder and one decoder step as graphs, and a JSON that says how
to decode with them (:func:`export_onnx`; ``attnkit export``; docs/deploy.md)."""

from attnkit.export.writer import (DEFAULT_OPSET, ENCODER_FILE, EXPORTER, JSON_FILE, OPSETS,
                                   STEP_FILE, export_graph, export_onnx)

__all__ = ["DEFAULT_OPSET", "ENCODER_FILE", "EXPORTER", "JSON_FILE", "OPSETS", "STEP_FILE",
           "export_graph", "export_onnx"]
