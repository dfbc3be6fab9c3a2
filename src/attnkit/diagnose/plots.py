"""Attention pictures (matplotlib, drawn off-screen with the Agg canvas)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import numpy as np
import numpy.typing as npt
import torch
from PIL import Image

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["plot_alignment", "plot_attention", "plot_image_attention"]

#: What the plots take for weights and images: a tensor (detached, moved to the CPU) or
#: anything :func:`numpy.asarray` reads.
ArrayOrTensor: TypeAlias = torch.Tensor | npt.ArrayLike


def _as_array(
    x: ArrayOrTensor, name: str = "weights", dims: str = "(Tq, Tk)"
) -> npt.NDArray[np.float32]:
    """``x`` as a float32 array with as many dims as ``dims`` names, all finite."""
    if isinstance(x, torch.Tensor):
        x = x.detach().float().cpu().numpy()
    arr = np.asarray(x, dtype=np.float32)
    ndim = dims.count(",") + 1
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D {dims} array, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(
            f"{name}: expected finite values, got {int((~np.isfinite(arr)).sum())} "
            "NaN or infinite entries"
        )
    return arr


def plot_attention(
    weights: ArrayOrTensor,
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
    arr = _as_array(weights)
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
    image = _weights_image(ax, arr)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    for axis, labels, n in ((ax.xaxis, x_labels, x_len), (ax.yaxis, y_labels, y_len)):
        if labels is not None and n <= 120:
            axis.set_ticks(range(n))
            axis.set_ticklabels([str(s) for s in labels[:n]])
    if x_labels is not None and x_len <= 120:
        ax.tick_params(axis="x", labelrotation=90)
    ax.set_xlabel(x_title)
    ax.set_ylabel(y_title)
    return _save(fig, path, dpi=110, title=title, over=ax)


def plot_alignment(
    weights: ArrayOrTensor,
    background: ArrayOrTensor,
    labels: Sequence[str] | None,
    path: str | Path,
    *,
    steps: int | None = None,
    marked: Sequence[int] | None = None,
    title: str | None = None,
    origin: Literal["upper", "lower"] = "upper",
    self_attention: ArrayOrTensor | None = None,
) -> Path:
    """Attention of output tokens over the input they were read from, drawn on that input.

    The top panel shows ``background`` (a text-line image, or a spectrogram with
    ``origin="lower"``) with the weights of the ``marked`` output tokens drawn over the
    columns they attend to, each labelled at its peak; the bottom panel is the full
    ``(tokens, steps)`` heat-map stretched to the same x axis (left out when there is no
    token). Attention step ``j`` of ``steps`` covers columns
    ``[j * W / steps, (j + 1) * W / steps)`` of the background. ``self_attention`` adds a
    panel under the background: the input's attention over itself, queries down and keys
    across on the same x axis.

    Args:
        weights: ``(Tq, S)`` tensor or array: one example's weights over ``S`` encoder steps.
        background: ``(Hb, W)``: the image (values in [0, 1], 1 = paper) or ``(F, W)`` features.
        labels: the ``Tq`` output tokens (or None).
        steps: the example's true number of encoder steps (default ``S``).
        marked: output positions drawn over the background (default: up to 8 spread evenly).
        origin: ``"upper"`` for images, ``"lower"`` for spectrograms.
        self_attention: ``(S, S)`` tensor or array (e.g. a CRNN's self-attention layer between
            its RNNs, mean over heads), cropped to ``steps``; or None.

    Returns:
        The path written.
    """
    arr = _as_array(weights)
    tq, s_all = arr.shape
    steps = _crop_len("x", None, steps, s_all)
    arr = arr[:, :steps]
    own = None
    if self_attention is not None:
        own = _as_array(self_attention, "self_attention", "(S, S)")
        if own.shape != (s_all, s_all):
            raise ValueError(
                f"self_attention: expected shape ({s_all}, {s_all}) (the "
                f"weights' S steps), got {own.shape}"
            )
        own = own[:steps, :steps]
    if labels is not None and len(labels) != tq:
        raise ValueError(f"labels: expected {tq} labels (one per output token), got {len(labels)}")
    bg = _as_array(background, "background", "(H, W)")
    if marked is None:
        marked = sorted(set(np.linspace(0, tq - 1, min(tq, 8)).round().astype(int).tolist()))
    bad = [m for m in marked if not 0 <= m < tq]
    if bad:
        raise ValueError(f"marked: expected output positions in [0, {tq}), got {bad}")

    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    h, w = bg.shape
    ratios = [1.2] + ([2.5] if own is not None else []) + ([max(1.0, 0.12 * tq)] if tq else [])
    fig = Figure(
        figsize=(
            min(max(6.0, w / 60), 40.0),
            2.5 + min(0.2 * tq, 12.0) + (3.0 if own is not None else 0.0),
        )
    )
    FigureCanvasAgg(fig)
    axes = list(
        fig.subplots(
            len(ratios), 1, sharex=True, squeeze=False, gridspec_kw={"height_ratios": ratios}
        )[:, 0]
    )
    top = axes[0]
    top.imshow(
        bg,
        cmap="gray" if origin == "upper" else "magma",
        aspect="auto",
        origin=origin,
        extent=(0, w, 0, h) if origin == "lower" else (0, w, h, 0),
    )
    centres = (np.arange(steps) + 0.5) * w / steps  # column of each encoder step
    colours = colormaps["tab10"]
    for k, m in enumerate(marked):
        row = arr[m] / max(float(arr[m].max()), 1e-9)
        colour = colours(k % 10)
        lo, hi = (h, h - row * h) if origin == "upper" else (0, row * h)
        top.fill_between(centres, lo, hi, color=colour, alpha=0.35, step="mid")
        peak = centres[int(arr[m].argmax())]
        text = labels[m] if labels is not None else str(m)
        top.annotate(
            str(text),
            (peak, h * (0.1 if origin == "upper" else 0.9)),
            color=colour,
            ha="center",
            fontsize=10,
            fontweight="bold",
        )
    top.set_yticks([])
    top.set_xlim(0, w)
    if own is not None:
        _weights_image(axes[1], own, (0, w, steps, 0))
        axes[1].set_ylabel("self-attention\n(query step)")
    if tq:
        _weights_image(axes[-1], arr, (0, w, tq, 0))
        axes[-1].set_ylabel("output")
    if labels is not None and 0 < tq <= 120:
        axes[-1].set_yticks(np.arange(tq) + 0.5)
        axes[-1].set_yticklabels([str(t) for t in labels])
    axes[-1].set_xlabel(f"input columns ({steps} attention steps)")
    return _save(fig, path, dpi=100, title=title, over=top)


def plot_image_attention(
    image: ArrayOrTensor,
    maps: ArrayOrTensor,
    labels: Sequence[str],
    path: str | Path,
    *,
    title: str | None = None,
    columns: int = 6,
) -> Path:
    """Attention over an image, one panel per map: the image first, then for each output
    (a caption's words, a question's hops) the image lit by its weights over the grid of
    image cells, upsampled (bilinear) to the image: bright where the output looked, dark
    elsewhere, labelled (as in the figures of Xu et al. 2015).

    Args:
        image: ``(3, H, W)`` or ``(H, W, 3)`` tensor or array, uint8 or float in ``[0, 1]``.
        maps: ``(N, h, w)``: the weights of ``N`` outputs over an ``h x w`` grid of cells
            (row-major over the image, as :class:`attnkit.models.grid.GridEncoder` orders
            them); each map is scaled to its own peak.
        labels: the ``N`` outputs.
        columns: panels per row.

    Returns:
        The path written.
    """
    if isinstance(image, torch.Tensor):
        image = image.detach().cpu().numpy()
    pixels = np.asarray(image)
    if pixels.ndim == 3 and pixels.shape[0] == 3 and pixels.shape[-1] != 3:
        pixels = pixels.transpose(1, 2, 0)  # (H, W, 3)
    if pixels.ndim != 3 or pixels.shape[-1] != 3:
        raise ValueError(
            f"image: expected a (3, H, W) or (H, W, 3) RGB image, got shape {pixels.shape}"
        )
    pixels = pixels.astype(np.float32) / (255.0 if pixels.dtype == np.uint8 else 1.0)
    maps = _as_array(maps, "maps", "(N, h, w)")
    if len(labels) != maps.shape[0]:
        raise ValueError(
            f"labels: expected {maps.shape[0]} labels (one per map), got {len(labels)}"
        )
    if not isinstance(columns, int) or columns < 1:
        raise ValueError(f"columns: expected a positive int, got {columns!r}")

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    h, w = pixels.shape[:2]
    panels = len(labels) + 1
    cols = min(columns, panels)
    rows = -(-panels // cols)
    fig = Figure(figsize=(2.0 * cols, 2.1 * rows + (0.4 if title else 0.0)))
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for k, ax in enumerate(axes):
        ax.set_axis_off()
        if k >= panels:
            continue
        if k == 0:
            ax.imshow(pixels, extent=(0, w, h, 0), interpolation="nearest")
            ax.set_title("image", fontsize=9)
            continue
        grid = maps[k - 1] / max(float(maps[k - 1].max()), 1e-9)  # (h, w), peak 1
        up = np.asarray(
            Image.fromarray(grid, "F").resize((w, h), Image.Resampling.BILINEAR)
        )  # (H, W)
        ax.imshow(
            pixels * (0.15 + 0.85 * up[..., None]), extent=(0, w, h, 0), interpolation="nearest"
        )
        ax.set_title(str(labels[k - 1]), fontsize=9)
    return _save(fig, path, dpi=100, title=title)


def _weights_image(
    ax: Axes, weights: np.ndarray, extent: tuple[float, float, float, float] | None = None
) -> Any:
    """Draw ``weights`` ``(rows, columns)`` on ``ax`` in viridis, from 0 to their largest (at
    least 1e-6), spanning ``extent`` (left, right, bottom, top; None: one cell a weight);
    returns the image (for a colour bar)."""
    return ax.imshow(
        weights,
        aspect="auto",
        cmap="viridis",
        extent=extent,
        vmin=0.0,
        vmax=max(float(weights.max()), 1e-6),
    )


def _save(
    fig: Figure, path: str | Path, *, dpi: int, title: str | None = None, over: Axes | None = None
) -> Path:
    """Title ``fig`` (when ``title``: over the axes ``over``, else over the whole figure), lay
    it out and write it to ``path`` (its folder made if needed)."""
    if title and over is not None:
        over.set_title(title)
    elif title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    return path


def _crop_len(axis: str, labels: Sequence[Any] | None, length: int | None, size: int) -> int:
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
