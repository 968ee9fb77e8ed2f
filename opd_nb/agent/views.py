"""Agent-sized views of what the core returns: series summaries, alerts with the best checkpoint, and a
step's best and worst sample with the teacher's token log-probs summarised.

Pure functions over the client's records; the rules they apply are the core's (``health`` for alerts
and the best checkpoint, ``rollout_results`` for ranking and log-ratios, ``plots`` for reading a
series), so an agent sees what the monitor and `opd watch` show.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opd_nb.agent.models import (
    AlertInfo,
    AlertsResult,
    BestCheckpointInfo,
    MetricsResult,
    SampleInfo,
    SamplesResult,
    SeriesSummary,
    TokenInfo,
)
from opd_nb.client.rollout_results import (
    CLOUD_NOTE,
    best_and_worst,
    log_ratio,
    mean_log_ratio,
    prompt_text,
    reward_of,
)
from opd_nb.health.rules import best_checkpoint, best_checkpoint_line, job_alerts
from opd_nb.plots.job_series import NO_METRICS, numeric_names, unknown_note
from opd_nb.plots.png import metric_series

DISAGREEING_TOKENS = 5


def metrics_view(
    job_id: str, rows: Sequence[Mapping[str, Any]] | None, names: Sequence[str] | None, last: int
) -> MetricsResult:
    """Each metric's summary (points, first/last step and value, min, max, mean) and the last `last` rows."""
    if rows is None:
        return MetricsResult(job_id=job_id, available=False, note=NO_METRICS)
    series, unknown = [], []
    for name in dict.fromkeys(names) if names else numeric_names(rows):
        steps, values = metric_series(rows, name)
        if values:
            series.append(SeriesSummary(
                name=name, points=len(values), first_step=steps[0], last_step=steps[-1], first=values[0],
                last=values[-1], min=min(values), max=max(values), mean=sum(values) / len(values),
            ))  # fmt: skip
        elif names:
            unknown.append(name)
    wanted = set(names or []) | {"step"}
    tail = (
        [dict(r) if not names else {k: v for k, v in r.items() if k in wanted} for r in rows[-last:]]
        if last
        else []
    )
    note = unknown_note(unknown)  # counted and a few quoted: never every name asked for
    return MetricsResult(job_id=job_id, available=True, note=note, series=series, last_rows=tail)


def alerts_view(
    job: Any,
    rows: Sequence[Mapping[str, Any]] | None,
    checkpoints: Sequence[Any] | None,
    records: Sequence[Mapping[str, Any]] | None = None,
) -> AlertsResult:
    """The health alerts the monitor shows and the best checkpoint by the docs' rule."""
    alerts = job_alerts(rows or [], status=job.status, job_id=job.job_id,
                        eval_steps=job.plan.eval_steps, records=records)  # fmt: skip
    best = best_checkpoint(checkpoints, rows) if checkpoints and rows else None
    info = None
    if best is not None:
        cp = best.checkpoint
        info = BestCheckpointInfo(name=cp.name, step=cp.step, reason=best.reason,
                                  deploy_or_continue_from=cp.model_name or cp.path or cp.name)  # fmt: skip
    return AlertsResult(
        job_id=job.job_id,
        status=job.status,
        alerts=[AlertInfo.of(a) for a in alerts],
        best_checkpoint=info,
        best_checkpoint_line=best_checkpoint_line(checkpoints, rows) if job.terminal else "",
    )


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def sample_view(index: int, record: Mapping[str, Any]) -> SampleInfo:
    """One sample: text, reward, and its tokens' log-probs summarised (the most disagreeing first)."""
    tokens = [t for t in record.get("tokens") or () if isinstance(t, Mapping)]
    scored = [t for t in tokens if log_ratio(t) is not None]
    worst = sorted(scored, key=lambda t: log_ratio(t))[:DISAGREEING_TOKENS]  # pyright: ignore[reportArgumentType, reportCallIssue]
    return SampleInfo(
        index=index,
        kind=record.get("kind"),
        group=record.get("group"),
        prompt=prompt_text(record),
        completion=str(record.get("completion") or ""),
        reward=reward_of(record),
        truncated=bool(record.get("truncated")),
        tokens=len(tokens),
        scored_tokens=len(scored),
        mean_teacher_logprob=_mean([float(t["teacher_logprob"]) for t in scored]),
        mean_student_logprob=_mean([float(t["student_logprob"]) for t in scored]),
        mean_log_ratio=mean_log_ratio(record),
        most_disagreeing=[
            TokenInfo(
                text=str(t.get("text") or ""),
                teacher_logprob=t.get("teacher_logprob"),
                student_logprob=t.get("student_logprob"),
                log_ratio=log_ratio(t),
            )  # fmt: skip
            for t in worst
        ],
    )


def samples_view(job_id: str, page: Any) -> SamplesResult:
    """A step's best and worst sample (by reward, then by the teacher's agreement), or why there are none."""
    if page is None:
        return SamplesResult(job_id=job_id, note=CLOUD_NOTE)
    records = page.rollouts
    pair = best_and_worst(records)
    return SamplesResult(
        job_id=job_id,
        step=page.step,
        kind=page.kind,
        recorded_steps=list(page.steps),
        samples=len(records),
        best=sample_view(pair[0], records[pair[0]]) if pair else None,
        worst=sample_view(pair[1], records[pair[1]]) if pair else None,
        note="" if pair else "no samples recorded at this step yet",
    )
