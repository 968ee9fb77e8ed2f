"""Experiments: one-variable sweeps over a workspace, and jobs compared side by side.

The docs' tuning advice, as code: change one variable at a time (a second ``--param`` needs
``--grid``), reuse the registered functions (the sweep's first job registers them, the others pass
their ``entity_id``: see :mod:`opd_nb.entities`), and judge a change only after eval_steps × 3
steps, on the docs' metrics and best-checkpoint rule (:mod:`opd_nb.health`). Each sweep job is
exactly ``config.yaml`` plus its one change (``submit_job.py --set``); ``config.yaml`` is never
edited. Values are checked against the hyper-parameter table before anything is sent.
"""

from __future__ import annotations

import html
import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from opd_nb import render
from opd_nb.chart_data import client_offsets
from opd_nb.constants import (
    CANCELED,
    FAILED,
    LOSS,
    REWARD_MEAN,
    SUCCEEDED,
    TEACHER_KL,
    TRAIN_REWARD_MEAN,
    VALID_TOKEN_RATE,
)
from opd_nb.entities import Registration, registration_plan
from opd_nb.errors import OpdError
from opd_nb.health import DEFAULT_EVAL_STEPS, FULL_VALID_TOKEN_RATE, best_checkpoint, eval_steps_of
from opd_nb.plots import metric_series
from opd_nb.results import ResultMixin
from opd_nb.spec.effective import EffectiveJob, effective_job
from opd_nb.spec.hyperparams import PARAMS_BY_NAME, ParamSpec, closest
from opd_nb.spend import gate, require_consent

MAX_JOB_NAME = 256  # the SDK's TuningModel.name limit
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")

# ---------------------------------------------------------------- sweep: values and plan


def _typed(spec: ParamSpec, text: str) -> Any:
    """`text` as the table's type says (raises ValueError with a reason)."""
    if spec.type == "bool":
        if text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        raise ValueError(f"expected true or false, got {text!r}")
    if spec.type == "int":
        return int(text)
    if spec.type == "float":
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"expected a finite number, got {text!r}")
        return value
    return text


def parse_param(text: str) -> tuple[ParamSpec, list[tuple[str, Any]]]:
    """``NAME=V1,V2,...`` as (the table row, [(value as written, typed value)]), checked against the table."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    example = "write --param learning_rate=5.0e-7,1.0e-6"
    if not sep or not name or not raw.strip():
        raise OpdError(f"--param {text!r}: expected NAME=V1,V2,...", where="--param", fix=example)
    spec = PARAMS_BY_NAME.get(name)
    if spec is None:
        guess = closest(name)
        raise OpdError(
            f"{name!r} is not a hyper-parameter or resource of the OPD table",
            where="--param",
            fix=f"did you mean {guess}?" if guess else "see `opd config --help` and the config comments",
        )
    if not spec.consumed_by_opd:
        raise OpdError(
            f"{name} is not consumed by OPD: every job of this sweep would train the same",
            where=f"--param {name}",
            fix="sweep a parameter OPD uses (learning_rate first)",
        )
    labels = [v.strip() for v in raw.split(",")]
    values: list[tuple[str, Any]] = []
    for label in labels:
        try:
            value = _typed(spec, label)
        except ValueError as exc:
            problem = str(exc) if spec.type == "bool" else f"expected {spec.type}, got {label!r}"
        else:
            problem = spec.problem(value)
        if problem or not label:
            raise OpdError(
                f"{name} value {label!r}: {problem or 'empty value'}",
                where=f"--param {name}",
                fix=f"{name} takes {spec.range_text()}",
            )
        if any(label == seen or value == v for seen, v in values):
            raise OpdError(f"{name} value {label!r} is given twice", where=f"--param {name}", fix=example)
        values.append((label, value))
    return spec, values


class SweepPoint(BaseModel):
    """One job of a sweep: its values, its name and the config changes it is submitted with."""

    values: dict[str, Any]  # param -> typed value
    labels: dict[str, str]  # param -> value as written
    job_name: str
    sets: dict[str, Any]  # "training.hyper_parameters.<param>" -> value (submit_job.py --set)

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.labels.items())


class SweepPlan(ResultMixin, BaseModel):
    """What a sweep submits (and, with --dry-run, all it does): one effective job per value."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    workspace: str
    config: str
    params: list[str]
    points: list[SweepPoint]
    effective: list[EffectiveJob] = Field(default_factory=list, exclude=True)
    registrations: list[Registration] = Field(default_factory=list)  # what the first job does
    target_kind: str = "local"
    base_url: str = ""

    @property
    def paid(self) -> bool:
        return self.target_kind == "cloud"

    def to_payload(self) -> dict[str, Any]:
        return {
            "param": self.params[0] if len(self.params) == 1 else self.params,
            "dry_run": True,
            "jobs": [
                {"value": _value_of(self, p), "job_name": p.job_name, "request": e.request()}
                for p, e in zip(self.points, self.effective, strict=True)
            ],
            "registrations": [r.note for r in self.registrations],
        }

    def _registration_lines(self) -> list[str]:
        if not self.registrations:
            return ["no functions to register (pure distillation)"]
        lines = [f"first job: {r.note}" for r in self.registrations]
        if len(self.points) > 1 and any(not r.reused for r in self.registrations):
            lines.append("the other jobs reuse what the first job registers")
        return lines

    def __str__(self) -> str:
        head = f"dry run: {len(self.points)} job(s) on {self.target_kind} {self.base_url}, nothing sent"
        parts = [head, *self._registration_lines()]
        for point, job in zip(self.points, self.effective, strict=True):
            parts += ["", f"# {point.job_name}-<8 hex>  ({point.label})", str(job)]
        return "\n".join(parts)

    def _repr_html_(self) -> str:
        rows = [
            (p.label, f"{p.job_name}-<8 hex>", f"<pre>{html.escape(str(e))}</pre>")
            for p, e in zip(self.points, self.effective, strict=True)
        ]
        notes = "".join(f"<div>{render.esc(line)}</div>" for line in self._registration_lines())
        return render.box(
            notes + render.table(["value", "job name", "effective job"], rows, raw_cols=(2,)),
            title=f"sweep dry run: {len(self.points)} job(s) on {self.target_kind}, nothing sent",
        )


