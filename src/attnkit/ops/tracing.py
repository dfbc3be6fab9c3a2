"""Export mode: attention as plain PyTorch operations, without reading tensor values in Python.

Exporters record the operations a call makes on tensors. A Python branch on a tensor's value
(``int(lengths.max())`` in an input check, ``bool(mask.all())`` in a path choice) is refused by
:func:`torch.export.export` and frozen at the example input's value by :func:`torch.jit.trace`
(which the TorchScript-based ONNX exporter runs); the C++ kernels of the step and chunked paths
are called through ctypes, which no exporter can record. While :func:`exporting` is true:

* every call takes the reference path (:mod:`attnkit.attention.reference`), whatever ``impl``
  asks for, and :class:`attnkit.attention.Plan` says why;
* the checks that read tensor values (lengths within ``[0, Tk]``) are skipped; those on shapes
  and dtypes stay.

:func:`exporting` is true inside :func:`export_mode`, under :func:`torch.jit.trace` and under
:func:`torch.export.export`, so exporting a module built with ``impl="auto"`` needs nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["export_mode", "exporting", "skips_padding", "values_readable"]

_depth = 0  # open export_mode() blocks


@contextmanager
def export_mode() -> Iterator[None]:
    """Make :func:`exporting` true inside the block (blocks nest).

    Example:
        >>> with export_mode():
        ...     exporting()
        True
        >>> exporting()
        False
    """
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1


def exporting() -> bool:
    """Whether attention calls are being exported: inside :func:`export_mode`, or while
    :func:`torch.jit.trace` or :func:`torch.export.export` records them."""
    return _depth > 0 or torch.jit.is_tracing() or torch.compiler.is_exporting()


def values_readable(x: torch.Tensor) -> bool:
    """Whether a check may read the values of ``x``: not while exporting (the graph would freeze
    them), and not on the meta device (its tensors have shapes and no values)."""
    return not exporting() and x.device.type != "meta"


def skips_padding(x: torch.Tensor) -> bool:
    """Whether layers take their padding-skipping paths for ``x`` (length groups, time
    segments, a packed CNN), which read lengths in Python: on CPU, and neither while
    exporting nor under ``torch.compile``, which need the one padded path."""
    return x.device.type == "cpu" and not exporting() and not torch.compiler.is_compiling()
