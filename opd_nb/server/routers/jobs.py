"""Fine-tune jobs: create, list (``model=`` filter), get, cancel, delete, logs, the SSE stream, checkpoints,
export, local-only metrics.

Every route that reads SQLite is a plain ``def`` (FastAPI runs it in the thread pool); the stream is
async and reads the store through ``anyio.to_thread`` so a slow disk never stalls the event loop.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from opd_nb.constants import DELETED, FAILED, SUCCEEDED, TERMINAL_STATUSES
from opd_nb.server.bodies import CancelBody, JobBody
from opd_nb.server.deps import (
    JobDep,
    JobManagerDep,
    PageDep,
    RegistryDep,
    ServicesDep,
    StoreDep,
    existing_job,
)
from opd_nb.server.errors import ApiError
from opd_nb.server.exports import export_checkpoint
from opd_nb.server.job.files import remove_job_files
from opd_nb.server.job.views import checkpoint_listing, job_output
from opd_nb.server.responses import request_id
from opd_nb.server.store import Store
from opd_nb.server.submission import submit_job
from opd_nb.wire.checkpoints import CheckpointEntry, ExportAnswer, ExportLocal
from opd_nb.wire.envelope import Output
from opd_nb.wire.jobs import (
    DeletedFiles,
    JobDeleted,
    JobListing,
    JobLogs,
    JobMetrics,
    JobOutput,
    JobStatus,
    JobStatusEvent,
)

router = APIRouter(prefix="/api/v1/fine-tunes", tags=["jobs"])
MAX_OFFSET = 2**53  # log offsets stay far inside SQLite's 64-bit INTEGER
STREAM_BATCH = 500  # log lines per read while streaming
STREAM_POLL_S = 0.5
KEEPALIVE_S = 10.0
_EVENT_ID = re.compile(r"[0-9]{1,18}")  # ASCII digits, within SQLite's INTEGER
_SSE_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # each ends an SSE field


def sse_event(event: str, data: str, ident: int | None = None) -> str:
    """One server-sent event, with each line of ``data`` in a ``data:`` field of its own.

    A log line holds user text (a job name): written raw, ``"\n\nevent: status\ndata: ..."`` in it
    would end the event and forge another. Split like this, a client joins the lines back with
    ``\n`` into the one event's data, as the SSE standard says."""
    head = f"id: {ident}\n" if ident is not None else ""
    fields = "".join(f"data: {part}\n" for part in _SSE_LINE_BREAK.split(data))
    return f"{head}event: {event}\n{fields}\n"


@router.post("")
def create_job(
    body: JobBody, store: StoreDep, registry: RegistryDep, manager: JobManagerDep
) -> Output[JobOutput]:
    return Output[JobOutput].of(job_output(submit_job(store, registry, manager, body)))


@router.get("")
def list_jobs(
    store: StoreDep,
    page: PageDep,
    model: str | None = Query(None, max_length=512, description="only this model's jobs"),
) -> Output[JobListing]:
    jobs, total = store.jobs(page.offset, page.page_size, model=model)
    listing = JobListing(
        page_no=page.page_no,
        page_size=page.page_size,
        total=total,
        jobs=[job_output(j, store.token_usage(j.job_id)) for j in jobs],
    )
    return Output[JobListing].of(listing)


@router.get("/{job_id}")
def get_job(job: JobDep, store: StoreDep) -> Output[JobOutput]:
    return Output[JobOutput].of(job_output(job, store.token_usage(job.job_id)))


@router.post("/{job_id}/cancel")
def cancel_job(job: JobDep, manager: JobManagerDep, body: CancelBody | None = None) -> Output[JobStatus]:
    """Bailian's cancel takes no body; locally an optional ``reason`` is kept in the job's message and log."""
    job_id = job.job_id
    if job.status in (SUCCEEDED, FAILED):
        raise ApiError(400, "JobFinished", f"job {job_id} already finished ({job.status}); nothing to cancel")
    status = manager.cancel(job_id, body.reason if body else None)
    return Output[JobStatus].of(JobStatus(job_id=job_id, status=status))


@router.delete("/{job_id}")
def delete_job(job: JobDep, store: StoreDep, services: ServicesDep) -> JobDeleted:
    """Hide the job and remove its files; ``local`` says how much was freed and what was kept, and why."""
    job_id = job.job_id
    if job.status not in TERMINAL_STATUSES:
        raise ApiError(400, "JobRunning", f"job {job_id} is {job.status}; cancel it before deleting it")
    with services.traces.deleting(job_id):  # an export racing this DELETE cannot bring a step file back
        store.set_job(job_id, deleted=1)
        files = _remove_files(job_id, store, services)
    return JobDeleted(request_id=request_id(), output=JobStatus(job_id=job_id, status=DELETED), local=files)