def _value_of(plan: SweepPlan | SweepResult, point: SweepPoint) -> Any:
    return point.values[plan.params[0]] if len(plan.params) == 1 else dict(point.values)


def _parse_params(params: Sequence[str], grid: bool) -> list[tuple[ParamSpec, list[tuple[str, Any]]]]:
    if not params:
        raise OpdError("no --param given", where="--param", fix="write --param learning_rate=5.0e-7,1.0e-6")
    if len(params) > 1 and not grid:
        raise OpdError(
            f"{len(params)} --param options: the docs say to change one variable at a time (with two, "
            "no job tells you which change did what)",
            where="--param",
            fix="sweep one parameter, or add --grid to submit every combination",
        )
    parsed = [parse_param(p) for p in params]
    names = [spec.name for spec, _ in parsed]
    if len(set(names)) != len(names):
        raise OpdError("the same parameter is given twice", where="--param", fix="one --param per parameter")
    return parsed


def _point(base_name: str, combo: Sequence[tuple[ParamSpec, tuple[str, Any]]]) -> SweepPoint:
    name = "-".join([base_name, *(f"{spec.name}-{label}" for spec, (label, _) in combo)])
    if len(name) > MAX_JOB_NAME:
        raise OpdError(
            f"job name {name[:40]}... would be {len(name)} characters (the SDK allows {MAX_JOB_NAME})",
            where="name",
            fix="shorten `name:` in the config",
        )
    return SweepPoint(
        values={spec.name: value for spec, (_, value) in combo},
        labels={spec.name: label for spec, (label, _) in combo},
        job_name=name,
        sets={f"training.{spec.section}.{spec.name}": value for spec, (_, value) in combo},
    )


def _effective(workspace: str, config: str, base: EffectiveJob, point: SweepPoint) -> EffectiveJob:
    """The effective job of one point: config.yaml plus its change (sources say where each came from)."""
    blocks: dict[str, dict[str, Any]] = {}
    for key, value in point.sets.items():
        _, section, name = key.split(".", 2)
        blocks.setdefault(section, dict(getattr(base.config.training, section) or {}))[name] = value
    job = effective_job(workspace, config=config, job_name=point.job_name, **blocks)
    sources = dict(base.sources)
    sources["name"] = "sweep (--job-name)"
    sources.update({key: "sweep (--set)" for key in point.sets})
    return job.model_copy(update={"sources": sources})


def plan_sweep(
    workspace: str,
    params: Sequence[str],
    *,
    grid: bool = False,
    config: str = "config.yaml",
    target_kind: str = "local",
    base_url: str = "",
    fresh: bool = False,
) -> SweepPlan:
    """Check the values and build every point's effective job; sends nothing."""
    parsed = _parse_params(params, grid)
    base = effective_job(workspace, config=config)
    combos = itertools.product(*[[(spec, v) for v in values] for spec, values in parsed])
    points = [_point(base.config.name, combo) for combo in combos]
    return SweepPlan(
        workspace=str(workspace),
        config=config,
        params=[spec.name for spec, _ in parsed],
        points=points,
        effective=[_effective(workspace, config, base, p) for p in points],
        registrations=registration_plan(workspace, base.config.functions, base_url, fresh=fresh),
        target_kind=target_kind,
        base_url=base_url,
    )


