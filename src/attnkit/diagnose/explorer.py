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
from pathlib import Path

import numpy as np
import torch
from PIL import Image

__all__ = ["Example", "Hypothesis", "explorer_html", "write_explorer"]


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
        raise ValueError(f"{name}: expected finite values, got "
                         f"{int((~np.isfinite(arr)).sum())} NaN or infinite entries")
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
        raise ValueError(f"{name}: expected an RGB picture (height, width, 3) for a grid, got "
                         f"shape {arr.shape}")
    if arr.dtype != np.uint8:
        arr = _array(arr.reshape(arr.shape[0], -1), name).reshape(arr.shape)
        arr = np.round(np.clip(arr, 0.0, 1.0) * 255).astype(np.uint8)
    return _data_uri(arr), arr.shape[0] / arr.shape[1]


def _grid(ex: Example, where: str) -> dict:
    """The page's ``grid`` entry of an example with one: its rows, columns, picture and
    aspect ratio."""
    rows, cols = ex.grid
    if not all(isinstance(n, int) and n > 0 for n in ex.grid) or rows * cols != len(ex.source):
        raise ValueError(f"{where}.grid: expected (rows, cols) of positive ints with rows * "
                         f"cols = len(source) = {len(ex.source)}, got {ex.grid!r}")
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
        hyps.append({"tokens": [str(t) for t in hyp.tokens],
                     "score": None if hyp.score is None else float(hyp.score),
                     "text": None if hyp.text is None else str(hyp.text),
                     "maps": [{"name": str(name),
                               "w": _weights(w, f"{where}.hypotheses[{k}].maps[{name!r}]",
                                             shape)}
                              for name, w in hyp.maps.items()]})
    reference = (ex.reference if ex.reference is None or isinstance(ex.reference, str)
                 else [str(r) for r in ex.reference])
    grid = None if ex.grid is None else _grid(ex, where)
    square = (len(ex.source), len(ex.source))
    return {"name": ex.name or f"example {n + 1}", "text": ex.text, "reference": reference,
            "source": [str(s) for s in ex.source], "hyps": hyps, "grid": grid,
            "inputMaps": [{"name": str(name),
                           "w": _weights(w, f"{where}.input_maps[{name!r}]", square)}
                          for name, w in ex.input_maps.items()],
            "image": None if ex.image is None or grid else _png(ex.image, f"{where}.image")}


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
    return (_PAGE.replace("__TITLE__", html.escape(title))
            .replace("__STYLE__", _STYLE).replace("__SCRIPT__", _SCRIPT)
            .replace("__DATA__", payload))


def write_explorer(examples: Sequence[Example], path: str | Path, *,
                   title: str = "attnkit explore") -> Path:
    """Write :func:`explorer_html` to ``path`` (folders created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(explorer_html(examples, title=title), encoding="utf-8")
    return path


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>__STYLE__</style></head>
<body>
<header><h1>__TITLE__</h1>
<label>example <select id="example"></select></label>
<button id="prev-example">&larr;</button><button id="next-example">&rarr;</button>
<label>map <select id="map"></select></label>
</header>
<section id="input"><h2>input</h2><div id="text"></div><div id="reference"></div></section>
<section><h2>hypotheses</h2><div id="nbest"></div></section>
<section><h2>attention</h2>
<div id="plot"><canvas id="heatmap"></canvas><img id="image" alt="input"></div>
<div id="tip" role="status"></div>
</section>
<section><h2>step through</h2>
<button id="step-prev">&larr;</button>
<input id="step" type="range" min="0" max="0" value="0">
<button id="step-next">&rarr;</button>
<div id="step-text"></div><canvas id="stepbar" height="40"></canvas>
</section>
<section id="over"><h2>attention over the image</h2>
<div class="photo" id="photo"><img alt="input"><canvas id="overlay"></canvas></div>
<div id="photo-tip" role="status"></div>
<div id="panels"></div>
</section>
<script id="data" type="application/json">__DATA__</script>
<script>__SCRIPT__</script>
</body></html>
"""