def _remove_files(job_id: str, store: StoreDep, services: ServicesDep) -> DeletedFiles:
    """Remove the job's directory but what an export or a live deployment still needs."""
    keep = {
        row["path"]: f"exported as model {row['model_name']!r} (it stays deployable)"
        for row in store.exports(job_id).values()
    }
    keep.update(
        {
            row["path"]: f"deployment {row['deployed_model']!r} serves it (delete the deployment first)"
            for row in store.live_deployments()
        }
    )
    return remove_job_files(services.data_dir, job_id, keep)


# The two routes with query parameters look the job up in their body, not with `JobDep`: FastAPI
# reports bad parameters only after the dependencies ran, and a bad offset must be a 400, not a 404.
@router.get("/{job_id}/logs")
def job_logs(
    job_id: str,
    store: StoreDep,
    offset: int = Query(1, ge=0, le=MAX_OFFSET),
    line: int = Query(1000, ge=1, le=10000),
) -> Output[JobLogs]:
    existing_job(job_id, store)
    start = max(offset, 1)  # 1-based line number, as the SDK's default offset=1 implies
    rows = store.logs(job_id, start, line)
    page = JobLogs(
        job_id=job_id,
        logs=[r[1] for r in rows],
        offset=start,
        line=line,
        total=store.log_count(job_id),
        next_offset=rows[-1][0] + 1 if rows else start,
    )
    return Output[JobLogs].of(page)


@router.get("/{job_id}/stream")
async def job_stream(
    job_id: str, store: StoreDep, request: Request, offset: int = Query(1, ge=0, le=MAX_OFFSET)
) -> StreamingResponse:
    """Server-sent events from log line ``offset`` (or after ``Last-Event-ID`` when reconnecting)."""
    last_id = request.headers.get("last-event-id", "").strip()
    if last_id and not _EVENT_ID.fullmatch(last_id):  # e.g. "²" (isdigit, not int) or 5,000 digits
        raise ApiError(
            400, "InvalidParameter", "Last-Event-ID must be the number of a log line (id: of an event)"
        )
    await anyio.to_thread.run_sync(existing_job, job_id, store)
    start = min(int(last_id), MAX_OFFSET) + 1 if last_id else max(offset, 1)
    return StreamingResponse(
        job_events(store, job_id, start, request),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache"},
    )


async def job_events(store: Store, job_id: str, start: int, request: Request) -> AsyncIterator[str]:
    """`status` on every state change, `log` per log line, until a terminal state and the last line."""
    seq, last_status, last_beat = start, None, time.monotonic()
    while True:
        job = await anyio.to_thread.run_sync(store.job, job_id)
        rows = await anyio.to_thread.run_sync(store.logs, job_id, seq, STREAM_BATCH)
        for n, line in rows:
            yield sse_event("log", line, n)
            seq = n + 1
        status = job.status if job else DELETED
        if status != last_status:
            last_status = status
            event = JobStatusEvent(job_id=job_id, status=status, progress=job.progress if job else None)
            yield sse_event("status", json.dumps(event.wire()))  # as before the models: json.dumps
        if len(rows) == STREAM_BATCH:
            continue  # more lines are waiting: send them before anything else
        if status in TERMINAL_STATUSES or job is None or await request.is_disconnected():
            return
        if time.monotonic() - last_beat > KEEPALIVE_S:
            last_beat = time.monotonic()
            yield ": keep-alive\n\n"
        await anyio.sleep(STREAM_POLL_S)


@router.get("/{job_id}/metrics", tags=["local-only"])
def job_metrics(job: JobDep, store: StoreDep) -> Output[JobMetrics]:
    """Local-only: one row per training step with Bailian's metric names."""
    return Output[JobMetrics].of(JobMetrics(job_id=job.job_id, metrics=store.metrics(job.job_id)))


@router.get("/{job_id}/checkpoints")
def job_checkpoints(job: JobDep, store: StoreDep) -> Output[list[CheckpointEntry]]:
    """Bailian's "list checkpoints": the kept checkpoints, local extras under ``local`` (path, metrics,
    published: the one that is the job's finetuned_output)."""
    listing = checkpoint_listing(job, store.checkpoints(job.job_id), store.exports(job.job_id))
    return Output[list[CheckpointEntry]].of(listing)


@router.get("/{job_id}/export/{checkpoint}")
def export_job_checkpoint(
    job_id: str,
    checkpoint: str,
    store: StoreDep,
    model_name: str | None = Query(None, max_length=256, description="a display name for the export"),
) -> ExportAnswer:
    """Bailian's export: publish a checkpoint as a deployable model (``output: true``); the name to
    deploy is the checkpoint's ``model_name`` in the list afterwards (also under ``local`` here)."""
    entry = export_checkpoint(store, existing_job(job_id, store), checkpoint, model_name)
    return ExportAnswer(request_id=request_id(), output=True, local=ExportLocal(checkpoint=entry))
