"""Function code: the signed upload URL and its PUT, layers, registration, and running instances.

The SDK's flow: ask for an upload URL, PUT the zip there (OSS on the cloud, ``/local-oss/`` here),
register the zip's class as a rollout/reward/group-reward, then ``load`` an instance of it and query,
read the logs of, or delete that instance.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from opd_nb.server.auth import OSS_PREFIX
from opd_nb.server.bodies import (
    FunctionRuntime,
    InstanceLogQuery,
    LayerBody,
    NoParameters,
    RegisterBody,
    UploadUrlBody,
    is_unique_key,
)
from opd_nb.server.deps import InstancesDep, ServicesDep, StoreDep
from opd_nb.server.errors import ApiError
from opd_nb.server.function_registry import (
    FUNCTION_KINDS,
    check_zip,
    new_id,
    register_function,
)
from opd_nb.server.responses import ok, request_id

router = APIRouter(prefix="/api/v1", tags=["functions"])


@router.post("/fine-tunes/generate/faas/upload/url")
def upload_url(body: UploadUrlBody, request: Request) -> JSONResponse:
    base = str(request.base_url).rstrip("/")
    return ok({"url": f"{base}{OSS_PREFIX}{body.unique_key}.zip", "unique_key": body.unique_key})


@router.put(OSS_PREFIX.removeprefix("/api/v1") + "{name}")
async def oss_put(name: str, request: Request, services: ServicesDep) -> JSONResponse:
    """The signed-URL target: stream the zip to disk (capped), check it, record it under its key."""
    key = name.removesuffix(".zip")
    if not name.endswith(".zip") or not is_unique_key(name):
        raise ApiError(400, "InvalidParameter", f"bad upload name {name!r}")
    dest = services.data_dir / "uploads" / name
    size = await _receive_zip(request, dest, services.max_zip_bytes)
    await run_in_threadpool(services.store.put_upload, key, str(dest), size)
    return JSONResponse({"request_id": request_id(), "output": {"key": key, "bytes": size}})


async def _receive_zip(request: Request, dest: Path, max_bytes: int) -> int:
    """Write the body to ``dest`` (via a temporary file, off the event loop); returns its size."""
    await anyio.to_thread.run_sync(lambda: dest.parent.mkdir(parents=True, exist_ok=True))
    tmp = dest.with_suffix(f".part-{secrets.token_hex(4)}")
    size = 0
    try:
        async with await anyio.open_file(tmp, "wb") as fh:
            async for chunk in request.stream():
                size += len(chunk)
                if size > max_bytes:
                    raise ApiError(
                        413,
                        "FileTooLarge",
                        f"function zip is over {max_bytes / 2**20:g} MiB; "
                        "exclude data, checkpoints and virtualenvs from the function directory",
                    )
                await fh.write(chunk)
        await run_in_threadpool(check_zip, tmp)
        await anyio.to_thread.run_sync(tmp.replace, dest)
    finally:
        await anyio.to_thread.run_sync(lambda: tmp.unlink(missing_ok=True))
    return size


@router.post("/fine-tunes/create/faas/layer")
def create_layer(body: LayerBody, store: StoreDep) -> JSONResponse:
    code = new_id("layer", 4)
    store.add_layer(code, body.layer_name or code, body.requirements_content or "")
    return ok(
        {
            "layer_code": code,
            "status": "SUCCESS",
            "note": "local layers install nothing: functions run in the server's Python environment",
        }
    )


@router.get("/fine-tunes/query/faas/layer/status")
def layer_status(store: StoreDep, layer_code: str = Query(...)) -> JSONResponse:
    if not store.has_layer(layer_code):
        raise ApiError(404, "LayerNotFound", f"layer {layer_code!r} does not exist")
    return ok({"layer_code": layer_code, "status": "SUCCESS"})


@router.post("/fine-tunes/create/{kind}")
def register(kind: str, body: RegisterBody, services: ServicesDep) -> JSONResponse:
    if kind not in FUNCTION_KINDS:
        raise ApiError(
            404, "NotFound", f"unknown function type {kind!r}; use rollout, reward or group-reward"
        )
    entity_kind = FUNCTION_KINDS[kind]
    entity_id = register_function(
        services.store, services.data_dir, entity_kind, body.name, body.func, body.unique_key
    )
    return ok({f"{entity_kind}_id": entity_id, "name": body.name, "func": body.func})


@router.post("/fine-tunes/online/faas/{tag}/{entity_id}")
def load(
    tag: str, entity_id: str, instances: InstancesDep, runtime: FunctionRuntime | None = None
) -> JSONResponse:
    return ok(instances.load(entity_id, tag, runtime.model_dump(exclude_unset=True) if runtime else {}))


@router.post("/fine-tunes/query/faas/log/{instance_id}")
def instance_logs(
    instance_id: str, instances: InstancesDep, query: InstanceLogQuery | None = None
) -> JSONResponse:
    query = query or InstanceLogQuery()
    keywords = query.keywords or []
    lines = [ln for ln in instances.log_entries(instance_id) if all(k in ln for k in keywords)]
    page, size = query.page_number, query.page_size
    return ok(
        {
            "page_number": page,
            "page_size": size,
            "total_count": len(lines),
            "log_entries": [{"message": ln} for ln in lines[(page - 1) * size : page * size]],
        }
    )


@router.post("/fine-tunes/query/faas/{instance_id}")
def query_instance(
    instance_id: str, instances: InstancesDep, body: NoParameters | None = None
) -> JSONResponse:
    return ok(instances.query(instance_id))


@router.post("/fine-tunes/delete/faas/{instance_id}")
def delete_instance(
    instance_id: str, instances: InstancesDep, body: NoParameters | None = None
) -> JSONResponse:
    instances.delete(instance_id)
    return JSONResponse(
        {
            "request_id": request_id(),
            "code": 0,
            "message": "success",
            "data": {"status": "deleted", "sandbox_code": instance_id},
        }
    )