_STYLE = """
body { font: 14px system-ui, sans-serif; margin: 1em; color: #222; background: #fff; }
header { display: flex; gap: 1em; align-items: center; flex-wrap: wrap; }
h1 { font-size: 18px; margin: 0; } h2 { font-size: 15px; margin: 1em 0 0.3em; }
#text, #reference { font-family: monospace; white-space: pre-wrap; overflow-wrap: anywhere; }
#nbest { display: flex; gap: 0.8em; flex-wrap: wrap; }
.hyp { border: 1px solid #bbb; padding: 0.4em; cursor: pointer; max-width: 260px; }
.hyp.chosen { border: 2px solid #c33; }
.hyp canvas { display: block; width: 240px; height: 90px; image-rendering: pixelated; }
.hyp .text { font-family: monospace; overflow-wrap: anywhere; }
#plot { position: relative; overflow: auto; max-height: 80vh; }
#heatmap { image-rendering: pixelated; display: block; }
#image { display: none; image-rendering: pixelated; height: 64px; }
#tip { font-family: monospace; min-height: 1.4em; }
#step { width: 50%; } #step-text { font-family: monospace; overflow-wrap: anywhere; }
#step-text b { background: #fd6; } #stepbar { display: block; }
#over { display: none; }
.photo { position: relative; }
.photo img, .photo canvas { position: absolute; left: 0; top: 0; width: 100%; height: 100%; }
.photo img { image-rendering: pixelated; }
#photo { width: 384px; cursor: crosshair; }
#photo-tip { font-family: monospace; min-height: 1.4em; }
#panels { display: flex; flex-wrap: wrap; gap: 0.5em; }
.panel { width: 112px; cursor: pointer; font-family: monospace; text-align: center; }
.panel .photo { width: 112px; } .panel.now { outline: 2px solid #06c; }
"""

