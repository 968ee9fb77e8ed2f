"""Deployments, as ``dashscope.Deployments`` calls them: create, list, get, scale, delete.

The processes behind them are the deployment manager's (:mod:`opd_nb.server.deployments`); these
routes only validate, call it in the thread pool (they are plain ``def``: SQLite and process
work) and answer Bailian's shapes under ``output``.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from opd_nb.server.bodies import DeploymentBody, ScaleBody
from opd_nb.server.deployments import deployment_output
from opd_nb.server.deps import DeploymentsDep, PageDep
from opd_nb.server.responses import ok

router = APIRouter(prefix="/api/v1/deployments", tags=["deployments"])


@router.post("")
def create_deployment(body: DeploymentBody, manager: DeploymentsDep) -> JSONResponse:
    """Deploy a model (PENDING until its process answers, then RUNNING)."""
    return ok(deployment_output(manager.create(body.model_name, body.capacity, body.suffix)))


@router.get("")
def list_deployments(manager: DeploymentsDep, page: PageDep) -> JSONResponse:
    rows, total = manager.list(page.offset, page.page_size)
    return ok(
        {
            "page_no": page.page_no,
            "page_size": page.page_size,
            "total": total,
            "deployments": [deployment_output(r) for r in rows],
        }
    )


@router.get("/{deployed_model}")
def get_deployment(deployed_model: str, manager: DeploymentsDep) -> JSONResponse:
    return ok(deployment_output(manager.get(deployed_model)))


@router.put("/{deployed_model}/scale")
def scale_deployment(deployed_model: str, body: ScaleBody, manager: DeploymentsDep) -> JSONResponse:
    return ok(deployment_output(manager.scale(deployed_model, body.capacity)))


@router.delete("/{deployed_model}")
def delete_deployment(deployed_model: str, manager: DeploymentsDep) -> JSONResponse:
    """Stop the deployment's process; calls to it then answer that it was deleted."""
    row = manager.delete(deployed_model)
    return ok({"deployed_model": row["deployed_model"], "status": row["status"]})
