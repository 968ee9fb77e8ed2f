"""The rollout viewer's ipywidgets: built once, then updated by value assignments only.

The controls call back into the viewer (which fetches and re-sorts); ``update`` pushes the
viewer's state into the widgets. While ``update`` runs, the controls' own change events are
ignored, so setting a dropdown's options never triggers a second fetch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opd_nb.client.rollout_results import SORTS
from opd_nb.errors import OpdError
from opd_nb.notebook import rollout_html
from opd_nb.views import render

KIND_OPTIONS = (("all", "all"), ("train", "train"), ("validation", "validation"))
CSS = (
    "<style>.opd-rollout-viewer select{font-family:monospace;font-size:12px}"
    ".opd-rollout-viewer .opd-tok:hover{outline:1px solid #555}</style>"
)


def _num(value: Any, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def row_label(row: Mapping[str, Any]) -> str:
    """One table row as fixed-width text (the Select shows it in a monospace font)."""
    kind = "val" if row["kind"] == "validation" else "trn"
    return (
        f"{row['index']:>3} {kind} {_num(row['reward'], '.2f'):>5} {row['length']:>4} "
        f"{'cut' if row['truncated'] else '':>3} {_num(row['mean_log_ratio'], '+.2f'):>6}  "
        f"{rollout_html.one_line(row['prompt'], 14):<14} → {rollout_html.one_line(row['completion'], 70)}"
    )


HEADER = "  # kind reward  len cut  Δmean  prompt         → completion"


class ViewerWidgets:
    """Header, controls (step, kind, sort, refresh), the samples table, and the selected sample."""

    def __init__(self, W: Any, viewer: Any):
        self.viewer = viewer
        self._updating = False
        self.header = W.HTML()
        self.step = W.Dropdown(description="step", layout=W.Layout(width="160px"))
        self.kind = W.ToggleButtons(options=list(KIND_OPTIONS), value="all", description="kind")
        # wide enough for the longest label ("validation" was cut to "validat…" at 80px)
        self.kind.style.button_width = f"{max(len(label) for label, _ in KIND_OPTIONS) + 3}ch"
        self.sort = W.Dropdown(
            options=[(label, key) for key, label in SORTS.items()],
            description="sort",
            layout=W.Layout(width="340px"),
        )
        self.refresh = W.Button(description="refresh", icon="refresh", layout=W.Layout(width="auto"))
        self.columns = W.HTML(f"<pre style='margin:0'>{render.esc(HEADER)}</pre>")
        self.table = W.Select(options=[], rows=10, layout=W.Layout(width="100%"))
        self.sample = W.HTML()
        self.message = W.HTML()
        self.step.observe(self._on_step, names="value")
        self.kind.observe(self._on_kind, names="value")
        self.sort.observe(self._on_sort, names="value")
        self.table.observe(self._on_select, names="value")
        self.refresh.on_click(lambda _b: self._act(self.viewer.refresh))
        self.box = W.VBox(
            [
                W.HTML(CSS),
                self.header,
                W.HBox([self.step, self.sort, self.refresh]),
                self.kind,
                self.columns,
                self.table,
                self.message,
                self.sample,
            ]
        )
        self.box.add_class("opd-rollout-viewer")

    # ---- control callbacks (kernel thread) ----------------------------------------------------
    def _act(self, fn: Any, *args: Any) -> None:
        if self._updating:
            return
        try:
            fn(*args)
            self.message.value = ""
        except OpdError as exc:
            self.message.value = render.box(f'<span class="bad">{render.esc(str(exc))}</span>')

    def _on_step(self, change: Mapping[str, Any]) -> None:
        if change["new"] is not None and change["new"] != self.viewer.step:
            self._act(self.viewer.set_step, change["new"])

    def _on_kind(self, change: Mapping[str, Any]) -> None:
        self._act(self.viewer.set_kind, change["new"])

    def _on_sort(self, change: Mapping[str, Any]) -> None:
        self._act(self.viewer.set_sort, change["new"])

    def _on_select(self, change: Mapping[str, Any]) -> None:
        if change["new"] is not None and change["new"] != self.viewer.selected:
            self._act(self.viewer.select, change["new"])

    # ---- state -> widgets ---------------------------------------------------------------------
    def update(self, state: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> None:
        """Push the viewer's state into the widgets (value assignments only)."""
        self._updating = True
        try:
            self._update(state, records)
        finally:
            self._updating = False

    def _update(self, state: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> None:
        title = f"<b>rollouts of {render.esc(state['job_id'])}</b>"
        usable = state["note"] is None
        for control in (self.step, self.kind, self.sort, self.refresh, self.table):
            control.disabled = not usable
        if not usable:
            self.header.value = render.box(f"{title}<br/><i>{render.esc(state['note'])}</i>")
            self.table.options, self.sample.value = [], ""
            return
        if state["step"] is None:
            where = "<i>no rollouts recorded yet: press refresh once the job has run a step</i>"
        else:
            where = (
                f"step {state['step']} · {len(records)} sample(s) · kind {render.esc(state['kind'] or 'all')}"
            )
        self.header.value = render.box(f"{title} — {where}" + rollout_html.legend_html())
        self.step.options = [(str(s), s) for s in state["steps"]]
        self.step.value = state["step"] if state["step"] in state["steps"] else None
        self.kind.value = state["kind"] or "all"
        self.sort.value = state["sort"]
        self.table.options = [(row_label(r), r["index"]) for r in state["rows"]]
        self.table.rows = max(3, min(12, len(state["rows"])))
        self.table.value = state["selected"]
        chosen = state["selected"]
        self.sample.value = (
            render.box(rollout_html.sample_html(records[chosen], self.viewer.trajectory_html(chosen)))
            if chosen is not None
            else ""
        )
