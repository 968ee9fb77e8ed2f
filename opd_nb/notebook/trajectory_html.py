"""Static HTML of traced calls: a waterfall per trajectory, each span a row that opens to its payloads.

Each span is a ``<details>`` row: its name, kind, a bar placed by its start and length within the
trajectory, its duration and marks (ERROR for a failed span, SLOW for one that took half the
trajectory or more); opened, it shows what the span holds: an LLM call's input and output messages and
token usage, a tool call's arguments, result and error, a reward's score and metrics. ``<details>``
needs no script, so the rows open in a saved notebook, an nbconvert export or an untrusted one alike;
``static/trajectory.js`` adds "expand all" and "only slow/failed". Every piece of span text is user
text and goes through ``render.esc``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from opd_nb.traces.facts import details, one_line
from opd_nb.traces.page import count_line
from opd_nb.traces.spans import SpanNode, Trajectory
from opd_nb.views import render, theme

MAX_TEXT = 4000  # characters of one message or payload in a pane (a saved notebook stays small)
KINDS = [k for k in theme.SPAN_KIND if k != "OTHER"]  # the kinds the legend names
SCROLL_PX = 640  # the waterfalls' height before they scroll
CSS = (
    "<style>.opd-traj details{margin:0}.opd-traj summary{cursor:pointer;list-style:none;display:flex;"
    "align-items:center;gap:6px;font-family:monospace;font-size:12px;white-space:nowrap}"
    ".opd-traj summary::-webkit-details-marker{display:none}.opd-traj .lane{position:relative;flex:1 1 40%;"
    f"height:10px;background:{theme.TINT};min-width:120px}}.opd-traj .bar{{position:absolute;top:1px;height:8px;"
    "min-width:2px}.opd-traj .name{flex:0 0 38%;overflow:hidden;text-overflow:ellipsis}"
    ".opd-traj .fail,.opd-traj .slow{font-weight:bold}"
    + theme.status_css(".opd-traj", {"bad": "fail", "warn": "slow"})
    # a kind's label and bar (a failed span's bar: "bad"), in the host theme's twin
    + theme.palette_css(".opd-traj", theme.SPAN_KIND, {k: f"k-{k}" for k in theme.SPAN_KIND})
    + theme.palette_css(
        ".opd-traj", theme.SPAN_KIND, {k: f"bar.k-{k}" for k in theme.SPAN_KIND}, "background"
    )
    + theme.palette_css(".opd-traj", theme.STATUS, {"bad": "bar.failed"}, "background")
    + ".opd-traj .pane{margin:2px 0 6px 24px;padding:4px 8px;"
    f"border-left:3px solid {theme.RULE};font-size:12px}}"
    ".opd-traj pre{white-space:pre-wrap;margin:2px 0;max-height:240px;overflow:auto}</style>"
)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _value_html(value: Any) -> str:
    if isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value):
        return "".join(
            f"<div><b>{render.esc(m['role'])}:</b><pre>{render.esc(_cut(m.get('text', '')))}</pre></div>"
            for m in value
        )
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=1, default=str)
    return f"<pre>{render.esc(_cut(text))}</pre>"


def pane_html(node: SpanNode) -> str:
    """What one span holds (messages, usage, arguments, result, metrics, error) and its ids."""
    s = node.span
    parts = [f"<div><b>{render.esc(k)}</b>{_value_html(v)}</div>" for k, v in details(s).items()]
    ids = f"span {s.span_id} · {s.status}" + (f" · {s.service}" if s.service else "")
    parts.append(f'<div style="{theme.MUTED}">{render.esc(ids)}</div>')
    return f'<div class="pane">{"".join(parts)}</div>'


def row_html(t: Trajectory, depth: int, node: SpanNode) -> str:
    s = node.span
    total = max(t.duration_ms, 1e-9)
    left = 100.0 * (s.start_ms - t.start_ms) / total
    width = max(100.0 * s.duration_ms / total, 0.3)
    kind_class = f"k-{s.kind if s.kind in theme.SPAN_KIND else 'OTHER'}"
    marks = ('<span class="fail">ERROR</span>' if s.failed else "") + (
        '<span class="slow">SLOW</span>' if node.slow else ""
    )
    flags = " ".join(f for f, on in (("failed", s.failed), ("slow", node.slow)) if on)
    name = f"{'&nbsp;' * 2 * depth}{render.esc(one_line(s.name, 70))}"
    kind = f' <small class="{kind_class}">{render.esc(s.kind)}</small>' if s.kind else ""
    return (
        f'<details class="opd-span" data-flags="{flags}"><summary>'
        f'<span class="name" title="{render.esc(s.name)}">{name}{kind}</span>'
        f'<span class="lane"><span class="bar {"failed" if s.failed else kind_class}" '
        f'style="left:{left:.2f}%;width:{min(width, 100 - left):.2f}%"></span></span>'
        f'<span style="flex:0 0 80px;text-align:right">{s.duration_ms:.1f} ms</span>{marks}</summary>'
        f"{pane_html(node)}</details>"
    )


def trajectory_html(t: Trajectory) -> str:
    where = t.sample.label() if t.sample else "not tied to a rollout sample"
    errors = f' · <span class="fail">{t.errors} failed span(s)</span>' if t.errors else ""
    head = f"<div><b>{render.esc(where)}</b> · {t.duration_ms:.1f} ms · {t.spans} span(s){errors}</div>"
    rows = "".join(row_html(t, depth, node) for depth, node in t.nodes())
    return f'<div class="opd-trajectory" style="margin:4px 0 8px 0">{head}{rows}</div>'


def waterfall_html(trajectories: Sequence[Trajectory], *, empty: str = "no spans received") -> str:
    """The trajectories (a record's rollout call, then its reward calls), each a waterfall."""
    if not trajectories:
        return f'<div class="opd-traj"><i>{render.esc(empty)}</i></div>'
    legend = (
        " ".join(f'<span class="k-{k}">■ {k}</span>' for k in KINDS)
        + ' <span class="fail">■ failed</span> · click a span for what it holds'
    )
    body = "".join(trajectory_html(t) for t in trajectories)
    return (  # a step's many trajectories scroll inside the view, not down the notebook
        f'<div class="opd-traj">{CSS}<div style="font-size:11px">{legend}</div>'
        f'<div style="max-height:{SCROLL_PX}px;overflow:auto">{body}</div></div>'
    )


def view_html(state: dict[str, Any], trajectories: Sequence[Trajectory], *, scripted: bool = True) -> str:
    """The trajectory view's snapshot: where it stands, the step's numbers, the waterfalls (`scripted`:
    with the buttons ``static/trajectory.js`` serves; a widget's HTML runs no script, so it has none)."""
    title = f"traces of {state['job_id']}"
    if state["note"]:
        return render.box(f"<i>{render.esc(state['note'])}</i>", title=title)
    if state["step"] is None:
        return render.box(
            "<i>no spans received yet (a traced job sends them from its first step)</i>", title=title
        )
    which = f" · group {state['group']}" if state["group"] is not None else ""
    which += f" · sample {state['sample']}" if state["sample"] is not None else ""
    where = (
        f"step <b>{state['step']}</b> of {render.esc(render.ranges(state['steps']))} "
        f"({len(state['steps'])} with spans) · "
        f"kind {render.esc(state['kind'] or 'all')}{render.esc(which)} · "
        f"{render.esc(count_line(len(trajectories), state.get('total')))}"
    )
    numbers = " · ".join(f"{render.esc(k)} {v:.3g}" for k, v in sorted(state["metrics"].items()))
    tools = (
        '<div class="opd-traj-tools"><button data-act="open">expand all</button> '
        '<button data-act="close">collapse all</button> '
        '<label><input type="checkbox" data-act="only"/> only slow or failed spans</label></div>'
    )
    tools = tools if scripted else ""
    body = f"<div>{where}</div><div><small>{numbers}</small></div>{tools}{waterfall_html(trajectories)}"
    return render.box(body, title=title)
