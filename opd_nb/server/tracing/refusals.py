"""What a job hears when its spans are refused: a line in its own log and two numbers in its metrics.

Why: a refused export was a line in a function server's log only (``Failed to export spans batch code:
400``), so a job SUCCEEDED saying its spans were traced while it had none. The intake counts, per job,
the exports it refused (a body it could not decode, a coding it does not take) and the spans it left
out of accepted ones; the first of each reason goes into the job's log at once, later ones at most once
a minute with their counts, and the running totals go into the metrics row of the job's last finished step
(:data:`~opd_nb.constants.TRACE_REFUSED_EXPORTS`, :data:`~opd_nb.constants.TRACE_REJECTED_SPANS`),
where the health rules (``opd_nb.health.rules.trace_refusal_alert``) and every watcher see them.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from opd_nb.constants import TRACE_REFUSED_EXPORTS, TRACE_REJECTED_SPANS
from opd_nb.server.store import Store
from opd_nb.server.store.db import now_text

LOG_EVERY_S = 60.0  # a job's log repeats a refusal it already named at most this often
MAX_NAMED = 32  # distinct reasons logged at once per job (the rest wait for LOG_EVERY_S)


@dataclass
class _Tally:
    exports: int = 0
    spans: int = 0
    named: set[str] = field(default_factory=set[str])  # reasons the job's log has already given
    logged_at: float = 0.0


class Refusals:
    """Per-job counts of refused exports and spans, told to the job's log and metrics."""

    def __init__(self, store: Store):
        self.store = store
        self._tallies: dict[str, _Tally] = {}
        self._lock = threading.Lock()

    def export_refused(self, job_id: str, step: int, status: int, message: str) -> None:
        """A whole export of the job was refused (HTTP `status`, `message` as the exporter got it)."""
        self._count(job_id, step, (1, 0), f"HTTP {status}: {message}", "refused a span export of this job")

    def spans_rejected(self, job_id: str, step: int, count: int, reason: str) -> None:
        """`count` spans of an accepted export were left out (OTLP's partial success)."""
        self._count(job_id, step, (0, count), reason, f"left out {count} span(s) of an export of this job")

    def counts(self, job_id: str) -> tuple[int, int]:
        """(exports refused, spans left out) so far in this server run."""
        with self._lock:
            tally = self._tallies.get(job_id, _Tally())
            return tally.exports, tally.spans

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._tallies.pop(job_id, None)

    def _count(self, job_id: str, step: int, added: tuple[int, int], reason: str, what: str) -> None:
        now = time.monotonic()
        with self._lock:
            tally = self._tallies.setdefault(job_id, _Tally())
            tally.exports += added[0]
            tally.spans += added[1]
            fresh = reason not in tally.named and len(tally.named) < MAX_NAMED
            due = fresh or now - tally.logged_at >= LOG_EVERY_S
            if due:
                tally.named.add(reason)
                tally.logged_at = now
            totals = {TRACE_REFUSED_EXPORTS: tally.exports, TRACE_REJECTED_SPANS: tally.spans}
        self.store.add_metrics(job_id, step, {"step": step, **totals})
        if due:
            self.store.add_log(
                job_id,
                f"[server] {now_text()} WARNING: opd serve {what} ({reason}); so far "
                f"{totals[TRACE_REFUSED_EXPORTS]} export(s) refused and {totals[TRACE_REJECTED_SPANS]} span(s) left out: those spans are "
                f"not in its traces",
            )