# ---------------------------------------------------------------- sweep: submitting


class SweepJob(BaseModel):
    """One submitted job of a sweep."""

    point: SweepPoint
    job_id: str
    functions: list[dict[str, Any]] = Field(default_factory=list)  # submit_job.py's notes per function


class SweepResult(ResultMixin, BaseModel):
    """The submitted sweep: which value went to which job, and what each did with the functions."""

    workspace: str
    params: list[str]
    jobs: list[SweepJob]
    target_kind: str
    base_url: str

    @property
    def job_ids(self) -> list[str]:
        return [j.job_id for j in self.jobs]

    def to_payload(self) -> dict[str, Any]:
        return {
            "param": self.params[0] if len(self.params) == 1 else self.params,
            "jobs": [{"value": _value_of(self, j.point), "job_id": j.job_id} for j in self.jobs],
        }

    def rows(self) -> list[tuple[str, str, str]]:
        """(value, job id, what it did with the functions) per job."""
        return [
            (j.point.label, j.job_id, "; ".join(str(f.get("note")) for f in j.functions) or "no functions")
            for j in self.jobs
        ]

    def _title(self) -> str:
        paid = " (paid)" if self.target_kind == "cloud" else ""
        return f"sweep of {', '.join(self.params)}: {len(self.jobs)} job(s){paid} on {self.target_kind}"

    def __str__(self) -> str:
        lines = [self._title()] + [f"  {v}  {jid}  {note}" for v, jid, note in self.rows()]
        lines.append(f"compare them: opd compare {' '.join(self.job_ids)}")
        return "\n".join(lines)

    def html(self) -> str:
        return render.table(["value", "job", "functions"], self.rows())

    def _repr_html_(self) -> str:
        return render.box(self.html(), title=self._title())


def submit_sweep(
    plan: SweepPlan,
    target: Any,
    *,
    fresh: bool = False,
    on_submitted: Callable[[SweepPoint, Any], None] | None = None,
) -> SweepResult:
    """Submit the plan's points in order: the first registers the functions, the others reuse them."""
    from opd_nb.client import submit

    jobs: list[SweepJob] = []
    for i, point in enumerate(plan.points):
        try:
            result = submit(
                plan.workspace,
                target,
                config=plan.config,
                job_name=point.job_name,
                sets=point.sets,
                fresh=fresh and i == 0,
                yes=True,  # the sweep as a whole was consented to and checked
                no_check=True,
            )
        except OpdError as exc:
            if not jobs:
                raise
            done = ", ".join(j.job_id for j in jobs)
            raise OpdError(
                f"{point.label}: {exc.message}",
                where=exc.where,
                fix=f"{len(jobs)} job(s) were already submitted ({done}); cancel them or submit the rest",
                exit_code=exc.exit_code,
                status=exc.status,
                code=exc.code,
            ) from None
        jobs.append(SweepJob(point=point, job_id=result.job_id, functions=result.functions))
        if on_submitted is not None:
            on_submitted(point, result)
    return SweepResult(
        workspace=plan.workspace,
        params=plan.params,
        jobs=jobs,
        target_kind=plan.target_kind,
        base_url=plan.base_url,
    )


def check_runner(workspace: str) -> None:
    """A sweep submits through the workspace's submit_job.py, which must know `--set` (older templates do not)."""
    script = Path(workspace) / "submit_job.py"
    fix = "copy submit_job.py from a new workspace (`opd new`); config.yaml stays as it is"
    if not script.is_file():
        raise OpdError(
            f"no submit_job.py in {workspace}: a sweep submits through it", where=str(script), fix=fix
        )
    if "--set" not in script.read_text(encoding="utf-8", errors="replace"):
        raise OpdError(
            "this submit_job.py predates `--set`, which a sweep needs (one change per job, config.yaml untouched)",
            where=str(script),
            fix=fix,
        )


def preflight(workspace: str, target: Any, config: str) -> None:
    """`opd check` once for the whole sweep: any error refuses it before a request is sent."""
    gate(workspace, target.kind, base_url=target.base_url, config=config)


