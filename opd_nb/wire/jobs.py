"""Fine-tune jobs: the job object (every field dashscope's ``FineTuneOutput`` declares, plus the local
plane's extras), its listing, logs, metrics, the answers of cancel and delete, and the status event of
its server-sent stream."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict

from opd_nb.constants import UNKNOWN
from opd_nb.wire.base import JsonObject, Scalar, Wire, absent_when_none

if TYPE_CHECKING:
    from opd_nb.spec.training_plan import TrainingPlan

FunctionType = Literal["reward", "group_reward", "rollout"]


class JobProgress(Wire):
    """Where training is, as the worker reports it each step (and a resume rewinds it). The local plane
    sends every field; a plane may send less (``total_steps`` 0: not known yet)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    step: int = 0
    total_steps: int = 0
    epoch: int = 0
    n_epochs: int = 0
    eta_s: float | None = None
    percent: float | None = None


class JobFunctionRef(Wire):
    """A registered function a job runs (a reused entity shows up here too)."""

    name: str
    type: str
    entity_id: str


class JobLocal(Wire):
    """The local control plane's extras of a job: stand-in notes, the local model paths, the chain of
    parent jobs, its functions, and its hyper-parameters as it trains (read once at submission)."""

    substitutions: list[str] = []
    student_path: str | None = None
    teacher_path: str | None = None
    final_checkpoint: str | None = None
    parents: list[str] = []  # the job it continued, that job's parent, ...
    functions: list[JobFunctionRef] = []
    # the job's TrainingPlan as read at submission, as JSON (an older server did not send it); typed by
    # JobOutput.plan, so importing the client does not load the spec's table
    plan: JsonObject | None = absent_when_none()


class JobOutput(Wire):
    """A job as both control planes answer it. ``base_model`` is the root base model even when the job
    continued a fine-tuned output; ``usage`` is the tokens its steps processed; ``code`` and ``message``
    come only with a failure (``message`` also with a cancel's reason); ``hyper_parameters`` echoes what
    was submitted (its typed reading: :attr:`plan`)."""

    job_id: str
    job_name: str | None = None
    status: str = UNKNOWN
    model: str | None = None
    base_model: str | None = None
    finetuned_output: str | None = None
    training_file_ids: list[str] = []
    validation_file_ids: list[str] = []
    hyper_parameters: dict[str, Any] = {}
    training_type: str | None = None
    teacher_model: str | None = None
    create_time: str | None = None
    end_time: str | None = None
    start_time: str | None = None
    user_identity: str | None = None
    modifier: str | None = None
    creator: str | None = None
    group: str | None = None
    usage: int | None = None
    progress: JobProgress | None = None
    entity_id: str | None = None  # seed 002 reads it after the first run: the first function's id
    local: JobLocal | None = None
    code: str | None = absent_when_none()
    message: str | None = absent_when_none()

    @property
    def plan(self) -> TrainingPlan:
        """The job's hyper-parameters, typed: as the local plane read them at submission, else read from
        the echo (leniently: a value another service took is shown, not refused)."""
        from opd_nb.spec.training_plan import TrainingPlan

        if self.local is not None and self.local.plan is not None:
            return TrainingPlan.model_validate(self.local.plan)
        return TrainingPlan.lenient(self.hyper_parameters)


class JobListing(Wire):
    page_no: int | None = None
    page_size: int | None = None
    total: int = 0
    jobs: list[JobOutput] = []


class JobLogs(Wire):
    """A page of a job's log. Bailian sends ``logs`` as one string, the local plane as a list of lines."""

    job_id: str | None = None
    logs: list[str] | str = []
    offset: int | None = None
    line: int | None = None
    total: int | None = None
    next_offset: int | None = None


class JobStatus(Wire):
    """What cancel and delete answer: the job and its status right after the request."""

    job_id: str
    status: str


class KeptPath(Wire):
    path: str
    why: str


class DeletedFiles(Wire):
    """The delete answer's ``local`` part: bytes freed and the paths kept (still exported or deployed)."""

    freed_bytes: int
    kept: list[KeptPath]


class JobDeleted(Wire):
    request_id: str
    output: JobStatus
    local: DeletedFiles | None = None


class JobMetrics(Wire):
    """Local-only: one row per training step, keyed by Bailian's metric names."""

    job_id: str | None = None
    metrics: list[dict[str, Scalar]] = []


class JobStatusEvent(Wire):
    """The data of a ``status`` event of ``GET /fine-tunes/{job_id}/stream`` (``log`` events carry a line)."""

    job_id: str
    status: str
    progress: JobProgress | None = None
