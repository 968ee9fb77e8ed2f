"""A live meter for paid jobs: elapsed time, the hours billed so far, and money when a price is set.

Bailian bills training units by the hour, each started hour whole (`opd_nb.paid.estimate.billed_hours`).
The meter counts from the job's start (else its creation) to its end (else now), as the job reports
them (local wall-clock ``YYYY-MM-DD HH:MM:SS``, or ISO 8601); the console's bill is the authority.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any


def _parse(stamp: Any) -> float | None:
    """Seconds since the epoch of a job timestamp (local time when it carries no zone)."""
    if not isinstance(stamp, str) or not stamp.strip():
        return None
    text = stamp.strip().replace("Z", "+00:00")
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class Meter:
    """Shown for jobs on a paid target; `units` (mtu_capacity) and `price` (per unit-hour) when known."""

    paid: bool
    units: int | None = None
    price: float | None = None

    def applies(self, job: Any) -> bool:
        return self.paid

    def elapsed_s(self, job: Any, now: float | None = None) -> float | None:
        raw = getattr(job, "raw", {}) or {}
        start = _parse(raw.get("start_time")) or _parse(getattr(job, "create_time", None))
        if start is None:
            return None
        end = _parse(getattr(job, "end_time", None)) or (time.time() if now is None else now)
        return max(0.0, end - start)

    def line(self, job: Any, now: float | None = None) -> str:
        elapsed = self.elapsed_s(job, now)
        if elapsed is None:
            return f"meter: {job.job_id} has no start time yet; nothing billed"
        from opd_nb.paid.estimate import billed_hours  # the one billing rule (imports the spec: not at load)

        hours = billed_hours(elapsed)
        text = (
            f"meter: {int(elapsed // 3600)}h {int(elapsed % 3600 // 60):02d}m elapsed, {hours} billed hour(s)"
        )
        if self.units is not None:
            text += f" x {self.units} units = {hours * self.units} unit-hours"
            if self.price is not None:
                text += f", {hours * self.units * self.price:,.2f} at {self.price:g} per unit-hour"
        return text + " (the console's bill is the authority)"

    def final_line(self, job: Any) -> str:
        return f"{job.job_id} {job.status}: {self.line(job).removeprefix('meter: ')}"
