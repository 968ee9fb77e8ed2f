"""Tools that start or follow jobs: submit, smoke, sweep (paid on Bailian: two calls), list, status,
a bounded wait, cancel. Each calls the public core function its `opd` verb calls."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import Field

from opd_nb.agent.consent import request_fingerprint
from opd_nb.agent.models import AlertInfo, Confirmation, JobInfo, JobListInfo, Paid, Submitted, WaitResult
from opd_nb.agent.planes import (
    STATE,
    AgentState,
    BaseUrlArg,
    ConfigArg,
    IdArg,
    JobIdArg,
    TargetArg,
    TokenArg,
    WorkspaceArg,
    client_for,
    tool_errors,
)
from opd_nb.errors import OpdError
from opd_nb.experiments.sweep import SweepResult
from opd_nb.paid.consent import HOW_TO_CONFIRM

T = TypeVar("T")
MAX_WAIT_S = 600.0
CONFIRM_FIX = HOW_TO_CONFIRM["mcp"]  # the one wording of each surface's consent: opd_nb.paid.consent
SetsArg = Annotated[
    dict[str, Any] | None,
    Field(
        description='config values for this submit only, e.g. {"training.hyper_parameters.learning_rate": 2e-6}'
    ),
]


def paid(
    state: AgentState,
    action: str,
    client: Any,
    arguments: dict[str, Any],
    workspace: str | None,
    start: Callable[[bool, str | None], T],
    token: str | None,
    preview: Callable[[], dict[str, Any]] | None = None,
    find: Callable[[str], T | None] | None = None,
) -> Paid[T]:
    """`start(yes, request_id)` behind the consent book; a refusal comes back with the preview and a token;
    `find(request_id)` answers a repeat whose first send lost its answer."""
    config = str(arguments.get("config") or "config.yaml")
    outcome = state.consent.run(
        action,
        lambda: request_fingerprint(action, client.target, arguments, workspace, config),
        start,
        token,
        find,
    )
    if outcome.refusal is not None:
        r = outcome.refusal
        extra = preview() if preview is not None else {}
        return Paid(
            status="needs_confirmation",
            confirmation=Confirmation(
                summary=r.summary,
                fix=CONFIRM_FIX,
                confirmation_token=r.token,
                expires_in_s=r.expires_in_s,
                **extra,
            ),  # fmt: skip
        )
    notes = ["this token already started it: nothing new was sent"] if outcome.repeated else []
    return Paid(
        status="already_started" if outcome.repeated else "started", result=outcome.result, notes=notes
    )


def job_preview(
    ws: str,
    target: Any,
    config: str,
    sets: dict | None,
    smoke: int | None,
    *,
    body: bool = True,
    **overrides: Any,
) -> dict:
    """What the consent step shows besides the line: every warning, the estimate, the request body."""
    from opd_nb.checks import check
    from opd_nb.client import dry_run
    from opd_nb.paid.estimate import estimate

    report = check(ws, target.kind, config=config)
    out: dict[str, Any] = {"warnings": [str(f) for f in report.findings if f.severity == "warning"]}
    out["estimate"] = estimate(
        ws, config=config, sets=dict(sets or {}), smoke=smoke, **overrides
    ).to_payload()
    try:
        if body:
            out["request"] = dry_run(ws, target, config=config, sets=sets, smoke=smoke, **overrides).job
    except OpdError as exc:
        out["warnings"].append(f"no request body to show: {exc}")
    return out


def _submit(state: AgentState, action: str, ws: str, target: str | None, base_url: str | None, token: str | None,
            config: str, sets: dict | None, smoke: int | None, fresh: bool, **overrides: Any) -> Paid[Submitted]:  # fmt: skip
    from opd_nb.client import submit
    from opd_nb.client.submit import find_started_job

    client = client_for(target, base_url, ws)

    def start(yes: bool, request_id: str | None) -> Submitted:
        result = submit(ws, client.target, config=config, sets=sets, smoke=smoke, fresh=fresh, yes=yes,
                        client=client, request_id=request_id, **overrides)  # fmt: skip
        job = result.job or client.get(result.job_id)
        return Submitted(job=JobInfo.of(job), runner=result.runner, functions=result.functions,
                         notes=result.note_lines())  # fmt: skip

    def find(request_id: str) -> Submitted | None:
        job = find_started_job(client, request_id)
        return Submitted(job=JobInfo.of(job), runner="found", functions=[]) if job is not None else None

    arguments = {"config": config, "sets": sets, "smoke": smoke, "fresh": fresh, **overrides}
    return paid(state, action, client, arguments, ws, start, token,
                lambda: job_preview(ws, client.target, config, sets, smoke, **overrides), find)  # fmt: skip


@tool_errors
def submit(
    workspace: WorkspaceArg = ".",
    target: TargetArg = None,
    base_url: BaseUrlArg = None,
    config: ConfigArg = "config.yaml",
    model: Annotated[
        IdArg | None,
        Field(
            description="student model id; to continue training: "
            "opd-local/<job_id>, a checkpoint or an exported model"
        ),
    ] = None,  # fmt: skip
    teacher_model: Annotated[IdArg | None, Field(description="teacher model id (overrides config)")] = None,
    job_name: Annotated[IdArg | None, Field(description="job name (the service appends -<8 hex>)")] = None,
    no_reward: Annotated[bool, Field(description="submit without reward functions")] = False,
    sets: SetsArg = None,
    fresh: Annotated[bool, Field(description="register the functions again even if unchanged")] = False,
    confirmation_token: TokenArg = None,
) -> Paid[Submitted]:
    """Check the workspace, then submit its job (`opd submit`); also continued training (set `model`).
    On Bailian the first call sends nothing and returns the summary, warnings, estimate and request
    body with a confirmation_token; show them, and on the user's yes call again with the token."""
    overrides = {
        "model": model,
        "teacher_model": teacher_model,
        "job_name": job_name,
        "no_reward": no_reward,
    }
    return _submit(STATE, "submit", workspace, target, base_url, confirmation_token, config, sets, None,
                   fresh, **overrides)  # fmt: skip


