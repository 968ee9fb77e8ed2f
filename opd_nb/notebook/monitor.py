"""Job monitor: live status, progress, interactive curves, health alerts, checkpoints, logs, cancel.

Design (see notebook-anchors.md §6 for the complaints this avoids):

* A background thread polls the control plane and **only sets widget state** (traits). It never
  prints and never enters an ``Output`` context, so nothing lands in the wrong cell and the kernel
  stays free.
* Its output (:class:`~opd_nb.notebook.display.LiveView`) is the widget view *and* a static
  ``text/html`` snapshot (the curves an interactive page of their own, :mod:`opd_nb.notebook.chart`)
  and ``text/plain``. When the jobs end, the output becomes the snapshot alone through its
  ``display_id``, so a saved notebook reopens as the final state, with no kernel and no widget state.
* Where the API has no metrics (Bailian: ``client.metrics()`` is None) it shows status, events
  and logs, and says so.

The health rules and the best-checkpoint rule are ``opd_nb.health.rules`` (``opd watch`` prints the same
alerts); the polling thread and the monitor's lifecycle are ``monitor_polling``, the per-job snapshot
``job_state``, its HTML ``monitor_html``, the widgets ``monitor_widgets``. The samples panel shows the latest recorded step's best and worst sample and
the ``%opd rollouts`` line that opens the full viewer.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from opd_nb.errors import OpdError
from opd_nb.health.rules import GuardThresholds
from opd_nb.notebook import monitor_html
from opd_nb.notebook.chart import MetricChart
from opd_nb.notebook.display import LiveView
from opd_nb.notebook.job_state import JobState, job_view, progress_of
from opd_nb.notebook.monitor_guard import MonitorGuard
from opd_nb.notebook.monitor_html import CLOUD_NOTE, STATUS_METRICS
from opd_nb.notebook.monitor_polling import JobPolling
from opd_nb.notebook.monitor_report import MonitorReport

__all__ = ["JobMonitor", "CLOUD_NOTE"]

STATUS_KEYS = tuple(metric for _, metric in STATUS_METRICS)


def _trackers(report_to: str | Sequence[str]) -> list[str]:
    """The backends of ``report_to=`` (checked now: an unknown or uninstalled one is an OpdError)."""
    if not report_to:
        return []
    from opd_nb.trackers import parse_report_to
    from opd_nb.trackers.backends import require

    names = parse_report_to(report_to)
    for name in names:
        require(name)
    return names


class JobMonitor(JobPolling, LiveView):
    """Watch one or more jobs; several jobs are overlaid on the same plots for comparison."""

    def __init__(
        self,
        job_ids: Sequence[str] | str,
        client: Any = None,
        *,
        poll_s: float = 2.0,
        log_tail: int = 15,
        guard: bool | GuardThresholds = False,
        notes: Sequence[str] = (),
        report_to: str | Sequence[str] = (),
    ):
        """`guard`: start with the guard switch on (cancel a job when an error rule fires, as
        ``opd watch --guard`` does; thresholds, or True for the defaults). The monitor's toggle flips
        it, and so does ``monitor.guard.on``. `notes`: lines shown above the jobs (``%opd submit``'s,
        the same the terminal prints); what the guard does is added to them. `report_to`: trackers to
        write each job to as it runs (``"trackio,wandb"``, as ``opd watch --report-to``)."""
        ids = [job_ids] if isinstance(job_ids, str) else list(job_ids)
        ids = list(dict.fromkeys(i for i in ids if i))
        if not ids:
            raise OpdError("no job id given", fix="pass a job id, e.g. %opd watch ft-...")
        self.job_ids = ids
        self.poll_s = float(poll_s)
        self.log_tail = log_tail
        self._client = client
        self._jobs = {i: JobState(i) for i in ids}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_threads: list[threading.Thread] = []
        self._widgets: Any = None  # MonitorWidgets, built on first display in a kernel
        self._display_id: str | None = None
        self._chart = MetricChart()
        self._offsets: dict[str, float] = {}  # job -> global-step offset (a continued job's parent)
        self.polls = 0
        self.plot_updates = 0
        self.notes: list[str] = list(notes)
        limits = guard if isinstance(guard, GuardThresholds) else GuardThresholds()
        self.guard = MonitorGuard(on=bool(guard), thresholds=limits)
        self.report = MonitorReport(to=_trackers(report_to))

    # ------------------------------------------------------------ snapshot
    @property
    def state(self) -> dict[str, Any]:
        """A plain snapshot: per-job status, progress, alerts, checkpoints, logs; plus poll counters."""
        with self._lock:
            return {
                "jobs": {
                    jid: job_view(st, log_tail=self.log_tail, latest=STATUS_KEYS)
                    for jid, st in self._jobs.items()
                },
                "notes": list(self.notes),
                "done": self.done,
                "polls": self.polls,
                "plot_updates": self.plot_updates,
            }

    def _update_chart(self) -> None:
        """Feed the chart every job's rows: a widget gets only the points it has not seen, so a poll
        costs its new points, never a redraw of the whole job (the chart draws in the browser)."""
        from opd_nb.plots.png import panel_names
        from opd_nb.plots.series import client_offsets

        with self._lock:
            rows_by_job = {jid: st.metrics for jid, st in self._jobs.items() if st.metrics}
            models = {
                jid: st.job.model
                for jid, st in self._jobs.items()
                if jid not in self._offsets and st.job is not None and st.metrics
            }
            # the legend names a job as its submit did (--job-name, else the workspace's name)
            labels = {jid: st.job.job_name for jid, st in self._jobs.items() if st.job and st.job.job_name}
        if models:  # once per job: where a continued job's steps start (its parent's last step)
            self._offsets.update(client_offsets(self.client, models))
        names = monitor_html.plot_names(rows_by_job, panel_names(rows_by_job))
        if self._chart.update(rows_by_job, names, labels=labels, offsets=self._offsets):
            with self._lock:
                self.plot_updates += 1

    def to_html(self) -> str:
        """The static snapshot: self-contained HTML, the chart an interactive page in an iframe."""
        self._update_chart()
        return monitor_html.snapshot_html(self.job_ids, self.state, self._chart.to_html())

    def __str__(self) -> str:
        return monitor_html.snapshot_text(self.state)

    def as_of(self) -> str:
        """Each job's step ("step 58/192"), or its status before its first step."""
        with self._lock:
            progress = [(st.status, progress_of(st)) for st in self._jobs.values()]
        return " · ".join(
            f"step {monitor_html.steps_text(p['step'], p['total_steps'])}"
            if p["step"]
            else str(status or "submitted").lower()
            for status, p in progress
        )

    def __repr__(self) -> str:
        return f"JobMonitor({self.job_ids!r}, done={self.done})"

    def __rich__(self) -> Any:
        return monitor_html.rich_table(self.state)

    # ------------------------------------------------------------ widgets
    def _ensure_widgets(self) -> dict[str, Any] | None:
        """The widgets by role, built on first use (None without ipywidgets)."""
        if self._widgets is None:
            try:
                import ipywidgets as W
            except ImportError:
                return None
            from opd_nb.notebook.monitor_widgets import MonitorWidgets

            self._update_chart()
            self._widgets = MonitorWidgets(
                W, self.job_ids, self._on_cancel, self.guard, chart=self._chart.widget()
            )
            self._render()
        return self._widgets.as_dict()

    def _on_cancel(self, job_id: str) -> None:
        try:
            sent = self.cancel(job_id)
            text = f"cancel sent for {job_id}" if sent else f"{job_id} already finished"
            cls = "warn"
        except OpdError as exc:
            text, cls = str(exc), "bad"
        if self._widgets is not None:
            self._widgets.show_message(text, cls)

    def _render(self) -> None:
        """Push the current state into the widgets (trait assignments only: thread-safe to call)."""
        self._update_chart()
        if self._widgets is not None:
            self._widgets.update(self.state)

    def widget(self) -> Any:
        """The ipywidgets VBox (None without ipywidgets)."""
        w = self._ensure_widgets()
        return None if w is None else w["box"]

    @property
    def final(self) -> bool:
        """Every job ended: the output becomes the snapshot (its chart interactive with no kernel)."""
        return self.done

    def _drop_widgets(self) -> Any:
        with self._lock:
            old, self._widgets = self._widgets, None
        self._chart.forget_widget()
        return None if old is None else old.box
