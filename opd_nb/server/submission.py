"""Turning a validated job body into a queued job, as the cloud would: every reference must resolve.

:class:`~opd_nb.server.bodies.JobBody` has already checked the shape. What is left needs the server's
state: which local models stand in for the named ones, which uploaded file each dataset is, and which
registered function each reward or rollout is. Anything that does not resolve is a 400 with the
field, the value and what to do; a job that resolves is stored PENDING with everything the worker
needs in its :class:`~opd_nb.server.store.job_record.JobMeta`.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from opd_nb.server.bodies import DatasetRef, FunctionRef, JobBody
from opd_nb.server.errors import ApiError
from opd_nb.server.function_registry import kind_of, runtime_env
from opd_nb.server.job.manager import JobManager
from opd_nb.server.models import ModelNotServable, ModelRegistry, ResolvedModel
from opd_nb.server.store import Store
from opd_nb.server.store.db import now_text
from opd_nb.server.store.job_record import JobFunction, JobMeta, JobRecord


def _bad(message: str, code: str = "InvalidParameter") -> ApiError:
    return ApiError(400, code, message)


@dataclass(frozen=True)
class JobModels:
    """The local models a job runs on, and the substitution notes for its log."""

    student: ResolvedModel
    teacher: ResolvedModel | None

    @property
    def notes(self) -> list[str]:
        return [m.note for m in (self.student, self.teacher) if m is not None and m.note]


def submit_job(store: Store, registry: ModelRegistry, manager: JobManager, body: JobBody) -> JobRecord:
    """Resolve every reference of ``body``, store the job PENDING and wake the scheduler."""
    models = resolve_models(registry, body)
    meta = JobMeta(
        training_type=body.training_type,
        plan=body.plan,
        student_path=models.student.path,
        teacher_path=models.teacher.path if models.teacher else models.student.path,
        substitutions=models.notes,
        train_file=_training_path(store, body),
        validation_file=dataset_path(store, "validation", body.validation_datasets),
        functions=function_specs(store, body),
        student_kind=models.student.kind,
        **lineage(store, models.student),
    )
    job_id = f"ft-{time.strftime('%Y%m%d%H%M')}-{secrets.token_hex(3)}"
    name = body.job_name or f"opd-{secrets.token_hex(4)}"
    store.insert_job(job_id, name, body.model_dump(mode="json", exclude_unset=True), meta)
    teacher = f", teacher {body.teacher_model!r}" if body.teacher_model else ""
    store.add_log(
        job_id,
        f"[server] {now_text()} job {job_id} ({name}) queued: {body.training_type}, "
        f"model {body.model!r}{teacher}",
        *[f"[server] {note}" for note in models.notes],
    )
    manager.wake()
    job = store.job(job_id)
    if job is None:  # it was just written; only a deletion racing the submit removes it
        raise ApiError(404, "JobNotFound", f"job {job_id} was deleted while it was submitted")
    return job


def lineage(store: Store, student: ResolvedModel) -> dict[str, Any]:
    """The root base model and the parent jobs of a job that continues a fine-tuned output (else nothing).

    A continued job's ``model`` names the previous job's output; Bailian reports the root base model as
    its ``base_model``, so the root travels down the chain instead of the nearest parent's output."""
    parent = store.job(student.job_id) if student.job_id else None
    if parent is None:
        return {}
    return {"base_model": parent.base_model, "parents": [parent.job_id, *parent.meta.parents]}


def resolve_models(registry: ModelRegistry, body: JobBody) -> JobModels:
    try:
        student = registry.resolve(body.model, "student")
        teacher = registry.resolve(body.teacher_model, "teacher") if body.teacher_model else None
    except ModelNotServable as exc:
        raise _bad(str(exc), "ModelNotFound") from None
    return JobModels(student, teacher)


def dataset_path(store: Store, kind: str, entries: list[DatasetRef]) -> str | None:
    """The stored path of the (single) uploaded file a dataset list names; None for no entries."""
    if not entries:
        return None
    file_id = entries[0].file_id
    row = store.file(file_id) if file_id is not None else None
    if row is None:
        raise _bad(
            f"{kind}_datasets[0].file_id {file_id!r} is not a file uploaded to this server", "FileNotFound"
        )
    return row["path"]


def _training_path(store: Store, body: JobBody) -> str:
    path = dataset_path(store, "training", body.training_datasets)
    if path is None:  # the body's own validator refuses an empty list first
        raise _bad("training_datasets is empty; upload a training JSONL file first (POST /files)")
    return path


def function_specs(store: Store, body: JobBody) -> list[JobFunction]:
    """What the worker needs to start each reward and the rollout: code, class, call options."""
    refs = [(f"rewards[{i}]", "rewards", ref) for i, ref in enumerate(body.rewards)]
    if body.rollout is not None:
        refs.append(("rollout", "rollout", body.rollout))
    return [function_spec(store, where, field, ref) for where, field, ref in refs]


def function_spec(store: Store, where: str, field: str, ref: FunctionRef) -> JobFunction:
    id_key = "reward_id" if field == "rewards" else "rollout_id"
    entity_id: str | None = getattr(ref, id_key)
    row = store.function(entity_id) if entity_id is not None else None
    if (
        entity_id is None
        or row is None
        or (field == "rewards" and kind_of(entity_id) not in ("reward", "group_reward"))
        or (field == "rollout" and row["kind"] != "rollout")
    ):
        raise _bad(
            f"{where}.{id_key} {entity_id!r} is not a {field.rstrip('s')} function registered on this server",
            "FunctionNotFound",
        )
    return JobFunction(
        entity_id=entity_id,
        kind=row["kind"],
        name=ref.name or row["name"],
        processor=row["processor"],
        code_dir=row["code_dir"],
        weight=ref.weight,
        timeout=ref.timeout,
        concurrency=ref.concurrency,
        reward_metric_weight=ref.reward_metric_weight,
        env=runtime_env({"env": ref.env}),
    )
