"""Deployments, as ``dashscope.Deployments`` and the v2 ``client.deployments`` read them (every field
``DeploymentOutput`` declares) plus the local plane's extras under ``local``."""

from __future__ import annotations

from pydantic import JsonValue

from opd_nb.wire.base import Wire


class DeploymentEvent(Wire):
    """A step of a deployment's process: a restart, a failure."""

    time: str
    event: str
    message: str | None = None


class DeploymentLocal(Wire):
    kind: str | None = None  # what the served model is: stand-in, mapped, checkpoint, path
    path: str | None = None
    message: str | None = None  # why it FAILED
    events: list[DeploymentEvent] = []


class DeploymentOutput(Wire):
    deployed_model: str
    gmt_create: str | None = None
    gmt_modified: str | None = None
    status: str
    model_name: str | None = None
    base_model: str | None = None
    base_capacity: int | None = None
    capacity: int | None = None
    ready_capacity: int | None = None
    workspace_id: str | None = None
    plan: str | None = None  # lora | ptu | mu
    charge_type: str | None = None
    deploy_spec: JsonValue = None  # as the create request sent it
    billing_method: JsonValue = None
    modifier: str | None = None
    creator: str | None = None
    local: DeploymentLocal | None = None


class DeploymentListing(Wire):
    page_no: int | None = None
    page_size: int | None = None
    total: int = 0
    deployments: list[DeploymentOutput] = []


class DeploymentStatus(Wire):
    deployed_model: str
    status: str
