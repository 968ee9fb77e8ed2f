"""The job monitor's guard switch: the rules of `opd watch --guard`, run on each of the monitor's polls.

Why in the monitor too: a user who watches a job in the notebook should not need a second watcher
to stop paying for a broken run. While the switch is on, every poll hands each unfinished job's
status and metrics to its :class:`opd_nb.health.guard.Guard`; the first error rule cancels that job, once,
and the guard's line (rule, values, step) is what the monitor shows. The polling thread calls
:meth:`MonitorGuard.check`; the switch only flips :attr:`MonitorGuard.on`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opd_nb.health.guard import Guard
from opd_nb.health.rules import GuardThresholds
from opd_nb.notebook.job_state import JobState

WHO = "the guard switch of the notebook's job monitor"  # named in the cancel's reason


@dataclass
class MonitorGuard:
    """One :class:`Guard` per watched job, consulted only while `on`."""

    on: bool = False
    thresholds: GuardThresholds = field(default_factory=GuardThresholds)
    lines: list[str] = field(default_factory=list)  # what the guards said, oldest first
    _guards: dict[str, Guard] = field(default_factory=dict)

    def check(self, client: Any, st: JobState) -> list[str]:
        """After a poll of `st`: the lines its guard says (a cancel; on Bailian, what it cannot see)."""
        if not self.on or st.job is None or st.terminal:
            return []
        guard = self._guards.setdefault(st.job_id, Guard(client, st.job_id, self.thresholds, who=WHO))
        said = guard.poll(st.job, st.metrics if st.metrics_available else None)
        self.lines.extend(said)
        return said

    def tripped(self, job_id: str) -> Any:
        """The alert that made the guard cancel `job_id` (None: it has not)."""
        guard = self._guards.get(job_id)
        return guard.tripped if guard is not None else None
