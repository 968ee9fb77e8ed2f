"""Compare: finished (or running) jobs side by side, and the winner by the docs' rules.

A change is judged only after eval_steps × 3 steps, on the docs' metrics and best-checkpoint rule
(:mod:`opd_nb.health.rules`): with a reward the validation reward mean@1 of the best checkpoint, without
one the distillation loss at the end. The inputs are the client's own records (:class:`Job`, its
metric rows and :class:`Checkpoint` list), so compare reads the fields every front end reads.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from opd_nb.client import Checkpoint, Job, JobClient
from opd_nb.constants import (
    CANCELED,
    FAILED,
    LOSS,
    REWARD_MEAN,
    SUCCEEDED,
    TEACHER_KL,
    TRAIN_REWARD_MEAN,
    UNKNOWN,
    VALID_TOKEN_RATE,
)
from opd_nb.errors import OpdError
from opd_nb.health.rules import DEFAULT_EVAL_STEPS, FULL_VALID_TOKEN_RATE, pick_checkpoint
from opd_nb.plots.png import metric_series
from opd_nb.plots.series import client_offsets
from opd_nb.results import ResultMixin
from opd_nb.views import render

COMPARED_METRICS = (LOSS, VALID_TOKEN_RATE, REWARD_MEAN, TEACHER_KL)
HIGHER_IS_BETTER = {LOSS: False, VALID_TOKEN_RATE: True, REWARD_MEAN: True, TEACHER_KL: False}
COMPARED_FIELDS = ("model", "teacher_model")  # compared with the hyper-parameters
REWARD_FIELD = (
    "reward"  # compared too: "yes" / "no" (a reward job and a pure-distillation job differ in kind)
)
# What decides the winner, as the docs pick checkpoints: with a reward the validation reward mean@1 of
# the best checkpoint; without one the distillation loss (the student's distance to the teacher) at the end.
JUDGED_BY = (REWARD_MEAN, LOSS)
_JUDGED_AS = {REWARD_MEAN: "at its best checkpoint", LOSS: "at the end"}
NO_METRICS_NOTE = (
    "this control plane has no metrics (Bailian): compared status, parameters and checkpoints only; "
    "judge the curves in the Bailian console"
)
_TIME_FORMATS = ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%SZ")


class JobRecord(BaseModel):
    """What compare reads about one job, as the client returns it (metrics/checkpoints None: the
    control plane has none)."""

    job: Job
    metrics: list[dict[str, Any]] | None = None
    checkpoints: list[Checkpoint] | None = None


class ComparedJob(BaseModel):
    job_id: str
    job_name: str | None = None
    status: str
    steps: int | None = None
    duration_s: float | None = None
    params: dict[str, Any] = Field(default_factory=dict)  # the compared values that differ between the jobs
    final: dict[str, float] = Field(default_factory=dict)
    best: dict[str, float] = Field(default_factory=dict)
    best_checkpoint: dict[str, Any] | None = None
    finetuned_output: str | None = None
    eval_steps: int = DEFAULT_EVAL_STEPS
    checkpoint_reward: float | None = (
        None  # reward mean@1 of the best checkpoint: what a reward run is judged by
    )

    def score(self, metric: str) -> float | None:
        """What the winner is judged by: the best checkpoint's reward, else the final value."""
        if metric == REWARD_MEAN:
            return self.checkpoint_reward if self.checkpoint_reward is not None else self.best.get(metric)
        return self.final.get(metric)


