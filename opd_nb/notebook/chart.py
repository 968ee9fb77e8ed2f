"""The interactive metric chart: an anywidget while the kernel runs, a self-contained page when saved.

One JavaScript file (``static/chart.js``, ours, no library and no network) draws both:

* live, as an `anywidget <https://anywidget.dev>`_ whose ``delta`` trait carries only the points of
  the latest poll (a sequence number per delta; a view that missed one asks for the whole ``data``
  again, so a reloaded page catches up), which works in JupyterLab, Notebook 7, VS Code and Colab;
* saved, as ``text/html``: the same script and the points inlined in an ``<iframe srcdoc>``, so a
  saved notebook or its ``nbconvert --to html`` export keeps hover, zoom and smoothing with no kernel;
  next to it a static SVG picture of the curves (:mod:`opd_nb.plots.svg`), which is what stays where a
  sanitizer strips scripts and frames (an untrusted notebook, GitHub's viewer).

anywidget is imported on the first chart, never by ``%load_ext opd_nb``. The widget is only ever
changed by trait assignments, so the monitor's polling thread may feed it.
"""

from __future__ import annotations

import html
import json
import math
import threading
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from opd_nb.notebook.snapshot import MAKE_INTERACTIVE, static_js
from opd_nb.plots.series import ChartFeed, Rows
from opd_nb.plots.svg import curves_img
from opd_nb.views import theme

__all__ = ["MetricChart", "chart_page", "chart_html"]

PANEL_HEIGHT = 215  # px per row of panels (each about 190 px high, plus its gap)
CHROME_HEIGHT = 110  # px for the title, the controls, one legend row and the note
LEGEND_PER_ROW, LEGEND_ROW_HEIGHT = 3, 22  # legend entries that fit one row of a notebook-wide chart

# The anywidget module: the chart script, then the glue that feeds it from the model's traits. Each
# delta is also folded into the view's own copy of ``data`` (set locally, never sent back): the widget
# state a notebook saves (JupyterLab's "Save Widget State Automatically") then holds every point shown,
# and a view restored without a kernel draws them all instead of asking a kernel that is not there.
_GLUE = """
function opdMerge(doc, points, seq) {
  const out = Object.assign({}, doc, { series: (doc.series || []).slice(), seq });
  const at = new Map(out.series.map((s, i) => [s.job + "\\u0000" + s.metric, i]));
  for (const p of points || []) {
    const key = p.job + "\\u0000" + p.metric, i = at.get(key);
    if (i === undefined) { if (!p.replace) { at.set(key, out.series.length); out.series.push(p); } continue; }
    const s = out.series[i];
    if (p.replace) { // new values for points held: at their steps, nothing added
      const values = s.values.slice();
      p.steps.forEach((st, k) => { const j = s.steps.indexOf(st); if (j >= 0) values[j] = p.values[k]; });
      out.series[i] = Object.assign({}, s, { values });
      continue;
    }
    out.series[i] = Object.assign({}, s, p, { steps: s.steps.concat(p.steps), values: s.values.concat(p.values) });
  }
  return out;
}
export default {
  render({ model, el }) {
    const chart = opdChart(el, model.get("data"));
    let seq = model.get("data").seq || 0;
    const onData = () => { const d = model.get("data"); if ((d.seq || 0) === seq && d.merged) return; chart.replace(d); seq = d.seq || 0; };
    const onDelta = () => {
      const d = model.get("delta");
      if (!d || !d.seq || d.seq <= seq) return;
      if (d.seq === seq + 1) {
        chart.append(d.points); seq = d.seq;
        if ((model.get("data").seq || 0) < seq) model.set("data", Object.assign(opdMerge(model.get("data"), d.points, seq), { merged: true }));
      } else {
        try { model.send({ kind: "sync" }); } catch (err) { /* restored without a kernel: draw what is held */ }
      }
    };
    model.on("change:data", onData);
    model.on("change:delta", onDelta);
    onDelta();
    return () => { model.off("change:data", onData); model.off("change:delta", onDelta); };
  }
};
"""


