"""Sweeps: one variable over a workspace, one job per value, the functions registered once.

The docs' tuning advice, as code: change one variable at a time (a second ``--param`` needs
``--grid``) and reuse the registered functions (the sweep's first job registers them, the others
pass their ``entity_id``: see :mod:`opd_nb.functions.entities`). Each sweep job is exactly ``config.yaml``
plus its one change (``submit_job.py --set``); ``config.yaml`` is never edited. Values are checked
against the hyper-parameter table before anything is sent.
"""

from __future__ import annotations

import html
import itertools
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import BaseModel, ConfigDict, Field

from opd_nb.errors import OpdError
from opd_nb.functions.entities import Registration, registration_plan
from opd_nb.paid.consent import require_consent
from opd_nb.paid.gate import gate, warning_lines
from opd_nb.results import ResultMixin
from opd_nb.spec.effective import EffectiveJob, effective_job
from opd_nb.spec.hyperparams import PARAMS_BY_NAME, ParamSpec, closest
from opd_nb.spec.job import workspace_config
from opd_nb.views import render

if TYPE_CHECKING:  # the client is imported when a sweep submits, not to plan one
    from opd_nb.client import SubmitResult, Target

MAX_JOB_NAME = 256  # the SDK's TuningModel.name limit
ParamValue = bool | int | float | str  # a table value, typed as its row says
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _typed(spec: ParamSpec, text: str) -> ParamValue:
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


def _refuse_value(spec: ParamSpec, label: str, problem: str) -> NoReturn:
    raise OpdError(
        f"{spec.name} value {label!r}: {problem}",
        where=f"--param {spec.name}",
        fix=f"{spec.name} takes {spec.range_text()}",
    )


def parse_param(text: str) -> tuple[ParamSpec, list[tuple[str, ParamValue]]]:
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
    values: list[tuple[str, ParamValue]] = []
    for label in labels:
        try:
            value = _typed(spec, label)
        except ValueError as exc:
            _refuse_value(
                spec, label, str(exc) if spec.type == "bool" else f"expected {spec.type}, got {label!r}"
            )
        problem = spec.problem(value)
        if problem or not label:
            _refuse_value(spec, label, problem or "empty value")
        if any(label == seen or value == v for seen, v in values):
            raise OpdError(f"{name} value {label!r} is given twice", where=f"--param {name}", fix=example)
        values.append((label, value))
    return spec, values


class SweepPoint(BaseModel):
    """One job of a sweep: its values, its name and the config changes it is submitted with."""

    values: dict[str, ParamValue]  # param -> typed value
    labels: dict[str, str]  # param -> value as written
    job_name: str
    sets: dict[str, ParamValue]  # "training.hyper_parameters.<param>" -> value (submit_job.py --set)

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
    warnings: list[str] = Field(default_factory=list)  # the preflight's, each once (see `preflight`)

    @property
    def paid(self) -> bool:
        return self.target_kind == "cloud"

    def to_payload(self) -> dict[str, Any]:
        return {
            "param": self.params[0] if len(self.params) == 1 else self.params,
            "dry_run": True,
            "jobs": [
                {"value": _value_of(self.params, p), "job_name": p.job_name, "request": e.request()}
                for p, e in zip(self.points, self.effective, strict=True)
            ],
            "registrations": [r.note for r in self.registrations],
            "preflight_warnings": self.warnings,
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
        parts = [*self.warnings, head, *self._registration_lines()]
        for point, job in zip(self.points, self.effective, strict=True):
            parts += ["", f"# {point.job_name}-<8 hex>  ({point.label})", str(job)]
        return "\n".join(parts)

    def _repr_html_(self) -> str:
        rows = [
            (p.label, f"{p.job_name}-<8 hex>", f"<pre>{html.escape(str(e))}</pre>")
            for p, e in zip(self.points, self.effective, strict=True)
        ]
        notes = "".join(
            f"<div>{render.esc(line)}</div>" for line in [*self.warnings, *self._registration_lines()]
        )
        return render.box(
            notes + render.table(["value", "job name", "effective job"], rows, raw_cols=(2,)),
            title=f"sweep dry run: {len(self.points)} job(s) on {self.target_kind}, nothing sent",
        )


def _value_of(params: list[str], point: SweepPoint) -> ParamValue | dict[str, ParamValue]:
    """The point's value as the JSON names it: bare for one parameter, by name for a grid."""
    return point.values[params[0]] if len(params) == 1 else dict(point.values)


def _parse_params(params: Sequence[str], grid: bool) -> list[tuple[ParamSpec, list[tuple[str, ParamValue]]]]:
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


def _point(base_name: str, combo: Sequence[tuple[ParamSpec, tuple[str, ParamValue]]]) -> SweepPoint:
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
    blocks: dict[str, Any] = {}  # section -> its changed block, as effective_job's keyword overrides
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
            "jobs": [{"value": _value_of(self.params, j.point), "job_id": j.job_id} for j in self.jobs],
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
    target: Target,
    *,
    fresh: bool = False,
    on_submitted: Callable[[SweepPoint, SubmitResult], None] | None = None,
    request_id: str | None = None,
) -> SweepResult:
    """Submit the plan's points in order: the first registers the functions, the others reuse them.
    Each paid point is sent once under its own request id (:func:`point_request_id`)."""
    from opd_nb.client import submit
    from opd_nb.paid.consent import request_id as new_request_id

    rid = request_id or new_request_id()
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
                preflight_done=True,
                request_id=point_request_id(rid, i),
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


