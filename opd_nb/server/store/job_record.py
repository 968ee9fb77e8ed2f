"""A fine-tune job as the store keeps it: the typed record the server and its worker both read.

The record crosses a process: the server writes it at submission (:mod:`opd_nb.server.submission`),
its worker subprocess reads it back to run the job, and both add to it (progress, the resume state,
the engine's outcome). So it is one set of pydantic models, validated on every read, instead of a
dict whose keys each side spells. The store keeps :class:`JobMeta` in the ``jobs.meta`` JSON column;
a row that an earlier version wrote (resume state and outcome as top-level keys) still loads.
"""

from __future__ import annotations

from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, model_validator

from opd_nb.spec.training_plan import TrainingPlan
from opd_nb.wire.jobs import JobProgress

FunctionKind = Literal["reward", "group_reward", "rollout"]
_RESUME_KEYS = ("interruptions", "resume_from")  # top-level meta keys of rows before ResumeState
_OUTCOME_KEYS = ("final_checkpoint", "steps", "epochs", "metrics_tail")


class JobFunction(BaseModel):
    """One registered function a job runs (a reward, or its rollout): what the worker starts, and how
    the engine calls it."""

    model_config = ConfigDict(frozen=True)

    entity_id: str
    kind: FunctionKind
    name: str
    processor: str
    code_dir: str
    weight: float | None = None
    timeout: float | None = None
    concurrency: int | None = None
    reward_metric_weight: dict[str, float] | None = None
    env: dict[str, str] = Field(default_factory=dict)  # the runtime's variables, as strings

    def call_options(self) -> dict[str, Any]:
        """The per-call limits the function was submitted with (only those that were set)."""
        return {
            k: v for k, v in (("timeout", self.timeout), ("concurrency", self.concurrency)) if v is not None
        }


class ResumeState(BaseModel):
    """How often the server stopped under the job, and the checkpoint its next run starts from."""

    model_config = ConfigDict(frozen=True)

    interruptions: int = 0
    resume_from: str | None = None  # a checkpoint-N directory; None: from step 0


class TrainingOutcome(BaseModel):
    """What the engine reported when the job trained to the end (its published checkpoint)."""

    model_config = ConfigDict(frozen=True)

    final_checkpoint: str  # (a record from before keeps the engine's best_checkpoint, ignored: `health.rules.pick_checkpoint` is the rule)
    steps: int = 0
    epochs: int = 0
    metrics_tail: dict[str, Any] = Field(default_factory=dict)


class JobMeta(BaseModel):
    """What the worker needs to run the job, resolved at submission, and what its runs added since."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    training_type: str
    plan: TrainingPlan | None = None  # the hyper-parameters read at submission (None: a row from before)
    student_path: str
    teacher_path: str
    student_kind: str | None = None
    substitutions: list[str] = Field(default_factory=list)  # stand-in notes for the job log
    train_file: str
    validation_file: str | None = None
    functions: list[JobFunction] = Field(default_factory=list[JobFunction])
    base_model: str | None = None  # the root base model of a job that continues a fine-tuned output
    parents: list[str] = Field(default_factory=list)  # the job it continued, that job's parent, ...
    resume: ResumeState = Field(default_factory=ResumeState)
    outcome: TrainingOutcome | None = None
    cancel_reason: str | None = None  # who cancelled and why, as the cancel request said (the first one)

    @model_validator(mode="before")
    @classmethod
    def _lift_flat_keys(cls, data: Any) -> Any:
        """A row from before :class:`ResumeState` and :class:`TrainingOutcome` keeps their fields at the top."""
        if not isinstance(data, dict):
            return data
        data = dict(cast(dict[str, Any], data))  # a stored row's JSON object
        if "resume" not in data:
            data["resume"] = {k: v for k in _RESUME_KEYS if (v := data.pop(k, None)) is not None}
        if "outcome" not in data:
            flat = {k: v for k in _OUTCOME_KEYS if (v := data.pop(k, None)) is not None}
            data["outcome"] = flat if "final_checkpoint" in flat else None
        return data

    @property
    def final_checkpoint(self) -> str | None:
        return self.outcome.final_checkpoint if self.outcome else None

    def with_resume(self, **changes: Any) -> JobMeta:
        """This meta with its resume state changed (``interruptions=``, ``resume_from=``)."""
        return self.model_copy(
            update={"resume": ResumeState.model_validate({**self.resume.model_dump(), **changes})}
        )


def cancel_message(reason: str | None) -> str:
    """A canceled job's message: who cancelled it and why, when the cancel request said so."""
    return f"canceled: {reason}" if reason else "canceled by user"


class JobRecord(BaseModel):
    """One row of the ``jobs`` table, as read back from the store."""

    model_config = ConfigDict(frozen=True)

    job_id: str
    seq: int
    job_name: str
    status: str
    request: dict[str, Any]  # the submitted body as JSON (answered back as the cloud does)
    meta: JobMeta
    finetuned_output: str | None = None
    message: str | None = None
    code: str | None = None
    create_time: str
    start_time: str | None = None
    end_time: str | None = None
    cancel_requested: bool = False
    worker_pid: int | None = None
    progress: JobProgress | None = None
    deleted: bool = False

    @property
    def cancel_message(self) -> str:
        """The message of the job once canceled (see :func:`cancel_message`)."""
        return cancel_message(self.meta.cancel_reason)

    @property
    def plan(self) -> TrainingPlan:
        """The job's typed hyper-parameters, as read at submission (a row from before they were kept is
        read from its request the same way)."""
        return self.meta.plan or TrainingPlan.from_submitted(self.request.get("hyper_parameters"))

    @property
    def base_model(self) -> str | None:
        """The root base model: the one a continued chain started from, else the requested model."""
        return self.meta.base_model or self.request.get("model")
