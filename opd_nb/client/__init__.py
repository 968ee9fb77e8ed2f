"""The job client shared by the CLI and the notebook (httpx; sync and async)."""

from __future__ import annotations

from opd_nb.client.jobs import (
    TERMINAL,
    AsyncJobClient,
    Checkpoint,
    Job,
    JobClient,
    JobEvent,
    JobList,
    LogPage,
)
from opd_nb.client.submit import SubmitResult, submit
from opd_nb.client.target import Target, resolve_target

__all__ = [
    "TERMINAL",
    "AsyncJobClient",
    "Checkpoint",
    "Job",
    "JobClient",
    "JobEvent",
    "JobList",
    "LogPage",
    "SubmitResult",
    "submit",
    "Target",
    "resolve_target",
]
