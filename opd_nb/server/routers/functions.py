"""Function code: the signed upload URL and its PUT, layers, registration, and running instances.

The SDK's flow: ask for an upload URL, PUT the zip there (OSS on the cloud, ``/local-oss/`` here),
register the zip's class as a rollout/reward/group-reward, then ``load`` an instance of it and query,
read the logs of, or delete that instance.

The upload URL carries a token (``?token=``, an HMAC only this server run can make), so only a
client that asked for the URL with a valid key can PUT code, on loopback too. An upload key is
written once: a second PUT with other bytes is a 409, the same bytes again (an SDK retry) a 200.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool

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
from opd_nb.server.deps import InstancesDep, Services, ServicesDep, StoreDep
from opd_nb.server.errors import ApiError
from opd_nb.server.function_registry import (
    FUNCTION_KINDS,
    check_zip,
    new_id,
    register_function,
)
from opd_nb.server.records import server_urls
from opd_nb.server.responses import request_id, shown
from opd_nb.server.store import Store
from opd_nb.wire.envelope import Output
from opd_nb.wire.functions import (
    Instance,
    InstanceDeleted,
    InstanceGone,
    InstanceLogEntry,
    InstanceLogs,
    Layer,
    Registered,
    StoredZip,
    UploadUrl,
)

router = APIRouter(prefix="/api/v1", tags=["functions"])


@router.post("/fine-tunes/generate/faas/upload/url")
def upload_url(body: UploadUrlBody, request: Request, services: ServicesDep) -> Output[UploadUrl]:
    base = own_base_url(services, request)
    token = services.uploads.sign(body.unique_key)
    url = f"{base}{OSS_PREFIX}{body.unique_key}.zip?token={token}"
    return Output[UploadUrl].of(UploadUrl(url=url, unique_key=body.unique_key))


def own_base_url(services: Services, request: Request) -> str:
    """This server's base URL as bound, never the request's ``Host`` (a DNS-rebinding page names its own
    there); a wildcard bind names the local address the connection reached (the socket's, not a header)."""
    host, port = services.bound
    if host.strip("[]") in ("", "0.0.0.0", "::"):
        local = request.scope.get("server")
        host = str(local[0]) if local else host
    return server_urls(host, port)[0]


@router.put(OSS_PREFIX.removeprefix("/api/v1") + "{name}")
async def oss_put(
    name: str, request: Request, services: ServicesDep, token: str | None = Query(None, max_length=200)
) -> Output[StoredZip]:
    """The signed-URL target: check the token, stream the zip to disk (capped), check it, record it once."""
    key = name.removesuffix(".zip")
    if not name.endswith(".zip") or not is_unique_key(name):
        raise ApiError(400, "InvalidParameter", f"bad upload name {shown(name)}")
    if not services.uploads.valid(key, token):
        raise ApiError(
            403,
            "AccessDenied",
            "this upload URL has no valid token; PUT to the exact URL /fine-tunes/generate/faas/upload/url returned",
        )
    dest = services.data_dir / "uploads" / name
    size = await _receive_zip(request, dest, services.max_zip_bytes, services.store)
    await run_in_threadpool(services.store.put_upload, key, str(dest), size)
    return Output[StoredZip].of(StoredZip(key=key, bytes=size))


def _same_bytes(a: Path, b: Path) -> bool:
    def digest(path: Path) -> str:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()

    return a.stat().st_size == b.stat().st_size and digest(a) == digest(b)


def _publish_once(tmp: Path, dest: Path) -> None:
    """Put the checked zip at ``dest`` unless one is there (atomic: a hard link never replaces)."""
    try:
        os.link(tmp, dest)
    except FileExistsError:
        if not _same_bytes(tmp, dest):
            raise ApiError(
                409,
                "UploadExists",
                f"a different zip was already uploaded under {shown(dest.stem)}; ask for a new upload "
                "URL with a new unique_key",
            ) from None


async def _receive_zip(request: Request, dest: Path, max_bytes: int, store: Store) -> int:
    """Write the body to ``dest`` (via a temporary file, off the event loop, named in the store's journal of
    unfinished writes while it exists); returns its size."""
    await anyio.to_thread.run_sync(lambda: dest.parent.mkdir(parents=True, exist_ok=True))
    tmp = dest.with_suffix(f".part-{secrets.token_hex(4)}")
    await run_in_threadpool(store.begin_write, tmp)
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
        await run_in_threadpool(_publish_once, tmp, dest)
    finally:
        await anyio.to_thread.run_sync(lambda: tmp.unlink(missing_ok=True))
        await run_in_threadpool(store.end_write, tmp)
    return size


@router.post("/fine-tunes/create/faas/layer")
def create_layer(body: LayerBody, store: StoreDep) -> Output[Layer]:
    code = new_id("layer", 4)
    store.add_layer(code, body.layer_name or code, body.requirements_content or "")
    layer = Layer(
        layer_code=code,
        status="SUCCESS",
        note="local layers install nothing: functions run in the server's Python environment",
    )
    return Output[Layer].of(layer)


@router.get("/fine-tunes/query/faas/layer/status")
def layer_status(store: StoreDep, layer_code: str = Query(...)) -> Output[Layer]:
    if not store.has_layer(layer_code):
        raise ApiError(404, "LayerNotFound", f"layer {shown(layer_code)} does not exist")
    return Output[Layer].of(Layer(layer_code=layer_code, status="SUCCESS"))


@router.post("/fine-tunes/create/{kind}")
def register(kind: str, body: RegisterBody, services: ServicesDep) -> Output[Registered]:
    if kind not in FUNCTION_KINDS:
        raise ApiError(
            404, "NotFound", f"unknown function type {shown(kind)}; use rollout, reward or group-reward"
        )
    entity_kind = FUNCTION_KINDS[kind]
    entity_id = register_function(
        services.store, services.data_dir, entity_kind, body.name, body.func, body.unique_key
    )
    ids = {f"{entity_kind}_id": entity_id}  # reward_id, rollout_id or group_reward_id: only that one is sent
    return Output[Registered].of(Registered(**ids, name=body.name, func=body.func))


@router.post("/fine-tunes/online/faas/{tag}/{entity_id}")
def load(
    tag: str, entity_id: str, instances: InstancesDep, runtime: FunctionRuntime | None = None
) -> Output[Instance]:
    started = instances.load(entity_id, tag, runtime.model_dump(exclude_unset=True) if runtime else {})
    return Output[Instance].of(started)


@router.post("/fine-tunes/query/faas/log/{instance_id}")
def instance_logs(
    instance_id: str, instances: InstancesDep, query: InstanceLogQuery | None = None
) -> Output[InstanceLogs]:
    query = query or InstanceLogQuery()
    keywords = query.keywords or []
    lines = [ln for ln in instances.log_entries(instance_id) if all(k in ln for k in keywords)]
    page, size = query.page_number, query.page_size
    logs = InstanceLogs(
        page_number=page,
        page_size=size,
        total_count=len(lines),
        log_entries=[InstanceLogEntry(message=ln) for ln in lines[(page - 1) * size : page * size]],
    )
    return Output[InstanceLogs].of(logs)


@router.post("/fine-tunes/query/faas/{instance_id}")
def query_instance(
    instance_id: str, instances: InstancesDep, body: NoParameters | None = None
) -> Output[Instance]:
    return Output[Instance].of(instances.query(instance_id))


@router.post("/fine-tunes/delete/faas/{instance_id}")
def delete_instance(
    instance_id: str, instances: InstancesDep, body: NoParameters | None = None
) -> InstanceDeleted:
    instances.delete(instance_id)
    gone = InstanceGone(status="deleted", sandbox_code=instance_id)
    return InstanceDeleted(request_id=request_id(), code=0, message="success", data=gone)