_SCRIPT = r"""
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);
const $ = (id) => document.getElementById(id);
const MARGIN = { left: 90, top: 70 };
const view = { ex: 0, hyp: 0, map: 0, step: 0, cell: 1, weights: null, t: 0, s: 0 };
const decoded = new Map();

// a hypothesis's maps (rows: its tokens), then the input's maps over itself (rows: the input)
const mapsOf = (ex, hyp) =>
  DATA.examples[ex].hyps[hyp].maps.concat(DATA.examples[ex].inputMaps);
const isInputMap = (ex, hyp, map) => map >= DATA.examples[ex].hyps[hyp].maps.length;
const rowsOf = (ex, hyp, map) =>
  isInputMap(ex, hyp, map) ? DATA.examples[ex].source : DATA.examples[ex].hyps[hyp].tokens;

function weightsOf(ex, hyp, map) {  // (rows, S) from (first, count) per row, then the values
  const key = ex + "/" + hyp + "/" + map;
  if (!decoded.has(key)) {
    const bytes = Uint8Array.from(atob(mapsOf(ex, hyp)[map].w), (c) => c.charCodeAt(0));
    const t = rowsOf(ex, hyp, map).length, s = DATA.examples[ex].source.length;
    const dv = new DataView(bytes.buffer), w = new Float32Array(t * s);
    for (let i = 0, at = 8 * t; i < t; i++) {
      const first = dv.getUint32(8 * i, true), count = dv.getUint32(8 * i + 4, true);
      for (let j = 0; j < count; j++, at += 2) {
        w[i * s + first + j] = dv.getUint16(at, true) / 65535;
      }
    }
    if (decoded.size > 64) decoded.clear();  // bounds the memory of long sessions
    decoded.set(key, w);
  }
  return decoded.get(key);
}

const shown = (tok) => (tok === " " ? "\u2423" : tok);  // an open box for a space

function colour(v) {  // white -> dark red
  return [255 - 80 * v, 255 - 235 * v, 255 - 235 * v];
}

function paint(w, t, s) {  // one pixel per cell on an offscreen canvas
  const off = document.createElement("canvas");
  off.width = Math.max(s, 1); off.height = Math.max(t, 1);
  const ctx = off.getContext("2d"), img = ctx.createImageData(off.width, off.height);
  for (let i = 0; i < t * s; i++) {
    const c = colour(w[i]);
    img.data[4 * i] = c[0]; img.data[4 * i + 1] = c[1]; img.data[4 * i + 2] = c[2];
    img.data[4 * i + 3] = 255;
  }
  ctx.putImageData(img, 0, 0);
  return off;
}

function draw() {
  const ex = DATA.examples[view.ex], rows = rowsOf(view.ex, view.hyp, view.map);
  const t = rows.length, s = ex.source.length;
  const w = weightsOf(view.ex, view.hyp, view.map);
  view.step = Math.min(view.step, Math.max(t - 1, 0));  // a map with fewer rows
  Object.assign(view, { weights: w, t: t, s: s });
  const width = Math.max(300, Math.min(1400, window.innerWidth - 60) - MARGIN.left);
  view.cell = Math.max(1, Math.min(24, Math.floor(width / Math.max(s, 1))));
  const rowH = Math.max(view.cell, Math.min(24, Math.floor(600 / Math.max(t, 1))));
  view.rowH = rowH;
  const canvas = $("heatmap");
  canvas.width = MARGIN.left + s * view.cell; canvas.height = MARGIN.top + t * rowH;
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(paint(w, t, s), MARGIN.left, MARGIN.top, s * view.cell, t * rowH);
  ctx.fillStyle = "#222"; ctx.font = "11px monospace"; ctx.textBaseline = "middle";
  if (rowH >= 9) {
    ctx.textAlign = "right";
    rows.forEach((tok, i) =>
      ctx.fillText(shown(tok), MARGIN.left - 4, MARGIN.top + (i + 0.5) * rowH));
  }
  if (view.cell >= 9) {
    ex.source.forEach((tok, j) => {
      ctx.save(); ctx.translate(MARGIN.left + (j + 0.5) * view.cell, MARGIN.top - 4);
      ctx.rotate(-Math.PI / 2); ctx.textAlign = "left"; ctx.fillText(shown(tok), 0, 0);
      ctx.restore();
    });
  }
  ctx.strokeStyle = "#06c"; ctx.lineWidth = 2;
  ctx.strokeRect(MARGIN.left, MARGIN.top + view.step * rowH, s * view.cell, rowH);
  const image = $("image");
  if (ex.image) {
    image.src = ex.image; image.style.display = "block";
    image.style.marginLeft = MARGIN.left + "px"; image.style.width = s * view.cell + "px";
  } else image.style.display = "none";
  drawStep();
  drawOver();
}

function shade(canvas, w, t, grid) {  // one pixel per cell: dark where output t did not look
  const n = grid.rows * grid.cols, row = w.subarray(t * n, (t + 1) * n);
  canvas.width = grid.cols; canvas.height = grid.rows;
  const ctx = canvas.getContext("2d"), img = ctx.createImageData(grid.cols, grid.rows);
  let peak = 0; row.forEach((v) => { if (v > peak) peak = v; });
  for (let j = 0; j < n; j++) img.data[4 * j + 3] = Math.round(204 * (1 - (peak > 0 ? row[j] / peak : 0)));
  ctx.putImageData(img, 0, 0);
}

function photo(box, grid) {  // the picture, as tall as its aspect ratio says
  box.querySelector("img").src = grid.image;
  box.style.height = Math.round(box.getBoundingClientRect().width * grid.aspect) + "px";
}

function drawOver() {  // the picture lit by the attention of the output on show, and a panel per output
  const ex = DATA.examples[view.ex], grid = ex.grid, hyp = ex.hyps[view.hyp];
  $("over").style.display = grid ? "block" : "none";
  if (!grid) return;
  photo($("photo"), grid); shade($("overlay"), view.weights, view.step, grid);
  const box = $("panels"), key = view.ex + "/" + view.hyp + "/" + view.map;
  if (box.dataset.key !== key) {
    box.dataset.key = key; box.textContent = "";
    hyp.tokens.forEach((tok, i) => {
      const panel = document.createElement("div"); panel.className = "panel";
      const pic = document.createElement("div"); pic.className = "photo";
      pic.append(document.createElement("img"), document.createElement("canvas"));
      const label = document.createElement("div"); label.textContent = shown(tok);
      panel.append(pic, label); box.appendChild(panel);
      photo(pic, grid); shade(pic.querySelector("canvas"), view.weights, i, grid);
      panel.addEventListener("click", () => setStep(i));
    });
  }
  box.querySelectorAll(".panel").forEach((p, i) => p.classList.toggle("now", i === view.step));
}

function hoverPhoto(event) {
  const ex = DATA.examples[view.ex], grid = ex.grid, rect = $("overlay").getBoundingClientRect();
  const c = Math.floor((event.clientX - rect.left) / rect.width * grid.cols);
  const r = Math.floor((event.clientY - rect.top) / rect.height * grid.rows);
  if (r < 0 || c < 0 || r >= grid.rows || c >= grid.cols) { $("photo-tip").textContent = ""; return; }
  const t = view.step, w = view.weights[t * view.s + r * grid.cols + c];
  $("photo-tip").textContent = "output " + t + " " + JSON.stringify(ex.hyps[view.hyp].tokens[t]) +
    " \u00b7 cell row " + r + " col " + c + " \u00b7 weight " + w.toFixed(4);
}

function drawStep() {
  const ex = DATA.examples[view.ex], rows = rowsOf(view.ex, view.hyp, view.map);
  const t = view.step, s = view.s;
  $("step").max = String(Math.max(rows.length - 1, 0)); $("step").value = String(t);
  const text = $("step-text"); text.textContent = "";
  rows.forEach((tok, i) => {
    const el = document.createElement(i === t ? "b" : "span");
    el.textContent = tok + " "; text.appendChild(el);
  });
  const row = view.weights.subarray(t * s, (t + 1) * s);
  let best = 0; row.forEach((v, j) => { if (v > row[best]) best = j; });
  text.appendChild(document.createTextNode(
    "  \u2192 " + (ex.source[best] === undefined ? "" : JSON.stringify(ex.source[best])) +
    " (" + (row[best] || 0).toFixed(4) + ")"));
  const bar = $("stepbar"); bar.width = MARGIN.left + s * view.cell;
  const ctx = bar.getContext("2d"); ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, bar.width, 40);
  ctx.fillStyle = "#c33";
  row.forEach((v, j) => ctx.fillRect(MARGIN.left + j * view.cell, 40 - 38 * v,
                                     Math.max(view.cell - (view.cell > 2), 1), 38 * v));
}

function nbest() {
  const ex = DATA.examples[view.ex], box = $("nbest");
  box.textContent = "";
  ex.hyps.forEach((hyp, k) => {
    const div = document.createElement("div");
    div.className = "hyp" + (k === view.hyp ? " chosen" : "");
    div.dataset.rank = String(k + 1);
    const head = document.createElement("div");
    head.textContent = "#" + (k + 1) + (hyp.score === null ? "" : " score " + hyp.score.toFixed(4));
    const text = document.createElement("div"); text.className = "text";
    text.textContent = hyp.text === null ? hyp.tokens.join(" ") : hyp.text;
    const thumb = document.createElement("canvas");
    const map = view.map < hyp.maps.length ? view.map : 0;  // its own map, not the input's
    const off = paint(weightsOf(view.ex, k, map), hyp.tokens.length, ex.source.length);
    thumb.width = off.width; thumb.height = off.height; thumb.getContext("2d").drawImage(off, 0, 0);
    div.append(head, text, thumb);
    div.addEventListener("click", () => {
      view.hyp = k; view.step = 0; showMaps(); nbest(); draw();
    });
    box.appendChild(div);
  });
}

function showMaps() {
  const maps = mapsOf(view.ex, view.hyp), sel = $("map");
  const name = sel.options.length ? sel.options[sel.selectedIndex].text : null;
  sel.textContent = "";
  maps.forEach((m, i) => sel.add(new Option(m.name, String(i))));
  const keep = maps.findIndex((m) => m.name === name);
  view.map = keep >= 0 ? keep : 0; sel.value = String(view.map);
}

function showExample(n) {
  const ex = DATA.examples[n];
  Object.assign(view, { ex: n, hyp: 0, step: 0 });
  $("example").value = String(n);
  $("text").textContent = ex.text || ex.source.join(" ");
  $("reference").textContent = ex.reference === null ? "" : Array.isArray(ex.reference) ?
    "references:\n" + ex.reference.join("\n") : "reference: " + ex.reference;
  showMaps(); nbest(); draw();
}

function hover(event) {
  const rect = $("heatmap").getBoundingClientRect();
  const j = Math.floor((event.clientX - rect.left - MARGIN.left) / view.cell);
  const i = Math.floor((event.clientY - rect.top - MARGIN.top) / view.rowH);
  if (i < 0 || j < 0 || i >= view.t || j >= view.s) { $("tip").textContent = ""; return; }
  const ex = DATA.examples[view.ex], w = view.weights[i * view.s + j];
  const rows = rowsOf(view.ex, view.hyp, view.map);
  $("tip").textContent = (isInputMap(view.ex, view.hyp, view.map) ? "query " : "output ") + i +
    " " + JSON.stringify(rows[i]) + " \u00b7 input " + j + " " + JSON.stringify(ex.source[j]) +
    " \u00b7 weight " + w.toFixed(4);
}

function setStep(t) {
  view.step = Math.max(0, Math.min(t, view.t - 1)); draw();
}

DATA.examples.forEach((ex, n) => $("example").add(new Option(ex.name, String(n))));
$("example").addEventListener("change", (e) => showExample(Number(e.target.value)));
$("prev-example").addEventListener("click", () => showExample(Math.max(view.ex - 1, 0)));
$("next-example").addEventListener("click",
  () => showExample(Math.min(view.ex + 1, DATA.examples.length - 1)));
$("map").addEventListener("change", (e) => { view.map = Number(e.target.value); nbest(); draw(); });
$("heatmap").addEventListener("mousemove", hover);
$("overlay").addEventListener("mousemove", hoverPhoto);
$("heatmap").addEventListener("click", (e) => { hover(e); setStep(
  Math.floor((e.clientY - $("heatmap").getBoundingClientRect().top - MARGIN.top) / view.rowH)); });
$("step").addEventListener("input", (e) => setStep(Number(e.target.value)));
$("step-prev").addEventListener("click", () => setStep(view.step - 1));
$("step-next").addEventListener("click", () => setStep(view.step + 1));
document.addEventListener("keydown", (e) => {
  if (e.target.tagName === "SELECT" || e.target.tagName === "INPUT") return;
  if (e.key === "ArrowDown") setStep(view.step + 1);
  if (e.key === "ArrowUp") setStep(view.step - 1);
});
showExample(0);
"""
