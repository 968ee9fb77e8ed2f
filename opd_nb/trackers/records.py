"""What a tracker run is made of: the run's identity and config, and what a report wrote.

One typed shape for every backend, built once from the job record (:func:`run_info`), so trackio,
W&B, TensorBoard and MLflow receive the same config, the same run name and the same global steps.
"""

from __future__ import annotations

import html
from typing import Any

from pydantic import BaseModel, Field

from opd_nb.results import ResultMixin
from opd_nb.spec.hyperparams import params_in

DEFAULT_PROJECT = "opd-nb"  # the trackio project, W&B project and MLflow experiment when none is named
STEP = "step"  # the metric rows' step key: the job's own step, counted from 1


class RunInfo(BaseModel):
    """One job as a tracker run: its name, the run it continues, its global-step offset, its config."""

    job_id: str
    project: str = DEFAULT_PROJECT
    name: str  # the run's name: the job id (the service's job name goes into the config)
    group: str  # the first job of a chain of continued jobs, so a tracker groups the chain
    parent_job_id: str | None = None  # the job this one continues (a linked run), None for a base model
    step_offset: int = 0  # where this job's step 1 lies on the chain's axis (its parent's last step)
    config: dict[str, Any] = Field(default_factory=dict)
    target: str = "local"  # local (`opd serve`) or cloud (Bailian)

    def global_step(self, step: Any) -> int | None:
        """The chain's step of one of this job's own steps (None when the row has no usable step)."""
        if isinstance(step, bool) or not isinstance(step, int | float):
            return None
        return self.step_offset + int(step)


def job_config(job: Any, target: str) -> dict[str, Any]:
    """The run's config: student, teacher, mode, hyper-parameters and resources, as the job reports them."""
    hp = dict(job.hyper_parameters or {})
    resource_keys = {p.name for p in params_in("resources")}
    resources = {k: hp.pop(k) for k in list(hp) if k in resource_keys}
    raw_resources = job.raw.get("resources") if isinstance(job.raw, dict) else None
    if isinstance(raw_resources, dict):
        resources.update(raw_resources)
    return {
        "job_id": job.job_id,
        "job_name": job.job_name,
        "student": job.model,
        "teacher": job.teacher_model,
        "mode": job.training_type,
        "functions": [f["type"] for f in job.functions],
        "hyper_parameters": hp,
        "resources": resources,
        "target": target,
    }


class ReportResult(ResultMixin, BaseModel):
    """What `opd report` (or a watch's `--report-to`) wrote: per backend, where it is and what went in."""

    job_id: str
    backends: list[str]
    status: str
    metric_rows: int = 0
    steps: list[int] = Field(default_factory=list)  # the global steps written, first and last
    sample_tables: int = 0
    alerts: int = 0
    where: dict[str, str] = Field(default_factory=dict)  # backend -> where the run is, how to view it
    notes: list[str] = Field(default_factory=list)

    def __str__(self) -> str:
        span = f"steps {self.steps[0]}-{self.steps[-1]}" if self.steps else "no steps"
        lines = [
            f"reported {self.job_id} ({self.status}) to {', '.join(self.backends)}: {self.metric_rows} metric "
            f"row(s), {span}, {self.sample_tables} sample table(s), {self.alerts} alert(s)",
            *self.notes,
            *(f"  {name}: {line}" for name, line in self.where.items()),
        ]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return "<pre>" + html.escape(str(self)) + "</pre>"
