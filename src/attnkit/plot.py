"""Attention pictures (matplotlib, drawn off-screen with the Agg canvas)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

__all__ = ["plot_attention"]


def _as_2d_array(weights) -> np.ndarray:
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().float().cpu().numpy()
    arr = np.asarray(weights, dtype=np.float32)
    if arr.ndim != 2:
        raise ValueError(f"weights: expected a 2-D (Tq, Tk) array, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"weights: expected finite values, got {int((~np.isfinite(arr)).sum())} "
                         "NaN or infinite entries")
    return arr


def plot_attention(
    weights,
    x_labels: Sequence[str] | None,
    y_labels: Sequence[str] | None,
    path: str | Path,
    *,
    x_len: int | None = None,
    y_len: int | None = None,
    title: str | None = None,
    x_title: str = "source (keys)",
    y_title: str = "output (queries)",
) -> Path:
    """Draw a labelled heat-map of one example's attention weights, cropped to its true lengths.

    Args:
        weights: ``(Tq, Tk)`` tensor or array (one example, padded or not).
        x_labels: labels of the first ``x_len`` keys (columns), or None.
        y_labels: labels of the first ``y_len`` queries (rows), or None.
        path: output image file (PNG, PDF or SVG by extension); parent folders are created.
        x_len, y_len: true lengths; default ``len(x_labels)`` / ``len(y_labels)``, else the
            full size.

    Returns:
        The path written.
    """
    arr = _as_2d_array(weights)
    tq, tk = arr.shape
    x_len = _crop_len("x", x_labels, x_len, tk)
    y_len = _crop_len("y", y_labels, y_len, tq)
    arr = arr[:y_len, :x_len]

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    width = min(2.0 + 0.28 * x_len, 40.0)
    height = min(1.5 + 0.28 * y_len, 40.0)
    fig = Figure(figsize=(max(width, 3.0), max(height, 2.5)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(arr, aspect="auto", cmap="viridis", vmin=0.0, vmax=max(float(arr.max()), 1e-6))
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    for axis, labels, n in ((ax.xaxis, x_labels, x_len), (ax.yaxis, y_labels, y_len)):
        if labels is not None and n <= 120:
            axis.set_ticks(range(n))
            axis.set_ticklabels([str(s) for s in labels[:n]])
    if x_labels is not None and x_len <= 120:
        ax.tick_params(axis="x", labelrotation=90)
    ax.set_xlabel(x_title)
    ax.set_ylabel(y_title)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _crop_len(axis: str, labels, length: int | None, size: int) -> int:
    dim = "Tk keys" if axis == "x" else "Tq queries"
    if length is None:
        if labels is None:
            return size
        if not 0 < len(labels) <= size:
            raise ValueError(
                f"{axis}_labels: expected 1 to {size} labels (the weights have {size} {dim}), "
                f"got {len(labels)}"
            )
        return len(labels)
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)):
        raise ValueError(f"{axis}_len: expected an int in [1, {size}], got {length!r}")
    length = int(length)
    if not 0 < length <= size:
        raise ValueError(f"{axis}_len: expected an int in [1, {size}], got {length!r}")
    if labels is not None and len(labels) < length:
        raise ValueError(
            f"{axis}_labels: expected at least {axis}_len = {length} labels, got {len(labels)}"
        )
    return length
