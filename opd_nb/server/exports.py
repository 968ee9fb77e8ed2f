"""Exporting a checkpoint: Bailian's ``GET /fine-tunes/{job_id}/export/{checkpoint}?model_name=NAME``.

The platform may auto-export only the best (here: the published final) checkpoint, so a user who
prefers another step exports it. The ``model_name`` passed is for display; the deployable name is the
one the checkpoint list then shows (``{root base}-{job_id}-ckpt-{step}``), which deployments,
``Generation`` and compatible mode accept. Exporting twice is idempotent: the first name stays.
"""

from __future__ import annotations

import re
from pathlib import Path

from opd_nb.server.errors import ApiError
from opd_nb.server.job.views import EXPIRED, checkpoint_listing
from opd_nb.server.store import Store
from opd_nb.server.store.job_record import JobRecord
from opd_nb.wire.checkpoints import CheckpointEntry

_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


def _not_found(job_id: str, checkpoint: str, names: list[str]) -> ApiError:
    listed = ", ".join(names) or "none"
    return ApiError(
        404,
        "NotFound",
        f"checkpoint {checkpoint!r} of job {job_id} does not exist (kept: {listed}); "
        f"GET /api/v1/fine-tunes/{job_id}/checkpoints lists them (`opd checkpoints {job_id}`)",
    )


def find_checkpoint(entries: list[CheckpointEntry], checkpoint: str) -> CheckpointEntry | None:
    """The entry a path names: its checkpoint (``checkpoint-20``), its id (``JOB:checkpoint-20``), or its step
    (the kept checkpoint of that step rather than the published final copy)."""
    named = [e for e in entries if checkpoint in (e.checkpoint, e.checkpoint_id)]
    by_step = sorted(
        (e for e in entries if str(e.step) == checkpoint), key=lambda e: bool(e.local and e.local.published)
    )
    return next(iter(named + by_step), None)


def export_checkpoint(
    store: Store, job: JobRecord, checkpoint: str, display_name: str | None
) -> CheckpointEntry:
    """Publish one checkpoint as a deployable model; returns its checkpoint-list entry."""
    job_id = job.job_id
    entries = checkpoint_listing(job, store.checkpoints(job_id), store.exports(job_id))
    entry = find_checkpoint(entries, checkpoint.strip())
    if entry is None:
        raise _not_found(job_id, checkpoint, [e.checkpoint or "" for e in entries])
    if entry.model_name:
        return entry  # exported before (or the published final output): the same name again
    if entry.status == EXPIRED:
        raise ApiError(
            400,
            "CheckpointExpired",
            f"{entry.checkpoint_id} expired at {entry.expire_time} and can no longer be exported; "
            "export a checkpoint before its expire_time (`opd checkpoints JOB` shows it)",
        )
    path = entry.local.path if entry.local else ""
    if not Path(path).is_dir():
        raise _not_found(job_id, checkpoint, [])
    root = job.base_model or "model"
    name = f"{_SLUG.sub('-', root).strip('-.')[:48]}-{job_id}-ckpt-{entry.step}"
    store.add_export(
        {
            "model_name": name,
            "job_id": job_id,
            "step": entry.step,
            "checkpoint": entry.checkpoint,
            "display_name": display_name or name,
            "path": path,
        }
    )
    done = find_checkpoint(
        checkpoint_listing(job, store.checkpoints(job_id), store.exports(job_id)), entry.checkpoint_id or ""
    )
    return done or entry