def chart_js() -> str:
    """The chart's script (a classic script that defines ``opdChart(el, data)``)."""
    return static_js("chart.js")


def _script_json(data: Any) -> str:
    """JSON safe inside a ``<script>``: no ``</script>`` or ``<!--`` can end it early."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


# In the page: tell the notebook around it how tall the chart is (an iframe cannot size itself).
_POST_HEIGHT = (
    "(function(){var root=document.getElementById('opd-chart'),last=0;if(window.parent===window)return;"
    "function post(){var h=Math.ceil(root.getBoundingClientRect().height)+4;"
    "if(h!==last){last=h;window.parent.postMessage({opdChartHeight:h},'*');}}"
    "if(window.ResizeObserver)new ResizeObserver(post).observe(root);post();"
    # the host's theme, which a frame cannot see: its colour scheme turns Canvas and CanvasText (the
    # chart draws in currentColor) light or dark
    "window.addEventListener('message',function(e){if(e.source===window.parent&&e.data&&"
    "(e.data.opdTheme==='dark'||e.data.opdTheme==='light'))"
    "document.documentElement.style.colorScheme=e.data.opdTheme;});})();"
)
# In the notebook, after the frame (a trusted output runs it; a sanitizer drops it with the frame):
# hide the static picture, and size the frame to the height its page reports.
_HOST = (
    "(function(root){if(!root)return;var frame=root.querySelector('iframe.opd-chart-frame'),"
    "still=root.querySelector('.opd-chart-static');if(!frame)return;if(still)still.style.display='none';"
    "function dark(){var b=document.body;return b.getAttribute('data-jp-theme-light')==='false'||"
    "b.classList.contains('vscode-dark');}"
    "function theme(){if(frame.contentWindow)frame.contentWindow.postMessage({opdTheme:dark()?'dark':'light'},'*');}"
    "function on(e){if(!frame.isConnected){window.removeEventListener('message',on);return;}"
    "if(e.source===frame.contentWindow&&e.data&&typeof e.data.opdChartHeight==='number'){"
    "frame.style.height=Math.max(40,Math.min(20000,e.data.opdChartHeight))+'px';theme();}}"
    "window.addEventListener('message',on);frame.addEventListener('load',theme);"
    "if(window.MutationObserver)new MutationObserver(theme).observe(document.body,"
    "{attributes:true,attributeFilter:['data-jp-theme-light','class']});"
    "})(document.currentScript&&document.currentScript.parentNode);"
)
STATIC_NOTE = (
    f"A static picture of the curves: for the interactive chart (hover, zoom, smoothing), {MAKE_INTERACTIVE}."
)


def chart_page(data: Mapping[str, Any]) -> str:
    """A whole HTML page that draws `data` with no kernel and no network."""
    return (
        '<!doctype html><html><head><meta charset="utf-8"><title>'
        + html.escape(str(data.get("title") or "metrics"))
        + '</title></head><body style="margin:0;font-family:system-ui,sans-serif">'
        + '<div id="opd-chart"></div><script>'
        + chart_js()
        + "\nopdChart(document.getElementById('opd-chart'), "
        + _script_json(data)
        + ");</script><script>"
        + _POST_HEIGHT
        + "</script></body></html>"
    )


def chart_height(data: Mapping[str, Any]) -> int:
    """The frame's first height, for two columns of panels, until its page reports its own."""
    rows = max(1, math.ceil(len(data.get("panels") or []) / 2))
    jobs = {s.get("job") for s in data.get("series") or []}
    legend_rows = max(0, math.ceil(len(jobs) / LEGEND_PER_ROW) - 1)  # a sweep's legend wraps
    return CHROME_HEIGHT + LEGEND_ROW_HEIGHT * legend_rows + PANEL_HEIGHT * rows


