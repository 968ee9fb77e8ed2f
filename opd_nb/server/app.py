"""The local Bailian-compatible control plane (FastAPI): every endpoint the dashscope SDK's OPD flow uses.

Shapes follow what dashscope 2.0.2 parses (see ``shared/reference/dashscope-sdk.md`` §2): job and
FC answers under ``output``, ``POST /files`` under ``data``, errors as non-200 with
``{"request_id", "code", "message"}``. Local-only extensions (``/models``, ``/fine-tunes/{id}/metrics``,
``/fine-tunes/{id}/rollouts``) are tagged ``local-only`` in the OpenAPI schema. Deployments
(``/deployments``), DashScope text generation and the OpenAI-compatible ``/compatible-mode/v1`` beside
``/api/v1`` are Bailian's, as ``dashscope.Deployments`` and ``Generation`` call them.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from starlette.types import Message, Receive, Scope, Send

from opd_nb import settings
from opd_nb.server import process_tree
from opd_nb.server.auth import BearerAuth
from opd_nb.server.deploy.manager import DeploymentManager
from opd_nb.server.deps import Services
from opd_nb.server.function_registry import MAX_ZIP_BYTES, InstanceManager
from opd_nb.server.job.manager import JobManager
from opd_nb.server.launcher import Launcher
from opd_nb.server.leftovers import reap_partial_files
from opd_nb.server.limits import MAX_JSON_BYTES, BodyGuard
from opd_nb.server.models import ModelRegistry
from opd_nb.server.openapi import document
from opd_nb.server.records import ServeOptions
from opd_nb.server.responses import install_error_handlers
from opd_nb.server.routers import (
    deployments,
    files,
    functions,
    health,
    inference,
    jobs,
    models,
    rollouts,
    traces,
)
from opd_nb.server.store import Store
from opd_nb.server.tracing.intake import TraceIntake
from opd_nb.server.tracing.otlp_forward import Forwarder, headers_from_env

log = logging.getLogger("opd_nb.server")
# One router per resource. Order matters: `/fine-tunes/create/{kind}` and friends before
# `/fine-tunes/{job_id}/...`; inference serves DashScope generation and /compatible-mode/v1 beside /api/v1.
ROUTERS = (
    health.router,
    functions.router,
    files.router,
    jobs.router,
    models.router,
    rollouts.router,
    traces.router,
    deployments.router,
    inference.router,
)


class ControlPlane(FastAPI):
    """FastAPI that answers an unexpected exception in Bailian's 500 shape and keeps the connection.

    Starlette sends its 500 and then re-raises, and uvicorn closes a connection whose app raised: a
    client's next request on that kept-alive connection then met a reset. Once the whole answer is
    sent, the exception is logged here (traceback in the server log, never in the answer) instead.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        done = False

        async def tracked(message: Message) -> None:
            nonlocal done
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                done = True
            await send(message)

        try:
            await super().__call__(scope, receive, tracked)
        except Exception:
            if not done:
                raise  # the answer is cut: only closing the connection tells the client
            log.exception("unexpected error in %s %s", scope.get("method"), scope.get("path"))


def build_services(options: ServeOptions) -> Services:
    data_dir = options.resolved_data_dir()
    store = Store(data_dir)
    registry = ModelRegistry(store, options.model_map)
    launcher = Launcher(data_dir)  # workers and serving processes, forked from one warm process
    forward = Forwarder(options.otlp_forward, headers_from_env()) if options.otlp_forward else None
    intake = TraceIntake(data_dir, store, forward, max_body=MAX_JSON_BYTES)
    return Services(
        data_dir=data_dir,
        store=store,
        registry=registry,
        jobs=JobManager(
            store,
            data_dir,
            launcher,
            max_running=options.max_running,
            resume=options.resume,
            max_interruptions=options.max_interruptions,
            worker_env=intake.worker_env,
        ),
        instances=InstanceManager(store, data_dir),
        max_zip_bytes=settings.MAX_ZIP_BYTES.get() or MAX_ZIP_BYTES,  # tests lower it
        deployments=DeploymentManager(
            store, registry, data_dir, launcher, max_deployments=options.max_deployments
        ),
        launcher=launcher,
        traces=intake,
        bound=(options.host, options.port),
    )


def _reap_partial_files(services: Services) -> None:
    """What a killed run's interrupted writes left, as the database's journal names them (see
    :mod:`opd_nb.server.leftovers`), with one line each; a journaled path a record still names is kept
    and said; then the journal is empty."""
    store = services.store
    reaped = reap_partial_files(services.data_dir, store.unfinished_writes(), store.held_paths())
    for path in reaped.removed:
        print(f"opd serve: removed {path}, left by an interrupted write of an earlier run", file=sys.stderr)
    for path, holder in reaped.kept:
        print(
            f"opd serve: kept {path}: the journal of interrupted writes names it, but {holder} "
            "(the record wins; a restored backup or a hand edit can leave the two disagreeing)",
            file=sys.stderr,
        )
    store.clear_writes()


def _migrate_paths(services: Services) -> None:
    """Rows of an older server hold absolute paths: made relative to the data dir, once (store/paths.py)."""
    if changed := services.store.migrate_paths():
        print(
            f"opd serve: {changed} database rows now name their files relative to the data dir",
            file=sys.stderr,
        )


def create_app(options: ServeOptions, *, api_key: str | None = None) -> FastAPI:
    """The app for one control plane running with ``options``.

    `api_key`: the only key accepted (None: any non-empty key, loopback only); it is no option, so
    that no serialized options ever hold it."""
    services = build_services(options)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncGenerator[None]:
        await run_in_threadpool(process_tree.reap_previous_run, services.data_dir)
        await run_in_threadpool(_migrate_paths, services)
        await run_in_threadpool(_reap_partial_files, services)
        await run_in_threadpool(services.instances.recover)
        await run_in_threadpool(services.jobs.start)
        await run_in_threadpool(services.deployments.recover)
        yield
        await run_in_threadpool(services.jobs.stop)
        await run_in_threadpool(services.instances.stop_all)
        await run_in_threadpool(services.deployments.stop_all)
        await run_in_threadpool(services.launcher.close)
        await run_in_threadpool(services.traces.close)

    app = ControlPlane(
        title="opd-nb local control plane",
        version="1",
        description="A local, faithful implementation of the Bailian fine-tune (OPD / agentic RL) API "
        "for the unmodified dashscope SDK. Endpoints tagged `local-only` have no cloud equivalent.",
        lifespan=lifespan,
    )
    app.state.services = services
    app.add_middleware(BodyGuard)  # size caps and JSON checks, after the key check below
    app.add_middleware(BearerAuth, api_key=api_key)
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    document(app)
    return app
