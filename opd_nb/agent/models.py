"""The MCP tools' typed outputs that the core has no model for (each tool's output schema).

Where a core call already returns a pydantic result (a workspace, a check report, an estimate, a log
search, the checkpoint table, a comparison, an evaluation, a tracker report), the tool returns it as
it is: one shape per fact. The models here are the agent-facing views the verbs print as text: a job,
a wait, metric series, alerts with the best checkpoint, a step's best and worst sample, and the
two-call answer of a paid action.
"""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, Field

T = TypeVar("T")


class JobInfo(BaseModel):
    """A job as the control plane reports it (the fields an agent decides on)."""

    job_id: str
    job_name: str | None = None
    status: str
    model: str | None = None
    teacher_model: str | None = None
    training_type: str | None = None
    step: int | None = None
    total_steps: int | None = None
    finetuned_output: str | None = None
    message: str | None = None
    create_time: str | None = None
    end_time: str | None = None
    hyper_parameters: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def of(cls, job: Any) -> JobInfo:
        progress = job.progress
        return cls(
            **{
                k: getattr(job, k)
                for k in (
                    "job_id",
                    "job_name",
                    "status",
                    "model",
                    "teacher_model",
                    "training_type",
                    "finetuned_output",
                    "message",
                    "create_time",
                    "end_time",
                    "hyper_parameters",
                )
            },  # fmt: skip
            step=progress.step if progress else None,
            total_steps=progress.total_steps if progress else None,
        )


class JobListInfo(BaseModel):
    jobs: list[JobInfo]
    total: int


class AlertInfo(BaseModel):
    """One health rule that fired: the same rule, wording and fix as the monitor and `opd watch`."""

    rule: str
    severity: Literal["error", "warning"]
    message: str
    fix: str

    @classmethod
    def of(cls, alert: Any) -> AlertInfo:
        return cls(rule=alert.rule, severity=alert.severity, message=alert.message, fix=alert.fix)


class Confirmation(BaseModel):
    """A paid action's first answer: nothing was sent. Show `summary` and `warnings` to the user; on a
    yes, call the same tool again with the same arguments and `confirmation_token`."""

    summary: str  # the one line `opd` prints without --yes
    fix: str  # what to do next
    warnings: list[str] = Field(default_factory=list)
    estimate: dict[str, Any] | None = None  # `opd estimate --json`, for a job
    request: dict[str, Any] | None = None  # the effective job (`opd submit --dry-run`), for a job
    confirmation_token: str
    expires_in_s: float


class Paid(BaseModel, Generic[T]):
    """`needs_confirmation` (nothing sent; see `confirmation`), `started`, or `already_started` (a
    repeated confirmed call: the same thing the token started, nothing new)."""

    status: Literal["needs_confirmation", "started", "already_started"]
    confirmation: Confirmation | None = None
    result: T | None = None
    notes: list[str] = Field(default_factory=list)


class Submitted(BaseModel):
    job: JobInfo
    runner: str
    functions: list[dict[str, Any]] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class WaitResult(BaseModel):
    """Why a bounded wait returned: the job ended, its status changed, a new alert, or the time ran out."""

    job: JobInfo
    reason: Literal["terminal", "status_changed", "alert", "timeout"]
    waited_s: float
    alerts: list[AlertInfo] = Field(default_factory=list)  # new since the wait started
    guard: list[str] = Field(default_factory=list)  # what the guard did (a cancel), when asked for


class SeriesSummary(BaseModel):
    name: str
    points: int
    first_step: float
    last_step: float
    first: float
    last: float
    min: float
    max: float
    mean: float


class MetricsResult(BaseModel):
    job_id: str
    available: bool  # False: this control plane (Bailian) has no metrics API
    note: str = ""
    series: list[SeriesSummary] = Field(default_factory=list)
    last_rows: list[dict[str, Any]] = Field(default_factory=list)


class BestCheckpointInfo(BaseModel):
    name: str
    step: int | None = None
    reason: str
    deploy_or_continue_from: str | None = None


class AlertsResult(BaseModel):
    job_id: str
    status: str
    alerts: list[AlertInfo] = Field(default_factory=list)
    best_checkpoint: BestCheckpointInfo | None = None
    best_checkpoint_line: str = ""


class TokenInfo(BaseModel):
    text: str
    teacher_logprob: float | None = None
    student_logprob: float | None = None
    log_ratio: float | None = None  # teacher - student


class SampleInfo(BaseModel):
    """One recorded sample with the teacher's token log-probs summarised."""

    index: int
    kind: str | None = None
    group: int | None = None
    prompt: str = ""
    completion: str = ""
    reward: float | None = None
    truncated: bool = False
    tokens: int = 0
    scored_tokens: int = 0
    mean_teacher_logprob: float | None = None
    mean_student_logprob: float | None = None
    mean_log_ratio: float | None = None
    most_disagreeing: list[TokenInfo] = Field(default_factory=list)  # lowest teacher - student first


class SamplesResult(BaseModel):
    job_id: str
    step: int | None = None
    kind: str | None = None
    recorded_steps: list[int] = Field(default_factory=list)
    samples: int = 0
    best: SampleInfo | None = None
    worst: SampleInfo | None = None
    note: str = ""


class ExportResult(BaseModel):
    checkpoint: str
    model_name: str | None = None
    next_step: str = ""
