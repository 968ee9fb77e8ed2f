"""The local Bailian-compatible control plane (FastAPI): every endpoint the dashscope SDK's OPD flow uses.

Shapes follow what dashscope 2.0.2 parses (see ``shared/reference/dashscope-sdk.md`` §2): job and
FC answers under ``output``, ``POST /files`` under ``data``, errors as non-200 with
``{"request_id", "code", "message"}``. Local-only extensions (``/models``, ``/fine-tunes/{id}/metrics``,
``/fine-tunes/{id}/checkpoints``) are tagged ``local-only`` in the OpenAPI schema.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool

from opd_nb.server.auth import BearerAuth
from opd_nb.server.deps import Services
from opd_nb.server.function_registry import MAX_ZIP_BYTES, InstanceManager
from opd_nb.server.jobs import JobManager
from opd_nb.server.models import ModelRegistry
from opd_nb.server.responses import install_error_handlers
from opd_nb.server.routers import files, functions, health, jobs, models
from opd_nb.server.store import Store


def build_services(data_dir: Path, model_map: dict[str, str] | None, max_running: int) -> Services:
    store = Store(data_dir)
    return Services(
        data_dir=data_dir,
        store=store,
        registry=ModelRegistry(store, model_map),
        jobs=JobManager(store, data_dir, max_running=max_running),
        instances=InstanceManager(store, data_dir),
        max_zip_bytes=int(os.environ.get("OPD_MAX_ZIP_BYTES") or MAX_ZIP_BYTES),  # tests lower it
    )


def create_app(
    data_dir: str | Path, model_map: dict[str, str] | None = None, *, max_running: int = 1
) -> FastAPI:
    services = build_services(Path(data_dir).expanduser().resolve(), model_map, max_running)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(services.instances.recover)
        await run_in_threadpool(services.jobs.start)
        yield
        await run_in_threadpool(services.jobs.stop)
        await run_in_threadpool(services.instances.stop_all)

    app = FastAPI(
        title="opd-nb local control plane",
        version="1",
        description="A local, faithful implementation of the Bailian fine-tune (OPD / agentic RL) API "
        "for the unmodified dashscope SDK. Endpoints tagged `local-only` have no cloud equivalent.",
        lifespan=lifespan,
    )
    app.state.services = services
    app.add_middleware(BearerAuth)
    install_error_handlers(app)
    app.include_router(health.router)
    # Order matters: `/fine-tunes/create/{kind}` and friends before `/fine-tunes/{job_id}/...`.
    app.include_router(functions.router)
    app.include_router(files.router)
    app.include_router(jobs.router)
    app.include_router(models.router)
    # Room for the other Bailian resources, one router each: deployments.router, rollouts.router.
    return app
