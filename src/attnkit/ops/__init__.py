"""The CPU machinery under attnkit's layers: not attention itself, but what makes it fast and
exportable.

- :mod:`~attnkit.ops.dense`: :func:`linear` / :class:`Linear`, dense layers on oneDNN on CPU
  float32 (``F.linear`` everywhere else), used by every model and attention module;
- :mod:`~attnkit.ops.native`, :mod:`~attnkit.ops.bindings`, ``csrc/``: the C++ additive-score
  kernels, built once per machine and called through ctypes;
- :mod:`~attnkit.ops.kernels`: the fused additive-score functions over those kernels (or
  ``torch.compile``), with their autograd;
- :mod:`~attnkit.ops.precision`: the dtype attention computes in, and autocast;
- :mod:`~attnkit.ops.tracing`: export mode, in which every path is plain PyTorch operations
  (:func:`export_mode`, :func:`exporting`) and padding-skipping paths are off
  (:func:`skips_padding`).
"""

from attnkit.ops.dense import Linear, linear
from attnkit.ops.tracing import export_mode, exporting, skips_padding

__all__ = ["Linear", "export_mode", "exporting", "linear", "skips_padding"]
