/* opd-nb metric chart (like TensorBoard scalars): plain SVG + DOM, no library, no network. The
 * Python side inlines this classic script in a saved page and prepends it to an anywidget module,
 * so it defines one global, opdChart(el, data), and nothing else. */
function opdChart(el, data) {
  "use strict";
  // one colour per job, in order of first appearance: the document's palette (chart_data.PALETTE)
  const PALETTE = (data && data.palette && data.palette.length) ? data.palette.slice() : ["#3b82f6"];
  const PANEL_H = 190, MIN_COL = 340, GAP = 12, TOP = 26, BOTTOM = 20, RIGHT = 16, SUFFIX = ["", "k", "M", "G", "T"];
  // scoped under .opd-chart ("&": the root); currentColor follows the host's theme
  const CSS = `&{position:relative;font:12px/1.4 system-ui,sans-serif;background:transparent;padding:2px}
*{box-sizing:border-box}
.opd-title{font-size:13px;font-weight:600;margin:0 0 4px}
.opd-controls{display:flex;flex-wrap:wrap;align-items:center;gap:4px 16px;margin:0 0 4px}
.opd-ctl,.opd-legend-item{display:inline-flex;align-items:center;gap:6px;cursor:pointer;user-select:none;white-space:nowrap}
.opd-legend-item{max-width:100%}
.opd-legend-label{overflow:hidden;text-overflow:ellipsis;min-width:0}
.opd-smoothing{width:110px;margin:0}
input[type=checkbox]{margin:0}
.opd-smoothing-value,.opd-range{min-width:2.4em;font-variant-numeric:tabular-nums}
.opd-reset{font:inherit;color:inherit;background:transparent;border:1px solid #8887;border-radius:4px;padding:1px 8px;cursor:pointer}
.opd-reset:disabled{opacity:.45;cursor:default}
.opd-range,.opd-note{opacity:.7}
.opd-hint{margin-left:auto;opacity:.5;font-size:11px;white-space:nowrap}
&.opd-narrow .opd-hint{display:none}
.opd-legend{display:flex;flex-wrap:wrap;gap:2px 14px;margin:0 0 6px}
.opd-legend-item.off{opacity:.4}
.opd-swatch{display:inline-block;width:14px;height:3px;border-radius:2px;flex:none}
.opd-panels{display:grid;gap:12px ${GAP}px}
svg.opd-panel{display:block;width:100%;height:${PANEL_H}px;min-width:0;border:1px solid #8884;border-radius:4px;cursor:crosshair;touch-action:pan-y;user-select:none}
svg.opd-panel text{fill:currentColor}
.opd-ptitle{font-size:12px;font-weight:600}
.opd-tick{font-size:10.5px;fill-opacity:.7}
.opd-warn,.opd-nodata{font-size:11px;fill-opacity:.6}
.opd-gridline{stroke:currentColor;stroke-opacity:.1}
.opd-axis{stroke:currentColor;stroke-opacity:.35}
path.opd-raw{fill:none;stroke-width:1;stroke-opacity:.25}
path.opd-line{fill:none;stroke-width:1.6;stroke-linejoin:round;stroke-linecap:round}
.opd-rule{stroke:currentColor;stroke-opacity:.4;stroke-dasharray:3 3}
.opd-dots circle{stroke:var(--jp-layout-color1,Canvas);stroke-width:1.2}
.opd-sel{fill:currentColor;fill-opacity:.08;stroke:currentColor;stroke-opacity:.3}
.opd-note{margin-top:4px;font-size:11px}
.opd-title:empty,.opd-note:empty{display:none}
.opd-empty:not(:empty){padding:16px 4px;opacity:.6}
.opd-tip{position:absolute;z-index:10;display:none;pointer-events:none;max-width:460px;overflow-wrap:anywhere;font-size:11.5px;padding:5px 8px;border-radius:4px;border:1px solid #8886;box-shadow:0 2px 8px #0003;background:var(--jp-layout-color1,var(--vscode-editor-background,Canvas));color:var(--jp-ui-font-color1,var(--vscode-editor-foreground,CanvasText))}
.opd-tip-head{font-weight:600;margin-bottom:2px}
.opd-tip-row{display:flex;align-items:baseline;gap:6px;font-variant-numeric:tabular-nums}
.opd-tip-row>span:last-child{min-width:0}`
    .split("\n").map((r) => r.slice(0, r.indexOf("{")).split(",")
      .map((x) => (x[0] === "&" ? ".opd-chart" + x.slice(1) : ".opd-chart " + x)).join(",") + r.slice(r.indexOf("{")))
    .join("\n");

  const doc = el.ownerDocument || document, win = doc.defaultView || window, M = Math;
  const ui = { smoothing: weight(data && data.smoothing), logy: false, align: false, hidden: new Set(), zoom: null };
  const colors = new Map(); // job -> colour, kept across replace() so a job never changes colour
  const panels = new Map(); // metric -> {svg, metric, info: where the last draw put things}
  const view = { drawn: 0, xdomain: null };
  let model, tipPanel = null, pending = false, cost = 0, hover = null, drag = null, full = null, drawnWidth = -1, legendKey = "";

  // ---- helpers
  function num(v) { return typeof v === "number" && isFinite(v) ? v : null; }
  function weight(w) { w = num(w); return w === null ? 0.6 : M.min(0.99, M.max(0, w)); }
  function esc(s) { return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]); }
  function strip(s) { return s.indexOf(".") < 0 || s.indexOf("e") >= 0 ? s : s.replace(/\.?0+$/, ""); }
  function r1(v) { return M.round(v * 10) / 10; }
  function colorOf(job) {
    if (!colors.has(job)) colors.set(job, PALETTE[colors.size % PALETTE.length]);
    return colors.get(job);
  }
  function xoff(s) { return ui.align ? 0 : s.offset; }
  function bound(a, x, upper) { // first index with a[i] >= x (or > x); steps are sorted
    let lo = 0, hi = a.length;
    while (lo < hi) { const m = (lo + hi) >> 1; if (a[m] < x || (upper && a[m] === x)) lo = m + 1; else hi = m; }
    return lo;
  }
  function expo(v, d) { return v.toExponential(d).replace(/\.?0+e/, "e").replace("e+", "e"); }
  // tick labels (0.35, 1.2e-4, 12k) with the digits that tell ticks `step` apart
  function fmt(v, step) {
    const a = M.abs(v);
    if (v === 0) return "0";
    if (a < 1e-3 || a >= 1e15) return expo(v, M.min(3, M.max(0, M.floor(M.log10(a)) - M.floor(M.log10(step)))));
    const k = a >= 1e3 ? M.min(4, M.floor(M.log10(a) / 3)) : 0, scale = M.pow(1000, k);
    return strip((v / scale).toFixed(M.min(4, M.max(0, M.ceil(-M.log10(step / scale) - 1e-9))))) + SUFFIX[k];
  }
  function fmtVal(v) { // read-outs: four significant digits
    const a = M.abs(v);
    if (v === 0) return "0";
    if (a < 1e-3 || a >= 1e6) return expo(v, 3);
    return a >= 1e4 ? v.toFixed(0) : strip(v.toPrecision(4));
  }
  function fmtStep(s) { return Number.isInteger(s) ? String(s) : strip(s.toFixed(3)); }

  // ticks at 1, 2 or 5 times a power of ten: {p: axis position, t: label}
  function linTicks(lo, hi, count, least) {
    const raw = M.max((hi - lo) / M.max(1, count), least || 0), p = M.pow(10, M.floor(M.log10(raw))), f = raw / p;
    const step = p * (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10), out = [];
    for (let k = M.ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k++) out.push({ p: k * step, t: fmt(k * step, step) });
    return out;
  }
  // log axis (positions are log10): decades, else 1-2-5 or 1-2-3-5-7 per decade, else plain ticks
  function logTicks(lo, hi, count) {
    for (const ms of [[1], [1, 2, 5], [1, 2, 3, 5, 7]]) {
      const out = [];
      for (let d = M.floor(lo); d <= M.ceil(hi); d++) {
        for (const m of ms) {
          const p = d + M.log10(m), v = m * M.pow(10, d);
          if (p >= lo - 1e-9 && p <= hi + 1e-9) out.push({ p, t: fmt(v, v) });
        }
      }
      const k = M.ceil(out.length / (count + 1));
      if (out.length >= 3) return ms.length > 1 ? out : out.filter((_, i) => i % k === 0);
    }
    return linTicks(M.pow(10, lo), M.pow(10, hi), count).filter((t) => t.p > 0).map((t) => ({ p: M.log10(t.p), t: t.t }));
  }

  // ---- data: series by (job, metric), finite points only, in step order
  function load(d) {
    d = d || {};
    model = { title: d.title || null, note: d.note || null, panels: [], series: [], byKey: new Map(), points: 0 };
    (d.panels || []).forEach((m) => addPanel(String(m)));
    (d.series || []).forEach(ingest);
    for (const [m, p] of panels) if (model.panels.indexOf(m) < 0) { p.svg.remove(); panels.delete(m); }
  }
  function addPanel(m) { if (model.panels.indexOf(m) < 0) model.panels.push(m); }
  function ingest(p) {
    if (!p || p.job == null || p.metric == null) return;
    const job = String(p.job), metric = String(p.metric), key = job + "\u0000" + metric;
    let s = model.byKey.get(key);
    if (!s) {
      s = { job, metric, label: job, offset: 0, steps: [], values: [], last: -Infinity, ema: null };
      model.byKey.set(key, s); model.series.push(s); addPanel(metric); colorOf(job);
    }
    if (p.label) s.label = String(p.label);
    if (num(p.offset) !== null) s.offset = p.offset;
    const steps = p.steps || [], values = p.values || [];
    if (p.replace) { // points already held whose value changed (a live step's running totals)
      for (let i = 0; i < steps.length; i++) {
        const st = num(steps[i]), v = num(values[i]);
        if (st === null || v === null) continue;
        const at = bound(s.steps, st);
        if (s.steps[at] === st) s.values[at] = v;
        else if (st <= s.last) { s.steps.splice(at, 0, st); s.values.splice(at, 0, v); model.points++; }
      }
      s.ema = null; // the smoothed line is recomputed from the changed point on
      return;
    }
    for (let i = 0; i < steps.length; i++) {
      const st = num(steps[i]), v = num(values[i]);
      if (st === null || st <= s.last) continue; // a repeated poll resends points already held
      s.last = st;
      if (v === null) continue; // a missing point: the line joins its neighbours
      s.steps.push(st); s.values.push(v); model.points++;
    }
  }
  // debiased EMA as TensorBoard draws it; cached per series, extended as points arrive
  function smoothed(s, w) {
    let e = s.ema;
    if (!e || e.w !== w) e = s.ema = { w, arr: [], last: 0 };
    for (let i = e.arr.length; i < s.values.length; i++) {
      e.last = e.last * w + (1 - w) * s.values[i];
      e.arr.push(e.last / (1 - M.pow(w, i + 1)));
    }
    return e.arr;
  }

  // ---- DOM, built once
  el.classList.add("opd-chart");
  el.innerHTML = '<div class="opd-title"></div><div class="opd-controls">' +
    '<label class="opd-ctl">smoothing' +
    '<input class="opd-smoothing" type="range" min="0" max="0.99" step="0.01"><span class="opd-smoothing-value"></span></label>' +
    '<label class="opd-ctl"><input class="opd-logy" type="checkbox">log y</label>' +
    '<label class="opd-ctl" title="off: x is the global step (a continued job starts where its parent stopped)">' +
    '<input class="opd-align" type="checkbox">align at step 0</label>' +
    '<button class="opd-reset" type="button">reset zoom</button><span class="opd-range"></span>' +
    '<span class="opd-hint">ctrl+wheel or pinch: zoom \u00b7 drag: pan \u00b7 shift-drag: range \u00b7 dbl-click: reset</span></div>' +
    '<div class="opd-legend"></div><div class="opd-panels"></div><div class="opd-note"></div><div class="opd-empty"></div><div class="opd-tip"></div>';
  const $ = (c) => el.querySelector(".opd-" + c);
  const titleEl = $("title"), controlsEl = $("controls"), legendEl = $("legend"), panelsEl = $("panels"), noteEl = $("note");
  const emptyEl = $("empty"), tipEl = $("tip"), rangeEl = $("range"), resetEl = $("reset");
  const smoothEl = $("smoothing"), smoothValEl = $("smoothing-value"), logEl = $("logy"), alignEl = $("align");
  { // one <style> per document (or shadow root)
    const root = el.getRootNode ? el.getRootNode() : doc, target = root.nodeType === 11 ? root : doc.head || doc.documentElement;
    if (!target.querySelector("style[data-opd-chart]")) {
      const st = doc.createElement("style");
      st.setAttribute("data-opd-chart", ""); st.textContent = CSS; target.appendChild(st);
    }
  }

  // ---- drawing
  function draw() {
    pending = false;
    const t0 = Date.now(), held = model.series.filter((s) => s.steps.length);
    titleEl.textContent = model.title || "";
    noteEl.textContent = model.note || "";
    emptyEl.textContent = held.length ? "" : "no metrics yet";
    for (const x of [controlsEl, legendEl, panelsEl]) x.style.display = held.length ? "" : "none";
    el.dataset.points = String(model.points);
    if (!held.length) { view.drawn = 0; view.xdomain = null; return hideTip(); }
    updateLegend(held);
    const vis = held.filter((s) => !ui.hidden.has(s.job));
    let lo = Infinity, hi = -Infinity; // the full x range of what is shown; a zoom stays inside it
    for (const s of vis.length ? vis : held) {
      lo = M.min(lo, s.steps[0] + xoff(s)); hi = M.max(hi, s.steps[s.steps.length - 1] + xoff(s));
    }
    if (hi - lo < 1e-9) { lo -= 1; hi += 1; } // a single step: a range around it
    full = [lo, hi];
    ui.zoom = ui.zoom && clampZoom(ui.zoom);
    const dom = ui.zoom || full, width = panelsEl.clientWidth, cols = width >= 2 * MIN_COL + GAP ? 2 : 1;
    const W = width ? M.floor((width - GAP * (cols - 1)) / cols) : MIN_COL;
    panelsEl.style.gridTemplateColumns = cols === 2 ? "1fr 1fr" : "1fr";
    el.classList.toggle("opd-narrow", width > 0 && width < 720);
    drawnWidth = width;
    // panel elements persist (and their listeners); re-append only when the order changed
    let ordered = panelsEl.children.length === model.panels.length;
    model.panels.forEach((m, i) => {
      if (!panels.has(m)) panels.set(m, makePanel(m));
      ordered = ordered && panelsEl.children[i] === panels.get(m).svg;
    });
    if (!ordered) model.panels.forEach((m) => panelsEl.appendChild(panels.get(m).svg));
    view.drawn = 0;
    for (const m of model.panels) view.drawn += drawPanel(panels.get(m), vis.filter((s) => s.metric === m), W, dom);
    view.xdomain = dom.slice();
    rangeEl.textContent = ui.zoom ? rangeText(dom) : "";
    resetEl.disabled = !ui.zoom;
    cost = Date.now() - t0;
    if (hover && !drag) showTip(hover); // keep the read-out current
  }

  // the zoom's edges in whole steps: the first and last step inside it
  function rangeText(dom) {
    const a = M.ceil(dom[0] - 1e-6), b = M.floor(dom[1] + 1e-6);
    return a <= b ? (a === b ? "step " + a : "steps " + a + "\u2013" + b)
      : "between steps " + M.floor(dom[0]) + " and " + M.ceil(dom[1]);
  }

  function updateLegend(held) {
    const jobs = new Map();
    for (const s of held) if (!jobs.has(s.job) || jobs.get(s.job) === s.job) jobs.set(s.job, s.label || s.job);
    const key = JSON.stringify([...jobs]);
    if (key !== legendKey) { // rebuilt only on change, so a click keeps its target
      legendKey = key;
      legendEl.innerHTML = [...jobs].map(([job, label]) =>
        `<span class="opd-legend-item" data-job="${esc(job)}" title="${esc(label === job ? job : label + " (" + job + ")")} (click: hide/show)">` +
        `<span class="opd-swatch" style="background:${colorOf(job)}"></span><span class="opd-legend-label">${esc(label)}</span></span>`).join("");
    }
    for (const it of legendEl.children) it.classList.toggle("off", ui.hidden.has(it.getAttribute("data-job")));
  }

  function makePanel(metric) {
    const svg = doc.createElementNS("http://www.w3.org/2000/svg", "svg"), p = { svg, metric, info: null };
    svg.setAttribute("class", "opd-panel");
    svg.setAttribute("data-metric", metric);
    bindPanel(p);
    return p;
  }

  // one panel as one string: one innerHTML is far cheaper than many DOM calls
  function drawPanel(p, items, W, dom) {
    const logy = ui.logy, ph = PANEL_H - TOP - BOTTOM, parts = [];
    // pass 1: the points in the x-domain, raw and smoothed, set the y range (a zoom must keep the
    // smoothed line, which carries earlier points, inside the plot); one more point each side keeps
    // lines to the edges
    let ylo = Infinity, yhi = -Infinity, neg = 0, drawn = 0;
    const fit = (v) => {
      if (logy) { if (!(v > 0)) return false; v = M.log10(v); }
      if (v < ylo) ylo = v;
      if (v > yhi) yhi = v;
      return true;
    };
    for (const s of items) {
      const o = xoff(s), st = s.steps, n = st.length, sm = smoothed(s, ui.smoothing);
      const a = bound(st, dom[0] - o), b = bound(st, dom[1] - o, true) - 1;
      if (a > b && (a === 0 || a === n)) continue; // wholly outside the view
      const i0 = M.max(0, a - 1), i1 = M.min(n - 1, b + 1);
      for (let i = a <= b ? a : i0; i <= (a <= b ? b : i1); i++) { // none inside: the segment across
        if (!fit(s.values[i])) neg++;
        fit(sm[i]);
      }
      parts.push({ s, o, i0, i1, sm });
    }
    if (!(ylo <= yhi)) { ylo = logy ? -1 : 0; yhi = 1; }
    else if (yhi - ylo <= 1e-12 * M.max(1, M.abs(yhi))) { // all equal: a band around the value
      const d = logy ? 0.5 : M.abs(ylo) * 0.1 || 1; ylo -= d; yhi += d;
    } else { const pad = (yhi - ylo) * 0.06; ylo -= pad; yhi += pad; }
    const yt = logy ? logTicks(ylo, yhi, 4) : linTicks(ylo, yhi, 4);
    const ml = M.round(M.max(34, 12 + 6.2 * M.max(0, ...yt.map((t) => t.t.length)))), pw = M.max(20, W - ml - RIGHT);
    const xt = linTicks(dom[0], dom[1], M.max(2, M.round(pw / 85)), 1), kx = pw / (dom[1] - dom[0]), ky = ph / (yhi - ylo);
    const Y = (v) => (yhi - (logy ? M.log10(v) : v)) * ky;
    // pass 2: paths in the plot's own coordinates (a nested <svg> clips them, no ids needed)
    let raws = "", lines = "", g = "";
    for (const q of parts) {
      const st = q.s.steps, vs = q.s.values, x0 = dom[0] - q.o, dense = q.i1 - q.i0 > 3 * pw;
      const rp = pathBuf(dense), lp = pathBuf(dense);
      for (let i = q.i0; i <= q.i1; i++) {
        const x = (st[i] - x0) * kx;
        if (!logy || vs[i] > 0) { rp.add(x, Y(vs[i])); drawn++; }
        if (!logy || q.sm[i] > 0) lp.add(x, Y(q.sm[i]));
      }
      const attrs = `data-job="${esc(q.s.job)}" stroke="${colorOf(q.s.job)}"`;
      raws += `<path class="opd-raw" ${attrs} d="${rp.d()}"/>`;
      lines += `<path class="opd-line" ${attrs} d="${lp.d()}"/>`;
    }
    for (const t of yt) {
      const y = r1(TOP + (yhi - t.p) * ky);
      g += `<line class="opd-gridline" x1="${ml}" x2="${ml + pw}" y1="${y}" y2="${y}"/>` +
        `<text class="opd-tick" x="${ml - 6}" y="${y}" dy="0.32em" text-anchor="end">${t.t}</text>`;
    }
    for (const t of xt) {
      const x = r1(ml + (t.p - dom[0]) * kx);
      g += `<line class="opd-gridline" x1="${x}" x2="${x}" y1="${TOP}" y2="${TOP + ph}"/>` +
        `<text class="opd-tick" x="${x}" y="${TOP + ph + 14}" text-anchor="middle">${t.t}</text>`;
    }
    const warn = neg ? `${neg} \u22640 values hidden` : "", metric = p.metric;
    const room = M.max(8, M.floor((W - 20 - warn.length * 6) / 6.8));
    const name = metric.length > room ? "\u2026" + metric.slice(1 - room) : metric; // keep the specific tail
    p.svg.setAttribute("viewBox", `0 0 ${W} ${PANEL_H}`);
    p.svg.innerHTML =
      `<text class="opd-ptitle" x="8" y="17">${esc(name)}${name === metric ? "" : `<title>${esc(metric)}</title>`}</text>` +
      (warn ? `<text class="opd-warn" x="${W - RIGHT}" y="17" text-anchor="end">${warn}</text>` : "") + g +
      `<path class="opd-axis" fill="none" d="M${ml},${TOP}V${TOP + ph}H${ml + pw}"/>` +
      `<svg class="opd-plot" x="${ml}" y="${TOP}" width="${pw}" height="${ph}" overflow="hidden">${raws}${lines}</svg>` +
      (parts.length ? "" : `<text class="opd-nodata" x="${ml + pw / 2}" y="${TOP + ph / 2}" text-anchor="middle">` +
        `${items.length ? "no points in this range" : "no data"}</text>`) +
      `<line class="opd-rule" y1="${TOP}" y2="${TOP + ph}" style="display:none"/><g class="opd-dots"></g>` +
      `<rect class="opd-sel" y="${TOP}" height="${ph}" width="0" style="display:none"/>`;
    p.info = { W, ml, pw, dom: dom.slice(), Y, logy, parts };
    return drawn;
  }
  // A path's points, joined once. Past 3 points a pixel, each pixel column keeps its first, lowest,
  // highest and last: the same picture, a fraction of the painting.
  function pathBuf(dense) {
    const pts = [], put = (x, y) => pts.push(r1(x) + "," + r1(y));
    let c = NaN, fx, fy, lx, ly, lo, hi;
    const flush = () => {
      if (c !== c) return; // no column yet
      put(fx, fy);
      if (lo < M.min(fy, ly)) put(c, lo);
      if (hi > M.max(fy, ly)) put(c, hi);
      if (lx !== fx) put(lx, ly);
    };
    return {
      add(x, y) {
        if (!dense) return put(x, y);
        if (M.round(x) !== c) { flush(); c = M.round(x); fx = lx = x; fy = ly = lo = hi = y; return; }
        lx = x; ly = y; lo = M.min(lo, y); hi = M.max(hi, y);
      },
      // a lone point: a zero-length segment, whose round cap shows as a dot
      d() { flush(); c = NaN; return pts.length ? "M" + pts.join("L") + (pts.length === 1 ? "h0" : "") : ""; },
    };
  }

  // ---- hover read-out
  function toView(p, clientX) { // client px -> the panel's viewBox x
    const r = p.svg.getBoundingClientRect();
    return r.width ? (clientX - r.left) * (p.info.W / r.width) : NaN;
  }
  function hideTip() {
    tipEl.style.display = "none";
    tipPanel = null;
    for (const p of panels.values()) {
      const rule = p.svg.querySelector(".opd-rule"), dots = p.svg.querySelector(".opd-dots");
      if (rule) rule.style.display = "none";
      if (dots) dots.textContent = "";
    }
  }
  function showTip(h) {
    const p = panels.get(h.metric), I = p && p.info, vx = I ? toView(p, h.x) : NaN;
    if (!I || !(vx >= I.ml && vx <= I.ml + I.pw)) return hideTip();
    const span = I.dom[1] - I.dom[0], xv = I.dom[0] + ((vx - I.ml) / I.pw) * span;
    let rows = "", dots = "";
    for (const q of I.parts) {
      const st = q.s.steps, t = xv - q.o, n = st.length;
      if (!n) continue;
      // a series the cursor is not over (a finished stage 1 beside stage 2) has no point here: within
      // its steps, or half its spacing past either end, or it stays out of the read-out
      const slack = n > 1 ? (st[n - 1] - st[0]) / (n - 1) / 2 : span / 100;
      if (t < st[0] - slack || t > st[n - 1] + slack) continue;
      let i = bound(st, t);
      if (i >= n || (i > 0 && t - st[i - 1] < st[i] - t)) i--; // the nearest point in x
      const x = st[i] + q.o, v = q.s.values[i], m = q.sm[i], c = colorOf(q.s.job);
      if (x < I.dom[0] || x > I.dom[1]) continue;
      const text = `${q.s.label} \u00b7 step ${fmtStep(x)}${q.o ? ` (job step ${fmtStep(st[i])})` : ""}` +
        ` \u00b7 value ${fmtVal(v)} (smoothed ${fmtVal(m)})`;
      rows += `<div class="opd-tip-row"><span class="opd-swatch" style="background:${c}"></span><span>${esc(text)}</span></div>`;
      if (!I.logy || m > 0) dots += `<circle r="3.2" cx="${r1(I.ml + ((x - I.dom[0]) * I.pw) / span)}" cy="${r1(TOP + I.Y(m))}" fill="${c}"/>`;
    }
    if (!rows) return hideTip();
    if (tipPanel !== p) hideTip(); // the cursor moved to another panel
    tipPanel = p;
    const rule = p.svg.querySelector(".opd-rule");
    rule.setAttribute("x1", r1(vx)); rule.setAttribute("x2", r1(vx)); rule.style.display = "";
    p.svg.querySelector(".opd-dots").innerHTML = dots;
    tipEl.innerHTML = `<div class="opd-tip-head">${esc(p.metric)}</div>${rows}`;
    tipEl.style.maxWidth = M.max(120, M.min(460, el.clientWidth - 8)) + "px"; // long labels wrap inside
    tipEl.style.display = "block";
    // near the cursor, flipped left (or up) rather than clipped at the root's edge
    const r = el.getBoundingClientRect(), cx = h.x - r.left, cy = h.y - r.top, tw = tipEl.offsetWidth, th = tipEl.offsetHeight;
    let left = cx + 14, top = cy + 14;
    if (left + tw > el.clientWidth) left = cx - 14 - tw;
    if (left < 0) left = M.max(0, el.clientWidth - tw);
    if (top + th > el.clientHeight) top = M.max(0, cy - 14 - th);
    tipEl.style.left = left + "px"; tipEl.style.top = top + "px";
  }

  // ---- zoom and pan: one x-domain for every panel
  function clampZoom(z) {
    const span = z[1] - z[0], fs = full[1] - full[0];
    if (!(span > 0) || span >= fs * 0.999) return null; // as wide as everything: not zoomed
    const lo = M.min(M.max(z[0], full[0]), full[1] - span);
    return [lo, lo + span];
  }
  function bindPanel(p) {
    const svg = p.svg, on = (ev, f, o) => svg.addEventListener(ev, f, o);
    on("pointermove", (e) => {
      if (drag) return onDrag(e);
      hover = { metric: p.metric, x: e.clientX, y: e.clientY };
      showTip(hover);
    });
    on("pointerleave", () => { if (!drag) { hover = null; hideTip(); } });
    on("pointerdown", (e) => {
      if (e.button !== 0 || !p.info) return;
      drag = { p, x0: e.clientX, vx0: toView(p, e.clientX), k: p.info.W / (svg.getBoundingClientRect().width || 1),
        dom: p.info.dom, select: e.shiftKey || e.altKey, moved: false };
      try { svg.setPointerCapture(e.pointerId); } catch (err) { /* not a real pointer */ }
      e.preventDefault();
    });
    const end = (e) => {
      const d = drag;
      drag = null;
      if (!d || !d.moved || !d.select) return;
      d.p.svg.querySelector(".opd-sel").style.display = "none";
      const I = d.p.info, vx = toView(d.p, e.clientX), k = (I.dom[1] - I.dom[0]) / I.pw;
      const a = M.max(I.ml, M.min(d.vx0, vx)), b = M.min(I.ml + I.pw, M.max(d.vx0, vx));
      if (b - a >= 4) { ui.zoom = [I.dom[0] + (a - I.ml) * k, I.dom[0] + (b - I.ml) * k]; interactive(); }
    };
    on("pointerup", end);
    on("pointercancel", end);
    on("dblclick", () => { ui.zoom = null; interactive(); });
    on("wheel", (e) => {
      const I = p.info, dy = e.deltaY * (e.deltaMode === 1 ? 16 : e.deltaMode === 2 ? 400 : 1);
      // A plain wheel scrolls the notebook (a chart must not trap the page); ctrl/alt/meta+wheel, or a
      // trackpad pinch (Chrome sends it as ctrl+wheel), zooms.
      if (!I || !dy || !(e.ctrlKey || e.altKey || e.metaKey)) return;
      const f = M.min(2, M.max(0.5, M.exp(dy * 0.002))), dom = ui.zoom || full;
      const c = dom[0] + ((M.min(I.ml + I.pw, M.max(I.ml, toView(p, e.clientX) || 0)) - I.ml) / I.pw) * (dom[1] - dom[0]);
      if (f < 1 && (dom[1] - dom[0]) * f < (full[1] - full[0]) * 1e-6) return;
      const z = clampZoom([c - (c - dom[0]) * f, c + (dom[1] - c) * f]);
      if (!z && !ui.zoom) return; // zooming out past everything: let the page scroll
      e.preventDefault();
      ui.zoom = z;
      interactive(true);
    }, { passive: false });
  }
  function onDrag(e) {
    const d = drag, I = d.p.info, dv = (e.clientX - d.x0) * d.k;
    if (!d.moved && M.abs(dv) < 3) return; // a click, not a drag yet
    if (!d.moved) { d.moved = true; hideTip(); }
    if (d.select) {
      const sel = d.p.svg.querySelector(".opd-sel");
      const a = M.max(I.ml, M.min(d.vx0, d.vx0 + dv)), b = M.min(I.ml + I.pw, M.max(d.vx0, d.vx0 + dv));
      sel.setAttribute("x", r1(a)); sel.setAttribute("width", r1(M.max(0, b - a))); sel.style.display = "";
    } else if (ui.zoom) { // nothing to pan while everything is shown
      const shift = (dv / I.pw) * (d.dom[1] - d.dom[0]);
      ui.zoom = [d.dom[0] - shift, d.dom[1] - shift];
      interactive(true);
    }
  }

  // ---- redraws: data waits for the next frame; a click draws at once; a slider, wheel or pan
  // draws at once while that is cheap, else once a frame
  function schedule() {
    if (pending) return;
    pending = true;
    const go = () => { if (pending) draw(); };
    if (win.requestAnimationFrame) win.requestAnimationFrame(go);
    win.setTimeout(go, win.requestAnimationFrame ? 250 : 0); // a hidden frame may never paint
  }
  function interactive(continuous) { if (!continuous || (cost < 30 && !pending)) draw(); else schedule(); }

  // ---- controls
  legendEl.addEventListener("click", (e) => {
    const it = e.target.closest && e.target.closest(".opd-legend-item"), job = it && it.getAttribute("data-job");
    if (it && !ui.hidden.delete(job)) ui.hidden.add(job);
    if (it) interactive();
  });
  smoothEl.value = String(ui.smoothing);
  smoothValEl.textContent = ui.smoothing.toFixed(2);
  const onSmooth = () => {
    const w = weight(parseFloat(smoothEl.value));
    if (w !== ui.smoothing) { ui.smoothing = w; smoothValEl.textContent = w.toFixed(2); interactive(true); }
  };
  const onLog = () => { if (ui.logy !== logEl.checked) { ui.logy = logEl.checked; interactive(); } };
  const onAlign = () => { // x changes meaning, so the old zoom would be arbitrary
    if (ui.align !== alignEl.checked) { ui.align = alignEl.checked; ui.zoom = null; interactive(); }
  };
  for (const ev of ["input", "change"]) {
    smoothEl.addEventListener(ev, onSmooth); logEl.addEventListener(ev, onLog); alignEl.addEventListener(ev, onAlign);
  }
  resetEl.addEventListener("click", () => { ui.zoom = null; interactive(); });
  // a new width: new panel sizes (the viewBox matches the pixels, so text stays 12px)
  const onResize = () => { if (panelsEl.clientWidth !== drawnWidth) schedule(); };
  if (win.ResizeObserver) new win.ResizeObserver(onResize).observe(el); else win.addEventListener("resize", onResize);

  load(data);
  draw();
  return {
    append(points) { (points || []).forEach(ingest); schedule(); },
    replace(d) { load(d); draw(); }, // the user's controls stay
    state() {
      if (pending) draw(); // what the next frame shows
      return { points: model.points, drawn: view.drawn, smoothing: ui.smoothing, logy: ui.logy, align: ui.align,
        hidden: [...ui.hidden], xdomain: view.xdomain && view.xdomain.slice(), zoomed: !!ui.zoom };
    },
    series(job, metric) { // the points held for one series (what the panel draws)
      const s = model.byKey.get(String(job) + "\u0000" + String(metric));
      return s ? { steps: s.steps.slice(), values: s.values.slice() } : null;
    },
  };
}
