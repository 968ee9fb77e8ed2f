"""Local-only: what the student wrote, step by step (``GET /fine-tunes/{job_id}/rollouts``).

The engine records a sample of each step's rollouts and every validation answer under the job's
output directory (format and reader: ``opd_nb.engine.rollouts``, pure Python, no torch). This
route serves them in Bailian's envelope so that the client, which never imports the engine, reads
plain JSON. Bailian has no such endpoint; its console shows trajectories instead.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Literal

from fastapi import APIRouter, Query

from opd_nb.engine.rollouts import KINDS, read_rollouts, recorded_steps
from opd_nb.server.deps import ServicesDep, StoreDep, existing_job
from opd_nb.server.errors import ApiError
from opd_nb.wire.envelope import Output
from opd_nb.wire.rollouts import RolloutRecord, RolloutsPage

router = APIRouter(prefix="/api/v1/fine-tunes", tags=["jobs"])
MAX_STEP = 10**9
MAX_LIMIT = 10_000


def job_output_dir(data_dir: Path, job_id: str) -> Path:
    """Where the worker points the engine (``EngineJob.output_dir``)."""
    return data_dir / "jobs" / job_id / "output"


# The job is looked up in the body, not with `JobDep`: FastAPI reports bad parameters only after
# the dependencies ran, and a bad `step` must be a 400 whether or not the job exists (as /logs does).
@router.get("/{job_id}/rollouts", tags=["local-only"])
def job_rollouts(
    job_id: str,
    store: StoreDep,
    services: ServicesDep,
    step: int | None = Query(None, ge=0, le=MAX_STEP, description="default: the latest recorded step"),
    kind: Literal["train", "validation"] | None = Query(None, description="default: both"),
    limit: int | None = Query(None, ge=0, le=MAX_LIMIT, description="at most this many records"),
) -> Output[RolloutsPage]:
    """Local-only: the recorded rollouts of one step (tokens with student and teacher log-probs)."""
    existing_job(job_id, store)
    out_dir = job_output_dir(services.data_dir, job_id)
    by_kind = {k: recorded_steps(out_dir, k) for k in KINDS}
    steps = by_kind[kind] if kind else sorted(set(by_kind["train"]) | set(by_kind["validation"]))
    shown = step if step is not None else (steps[-1] if steps else None)
    try:
        records = read_rollouts(out_dir, shown, kind, limit) if shown is not None else []
    except (OSError, EOFError, zlib.error, ValueError) as exc:  # a damaged file, not a bad request
        raise ApiError(
            500, "RolloutsUnreadable", f"the recorded rollouts of step {shown} cannot be read: {exc}"
        ) from None
    page = RolloutsPage(
        job_id=job_id,
        step=shown,
        kind=kind,
        steps=steps,
        steps_by_kind=by_kind,
        rollouts=[RolloutRecord.model_validate(r) for r in records],  # as the engine wrote them
    )
    return Output[RolloutsPage].of(page)
