"""The job monitor's ipywidgets: built once, then updated by trait assignments only.

``MonitorWidgets.update`` is what the polling thread calls: it only sets widget values (never
prints, never enters an ``Output``), which is safe from a background thread and keeps the cell
that displayed the monitor the only place anything appears.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from opd_nb.constants import CANCELED, FAILED, SUCCEEDED
from opd_nb.notebook import monitor_html
from opd_nb.views import render

NO_CHART = (
    "<small>live curves need anywidget (pip install 'opd-nb[notebook]'); the saved snapshot has them</small>"
)
BAR_STYLE = {SUCCEEDED: "success", FAILED: "danger", CANCELED: "warning"}


class MonitorWidgets:
    """Status table, one progress bar and cancel button per job, alerts, chart, samples, checkpoints, logs."""

    def __init__(
        self, W: Any, job_ids: Sequence[str], on_cancel: Callable[[str], None], guard: Any, *, chart: Any
    ):
        """`chart`: the metric chart's widget (:class:`~opd_nb.notebook.chart.MetricChart`), fed by
        the monitor itself; None (no anywidget) leaves the chart to the saved snapshot."""
        self.status = W.HTML()
        self.notes = W.HTML()
        self.bars = {jid: self._bar(W, jid) for jid in job_ids}
        self.plot = chart if chart is not None else W.HTML(NO_CHART)
        self.alerts = W.HTML()
        self.samples = W.HTML()
        self.checkpoints = W.HTML()
        self.logs = W.HTML()
        self.cancel = {jid: self._cancel_button(W, jid, on_cancel) for jid in job_ids}
        self.message = W.HTML()
        self.guard = self._guard_switch(W, guard)
        self.box = W.VBox(
            [
                self.status,
                self.notes,
                *self.bars.values(),
                self.alerts,
                self.plot,
                self.samples,
                self.checkpoints,
                W.HBox([*self.cancel.values(), self.guard]),
                self.message,
                self.logs,
            ]
        )
        self.box.add_class("opd-job-monitor")

    @staticmethod
    def _bar(W: Any, jid: str) -> Any:
        return W.FloatProgress(
            min=0.0,
            max=1.0,
            value=0.0,
            description=jid,
            style={"description_width": "initial"},
            layout=W.Layout(width="70%"),
        )

    @staticmethod
    def _cancel_button(W: Any, jid: str, on_cancel: Callable[[str], None]) -> Any:
        button = W.Button(
            description=f"Cancel {jid}", button_style="danger", icon="stop", layout=W.Layout(width="auto")
        )
        button.on_click(lambda _b: on_cancel(jid))
        return button

    @staticmethod
    def _guard_switch(W: Any, guard: Any) -> Any:
        """A toggle for the monitor's guard (:class:`~opd_nb.notebook.monitor_guard.MonitorGuard`)."""
        switch = W.ToggleButton(
            value=guard.on,
            description="Guard: cancel on error rules",
            tooltip="cancel a job when valid_token_rate, reward failures, the loss or zero-variance "
            "groups break an error rule (the rules of opd watch --guard)",
            icon="shield",
            layout=W.Layout(width="auto"),
        )

        def flip(change: dict) -> None:
            guard.on = bool(change["new"])

        switch.observe(flip, names="value")
        return switch

    def as_dict(self) -> dict[str, Any]:
        """The widgets by role (what tests and callers reach into)."""
        return {
            "box": self.box,
            "status": self.status,
            "notes": self.notes,
            "bars": self.bars,
            "plot": self.plot,
            "alerts": self.alerts,
            "samples": self.samples,
            "checkpoints": self.checkpoints,
            "logs": self.logs,
            "cancel": self.cancel,
            "message": self.message,
            "guard": self.guard,
        }

    def show_message(self, text: str, cls: str) -> None:
        self.message.value = render.box(f'<span class="{cls}">{render.esc(text)}</span>')

    def update(self, state: dict[str, Any]) -> None:
        """Push a state snapshot into the widgets (trait assignments only: thread-safe to call)."""
        self.status.value = render.box(monitor_html.status_html(state))
        for jid, bar in self.bars.items():
            v = state["jobs"][jid]
            total, step = v["total_steps"], v["step"]
            bar.value = 1.0 if v["status"] == SUCCEEDED else (min(1.0, step / total) if total else 0.0)
            bar.bar_style = BAR_STYLE.get(v["status"], "info")
        for widget, fragment in (
            (self.notes, monitor_html.notes_html(state)),
            (self.alerts, monitor_html.alerts_html(state)),
            (self.samples, monitor_html.samples_html(state)),
            (self.checkpoints, monitor_html.checkpoints_html(state)),
            (self.logs, monitor_html.logs_html(state)),
        ):
            widget.value = render.box(fragment) if fragment else ""
        for jid, button in self.cancel.items():
            button.disabled = state["jobs"][jid]["terminal"]
        # The guard acts only on unfinished jobs: once every job ended there is nothing to switch.
        self.guard.disabled = all(v["terminal"] for v in state["jobs"].values())
