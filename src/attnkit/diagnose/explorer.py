"""The alignment explorer: one self-contained HTML page of decoded examples and their attention.

Per example the page shows the input (its text, and a line image or spectrogram under the
keys), the n-best hypotheses side by side with their scores, the attention of the chosen one as
a heat-map with the weight under the pointer, one map per layer and head where the model has
several, the input's maps over itself (an encoder's self-attention) beside them, and a
token-by-token step through the alignment. When the keys are the cells of a grid over a
picture (an image captioner's or a VQA model's), the page also draws the picture with the
attention of the output on show laid over it (the weight of the cell under the pointer
printed), and one small panel per output. Nothing is fetched: the script, the style and the
images (PNG data URIs) are inline, and the weights travel as 16-bit fixed point
(``round(w * 65535)``, base64), each row from its first to its last non-zero value (a window's
band costs its width, not the input's), decoded in the browser only for the example on show.
Heat-maps are drawn on a ``<canvas>`` one pixel per cell and scaled, so 800-step inputs and
hundreds of examples stay responsive.

Example:
    >>> import numpy as np
    >>> hyp = Hypothesis(["a", "b"], {"attention": np.full((2, 3), 1 / 3)}, score=-0.5)
    >>> page = explorer_html([Example(["x", "y", "z"], [hyp], text="x y z")])
    >>> page.startswith("<!DOCTYPE html>") and "http" not in page.split("<script")[0]
    True
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from PIL import Image

__all__ = ["Example", "Hypothesis", "explorer_html", "write_explorer"]

# The page, its style and its script: package data files (static/explorer.html, .css, .js),
# inlined into every page written.
_STATIC = resources.files("attnkit.diagnose") / "static"


@dataclass(frozen=True)
class Hypothesis:
    """One output: its ``tokens`` (``T`` labels, EOS included when it was decoded), its
    attention ``maps`` (name -> weights ``(T, S)``, e.g. ``{"attention": w}`` or
    ``{"layer 1 / head 2": w, ...}``), its model ``score`` (None when there is none) and, when
    the tokens are not the output itself, its ``text`` (a VQA model's answer, whose ``T``
    rows are the attention hops)."""

    tokens: Sequence[str]
    maps: Mapping[str, object]
    score: float | None = None
    text: str | None = None


@dataclass(frozen=True)
class Example:
    """One input: the labels of its ``S`` keys (``source``), its ``hypotheses`` best first,
    a ``name``, the input as ``text``, an optional ``reference`` (or several) and an optional
    ``image``; ``input_maps``: maps of the input over itself (name -> weights ``(S, S)``,
    queries down, e.g. ``{"encoder self-attention": w}``), offered after every hypothesis's
    maps.

    Without ``grid``, the image is ``(height, width)`` (a line image, or a spectrogram with
    its lowest band in the last row), drawn under the keys, its width spread over the ``S``
    columns. With ``grid = (rows, cols)``, the keys are the ``rows * cols = S`` cells of a
    grid over the image (row-major, as :class:`attnkit.models.grid.GridEncoder` orders
    them), an RGB picture ``(height, width, 3)`` (uint8, or float in ``[0, 1]``) over which
    the page draws each output's map.
    """

    source: Sequence[str]
    hypotheses: Sequence[Hypothesis]
    name: str = ""
    text: str = ""
    reference: str | Sequence[str] | None = None
    image: object = field(default=None, repr=False)
    grid: tuple[int, int] | None = None
    input_maps: Mapping[str, object] = field(default_factory=dict, repr=False)


def _array(x, name: str, shape: tuple[int, int] | None = None) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().float().cpu().numpy()
    arr = np.asarray(x, dtype=np.float32)
    if arr.ndim != 2 or (shape is not None and arr.shape != shape):
        expected = f"shape {shape}" if shape is not None else "a 2-D array"
        raise ValueError(f"{name}: expected {expected}, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(
            f"{name}: expected finite values, got "
            f"{int((~np.isfinite(arr)).sum())} NaN or infinite entries"
        )
    return arr


def _weights(w, name: str, shape: tuple[int, int]) -> str:
    """Weights ``(T, S)`` in [0, 1] as base64 of ``round(w * 65535)`` row by row from each
    row's first to its last non-zero value: ``T`` pairs (first column, count) as
    little-endian uint32, then the rows' values as little-endian uint16."""
    arr = _array(w, name, shape)
    fixed = np.round(np.clip(arr, 0.0, 1.0) * 65535).astype("<u2")  # (T, S)
    nonzero = fixed != 0
    seen = nonzero.any(1)
    first = np.where(seen, nonzero.argmax(1), 0)
    end = np.where(seen, shape[1] - nonzero[:, ::-1].argmax(1), 0)
    cols = np.arange(shape[1])
    kept = fixed[(cols >= first[:, None]) & (cols < end[:, None])]  # row-major: row by row
    header = np.stack([first, end - first], axis=1).astype("<u4")  # (T, 2)
    return base64.b64encode(header.tobytes() + kept.tobytes()).decode("ascii")


