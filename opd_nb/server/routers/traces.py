"""Local-only: the SDK's spans of a job's function calls, received over OTLP/HTTP and answered as trees.

``POST /otlp/v1/traces`` is where a job's function servers export (protobuf or JSON), with the job's
token as their Bearer credential (:mod:`opd_nb.server.tracing.keys`); the API key is no credential there.
``GET /api/v1/fine-tunes/{job_id}/traces?step=&kind=&group=&sample=`` answers a step's trajectories.
Bailian has neither: its spans go to ARMS, and its console's Trajectory tab shows them.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from opd_nb.server.deps import ServicesDep, StoreDep, existing_job
from opd_nb.server.errors import ApiError
from opd_nb.server.tracing.env import OTLP_PATH
from opd_nb.server.tracing.intake import Refused
from opd_nb.traces.page import DEFAULT_TRAJECTORIES, MAX_TRAJECTORIES, TracesPage
from opd_nb.wire.envelope import Output

router = APIRouter()
MAX_STEP = 10**9
_OTLP_BODY = {
    "content": {
        "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
        "application/json": {"schema": {"type": "object"}},
    },
    "required": True,
}


@router.post(
    OTLP_PATH,
    tags=["local-only"],
    openapi_extra={"requestBody": _OTLP_BODY},
    responses={200: {"content": {"application/x-protobuf": {}, "application/json": {}}}},
)
async def receive_traces(request: Request, services: ServicesDep) -> Response:
    """Local-only: an OTLP/HTTP trace export from one of this server's function servers."""
    auth = request.headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    body = await request.body()
    try:
        answer, media = await run_in_threadpool(
            services.traces.accept,
            token.strip() if scheme.lower() == "bearer" else None,
            body,
            request.headers.get("content-type"),
            request.headers.get("content-encoding"),
        )
    except Refused as exc:
        raise ApiError(exc.status, exc.code, exc.message) from None
    return Response(answer, media_type=media)


# The job is looked up in the body, not with `JobDep`: a bad `step` must be a 400 whether or not the
# job exists (as /rollouts does).
@router.get(
    "/api/v1/fine-tunes/{job_id}/traces",
    tags=["local-only"],
)
def job_traces(
    job_id: str,
    store: StoreDep,
    services: ServicesDep,
    step: int | None = Query(None, ge=0, le=MAX_STEP, description="default: the latest step with spans"),
    kind: Literal["train", "validation"] | None = Query(None, description="default: both"),
    group: int | None = Query(
        None, ge=0, le=MAX_STEP, description="one prompt of the step (a record's group)"
    ),
    sample: int | None = Query(
        None, ge=0, le=MAX_STEP, description="one rollout of the prompt (a record's sample)"
    ),
    limit: int = Query(
        DEFAULT_TRAJECTORIES, ge=1, le=MAX_TRAJECTORIES, description="at most this many trajectories"
    ),
) -> Output[TracesPage]:
    """Local-only: a step's traced calls as span trees, each tied to its rollout record."""
    existing_job(job_id, store)
    page = services.traces.page(job_id, step, kind, (group, sample), limit)
    return Output[TracesPage].of(page)
