"""Deployments, as ``dashscope.Deployments`` and the v2 ``client.deployments`` call them: create (with a
``plan``), list, get, scale, delete, and ``/deployments/{id}/stream`` (server-sent status events).

The processes behind them are the deployment manager's (:mod:`opd_nb.server.deploy.manager`); these
routes only validate, call it in the thread pool (they are plain ``def``: SQLite and process
work) and answer Bailian's shapes under ``output``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from opd_nb.constants import DELETED, PENDING
from opd_nb.server.bodies import DeploymentBody, ScaleBody
from opd_nb.server.deploy.manager import DeploymentManager, deployment_output
from opd_nb.server.deps import DeploymentsDep, PageDep
from opd_nb.server.errors import ApiError
from opd_nb.wire.deployments import DeploymentListing, DeploymentOutput, DeploymentStatus
from opd_nb.wire.envelope import Output

router = APIRouter(prefix="/api/v1/deployments", tags=["deployments"])
STREAM_POLL_S = 0.2


@router.post("")
def create_deployment(body: DeploymentBody, manager: DeploymentsDep) -> Output[DeploymentOutput]:
    """Deploy a model (PENDING until its process answers, then RUNNING)."""
    row = manager.create(body.model_name, body.capacity, body.suffix, body.plan_fields())
    return Output[DeploymentOutput].of(deployment_output(row))


@router.get("")
def list_deployments(manager: DeploymentsDep, page: PageDep) -> Output[DeploymentListing]:
    rows, total = manager.list(page.offset, page.page_size)
    listing = DeploymentListing(
        page_no=page.page_no,
        page_size=page.page_size,
        total=total,
        deployments=[deployment_output(r) for r in rows],
    )
    return Output[DeploymentListing].of(listing)


@router.get("/{deployed_model}")
def get_deployment(deployed_model: str, manager: DeploymentsDep) -> Output[DeploymentOutput]:
    return Output[DeploymentOutput].of(deployment_output(manager.get(deployed_model)))


@router.put("/{deployed_model}/scale")
def scale_deployment(
    deployed_model: str, body: ScaleBody, manager: DeploymentsDep
) -> Output[DeploymentOutput]:
    return Output[DeploymentOutput].of(deployment_output(manager.scale(deployed_model, body.capacity)))


@router.delete("/{deployed_model}")
def delete_deployment(deployed_model: str, manager: DeploymentsDep) -> Output[DeploymentStatus]:
    """Stop the deployment's process; calls to it then answer that it was deleted."""
    row = manager.delete(deployed_model)
    return Output[DeploymentStatus].of(
        DeploymentStatus(deployed_model=row["deployed_model"], status=row["status"])
    )


@router.get("/{deployed_model}/stream")
async def deployment_stream(
    deployed_model: str, manager: DeploymentsDep, request: Request
) -> StreamingResponse:
    """One ``status`` event per state the deployment goes through (PENDING, then RUNNING or FAILED)."""
    first = await anyio.to_thread.run_sync(manager.get, deployed_model)  # a 404 before any event
    return StreamingResponse(
        _deployment_events(manager, first, request),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache"},
    )


async def _deployment_events(
    manager: DeploymentManager, row: dict[str, Any], request: Request
) -> AsyncIterator[str]:
    seq, last = 0, None
    while True:
        if row["status"] != last:
            last, seq = row["status"], seq + 1
            yield f"id:{seq}\nevent:status\ndata:{json.dumps(deployment_output(row).wire())}\n\n"
        if last != PENDING or await request.is_disconnected():
            return
        await anyio.sleep(STREAM_POLL_S)
        try:
            row = await anyio.to_thread.run_sync(manager.get, row["deployed_model"])
        except ApiError:  # deleted while starting
            row = {**row, "status": DELETED}