def sweep(
    workspace: str,
    params: Sequence[str],
    target: Any,
    *,
    grid: bool = False,
    dry_run: bool = False,
    yes: bool = False,
    fresh: bool = False,
    config: str = "config.yaml",
    on_submitted: Callable[[SweepPoint, Any], None] | None = None,
) -> SweepPlan | SweepResult:
    """Plan (values checked), refuse paid jobs without `yes`, preflight once, then submit one job per value."""
    plan = plan_sweep(
        workspace,
        params,
        grid=grid,
        config=config,
        target_kind=target.kind,
        base_url=target.base_url,
        fresh=fresh,
    )
    if not dry_run:
        require_consent(
            target.kind,
            yes,
            f"this sweep would start {len(plan.points)} paid job(s) on Bailian ({', '.join(plan.params)})",
            fix="add --yes to start them, or --dry-run to see them first",
        )
    preflight(workspace, target, config)
    if dry_run:
        return plan
    check_runner(workspace)
    return submit_sweep(plan, target, fresh=fresh, on_submitted=on_submitted)


# ---------------------------------------------------------------- compare

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
    """What compare reads about one job (metrics/checkpoints None: the control plane has none)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    job: Any
    metrics: list[dict[str, Any]] | None = None
    checkpoints: list[Any] | None = None


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

    def label(self, job: ComparedJob) -> str:
        """A job as the table and the plot legend name it: its differing values, then its id."""
        values = ", ".join(f"{k}={render.fmt(v)}" for k, v in job.params.items())
        return f"{values} ({job.job_id})" if values else job.job_id

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
        from opd_nb.plots import KEY_METRICS, render_png

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


def _field(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def _seconds(text: Any) -> float | None:
    for fmt in _TIME_FORMATS:
        try:
            return time.mktime(time.strptime(str(text), fmt))
        except (TypeError, ValueError):
            continue
    return None


def _duration_of(job: Any) -> float | None:
    raw = _field(job, "raw") or {}
    start = _seconds(raw.get("start_time") or _field(job, "create_time"))
    end = _seconds(_field(job, "end_time"))
    return end - start if start is not None and end is not None and end >= start else None


def _reward_of(record: JobRecord) -> str | None:
    """ "yes"/"no": did the job train with a reward; None where the control plane does not tell."""
    raw = _field(record.job, "raw") or {}
    local = raw.get("local") if isinstance(raw, Mapping) else None
    if isinstance(local, Mapping):  # the local plane lists the functions a job runs
        kinds = {f.get("type") for f in local.get("functions") or [] if isinstance(f, Mapping)}
        return "yes" if kinds & {"reward", "group_reward"} else "no"
    if record.metrics:  # else by what it reports: pure distillation reports no reward series
        return "yes" if any(REWARD_MEAN in r or TRAIN_REWARD_MEAN in r for r in record.metrics) else "no"
    return None


def _compared_values(record: JobRecord) -> dict[str, Any]:
    job = record.job
    values = dict(_field(job, "hyper_parameters") or {})
    values.update({k: _field(job, k) for k in COMPARED_FIELDS})
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


def _checkpoint_reward(checkpoint: Any, rows: Sequence[Mapping[str, Any]]) -> float | None:
    """The reward mean@1 a checkpoint was saved with, else the last one validated at or before it."""
    value = (_field(checkpoint, "metrics") or {}).get(REWARD_MEAN)
    if value is None:
        steps, values = metric_series(rows, REWARD_MEAN)
        before = [v for s, v in zip(steps, values, strict=True) if s <= (_field(checkpoint, "step") or 0)]
        value = before[-1] if before else None
    return None if value is None else float(value)


def _compared_job(record: JobRecord, differing: list[str]) -> ComparedJob:
    job, rows = record.job, record.metrics or []
    values = _compared_values(record)
    final, best = _metric_values(rows)
    best_cp = best_checkpoint(record.checkpoints, rows) if record.checkpoints else None
    cp_reward = _checkpoint_reward(best_cp.checkpoint, rows) if best_cp is not None else None
    steps = int(rows[-1].get("step", len(rows))) if rows else (_field(job, "progress") or {}).get("step")
    return ComparedJob(
        job_id=_field(job, "job_id"),
        job_name=_field(job, "job_name"),
        status=str(_field(job, "status") or "UNKNOWN"),
        steps=steps,
        duration_s=_duration_of(job),
        params={k: values.get(k) for k in differing},
        final=final,
        best=best,
        best_checkpoint=None
        if best_cp is None
        else {
            "name": _field(best_cp.checkpoint, "name"),
            "step": _field(best_cp.checkpoint, "step"),
            "reason": best_cp.reason,
        },
        finetuned_output=_field(job, "finetuned_output"),
        eval_steps=eval_steps_of(_field(job, "hyper_parameters")) or DEFAULT_EVAL_STEPS,
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


def compare_jobs(client: Any, job_ids: Sequence[str]) -> Comparison:
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
    models = {r.job.job_id: getattr(r.job, "model", None) for r in records}
    cmp.step_offsets = client_offsets(client, models)
    return cmp