def point_request_id(request_id: str, index: int) -> str:
    """The request id of a sweep's `index`-th job: the sweep's, numbered (its job name holds it)."""
    return f"{request_id}-{index}"


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


def preflight(plan: SweepPlan, target: Target) -> list[str]:
    """`opd check` on each point's config (config.yaml plus its change): an error in any refuses the whole
    sweep before a request is sent, naming the value. Returns the warnings to show, each once: a warning
    of every point as it is, one that only some values cause with those values."""
    per_point: list[tuple[SweepPoint, list[str]]] = []
    for point in plan.points:
        try:
            report = gate(
                plan.workspace, target.kind, base_url=target.base_url, config=plan.config, sets=point.sets
            )
        except OpdError as exc:
            raise OpdError(
                f"{point.label}: {exc.message}",
                where=exc.where,
                fix=exc.fix,
                exit_code=exc.exit_code,
                code=exc.code,
            ) from None
        per_point.append((point, warning_lines(report)))
    shown: list[str] = []
    for line in dict.fromkeys(w for _, lines in per_point for w in lines):
        points = [p.label for p, lines in per_point if line in lines]
        shown.append(line if len(points) == len(per_point) else f"{line}\n  (only for {'; '.join(points)})")
    return shown


def run_sweep(
    workspace: str,
    params: Sequence[str],
    target: Target,
    *,
    grid: bool = False,
    dry_run: bool = False,
    yes: bool = False,
    fresh: bool = False,
    config: str = "config.yaml",
    on_submitted: Callable[[SweepPoint, SubmitResult], None] | None = None,
    on_note: Callable[[str], None] | None = None,
    request_id: str | None = None,
) -> SweepPlan | SweepResult:
    """Plan (values checked), preflight each point, refuse paid jobs without `yes` (showing the warnings),
    show the warnings (`on_note`) before anything is sent, then submit one job per value."""
    ws, config = workspace_config(workspace, config)
    plan = plan_sweep(
        str(ws),
        params,
        grid=grid,
        config=config,
        target_kind=target.kind,
        base_url=target.base_url,
        fresh=fresh,
    )
    plan.warnings = preflight(plan, target)
    if dry_run:
        return plan
    require_consent(
        target.kind,
        yes,
        f"this sweep would start {len(plan.points)} paid job(s) on Bailian ({', '.join(plan.params)})",
        fix="add --yes to start them, or --dry-run to see them first",
        warnings=plan.warnings,
    )
    check_runner(plan.workspace)
    if on_note is not None:
        for line in plan.warnings:
            on_note(line)
    return submit_sweep(plan, target, fresh=fresh, on_submitted=on_submitted, request_id=request_id)
