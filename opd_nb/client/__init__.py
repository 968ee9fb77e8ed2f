"""The job client shared by the CLI and the notebook (httpx; sync and async), and target switching.

Every call raises :class:`opd_nb.errors.OpdError` with ``status`` (the HTTP status, None when the
control plane could not be reached) and ``code`` (the service's error code). A local-only call
(``metrics``, ``checkpoints``, ``models``, ``rollouts``) answers None where the control plane has no
such endpoint and raises ``status == 404`` only for an unknown job; ``get``/``wait``/``logs``/``cancel``
raising ``status == 404`` means the job is unknown.
"""

from __future__ import annotations

from opd_nb.client.deploy_results import ChatReply, Deployment, DeploymentList
from opd_nb.client.job_results import Checkpoint, Job, JobEvent, JobList, LogPage
from opd_nb.client.jobs import AsyncJobClient, JobClient
from opd_nb.client.rollout_results import RolloutPage
from opd_nb.client.submit import DryRun, SubmitResult, dry_run, parse_sets, submit
from opd_nb.client.target import Target, TargetInfo, resolve_target, use_target
from opd_nb.constants import TERMINAL_STATUSES

TERMINAL = TERMINAL_STATUSES  # the name this package exported before the shared constant existed

__all__ = [
    "TERMINAL",
    "AsyncJobClient",
    "ChatReply",
    "Checkpoint",
    "Deployment",
    "DeploymentList",
    "Job",
    "JobClient",
    "JobEvent",
    "JobList",
    "LogPage",
    "RolloutPage",
    "DryRun",
    "SubmitResult",
    "dry_run",
    "parse_sets",
    "submit",
    "Target",
    "TargetInfo",
    "resolve_target",
    "use_target",
]
