// Rollgate viewer charts: inline SVG drawn here, no library and nothing fetched (the page works
// offline). Colours come from classes in style.css; SVG presentation attributes are not inline
// styles, so the page's strict CSP (style-src 'self') allows them.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";

function svgEl(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "data") for (const [dk, dv] of Object.entries(v)) node.setAttribute("data-" + dk, String(dv));
    else node.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

const tip = (text) => svgEl("title", {}, text); // the browser's own tooltip: no script needed
const r3 = (x) => +x.toFixed(3);

// Round a top value up to 1, 2 or 5 x 10^n so the axis ticks read well.
function niceMax(x) {
  if (!(x > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(x)));
  for (const m of [1, 2, 5, 10]) if (x <= m * p + 1e-12) return m * p;
  return 10 * p;
}

function frame(width, height, pad) {
  return { width, height, pad, w: width - pad.left - pad.right, h: height - pad.top - pad.bottom };
}

function yAxis(f, lo, hi, ticks, label) {
  const g = svgEl("g", { class: "axis y" });
  for (let i = 0; i <= ticks; i++) {
    const v = lo + ((hi - lo) * i) / ticks;
    const y = f.pad.top + f.h - (f.h * i) / ticks;
    g.append(svgEl("line", { x1: f.pad.left, x2: f.pad.left + f.w, y1: y, y2: y, class: "grid" }),
      svgEl("text", { x: f.pad.left - 6, y: y + 4, "text-anchor": "end" }, r3(v)));
  }
  if (label) {
    g.append(svgEl("text", { x: 12, y: f.pad.top + f.h / 2, "text-anchor": "middle", class: "label",
      transform: `rotate(-90 12 ${f.pad.top + f.h / 2})` }, label));
  }
  return g;
}

function legend(f, series) {
  const g = svgEl("g", { class: "legend" });
  let x = f.pad.left;
  for (const s of series) {
    g.append(svgEl("rect", { x, y: 6, width: 10, height: 10, class: "swatch " + s.cls }),
      svgEl("text", { x: x + 14, y: 15 }, s.name));
    x += 24 + 7 * s.name.length;
  }
  return g;
}

function marker(kind, x, y, cls) {
  if (kind === "square") return svgEl("rect", { x: x - 4, y: y - 4, width: 8, height: 8, class: "pt " + cls });
  if (kind === "diamond") return svgEl("path", { d: `M${x} ${y - 5}L${x + 5} ${y}L${x} ${y + 5}L${x - 5} ${y}Z`, class: "pt " + cls });
  return svgEl("circle", { cx: x, cy: y, r: 4, class: "pt " + cls });
}

// categories: x labels in order. series: [{name, cls, marker, line, points: [{i, y, lo?, hi?, title}]}]
// Points carry data-series / data-x / data-y so tests can read the plotted values back.
function lineChart({ categories, series, yLabel, width = 760, height = 300 }) {
  const f = frame(width, height, { top: 26, right: 16, bottom: 48, left: 56 });
  const all = series.flatMap((s) => s.points.flatMap((p) => [p.y, p.hi ?? p.y]));
  const lo = Math.min(0, ...all.filter(Number.isFinite));
  const hi = niceMax(Math.max(1, ...all.filter(Number.isFinite)));
  const n = Math.max(categories.length, 1);
  const step = f.w / n;
  const X = (i) => f.pad.left + step * (i + 0.5);
  const Y = (v) => f.pad.top + f.h - ((v - lo) / (hi - lo)) * f.h;
  const root = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, width, height, class: "chart line-chart",
    role: "img", "aria-label": yLabel || "chart" });
  root.append(yAxis(f, lo, hi, 5, yLabel));
  const xs = svgEl("g", { class: "axis x" });
  const every = Math.ceil(n / 12); // at most ~12 labels, however many versions
  categories.forEach((c, i) => {
    if (i % every === 0 || i === n - 1) {
      xs.append(svgEl("text", { x: X(i), y: f.pad.top + f.h + 16, "text-anchor": "middle" }, c));
    }
  });
  xs.append(svgEl("text", { x: f.pad.left + f.w / 2, y: height - 6, "text-anchor": "middle", class: "label" },
    "policy version"));
  root.append(xs);
  series.forEach((s, k) => {
    const g = svgEl("g", { class: "series " + s.cls, data: { series: s.name } });
    const off = (k - (series.length - 1) / 2) * 6; // side by side, so error bars never hide each other
    const pts = s.points.filter((p) => Number.isFinite(p.y));
    if (s.line && pts.length > 1) {
      g.append(svgEl("polyline", { class: "line", points: pts.map((p) => `${X(p.i) + off},${Y(p.y)}`).join(" ") }));
    }
    for (const p of pts) {
      const x = X(p.i) + off;
      if (Number.isFinite(p.lo) && Number.isFinite(p.hi)) {
        g.append(svgEl("line", { class: "ci", x1: x, x2: x, y1: Y(p.lo), y2: Y(p.hi) }),
          svgEl("line", { class: "ci", x1: x - 3, x2: x + 3, y1: Y(p.lo), y2: Y(p.lo) }),
          svgEl("line", { class: "ci", x1: x - 3, x2: x + 3, y1: Y(p.hi), y2: Y(p.hi) }));
      }
      const m = marker(s.marker, x, Y(p.y), s.cls);
      m.setAttribute("data-series", s.name);
      m.setAttribute("data-x", categories[p.i]);
      m.setAttribute("data-y", String(p.y));
      m.append(tip(p.title || `${s.name} @ ${categories[p.i]}: ${r3(p.y)}`));
      g.append(m);
    }
    root.append(g);
  });
  root.append(legend(f, series));
  return root;
}

