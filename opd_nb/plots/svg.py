"""The metric chart as a small static SVG: what a saved notebook shows where scripts cannot run.

Why: an untrusted notebook (a fresh clone), GitHub's viewer and other sanitizing hosts drop the
interactive chart (an ``<iframe srcdoc>`` with a script) but keep an ``<img>`` whose ``src`` is a
``data:`` URL. :func:`curves_img` draws the same chart document (:class:`opd_nb.plots.series.ChartFeed`'s
``full()``) as one inline SVG: a panel per metric, one polyline per job in the interactive chart's
colours, downsampled (LTTB) to a few hundred points per series so a tutorial stays small. Pure
functions of the document: no widget, no browser.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from opd_nb.plots.series import PALETTE, lttb

STATIC_POINTS = 150  # per series: a panel's plot is about 300 px wide
WIDTH, PANEL_H, GAP, LEGEND_H = 720, 132, 10, 20
LEFT, RIGHT, TOP, BOTTOM = 46, 8, 20, 16


def _num(value: float) -> str:
    """A tick label: three significant digits (0.0421, 1.25e-05, 512)."""
    return f"{value:.3g}"


def _step(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.4g}"


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def job_colors(series: Sequence[Mapping[str, Any]], palette: Sequence[str] = PALETTE) -> dict[str, str]:
    """Each job's colour, in order of first appearance (the order the interactive chart uses)."""
    colors: dict[str, str] = {}
    for s in series:
        job = str(s.get("job"))
        if job not in colors:
            colors[job] = palette[len(colors) % len(palette)]
    return colors


def _x_range(series: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    """The global steps every panel shares (a continued job sits after its parent)."""
    lo, hi = math.inf, -math.inf
    for s in series:
        if s.get("steps"):
            offset = float(s.get("offset") or 0)
            lo, hi = min(lo, s["steps"][0] + offset), max(hi, s["steps"][-1] + offset)
    if hi - lo < 1e-9:
        lo, hi = lo - 1, hi + 1
    return lo, hi


def _panel(
    metric: str,
    items: Sequence[Mapping[str, Any]],
    box: tuple[float, float, float],
    xr: tuple[float, float],
    colors: Mapping[str, str],
) -> str:
    """One panel at (x, y) of width w: its title, y extremes, x extremes and one polyline per job."""
    x0, y0, w = box
    pw, ph = w - LEFT - RIGHT, PANEL_H - TOP - BOTTOM
    values = [v for s in items for v in s["values"]]
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.06 if hi > lo else (abs(lo) * 0.1 or 1.0)
    lo, hi = lo - pad, hi + pad
    kx, ky = pw / (xr[1] - xr[0]), ph / (hi - lo)
    left, top = x0 + LEFT, y0 + TOP
    lines = []
    for s in items:
        steps, vals = lttb(s["steps"], s["values"], STATIC_POINTS)
        offset = float(s.get("offset") or 0)
        points = ",".join(
            f"{left + (st + offset - xr[0]) * kx:.0f},{top + (hi - v) * ky:.0f}"
            for st, v in zip(steps, vals, strict=True)
        )
        lines.append(
            f"<polyline fill='none' stroke='{colors[str(s['job'])]}' stroke-width='1.5' points='{points}'/>"
        )
    room = max(8, int((w - 12) / 6.6))
    name = metric if len(metric) <= room else "…" + metric[1 - room :]
    return (
        f"<rect x='{x0}' y='{y0}' width='{w}' height='{PANEL_H}' rx='4' fill='none' stroke='#8886'/>"
        f"<text x='{x0 + 8}' y='{y0 + 14}' font-weight='600'>{_esc(name)}</text>"
        f"<path d='M{left},{top}V{top + ph}H{left + pw}' fill='none' stroke='#8889'/>"
        f"<text x='{left - 4}' y='{top + 8}' text-anchor='end' font-size='10'>{_num(hi - pad)}</text>"
        f"<text x='{left - 4}' y='{top + ph}' text-anchor='end' font-size='10'>{_num(lo + pad)}</text>"
        f"<text x='{left}' y='{top + ph + 12}' font-size='10'>{_step(xr[0])}</text>"
        f"<text x='{left + pw}' y='{top + ph + 12}' text-anchor='end' font-size='10'>{_step(xr[1])}</text>"
        + "".join(lines)
    )


def _legend(series: Sequence[Mapping[str, Any]], colors: Mapping[str, str]) -> str:
    labels: dict[str, str] = {}
    for s in series:
        labels.setdefault(str(s["job"]), str(s.get("label") or s["job"]))
    parts, x = [], 4.0
    for job, label in labels.items():
        text = label if len(label) <= 60 else label[:59] + "…"
        parts.append(
            f"<rect x='{x:.0f}' y='6' width='14' height='3' fill='{colors[job]}'/>"
            f"<text x='{x + 18:.0f}' y='11'>{_esc(text)}</text>"
        )
        x += 30 + 6.2 * len(text)
    return "".join(parts)


def curves_svg(document: Mapping[str, Any]) -> str:
    """The chart document as one SVG ("" when it holds no points)."""
    series = [s for s in document.get("series") or [] if s.get("steps")]
    if not series:
        return ""
    panels = [m for m in document.get("panels") or [] if any(s["metric"] == m for s in series)]
    panels += sorted({s["metric"] for s in series} - set(panels))
    colors = job_colors(series, document.get("palette") or PALETTE)
    cols = 2 if len(panels) > 1 else 1
    w = (WIDTH - GAP * (cols - 1)) / cols
    xr = _x_range(series)
    body = [_legend(series, colors)]
    for i, metric in enumerate(panels):
        box = ((i % cols) * (w + GAP), LEGEND_H + (i // cols) * (PANEL_H + GAP), w)
        body.append(_panel(metric, [s for s in series if s["metric"] == metric], box, xr, colors))
    height = LEGEND_H + math.ceil(len(panels) / cols) * (PANEL_H + GAP)
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {WIDTH} {height}' width='{WIDTH}' "
        f"height='{height}' font-family='system-ui,sans-serif' font-size='11' fill='#555'>"
        + "".join(body)
        + "</svg>"
    )


def curves_img(document: Mapping[str, Any], *, alt: str = "metric curves") -> str:
    """An ``<img>`` holding :func:`curves_svg` as a ``data:`` URL ("" when there is nothing to draw):
    the form of the chart that HTML sanitizers keep."""
    svg = curves_svg(document)
    if not svg:
        return ""
    src = "data:image/svg+xml," + quote(svg, safe=",.=/:;'()-_")
    return f'<img class="opd-chart-img" alt="{_esc(alt)}" src="{src}" style="max-width:100%;height:auto"/>'
