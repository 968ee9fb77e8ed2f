"""What routes get injected (``Depends``): the store, the model registry, the job manager, ...

Like the FastAPI full-stack template's ``api/deps.py``: ``create_app`` builds one
:class:`Services` and puts it on ``app.state``; routes declare what they need with the
``Annotated`` aliases below instead of closing over ``create_app``'s locals. The getters are
``async`` (plain attribute reads), so FastAPI does not spend a thread-pool hop on each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Query, Request

from opd_nb.constants import LOCAL_HOST, LOCAL_PORT
from opd_nb.server.auth import UploadSigner
from opd_nb.server.deploy.manager import DeploymentManager
from opd_nb.server.errors import ApiError
from opd_nb.server.function_registry import InstanceManager
from opd_nb.server.job.manager import JobManager
from opd_nb.server.launcher import Launcher
from opd_nb.server.models import ModelRegistry
from opd_nb.server.store import Store
from opd_nb.server.store.job_record import JobRecord
from opd_nb.server.tracing.intake import TraceIntake

MAX_PAGE = 10**9  # paging numbers stay far inside SQLite's 64-bit INTEGER


@dataclass(frozen=True)
class Services:
    """Everything one control plane serves from: built once per app."""

    data_dir: Path
    store: Store
    registry: ModelRegistry
    jobs: JobManager
    instances: InstanceManager
    max_zip_bytes: int
    deployments: DeploymentManager
    launcher: Launcher
    traces: TraceIntake  # the SDK's spans of the jobs' function calls (routers/traces.py)
    uploads: UploadSigner = field(default_factory=UploadSigner)  # tokens of this run's zip upload URLs
    bound: tuple[str, int] = (LOCAL_HOST, LOCAL_PORT)  # host and real port: the URLs it hands back


async def get_services(request: Request) -> Services:
    return request.app.state.services


async def get_store(services: Annotated[Services, Depends(get_services)]) -> Store:
    return services.store


async def get_registry(services: Annotated[Services, Depends(get_services)]) -> ModelRegistry:
    return services.registry


async def get_job_manager(services: Annotated[Services, Depends(get_services)]) -> JobManager:
    return services.jobs


async def get_instances(services: Annotated[Services, Depends(get_services)]) -> InstanceManager:
    return services.instances


async def get_deployments(services: Annotated[Services, Depends(get_services)]) -> DeploymentManager:
    return services.deployments


ServicesDep = Annotated[Services, Depends(get_services)]
StoreDep = Annotated[Store, Depends(get_store)]
RegistryDep = Annotated[ModelRegistry, Depends(get_registry)]
JobManagerDep = Annotated[JobManager, Depends(get_job_manager)]
InstancesDep = Annotated[InstanceManager, Depends(get_instances)]
DeploymentsDep = Annotated[DeploymentManager, Depends(get_deployments)]


@dataclass(frozen=True)
class Page:
    """``page_no``/``page_size`` as Bailian's list endpoints take them."""

    page_no: int
    page_size: int

    @property
    def offset(self) -> int:
        return (self.page_no - 1) * self.page_size


async def get_page(
    page_no: int = Query(1, ge=1, le=MAX_PAGE), page_size: int = Query(10, ge=1, le=100)
) -> Page:
    return Page(page_no, page_size)


PageDep = Annotated[Page, Depends(get_page)]


def existing_job(job_id: str, store: StoreDep) -> JobRecord:
    """The job named in the path, or a 404 (a sync dependency: FastAPI runs it in the thread pool)."""
    job = store.job(job_id)
    if job is None:
        raise ApiError(404, "JobNotFound", f"fine-tune job {job_id!r} does not exist")
    return job


JobDep = Annotated[JobRecord, Depends(existing_job)]
