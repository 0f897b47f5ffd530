// Training curves drawn as inline SVG, one panel per measure, one line per run (no chart library).
// Data: /api/curves?run=A&run=B -> {panels: [{title, y, log, series: [{label, points: [[step, minutes, y, lo, hi]]}]}]}.
// A panel with `bars` draws each point's [lo, hi] as an error bar (an open end: to the plot's edge), else as a band.
"use strict";
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
const W = 520, H = 260, M = {l: 64, r: 10, t: 8, b: 34};
const SVG = "http://www.w3.org/2000/svg";

function el(name, attrs, parent) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

function ticks(lo, hi, n) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map(s => s * mag).find(s => s >= raw);
  const out = [], first = Math.ceil(lo / step);
  for (let i = first; i * step <= hi + step * 1e-9; i++) out.push(Number((i * step).toPrecision(6)));
  return out;
}

function drawPanel(panel, xi) {
  const box = document.createElement("div");
  box.className = "panel";
  box.innerHTML = "<h3></h3><div class='legend'></div>";
  box.querySelector("h3").textContent = panel.title;
  const f = panel.log ? v => Math.log10(Math.max(v, 1e-6)) : v => v;
  const pts = panel.series.flatMap(s => s.points).filter(p => p[xi] !== null && p[2] !== null);
  const xs = pts.map(p => p[xi]), ys = pts.flatMap(p => [p[2], p[3], p[4]]).filter(v => v !== null).map(f);
  let [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) { y0 -= 0.5; y1 += 0.5; }
  const X = v => M.l + (v - x0) / (x1 - x0) * (W - M.l - M.r), Y = v => H - M.b - (f(v) - y0) / (y1 - y0) * (H - M.t - M.b);
  const svg = el("svg", {width: W, height: H, viewBox: `0 0 ${W} ${H}`});
  for (const t of ticks(y0, y1, 5)) {
    const v = panel.log ? Math.pow(10, t) : t;
    el("line", {x1: M.l, x2: W - M.r, y1: Y(v), y2: Y(v), stroke: "#eee"}, svg);
    el("text", {x: M.l - 4, y: Y(v) + 4, "text-anchor": "end", "font-size": 10}, svg).textContent = panel.log ? Number(v.toPrecision(2)) : t;
  }
  for (const t of ticks(x0, x1, 6)) el("text", {x: X(t), y: H - M.b + 14, "text-anchor": "middle", "font-size": 10}, svg).textContent = t;
  el("text", {x: (W + M.l) / 2, y: H - 4, "text-anchor": "middle", "font-size": 11}, svg).textContent = xi === 0 ? "training step" : "wall-clock minutes";
  el("text", {x: 10, y: H / 2, "text-anchor": "middle", "font-size": 11, transform: `rotate(-90 10 ${H / 2})`}, svg).textContent = panel.y;
  el("rect", {x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b, fill: "none", stroke: "#999"}, svg);
  const legend = box.querySelector(".legend");
  panel.series.forEach((s, k) => {
    const color = COLORS[k % COLORS.length], p = s.points.filter(q => q[xi] !== null && q[2] !== null);
    const band = p.filter(q => q[3] !== null && q[4] !== null);
    if (panel.bars) p.forEach(q => el("line", {x1: X(q[xi]), x2: X(q[xi]), y1: q[3] === null ? H - M.b : Y(q[3]), y2: q[4] === null ? M.t : Y(q[4]), stroke: color, "stroke-width": 1, class: "bar"}, svg));
    else if (band.length > 1) el("polygon", {points: band.map(q => X(q[xi]) + "," + Y(q[4])).concat(band.slice().reverse().map(q => X(q[xi]) + "," + Y(q[3]))).join(" "), fill: color, "fill-opacity": 0.12, stroke: "none"}, svg);
    el("polyline", {points: p.map(q => X(q[xi]) + "," + Y(q[2])).join(" "), fill: "none", stroke: color, "stroke-width": 1.5, class: "curve"}, svg);
    p.forEach(q => el("circle", {cx: X(q[xi]), cy: Y(q[2]), r: panel.bars ? 3 : 2, fill: color, class: "point"}, svg));
    const item = document.createElement("span");
    item.innerHTML = `<b style="color:${color}">━</b> `;
    item.append(s.label);
    legend.appendChild(item);
  });
  box.appendChild(svg);
  return box;
}

async function draw() {
  const host = document.getElementById("curves");
  if (!host) return;  // another page drawing panels with drawPanel
  const runs = JSON.parse(host.dataset.runs);
  if (!runs.length) return;
  const q = runs.map(r => "run=" + encodeURIComponent(r)).join("&");
  const data = await (await fetch("/api/curves?" + q, {credentials: "same-origin"})).json();
  const xi = Number(document.getElementById("x-axis").value);
  host.replaceChildren(...data.panels.map(p => drawPanel(p, xi)));
  if (!data.panels.length) host.textContent = "These runs have no rows to draw yet.";
}

document.addEventListener("DOMContentLoaded", () => {
  const axis = document.getElementById("x-axis");
  if (axis) axis.addEventListener("change", draw);
  if (!document.getElementById("curves")) return;
  draw();
  setInterval(draw, 10000);
});