@tool_errors
def smoke(
    workspace: WorkspaceArg = ".",
    rows: Annotated[int, Field(ge=0, description="training rows (0: two steps' worth)")] = 0,
    target: TargetArg = None,
    base_url: BaseUrlArg = None,
    config: ConfigArg = "config.yaml",
    confirmation_token: TokenArg = None,
) -> Paid[Submitted]:
    """A small first run (`opd submit --smoke`): sampled rows, one epoch, a few validation rows, job
    name +-smoke; data/ is not edited. Paid on Bailian: two calls, as `submit`."""
    return _submit(STATE, "smoke", workspace, target, base_url, confirmation_token, config, None, rows,
                   False)  # fmt: skip


@tool_errors
def sweep(
    params: Annotated[list[IdArg], Field(description="NAME=V1,V2,... e.g. learning_rate=5e-7,1e-6")],
    workspace: WorkspaceArg = ".",
    grid: Annotated[bool, Field(description="several params: one job per combination")] = False,
    target: TargetArg = None,
    base_url: BaseUrlArg = None,
    config: ConfigArg = "config.yaml",
    fresh: bool = False,
    confirmation_token: TokenArg = None,
) -> Paid[SweepResult]:
    """One job per value of one hyper-parameter (`opd sweep`); the first registers the functions.
    Paid on Bailian (one job per value): two calls, as `submit`."""
    from opd_nb.experiments import run_sweep

    client = client_for(target, base_url, workspace)

    def start(yes: bool, request_id: str | None) -> SweepResult:
        return run_sweep(  # pyright: ignore[reportReturnType]
            workspace, params, client.target, grid=grid, yes=yes, fresh=fresh, config=config,
            request_id=request_id,
        )  # fmt: skip

    def find(request_id: str) -> SweepResult | None:  # every job of the sweep, found by its own id
        from opd_nb.experiments.sweep import plan_sweep

        plan = plan_sweep(workspace, params, grid=grid, config=config, target_kind=client.target.kind,
                          base_url=client.target.base_url, fresh=fresh)  # fmt: skip
        return sweep_found(client, plan, request_id)

    def preview() -> dict[str, Any]:  # every point's effective job, checked; nothing sent
        plan = run_sweep(
            workspace, params, client.target, grid=grid, dry_run=True, fresh=fresh, config=config
        )
        shown = job_preview(workspace, client.target, config, None, None, body=False)
        return {**shown, "request": plan.to_payload()}

    arguments = {"params": params, "grid": grid, "config": config, "fresh": fresh}
    return paid(STATE, "sweep", client, arguments, workspace, start, confirmation_token, preview, find)


