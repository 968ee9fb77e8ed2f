"""How a stored job is answered: its wire model (Bailian's job shape), and its checkpoints in Bailian's
listing shape (:mod:`opd_nb.wire.jobs`, :mod:`opd_nb.wire.checkpoints`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from opd_nb import settings
from opd_nb.constants import FAILED, SUCCEEDED
from opd_nb.server.records import DEFAULT_CHECKPOINT_TTL_DAYS
from opd_nb.server.store.job_record import JobRecord
from opd_nb.wire.checkpoints import CheckpointEntry, CheckpointLocal
from opd_nb.wire.jobs import JobFunctionRef, JobLocal, JobOutput

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"  # Bailian's timestamps (store.now_text)
EXPIRED = "EXPIRED"  # a checkpoint past its expire_time (a checkpoint status, not a job status)


def _file_ids(datasets: list[dict[str, Any]] | None) -> list[str]:
    return [str(d["file_id"]) for d in datasets or [] if d.get("file_id")]


def job_output(job: JobRecord, usage: int | None = None) -> JobOutput:
    """A job as Bailian answers it: every field dashscope's FineTuneOutput declares, plus local extras.

    ``base_model`` is the root base model even when the job continued a fine-tuned output (the chain of
    parent jobs is ``local.parents``); ``usage`` is the tokens its steps processed."""
    req, meta = job.request, job.meta
    failure: dict[str, str] = {}
    if job.status == FAILED:
        failure = {"code": job.code or "JobFailed", "message": job.message or ""}
    elif job.message:
        failure = {"message": job.message}
    return JobOutput(
        job_id=job.job_id,
        job_name=job.job_name,
        status=job.status,
        model=req.get("model"),
        base_model=job.base_model,
        finetuned_output=job.finetuned_output,
        training_file_ids=_file_ids(req.get("training_datasets")),
        validation_file_ids=_file_ids(req.get("validation_datasets")),
        hyper_parameters=req.get("hyper_parameters") or {},
        training_type=req.get("training_type"),
        teacher_model=req.get("teacher_model"),
        create_time=job.create_time,
        end_time=job.end_time,
        start_time=job.start_time,
        user_identity="local",
        modifier="local",
        creator="local",
        group="llm",
        usage=usage,
        progress=job.progress,
        # Seed 002 reads `result.output.entity_id` after the first run (rw-/ro-): the first function's id.
        entity_id=next((f.entity_id for f in meta.functions), None),
        local=JobLocal(
            substitutions=meta.substitutions,
            student_path=meta.student_path,
            teacher_path=meta.teacher_path,
            final_checkpoint=meta.final_checkpoint,
            parents=meta.parents,  # the job it continued, that job's parent, ...
            functions=[  # the registered functions the job runs (a reused entity shows up here)
                JobFunctionRef(name=f.name, type=f.kind, entity_id=f.entity_id) for f in meta.functions
            ],
            plan=job.plan.model_dump(mode="json"),
        ),
        **failure,
    )


def checkpoint_ttl_days() -> float:
    """How long a checkpoint lives: ``$OPD_CHECKPOINT_TTL_DAYS`` (``opd serve --checkpoint-ttl-days``), else 15."""
    days = settings.CHECKPOINT_TTL_DAYS.get()
    return DEFAULT_CHECKPOINT_TTL_DAYS if days is None else days


def expire_time(create_time: str | None, ttl_days: float) -> str | None:
    """``create_time`` plus the time to live, in the same local wall-time style."""
    if not create_time:
        return None
    try:
        created = time.mktime(time.strptime(create_time, TIME_FORMAT))
    except ValueError:
        return None
    return time.strftime(TIME_FORMAT, time.localtime(created + ttl_days * 86400))


def expired(expires: str | None) -> bool:
    return expires is not None and expires <= time.strftime(TIME_FORMAT)


def checkpoint_id(job_id: str, name: str) -> str:
    """Bailian's checkpoint id, ``{job_id}:checkpoint-{step}`` (the published copy: ``{job_id}:final``)."""
    return f"{job_id}:{name}"


def kept_checkpoints(job: JobRecord, checkpoints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stored checkpoints still on disk (``save_total_limit`` deletes the oldest, and the cloud then
    lists them no more), the published one marked (added when only the final output was kept)."""
    outcome = job.meta.outcome
    final = outcome.final_checkpoint if outcome else None
    checkpoints = [cp for cp in checkpoints if Path(cp["path"]).is_dir()]
    for cp in checkpoints:
        cp["published"] = bool(final) and Path(cp["path"]).resolve() == Path(final).resolve()
    if outcome and final and not any(cp["published"] for cp in checkpoints):
        checkpoints.append(
            {
                "name": Path(final).name,
                "step": outcome.steps,
                "path": final,
                "created_at": job.end_time,
                "metrics": outcome.metrics_tail,
                "published": True,
            }
        )
    return sorted(checkpoints, key=lambda cp: (cp["step"], cp["published"]), reverse=True)


def checkpoint_listing(
    job: JobRecord,
    checkpoints: list[dict[str, Any]],
    exports: dict[str, dict[str, Any]] | None = None,
    ttl_days: float | None = None,
) -> list[CheckpointEntry]:
    """The saved checkpoints in Bailian's "list checkpoints" shape, newest step first (the published
    final copy before the kept checkpoint of the same step).

    Each entry has Bailian's fields (``checkpoint_id``, ``checkpoint``, ``full_name``, ``job_id``,
    ``step``, ``status``, ``create_time``, ``expire_time``, and ``model_name`` once exported: the job's
    ``finetuned_output`` for the published checkpoint, the export's name for an exported one, which is
    the name to deploy; ``model_display_name`` is the display name the export was given). An expired
    checkpoint reads ``EXPIRED`` (nothing is deleted locally). The local extras (``path``, ``metrics``,
    ``published``) are under ``local``.
    """
    ttl = checkpoint_ttl_days() if ttl_days is None else ttl_days
    exports = exports or {}
    job_id = job.job_id
    out: list[CheckpointEntry] = []
    for cp in kept_checkpoints(job, checkpoints):
        expires = expire_time(cp["created_at"], ttl)
        export = exports.get(cp["name"])
        name = export["model_name"] if export else (job.finetuned_output if cp["published"] else None)
        out.append(
            CheckpointEntry(
                checkpoint_id=checkpoint_id(job_id, cp["name"]),
                checkpoint=cp["name"],
                full_name=f"{job_id}-{cp['name']}",
                job_id=job_id,
                step=cp["step"],
                status=EXPIRED if expired(expires) else SUCCEEDED,
                create_time=cp["created_at"],
                expire_time=expires,
                model_name=name,
                model_display_name=export["display_name"] if export else None,
                local=CheckpointLocal(path=cp["path"], metrics=cp["metrics"], published=cp["published"]),
            )
        )
    return out
