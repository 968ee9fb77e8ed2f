"""Experiments: one-variable sweeps over a workspace (:mod:`.sweep`) and jobs compared side by side
(:mod:`.compare`).

Two features that meet only in the user's workflow (sweep, then compare the sweep's jobs), so they
share no code; this package re-exports what the front ends import.
"""

from __future__ import annotations

from opd_nb.experiments.compare import (
    COMPARED_METRICS,
    ComparedJob,
    Comparison,
    JobRecord,
    compare_jobs,
    compare_records,
)
from opd_nb.experiments.sweep import (
    SweepJob,
    SweepPlan,
    SweepPoint,
    SweepResult,
    check_runner,
    parse_param,
    plan_sweep,
    preflight,
    run_sweep,
    submit_sweep,
)

__all__ = [
    "COMPARED_METRICS",
    "ComparedJob",
    "Comparison",
    "JobRecord",
    "SweepJob",
    "SweepPlan",
    "SweepPoint",
    "SweepResult",
    "check_runner",
    "compare_jobs",
    "compare_records",
    "parse_param",
    "plan_sweep",
    "preflight",
    "run_sweep",
    "submit_sweep",
]
