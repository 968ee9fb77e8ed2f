"""The job monitor's ``report_to=``: each watched job into the user's trackers, on the monitor's polls.

The same :class:`opd_nb.trackers.Reporter` as `opd watch --report-to`: the polling thread hands it each
unfinished job's status, metrics and newly seen alerts, and the job's end; the trackers' own prints are
muted (:mod:`opd_nb.trackers.quiet`), so the thread still only sets state. What it says (a tracker that
failed, where each run went) becomes a monitor note.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opd_nb.health.rules import AlertTracker, job_alerts
from opd_nb.notebook.job_state import JobState


@dataclass
class MonitorReport:
    """One Reporter per watched job, for the backends in `to` (empty: reporting is off)."""

    to: Sequence[str] = ()
    _reporters: dict[str, Any] = field(default_factory=dict)
    _alerts: dict[str, AlertTracker] = field(default_factory=dict)

    def check(self, client: Any, st: JobState) -> list[str]:
        """After a poll of `st`: write what is new; at its end, close its runs. The lines to show."""
        if not self.to or st.job is None:
            return []
        from opd_nb.trackers import Reporter

        reporter = self._reporters.get(st.job_id)
        if reporter is None:
            reporter = self._reporters[st.job_id] = Reporter(client, st.job_id, self.to)
        if reporter.result.status:  # already ended
            return []
        rows = st.metrics if st.metrics_available else None
        tracker = self._alerts.setdefault(st.job_id, AlertTracker())
        alerts = job_alerts(rows or [], status=st.status, job_id=st.job_id,
                            eval_steps=st.job.plan.eval_steps)  # fmt: skip
        reporter.poll(st.job, rows, tracker.fresh(alerts))
        lines = reporter.take_lines()
        if st.terminal:
            reporter.end(st.job)
            lines += [*reporter.take_lines(), *reporter.where_lines()]
        return lines