def chart_html(data: Mapping[str, Any]) -> str:
    """The saved-notebook form ("" with no points): the interactive page in an ``<iframe srcdoc>``
    (scripts allowed, nothing else), sized to its content, and a static SVG picture of the same curves
    with a line saying how to get the interactive one. Where scripts run, the picture is hidden; where
    a sanitizer strips scripts and frames (an untrusted notebook, GitHub), the picture is what stays."""
    if not data.get("series"):
        return ""
    title = html.escape(str(data.get("title") or "metric curves"))
    picture = curves_img(data, alt=f"{title} (static picture)")
    return (
        f'<div class="opd-chart-snap"><style>{theme.inverted_in_dark(".opd-chart-img")}</style>'
        f'<div class="opd-chart-static">{picture}<div><small>{html.escape(STATIC_NOTE)}</small></div></div>'
        '<iframe class="opd-chart-frame" sandbox="allow-scripts" '
        f'style="width:100%;height:{chart_height(data)}px;border:0" title="{title}" '
        f'srcdoc="{html.escape(chart_page(data), quote=True)}"></iframe>'
        f"<script>{_HOST}</script></div>"
    )


@cache
def _widget_class() -> type:
    """The anywidget class, built on first use (anywidget and traitlets load only then)."""
    import anywidget
    import traitlets

    class ChartWidget(anywidget.AnyWidget):
        _esm = chart_js() + _GLUE
        data = traitlets.Dict().tag(sync=True)
        delta = traitlets.Dict().tag(sync=True)

    return ChartWidget


class MetricChart:
    """One chart of metric curves, fed the whole metric rows of its jobs on every poll.

    ``update`` keeps every point (:class:`~opd_nb.plots.series.ChartFeed`) and, once a widget exists,
    assigns only the new points to it. ``to_html`` is the saved snapshot of everything so far."""

    def __init__(self, title: str | None = None):
        self.feed = ChartFeed(title=title)
        self._lock = threading.Lock()
        self._widget: Any = None
        self._seq = 0
        self.updates = 0  # deltas pushed to the widget (each one poll's new points)

    def update(
        self,
        rows_by_job: Mapping[str, Rows],
        panels: Sequence[str],
        *,
        labels: Mapping[str, str] | None = None,
        offsets: Mapping[str, float] | None = None,
    ) -> int:
        """Take the latest rows; returns how many new points went to the widget (0 without one)."""
        with self._lock:
            self.feed.labels.update(labels or {})
            # Series move only when their offset differs from the one they were drawn at: a first
            # offset of 0 (no parent, the usual case) still goes out as a delta.
            moved = {j: o for j, o in (offsets or {}).items() if self.feed.offset(j) != o}
            self.feed.offsets.update(moved)
            self.feed.update(rows_by_job, panels)
            if self._widget is None:
                return 0
            if moved:  # a parent found late moves whole series: redraw from the full data
                self._widget.data = self._document()
                return self.feed.points
            points = self.feed.delta()
            if not points:
                return 0
            self._seq += 1
            self._widget.delta = {"seq": self._seq, "points": points}
            self.updates += 1
            return sum(len(p["steps"]) for p in points)

    def _document(self) -> dict[str, Any]:
        """Everything as the widget's ``data`` (marks every point as sent; the lock is held)."""
        return {**self.feed.full(), "seq": self._seq}

    def widget(self) -> Any:
        """The anywidget (None where anywidget is not installed)."""
        with self._lock:
            if self._widget is None:
                try:
                    cls = _widget_class()
                except ImportError:
                    return None
                self._widget = cls(data=self._document())
                self._widget.on_msg(self._on_msg)
            return self._widget

    def forget_widget(self) -> None:
        """Drop the widget (its view closes it); a later :meth:`widget` builds a new one from all points."""
        with self._lock:
            self._widget = None

    def _on_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """A view that missed a delta asks for everything again."""
        if isinstance(content, dict) and content.get("kind") == "sync":
            with self._lock:
                self._widget.data = self._document()

    def data(self) -> dict[str, Any]:
        """The chart document as it stands (for the snapshot and for tests)."""
        with self._lock:
            return self.feed.full(mark=False)

    def to_html(self) -> str:
        """The saved snapshot ("" while there is nothing to draw)."""
        return chart_html(self.data())
