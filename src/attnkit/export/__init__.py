"""Export to ONNX: a model's encoder and one decoder step as graphs, a JSON that says how to
decode with them, and a numpy-only runner that does (:func:`export_onnx`; ``attnkit export``;
docs/deploy.md); and a translation Transformer as a CTranslate2 model
(:func:`export_ctranslate2`); a model card drafted from a checkpoint (:func:`write_card`)."""

from attnkit.export.card import CARD, write_card
from attnkit.export.ctranslate2_format import export_ctranslate2
from attnkit.export.session import ExportedModel, is_export, read_export
from attnkit.export.writer import (
    DEFAULT_OPSET,
    ENCODER_FILE,
    EXPORTER,
    JSON_FILE,
    OPSETS,
    RUNNER_FILE,
    STEP_FILE,
    check_out,
    decoding_json,
    export_graph,
    export_onnx,
)

__all__ = [
    "CARD",
    "DEFAULT_OPSET",
    "ENCODER_FILE",
    "EXPORTER",
    "JSON_FILE",
    "OPSETS",
    "RUNNER_FILE",
    "STEP_FILE",
    "ExportedModel",
    "check_out",
    "export_ctranslate2",
    "decoding_json",
    "export_graph",
    "export_onnx",
    "is_export",
    "read_export",
    "write_card",
]