def _data_uri(pixels: np.ndarray) -> str:
    """A PNG data URI of uint8 ``pixels`` ``(height, width)`` or ``(height, width, 3)``."""
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _png(image, name: str) -> str:
    """A grey-scale PNG data URI of ``image`` ``(height, width)``, scaled to its range."""
    arr = _array(image, name)
    lo, hi = float(arr.min()), float(arr.max())
    return _data_uri(((arr - lo) / (hi - lo if hi > lo else 1.0) * 255).astype(np.uint8))


def _rgb_png(image, name: str) -> tuple[str, float]:
    """A PNG data URI of an RGB ``image`` ``(height, width, 3)`` (uint8, or float in
    ``[0, 1]``) and its aspect ratio ``height / width``."""
    if isinstance(image, torch.Tensor):
        image = image.detach().cpu().numpy()
    arr = np.asarray(image)
    if arr.ndim != 3 or arr.shape[-1] != 3 or 0 in arr.shape:
        raise ValueError(
            f"{name}: expected an RGB picture (height, width, 3) for a grid, got shape {arr.shape}"
        )
    if arr.dtype != np.uint8:
        arr = _array(arr.reshape(arr.shape[0], -1), name).reshape(arr.shape)
        arr = np.round(np.clip(arr, 0.0, 1.0) * 255).astype(np.uint8)
    return _data_uri(arr), arr.shape[0] / arr.shape[1]


def _grid(ex: Example, where: str) -> dict:
    """The page's ``grid`` entry of an example with one: its rows, columns, picture and
    aspect ratio."""
    assert ex.grid is not None  # the caller draws a grid only for examples with one
    rows, cols = ex.grid
    if not all(isinstance(n, int) and n > 0 for n in ex.grid) or rows * cols != len(ex.source):
        raise ValueError(
            f"{where}.grid: expected (rows, cols) of positive ints with rows * "
            f"cols = len(source) = {len(ex.source)}, got {ex.grid!r}"
        )
    if ex.image is None:
        raise ValueError(f"{where}.image: expected the picture the grid lies over, got None")
    uri, aspect = _rgb_png(ex.image, f"{where}.image")
    return {"rows": rows, "cols": cols, "image": uri, "aspect": aspect}


def _example_json(n: int, ex: Example) -> dict:
    where = f"examples[{n}]"
    if not ex.hypotheses:
        raise ValueError(f"{where}.hypotheses: expected at least one, got none")
    hyps = []
    for k, hyp in enumerate(ex.hypotheses):
        if not hyp.maps:
            raise ValueError(f"{where}.hypotheses[{k}].maps: expected at least one map, got none")
        shape = (len(hyp.tokens), len(ex.source))
        hyps.append(
            {
                "tokens": [str(t) for t in hyp.tokens],
                "score": None if hyp.score is None else float(hyp.score),
                "text": None if hyp.text is None else str(hyp.text),
                "maps": [
                    {
                        "name": str(name),
                        "w": _weights(w, f"{where}.hypotheses[{k}].maps[{name!r}]", shape),
                    }
                    for name, w in hyp.maps.items()
                ],
            }
        )
    reference = (
        ex.reference
        if ex.reference is None or isinstance(ex.reference, str)
        else [str(r) for r in ex.reference]
    )
    grid = None if ex.grid is None else _grid(ex, where)
    square = (len(ex.source), len(ex.source))
    return {
        "name": ex.name or f"example {n + 1}",
        "text": ex.text,
        "reference": reference,
        "source": [str(s) for s in ex.source],
        "hyps": hyps,
        "grid": grid,
        "inputMaps": [
            {"name": str(name), "w": _weights(w, f"{where}.input_maps[{name!r}]", square)}
            for name, w in ex.input_maps.items()
        ],
        "image": None if ex.image is None or grid else _png(ex.image, f"{where}.image"),
    }


def explorer_html(examples: Sequence[Example], *, title: str = "attnkit explore") -> str:
    """The explorer page of ``examples`` as one HTML string.

    Raises:
        ValueError: no example, an example without hypotheses or maps, or a map whose shape
            is not ``(len(tokens), len(source))`` (an input map: ``(len(source),
            len(source))``) or holds NaN, naming the example and map.
    """
    if not examples:
        raise ValueError("examples: expected at least one example, got none")
    data = {"title": title, "examples": [_example_json(n, ex) for n, ex in enumerate(examples)]}
    # "<" escaped so that no string in the data can close the <script> element
    payload = json.dumps(data, ensure_ascii=False).replace("<", "\\u003c")
    page, style, script = (
        _STATIC.joinpath(f"explorer.{kind}").read_text(encoding="utf-8")
        for kind in ("html", "css", "js")
    )
    return (
        page.replace("__TITLE__", html.escape(title))
        .replace("__STYLE__", style)
        .replace("__SCRIPT__", script)
        .replace("__DATA__", payload)
    )


def write_explorer(
    examples: Sequence[Example], path: str | Path, *, title: str = "attnkit explore"
) -> Path:
    """Write :func:`explorer_html` to ``path`` (folders created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(explorer_html(examples, title=title), encoding="utf-8")
    return path
