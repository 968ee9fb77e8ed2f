"""Tools that read a job: metrics, alerts and the best checkpoint, logs, samples, checkpoints, compare."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from opd_nb.agent.models import AlertsResult, MetricsResult, SamplesResult
from opd_nb.agent.planes import BaseUrlArg, IdArg, JobIdArg, TargetArg, client_for, tool_errors
from opd_nb.agent.views import alerts_view, metrics_view, samples_view
from opd_nb.experiments.compare import Comparison
from opd_nb.health.checkpoint_table import CheckpointTable
from opd_nb.watching.log_search import LogSearch


@tool_errors
def metrics(
    job_id: JobIdArg,
    names: Annotated[list[IdArg] | None, Field(description="metric names (default: every metric)")] = None,
    last: Annotated[int, Field(ge=0, le=200, description="how many of the latest rows to include")] = 5,
    target: TargetArg = None,
    base_url: BaseUrlArg = None,
) -> MetricsResult:
    """Each metric's series summarised (points, first and last step and value, min, max, mean) and
    the last N rows, under the docs' names (the metric dictionary resource explains each)."""
    return metrics_view(job_id, client_for(target, base_url).metrics(job_id), names, last)


@tool_errors
def alerts(job_id: JobIdArg, target: TargetArg = None, base_url: BaseUrlArg = None) -> AlertsResult:
    """The health alerts the monitor shows (the docs' troubleshooting rules), each with its fix, and
    the best checkpoint by the docs' rule (highest reward mean@1, else where the loss levels off)."""
    client = client_for(target, base_url)
    job, rows = client.get(job_id), client.metrics(job_id)
    page = client.rollouts(job_id, kind="train") if rows else None
    return alerts_view(job, rows, client.checkpoints(job_id), page.rollouts if page else None)


@tool_errors
def logs(
    job_id: JobIdArg,
    search: Annotated[
        IdArg | None, Field(description="only lines containing this (case-insensitive)")
    ] = None,
    tail: Annotated[int | None, Field(ge=1, le=10000, description="only the last N (matching) lines")] = 50,
    target: TargetArg = None,
    base_url: BaseUrlArg = None,
) -> LogSearch:
    """A job's log, searched and/or tailed (`opd logs --search/--tail`), with line numbers."""
    from opd_nb.watching.log_search import search_logs

    return search_logs(client_for(target, base_url), job_id, search, tail)


@tool_errors
def samples(
    job_id: JobIdArg,
    step: Annotated[int | None, Field(ge=0, description="the step (default: the latest recorded)")] = None,
    kind: Literal["train", "validation"] | None = None,
    target: TargetArg = None,
    base_url: BaseUrlArg = None,
) -> SamplesResult:
    """A step's best and worst recorded sample (by reward, then by the teacher's agreement) with the
    teacher's and student's token log-probs summarised and the most disagreeing tokens."""
    return samples_view(job_id, client_for(target, base_url).rollouts(job_id, step=step, kind=kind))


@tool_errors
def checkpoints(job_id: JobIdArg, target: TargetArg = None, base_url: BaseUrlArg = None) -> CheckpointTable:
    """A job's checkpoints: step, status, metrics, the best one, days to expiry, exported names."""
    from opd_nb.health.checkpoint_table import checkpoint_table

    client = client_for(target, base_url)
    return checkpoint_table(job_id, client.checkpoints(job_id) or [], client.metrics(job_id))


@tool_errors
def compare(
    job_ids: Annotated[list[JobIdArg], Field(min_length=2, description="two or more job ids")],
    target: TargetArg = None,
    base_url: BaseUrlArg = None,
) -> Comparison:
    """Jobs side by side (`opd compare`): differing parameters, metrics, best checkpoints, the winner."""
    from opd_nb.experiments import compare_jobs

    return compare_jobs(client_for(target, base_url), job_ids)


TOOLS = (
    metrics,
    alerts,
    logs,
    samples,
    checkpoints,
    compare,
)  # registered by opd_nb.agent.server, in this order