class Comparison(ResultMixin, BaseModel):
    """Jobs side by side: status, steps, duration, differing parameters, metrics, best checkpoints, winner."""

    jobs: list[ComparedJob]
    differing: list[str] = Field(default_factory=list)
    metrics: list[str] = Field(default_factory=list)  # the compared metrics some job reports
    metrics_available: bool = True
    winner: str | None = None
    why: str = ""
    notes: list[str] = Field(default_factory=list)
    rows_by_job: dict[str, list[dict[str, Any]]] = Field(default_factory=dict, exclude=True)
    step_offsets: dict[str, float] = Field(default_factory=dict, exclude=True)  # continued jobs' starts

    def to_payload(self) -> dict[str, Any]:
        keys = ("job_id", "status", "params", "final", "best", "best_checkpoint")
        return {
            "jobs": [{k: getattr(j, k) for k in keys} for j in self.jobs],
            "winner": self.winner,
            "why": self.why,
            "notes": self.notes,
        }

    def label(self, job: ComparedJob, *, by_name: bool = False) -> str:
        """A job as the table and the plot legend name it: its differing values, then its id (`by_name`:
        its name where it has one, as the chart's legend shows it; the legend's tooltip keeps the id)."""
        values = ", ".join(f"{k}={render.fmt(v)}" for k, v in job.params.items())
        who = (job.job_name or job.job_id) if by_name else job.job_id
        return f"{values} ({who})" if values else who

    def table_rows(self) -> list[tuple[str, list[str]]]:
        """(row name, one cell per job): the side-by-side view every renderer draws."""
        rows = [
            ("status", [j.status for j in self.jobs]),
            ("steps", [render.fmt(j.steps) for j in self.jobs]),
            ("duration", [_duration(j.duration_s) for j in self.jobs]),
        ]
        rows += [(name, [render.fmt(j.params.get(name)) for j in self.jobs]) for name in self.differing]
        for metric in self.metrics:
            rows.append((f"{metric} (final)", [render.fmt(j.final.get(metric)) for j in self.jobs]))
            rows.append((f"{metric} (best)", [render.fmt(j.best.get(metric)) for j in self.jobs]))
        rows.append(("best checkpoint", [_checkpoint_text(j) for j in self.jobs]))
        rows.append(("wins", ["yes" if j.job_id == self.winner else "" for j in self.jobs]))
        return rows

    def summary(self) -> list[str]:
        return [self.why, *self.notes] if self.why else list(self.notes)

    def plot_png(self) -> bytes | None:
        """The docs' key metrics overlaid, one line per job (None without metrics or matplotlib)."""
        from opd_nb.plots.png import KEY_METRICS, render_png

        rows = {self.label(j): self.rows_by_job.get(j.job_id) or [] for j in self.jobs}
        names = [m for m in KEY_METRICS if m in self.metrics]
        if not any(rows.values()) or not names:
            return None
        try:
            return render_png(rows, names=names)
        except ImportError:  # matplotlib is a notebook extra
            return None

    def html(self, *, png: bytes | None = None) -> str:
        head = ["", *(self.label(j) for j in self.jobs)]
        body = render.table(head, [(name, *cells) for name, cells in self.table_rows()])
        notes = "".join(f"<div>{render.esc(line)}</div>" for line in self.summary())
        return body + notes + render.png_img(png, alt="compared metrics")

    def _repr_html_(self) -> str:
        return render.box(self.html(png=self.plot_png()), title=f"{len(self.jobs)} jobs compared")

    def __str__(self) -> str:
        width = max(len(name) for name, _ in self.table_rows())
        lines = [" " * width + "  " + "  ".join(j.job_id for j in self.jobs)]
        lines += [f"{name:<{width}}  " + "  ".join(cells) for name, cells in self.table_rows()]
        return "\n".join([*lines, *self.summary()])

    def __rich__(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table(title=f"{len(self.jobs)} jobs compared")
        table.add_column("")
        for job in self.jobs:
            table.add_column(Text(self.label(job)))
        for name, cells in self.table_rows():  # cells are Text: user strings are not read as markup
            table.add_row(Text(name), *(Text(c) for c in cells))
        return Group(table, *(Text(line) for line in self.summary()))


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def _checkpoint_text(job: ComparedJob) -> str:
    cp = job.best_checkpoint
    if cp is None:
        return job.finetuned_output or ""
    return f"{cp['name']} (step {cp['step']}): {cp['reason']}"


def _seconds(text: Any) -> float | None:
    for fmt in _TIME_FORMATS:
        try:
            return time.mktime(time.strptime(str(text), fmt))
        except (TypeError, ValueError):
            continue
    return None


def _duration_of(job: Job) -> float | None:
    start = _seconds(job.start_time or job.create_time)
    end = _seconds(job.end_time)
    return end - start if start is not None and end is not None and end >= start else None


def _reward_of(record: JobRecord) -> str | None:
    """ "yes"/"no": did the job train with a reward; None where the control plane does not tell."""
    if record.job.local is not None:  # the local plane lists the functions a job runs
        kinds = {f["type"] for f in record.job.functions}
        return "yes" if kinds & {"reward", "group_reward"} else "no"
    if record.metrics:  # else by what it reports: pure distillation reports no reward series
        return "yes" if any(REWARD_MEAN in r or TRAIN_REWARD_MEAN in r for r in record.metrics) else "no"
    return None


def _compared_values(record: JobRecord) -> dict[str, Any]:
    job = record.job
    values = dict(job.hyper_parameters)
    values.update({k: getattr(job, k) for k in COMPARED_FIELDS})
    values[REWARD_FIELD] = _reward_of(record)
    return values


def _metric_values(rows: Sequence[Mapping[str, Any]]) -> tuple[dict[str, float], dict[str, float]]:
    """Final and best value of each compared metric over the trained steps (step 0 is the untrained
    baseline: it is nobody's best)."""
    trained = [r for r in rows if r.get("step") is None or r["step"] > 0] or list(rows)
    final, best = {}, {}
    for metric in COMPARED_METRICS:
        _, values = metric_series(trained, metric)
        if values:
            final[metric] = values[-1]
            best[metric] = max(values) if HIGHER_IS_BETTER[metric] else min(values)
    return final, best


def _compared_job(record: JobRecord, differing: list[str]) -> ComparedJob:
    job, rows = record.job, record.metrics or []
    values = _compared_values(record)
    final, best = _metric_values(rows)
    pick = pick_checkpoint(record.checkpoints, rows) if record.checkpoints else None
    best_cp = pick.best if pick is not None else None
    # the reward measured at the best checkpoint's own step (the one rule: never a neighbour's score)
    cp_reward = (
        pick.scores[best_cp.checkpoint.name]
        if pick is not None and best_cp and pick.metric == REWARD_MEAN
        else None
    )
    steps = int(rows[-1].get("step", len(rows))) if rows else (job.progress.step if job.progress else None)
    return ComparedJob(
        job_id=job.job_id,
        job_name=job.job_name,
        status=job.status or UNKNOWN,
        steps=steps,
        duration_s=_duration_of(job),
        params={k: values.get(k) for k in differing},
        final=final,
        best=best,
        best_checkpoint=None
        if best_cp is None
        else {
            "name": best_cp.checkpoint.name,
            "step": best_cp.checkpoint.step,
            "reason": best_cp.reason,
        },
        finetuned_output=job.finetuned_output,
        eval_steps=job.plan.eval_steps,
        checkpoint_reward=cp_reward,
    )


def _differing(records: Sequence[JobRecord]) -> list[str]:
    values = [_compared_values(r) for r in records]
    keys = list(dict.fromkeys(k for v in values for k in v))
    return [k for k in keys if len({repr(v.get(k)) for v in values}) > 1]


def _candidates(cmp: Comparison) -> tuple[list[ComparedJob], list[str]]:
    """The jobs that may win, and why the others may not (the docs' order: the teacher signal first)."""
    notes = []
    alive = [j for j in cmp.jobs if j.status not in (FAILED, CANCELED) and j.final]
    notes += [f"{j.job_id} is {j.status}: it cannot win" for j in cmp.jobs if j.status in (FAILED, CANCELED)]
    notes += [
        f"{j.job_id} is still {j.status}: its values may change" for j in alive if j.status != SUCCEEDED
    ]
    complete = [j for j in alive if j.final.get(VALID_TOKEN_RATE, 1.0) >= FULL_VALID_TOKEN_RATE]
    if complete and len(complete) < len(alive):
        for j in alive:
            if j not in complete:
                notes.append(
                    f"{j.job_id} left out: {VALID_TOKEN_RATE} {j.final[VALID_TOKEN_RATE]:.3f} < 1 "
                    "(the teacher did not score every token)"
                )
        alive = complete
    return alive, notes


def _judge(cmp: Comparison) -> tuple[str | None, str, list[str]]:
    """(winner, why, notes): with a reward the highest best reward mean@1, else the lowest final loss."""
    if not cmp.metrics_available:
        return None, NO_METRICS_NOTE, []
    alive, notes = _candidates(cmp)
    notes += [
        f"{j.job_id} trained {j.steps} step(s), fewer than eval_steps × 3 = {3 * j.eval_steps}: "
        "too early to judge its trend"
        for j in cmp.jobs
        if j.steps is not None and j.steps < 3 * j.eval_steps
    ]
    if not alive:
        return None, "no job can win yet (none has metrics and a usable status)", notes
    kinds = {j.params.get(REWARD_FIELD) for j in alive} if REWARD_FIELD in cmp.differing else set()
    if len(kinds) > 1:
        with_reward = ", ".join(j.job_id for j in alive if j.params.get(REWARD_FIELD) == "yes")
        without = ", ".join(j.job_id for j in alive if j.params.get(REWARD_FIELD) != "yes")
        return (
            None,
            f"no winner: {with_reward} trained with a reward and {without} by pure distillation; their "
            f"{LOSS} is not comparable (a reward also pulls the student) and pure distillation reports no "
            f"{REWARD_MEAN}",
            [*notes, "compare jobs of one kind: all with the reward, or all without (--no-reward)"],
        )
    metric = next((m for m in JUDGED_BY if all(j.score(m) is not None for j in alive)), None)
    if metric is None:
        return None, "the jobs report no common metric to judge", notes
    score = {j.job_id: j.score(metric) or 0.0 for j in alive}
    higher = HIGHER_IS_BETTER[metric]
    scored = sorted(alive, key=lambda j: score[j.job_id], reverse=higher)  # stable: ties keep the order
    top = scored[0]
    others = ", ".join(f"{render.fmt(score[j.job_id])} ({j.job_id})" for j in scored[1:])
    tie = len(scored) > 1 and score[scored[1].job_id] == score[top.job_id]
    why = (
        f"{cmp.label(top)} wins: {'highest' if higher else 'lowest'} {metric} {_JUDGED_AS[metric]}, "
        f"{render.fmt(score[top.job_id])}"
        + (f" (others: {others})" if others else "")
        + (" - a tie: the first listed wins" if tie else "")
    )
    return top.job_id, why, notes


def compare_records(records: Sequence[JobRecord]) -> Comparison:
    """Compare fetched jobs (pure: the data in, the side-by-side view and the winner out)."""
    if len(records) < 2:
        raise OpdError("compare needs at least two jobs", where="JOB...", fix="pass two or more job ids")
    differing = _differing(records)
    jobs = [_compared_job(r, differing) for r in records]
    present = {m for j in jobs for m in j.final}
    cmp = Comparison(
        jobs=jobs,
        differing=differing,
        metrics=[m for m in COMPARED_METRICS if m in present],
        metrics_available=any(r.metrics is not None for r in records),
        rows_by_job={j.job_id: list(r.metrics or []) for j, r in zip(jobs, records, strict=True)},
    )
    cmp.winner, cmp.why, cmp.notes = _judge(cmp)
    return cmp


def compare_jobs(client: JobClient, job_ids: Sequence[str]) -> Comparison:
    """Fetch each job, its metrics and checkpoints (None where the control plane has none), then compare."""
    ids = list(dict.fromkeys(job_ids))
    if len(ids) < 2:
        raise OpdError(
            "compare needs at least two different jobs", where="JOB...", fix="pass two or more job ids"
        )
    records = [
        JobRecord(job=client.get(jid), metrics=client.metrics(jid), checkpoints=client.checkpoints(jid))
        for jid in ids
    ]
    cmp = compare_records(records)
    models = {r.job.job_id: r.job.model for r in records}
    cmp.step_offsets = client_offsets(client, models)
    return cmp