// A histogram of values over [lo, hi] in equal bins; each bar carries data-count.
function histogram({ values, bins = 10, lo = 0, hi = 1, xLabel = "reward", width = 440, height = 210 }) {
  const f = frame(width, height, { top: 14, right: 12, bottom: 40, left: 44 });
  if (hi <= lo) hi = lo + 1;
  const counts = new Array(bins).fill(0);
  for (const v of values) counts[Math.min(bins - 1, Math.max(0, Math.floor(((v - lo) / (hi - lo)) * bins)))] += 1;
  const top = niceMax(Math.max(1, ...counts));
  const root = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, width, height, class: "chart histogram",
    role: "img", "aria-label": "reward histogram" });
  root.append(yAxis(f, 0, top, 4, "records"));
  const bw = f.w / bins;
  counts.forEach((c, i) => {
    const a = lo + ((hi - lo) * i) / bins;
    const b = lo + ((hi - lo) * (i + 1)) / bins;
    const h = (c / top) * f.h;
    root.append(svgEl("rect", { class: "bar", x: f.pad.left + i * bw + 1, y: f.pad.top + f.h - h, width: Math.max(1, bw - 2),
      height: h, data: { count: c, lo: r3(a), hi: r3(b) } }, tip(`${c} with reward in [${r3(a)}, ${r3(b)}${i === bins - 1 ? "]" : ")"}`)));
  });
  const xs = svgEl("g", { class: "axis x" });
  for (let i = 0; i <= bins; i += bins / 5) {
    xs.append(svgEl("text", { x: f.pad.left + i * bw, y: f.pad.top + f.h + 15, "text-anchor": "middle" }, r3(lo + ((hi - lo) * i) / bins)));
  }
  xs.append(svgEl("text", { x: f.pad.left + f.w / 2, y: height - 4, "text-anchor": "middle", class: "label" }, xLabel));
  root.append(xs);
  return root;
}

// One horizontal bar per row, split by key (outcome); segments carry data-env / data-outcome / data-count.
function stackedBars({ rows, keys, width = 440 }) {
  const barH = 18, gap = 8;
  const f = frame(width, 30 + rows.length * (barH + gap) + 24, { top: 28, right: 12, bottom: 20, left: 96 });
  const root = svgEl("svg", { viewBox: `0 0 ${width} ${f.height}`, width, height: f.height,
    class: "chart stacked", role: "img", "aria-label": "outcomes per environment" });
  const used = keys.filter((k) => rows.some((r) => r.counts[k]));
  root.append(legend(f, used.map((k) => ({ name: k, cls: "o-" + k }))));
  rows.forEach((r, j) => {
    const total = used.reduce((n, k) => n + (r.counts[k] || 0), 0);
    const y = f.pad.top + j * (barH + gap);
    root.append(svgEl("text", { x: f.pad.left - 6, y: y + barH - 5, "text-anchor": "end", class: "row-label" }, r.label));
    let x = f.pad.left;
    for (const k of used) {
      const c = r.counts[k] || 0;
      if (!c) continue;
      const w = (c / total) * f.w;
      root.append(svgEl("rect", { class: "seg o-" + k, x, y, width: w, height: barH,
        data: { env: r.label, outcome: k, count: c } }, tip(`${r.label}: ${c} ${k} (${Math.round((100 * c) / total)}%)`)));
      if (w > 22) root.append(svgEl("text", { x: x + w / 2, y: y + barH - 5, "text-anchor": "middle", class: "seg-label" }, c));
      x += w;
    }
  });
  return root;
}