def sweep_found(client: Any, plan: Any, request_id: str) -> SweepResult | None:
    """The jobs a sweep whose answer was lost started, each found by its point's request id: all of them,
    or None when the plane shows none. A sweep stops at a start it cannot confirm, so it may have started
    only some: that is an error naming the jobs that run and the values never sent (none is sent now)."""
    from opd_nb.agent.consent import SPENT_TOKEN
    from opd_nb.client.submit import find_started_job
    from opd_nb.experiments.sweep import SweepJob, point_request_id

    found = [find_started_job(client, point_request_id(request_id, i)) for i in range(len(plan.points))]
    jobs = [
        SweepJob(point=p, job_id=j.job_id) for p, j in zip(plan.points, found, strict=True) if j is not None
    ]
    if not jobs:
        return None
    if len(jobs) < len(plan.points):
        runs = "; ".join(f"{j.point.label}: {j.job_id}" for j in jobs)
        unsent = "; ".join(p.label for p, j in zip(plan.points, found, strict=True) if j is None)
        raise OpdError(
            f"nothing sent: this confirmation token's sweep was cut short by a lost answer: the plane shows "
            f"{len(jobs)} of {len(plan.points)} jobs ({runs}); not started: {unsent}",
            fix="watch or cancel the jobs that run (list_jobs); to start the rest, call sweep again with only "
            "their values and without confirmation_token, and ask the user anew",
            code=SPENT_TOKEN,
            exit_code=1,
        )
    return SweepResult(workspace=plan.workspace, params=plan.params, jobs=jobs,
                       target_kind=client.target.kind, base_url=client.target.base_url)  # fmt: skip


@tool_errors
def list_jobs(
    target: TargetArg = None,
    base_url: BaseUrlArg = None,
    page: Annotated[int, Field(ge=1)] = 1,
    size: Annotated[int, Field(ge=1, le=100)] = 20,
) -> JobListInfo:
    """Jobs, newest first (`opd jobs`)."""
    listing = client_for(target, base_url).list(page=page, size=size)
    return JobListInfo(jobs=[JobInfo.of(j) for j in listing.jobs], total=listing.total)


@tool_errors
def job_status(job_id: JobIdArg, target: TargetArg = None, base_url: BaseUrlArg = None) -> JobInfo:
    """One job: status, progress, model, output (`opd status`)."""
    return JobInfo.of(client_for(target, base_url).get(job_id))


@tool_errors
def wait_job(
    job_id: JobIdArg,
    timeout_s: Annotated[
        float, Field(gt=0, le=MAX_WAIT_S, description="return by then at the latest")
    ] = 60.0,
    guard: Annotated[
        bool,
        Field(
            description="cancel the job when an error health rule fires "
            "(`opd watch --guard`, default thresholds)"
        ),
    ] = False,  # fmt: skip
    target: TargetArg = None,
    base_url: BaseUrlArg = None,
) -> WaitResult:
    """Wait, bounded, until the job ends, changes status or raises a new health alert (alerts
    already returned by an earlier wait are not repeated)."""
    return wait(STATE, client_for(target, base_url), job_id, timeout_s, guard)


@tool_errors
def cancel_job(job_id: JobIdArg, target: TargetArg = None, base_url: BaseUrlArg = None) -> JobInfo:
    """Cancel a job (`opd cancel`); a running local job stops within a few seconds."""
    client = client_for(target, base_url)
    return JobInfo.of(client.cancel(job_id, reason="by a coding agent (opd mcp cancel_job)"))


TOOLS = (
    submit,
    smoke,
    sweep,
    list_jobs,
    job_status,
    wait_job,
    cancel_job,
)  # registered by opd_nb.agent.server, in this order


def wait(state: AgentState, client: Any, job_id: str, timeout_s: float, guard: bool) -> WaitResult:
    """Poll `job_id` until it ends, its status changes, a new alert fires, or `timeout_s` passes."""
    from opd_nb.health.guard import Guard
    from opd_nb.health.rules import AlertTracker, job_alerts

    tracker = state.alerts.setdefault(job_id, AlertTracker())
    poll_s = 1.0 if client.target.kind == "local" else 5.0
    began, first, said = time.monotonic(), None, []
    while True:
        job = client.get(job_id)
        first = first or job.status
        rows = client.metrics(job_id)
        if guard:
            said += state.guards.setdefault(job_id, Guard(client, job_id)).poll(job, rows)
        alerts = job_alerts(rows or [], status=job.status, job_id=job_id, eval_steps=job.plan.eval_steps)
        fresh = [AlertInfo.of(a) for a in tracker.fresh(alerts)]
        waited = time.monotonic() - began
        reason = ("terminal" if job.terminal else "status_changed" if job.status != first
                  else "alert" if fresh else "timeout" if waited + poll_s > timeout_s else None)  # fmt: skip
        if reason is not None:
            return WaitResult(
                job=JobInfo.of(job), reason=reason, waited_s=round(waited, 1), alerts=fresh, guard=said
            )
        time.sleep(poll_s)
