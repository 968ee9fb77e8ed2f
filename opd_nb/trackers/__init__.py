"""Report jobs to the experiment trackers a team already reads: trackio, W&B, TensorBoard, MLflow.

`opd watch JOB --report-to trackio,wandb` streams a job as it runs, `opd report JOB --to ...`
backfills one, and the notebook monitor takes ``report_to=``; all three drive one
:class:`~opd_nb.trackers.reporter.Reporter`. Local and offline by default (trackio's local store, W&B
offline unless logged in, event files, MLflow's local store); each tracker's library is an optional
extra imported only when that tracker is used.
"""

from __future__ import annotations

from opd_nb.trackers.backends import BACKENDS, parse_report_to
from opd_nb.trackers.records import DEFAULT_PROJECT, ReportResult, RunInfo
from opd_nb.trackers.reporter import Reporter, report_job, run_info

__all__ = ["BACKENDS", "DEFAULT_PROJECT", "ReportResult", "Reporter", "RunInfo", "parse_report_to",
           "report_job", "run_info"]  # fmt: skip
