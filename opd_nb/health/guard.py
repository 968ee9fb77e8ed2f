"""A watcher that stops paying for a broken run: cancel a job once an error rule of `health/rules.py` fires.

`opd watch JOB --guard` and the monitor's guard switch poll through :meth:`Guard.poll`. Where the
control plane has metrics (`opd serve`), the rules of :func:`opd_nb.health.rules.guard_alerts` decide; on
Bailian, which has no metrics API, the guard acts on the job's status and on error lines in its log,
and says up front which rules it cannot see. A cancel is logged (logger ``opd_nb.health.guard``) and shown
with the rule, its values and the step; it happens once. The cancel carries that as its reason, which
`opd serve` records in the job's message and log; Bailian's cancel takes no body, so there the
watcher's own output, log and webhook are the record.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opd_nb.health.rules import GuardThresholds, HealthAlert, guard_alerts

log = logging.getLogger("opd_nb.health.guard")

UNSEEN_WITHOUT_METRICS = ("valid_token_rate", "reward_failures", "loss_not_finite", "loss_diverging",
                          "zero_variance_groups")  # fmt: skip
LOG_ERROR = re.compile(r"\bERROR\b|Traceback \(most recent call last\)|\b(?:CUDA )?out of memory\b")
LOG_PAGE = 500


def log_error_alert(line: str, job_id: str) -> HealthAlert | None:
    """The alert an error line of a job's log raises (None for any other line): what a watcher sees on
    a control plane without metrics."""
    if not LOG_ERROR.search(line):
        return None
    return HealthAlert("log_error", "error", f"error line in the job's log: {line.strip()[:200]}",
                       f"read the log (opd logs {job_id})")  # fmt: skip


@dataclass
class Guard:
    """Polls with the watcher; the first error alert cancels the job. `tripped` holds that alert."""

    client: Any
    job_id: str
    thresholds: GuardThresholds = field(default_factory=GuardThresholds)
    who: str = "the guard of `opd watch --guard`"  # named in the cancel's reason (the job's message and log)
    tripped: HealthAlert | None = None
    step: Any = None
    _log_offset: int = 1
    _blind_said: bool = False
    _pending: HealthAlert | None = None  # an alert whose cancel did not go through yet

    def poll(self, job: Any, rows: Sequence[Mapping[str, Any]] | None) -> list[str]:
        """Lines to show after one poll (a cancel, or once on a plane without metrics what is unseen)."""
        if self.tripped is not None or job.terminal:
            return []
        lines: list[str] = []
        if rows is None and not self._blind_said:
            self._blind_said = True
            lines.append(
                f"guard: {self.job_id}: no metrics on this control plane, so these rules are not seen: "
                f"{', '.join(UNSEEN_WITHOUT_METRICS)}; acting on status and error lines in the log"
            )
        alert = self._pending or (self._log_alert() if rows is None else self._metric_alert(job, rows))
        if alert is not None:
            lines.append(self._cancel(job, alert, rows))
        return lines

    def _metric_alert(self, job: Any, rows: Sequence[Mapping[str, Any]]) -> HealthAlert | None:
        found = guard_alerts(rows, eval_steps=job.plan.eval_steps, thresholds=self.thresholds)
        return found[0] if found else None

    def _log_alert(self) -> HealthAlert | None:
        page = self.client.logs(self.job_id, offset=self._log_offset, lines=LOG_PAGE)
        self._log_offset = page.next_offset
        return next((a for line in page.lines if (a := log_error_alert(line, self.job_id))), None)

    def _cancel(self, job: Any, alert: HealthAlert, rows: Sequence[Mapping[str, Any]] | None) -> str:
        """Cancel with the reason recorded (by `opd serve`; Bailian's cancel takes none), then say so.
        Tripped only once the cancel went through: a lost answer is tried again at the next poll."""
        step = (rows[-1].get("step") if rows else None) or (job.progress.step if job.progress else None)
        why = f"at step {step}: rule {alert.rule}: {alert.message}"
        self._pending = alert
        self.client.cancel(self.job_id, reason=f"by {self.who} {why}")
        self.tripped, self.step, self._pending = alert, step, None
        line = f"guard: cancelled {self.job_id} {why}"
        log.info(line)
        return line
