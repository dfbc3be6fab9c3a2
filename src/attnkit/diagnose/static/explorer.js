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
