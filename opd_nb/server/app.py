"""The local Bailian-compatible control plane (FastAPI): every endpoint the dashscope SDK's OPD flow uses.

Shapes follow what dashscope 2.0.2 parses (see ``shared/reference/dashscope-sdk.md`` §2): job and
FC answers under ``output``, ``POST /files`` under ``data``, errors as non-200 with
``{"request_id", "code", "message"}``. Local-only extensions (``/models``, ``/fine-tunes/{id}/metrics``,
``/fine-tunes/{id}/checkpoints``) are marked as such in the OpenAPI descriptions.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import time
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from opd_nb.server.errors import ApiError
from opd_nb.server.function_registry import (
    KIND_PREFIX,
    MAX_ZIP_BYTES,
    InstanceManager,
    check_zip,
    kind_of,
    new_id,
    processor_path,
    runtime_env,
    unpack,
)
from opd_nb.server.jobs import JobManager
from opd_nb.server.models import ModelNotServable, ModelRegistry
from opd_nb.server.store import TERMINAL, Store, now_text

MAX_DATASET_BYTES = 1024**3  # the SDK's own limit (DATASETS_FILE_SIZE_WARNING)
MAX_PAGE = 10**9  # paging and log offsets stay far inside SQLite's 64-bit INTEGER
MAX_OFFSET = 2**53
OSS_PREFIX = "/api/v1/local-oss/"
_KEY_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


class BearerAuth:
    """Pure ASGI middleware (cheaper than BaseHTTPMiddleware): /api/* needs a non-empty Bearer.

    Any value is accepted locally; the signed-URL zip PUT is exempt, as OSS URLs are on the cloud.
    """

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            path = scope.get("path", "")
            if path.startswith("/api/") and not path.startswith(OSS_PREFIX):
                auth = ""
                for key, value in scope.get("headers", []):
                    if key == b"authorization":
                        auth = value.decode("latin-1")
                        break
                scheme, _, token = auth.partition(" ")
                if scheme.lower() != "bearer" or not token.strip():
                    response = err(
                        401,
                        "InvalidApiKey",
                        "missing or empty API key: send 'Authorization: Bearer "
                        "<key>' (any non-empty value works locally; set DASHSCOPE_API_KEY before "
                        "importing dashscope)",
                    )
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def _rid() -> str:
    return str(uuid.uuid4())


def ok(output: Any = None, *, key: str = "output", **extra: Any) -> JSONResponse:
    body = {"request_id": _rid(), key: output, **extra}
    return JSONResponse(body, status_code=200)


def err(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"request_id": _rid(), "code": code, "message": message}, status_code=status)


async def json_body(request: Request, *, required: bool = True) -> dict:
    raw = await request.body()
    if not raw.strip():
        if required:
            raise ApiError(400, "InvalidParameter", "request body is empty; send a JSON object")
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "InvalidParameter", f"malformed JSON in request body: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "InvalidParameter", "request body must be a JSON object")
    return data


def _body(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """OpenAPI request body for endpoints that parse JSON themselves (documents and lets fuzzers reach them)."""
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return {"requestBody": {"required": bool(required), "content": {"application/json": {"schema": schema}}}}


_OBJ: dict[str, Any] = {"type": "object"}
_STR: dict[str, Any] = {"type": "string"}
_DATASETS: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"type": _STR, "data_source_type": _STR, "file_id": _STR, "file_name": _STR},
    },
}
JOB_BODY = _body(
    {
        "model": _STR,
        "teacher_model": _STR,
        "training_type": {"type": "string", "enum": ["pg_opd", "reinforcement"]},
        "job_name": _STR,
        "training_datasets": _DATASETS,
        "validation_datasets": _DATASETS,
        "rewards": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "reward_id": _STR,
                    "name": _STR,
                    "weight": {"type": "number"},
                    "timeout": {"type": "number"},
                    "concurrency": {"type": "integer"},
                    "env": _OBJ,
                },
            },
        },
        "rollout": {"type": "object", "properties": {"rollout_id": _STR, "name": _STR}},
        "hyper_parameters": _OBJ,
        "resource_config": _OBJ,
    },
    ["model"],
)


def create_app(
    data_dir: str | Path, model_map: dict[str, str] | None = None, *, max_running: int = 1
) -> FastAPI:
    data_dir = Path(data_dir).expanduser().resolve()
    store = Store(data_dir)
    registry = ModelRegistry(store, model_map)
    instances = InstanceManager(store, data_dir)
    manager = JobManager(store, data_dir, max_running=max_running)
    max_zip = int(os.environ.get("OPD_MAX_ZIP_BYTES") or MAX_ZIP_BYTES)  # tests lower it

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202
        instances.recover()
        manager.start()
        yield
        await run_in_threadpool(manager.stop)
        await run_in_threadpool(instances.stop_all)

    app = FastAPI(
        title="opd-nb local control plane",
        version="1",
        description="A local, faithful implementation of the Bailian fine-tune (OPD / agentic RL) API "
        "for the unmodified dashscope SDK. Endpoints tagged `local-only` have no cloud equivalent.",
        lifespan=lifespan,
    )
    app.state.store, app.state.registry, app.state.manager, app.state.instances = (
        store,
        registry,
        manager,
        instances,
    )
    app.state.data_dir = data_dir

    # ---- auth and errors ----------------------------------------------------------------------
    app.add_middleware(BearerAuth)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return err(exc.status, exc.code, exc.message)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for e in exc.errors()[:5]:
            loc = ".".join(str(p) for p in e.get("loc", ()) if p not in ("query", "path", "body"))
            parts.append(f"{loc}: {e.get('msg')}")
        return err(400, "InvalidParameter", "; ".join(parts) or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "BadRequest")
        message = (
            str(exc.detail)
            if exc.status_code != 404
            else f"no such endpoint: {request.method} {request.url.path}"
        )
        return err(exc.status_code, code, message)

    @app.get("/health", tags=["local-only"])
    def health() -> dict:
        return {"status": "healthy", "data_dir": str(data_dir)}

    # ---- function code upload, layers, registration ------------------------------------------
    @app.post(
        "/api/v1/fine-tunes/generate/faas/upload/url",
        tags=["functions"],
        openapi_extra=_body({"unique_key": _STR}, ["unique_key"]),
    )
    async def upload_url(request: Request) -> JSONResponse:
        body = await json_body(request)
        key = body.get("unique_key")
        if not isinstance(key, str) or not _KEY_RE.match(key):
            raise ApiError(
                400, "InvalidParameter", "unique_key must be a string of letters, digits, '.', '_', '-'"
            )
        base = str(request.base_url).rstrip("/")
        return ok({"url": f"{base}{OSS_PREFIX}{key}.zip", "unique_key": key})

    @app.put(OSS_PREFIX + "{name}", tags=["functions"])
    async def oss_put(name: str, request: Request) -> JSONResponse:
        if not name.endswith(".zip") or not _KEY_RE.match(name):
            raise ApiError(400, "InvalidParameter", f"bad upload name {name!r}")
        key = name[: -len(".zip")]
        dest = data_dir / "uploads" / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(f".part-{secrets.token_hex(4)}")
        size = 0
        try:
            with open(tmp, "wb") as fh:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > max_zip:
                        raise ApiError(
                            413,
                            "FileTooLarge",
                            f"function zip is over {max_zip / 2**20:g} MiB; "
                            "exclude data, checkpoints and virtualenvs from the function directory",
                        )
                    fh.write(chunk)
            await run_in_threadpool(check_zip, tmp)
            tmp.replace(dest)
        finally:
            tmp.unlink(missing_ok=True)
        await run_in_threadpool(
            store.run,
            "INSERT OR REPLACE INTO uploads(key, path, bytes, created_at) VALUES (?,?,?,?)",
            key,
            str(dest),
            size,
            now_text(),
        )
        return JSONResponse({"request_id": _rid(), "output": {"key": key, "bytes": size}}, status_code=200)

    @app.post(
        "/api/v1/fine-tunes/create/faas/layer",
        tags=["functions"],
        openapi_extra=_body({"layer_name": _STR, "requirements_content": _STR}),
    )
    async def create_layer(request: Request) -> JSONResponse:
        body = await json_body(request)
        reqs = body.get("requirements_content", "")
        if not isinstance(reqs, str):
            raise ApiError(400, "InvalidParameter", "requirements_content must be a string")
        code = new_id("layer", 4)
        await run_in_threadpool(
            store.run,
            "INSERT INTO layers VALUES (?,?,?,?)",
            code,
            str(body.get("layer_name") or code),
            reqs,
            now_text(),
        )
        return ok(
            {
                "layer_code": code,
                "status": "SUCCESS",
                "note": "local layers install nothing: functions run in the server's Python environment",
            }
        )

    @app.get("/api/v1/fine-tunes/query/faas/layer/status", tags=["functions"])
    def layer_status(layer_code: str = Query(...)) -> JSONResponse:
        row = store.one("SELECT layer_code FROM layers WHERE layer_code = ?", layer_code)
        if row is None:
            raise ApiError(404, "LayerNotFound", f"layer {layer_code!r} does not exist")
        return ok({"layer_code": layer_code, "status": "SUCCESS"})

    @app.post(
        "/api/v1/fine-tunes/create/{kind}",
        tags=["functions"],
        openapi_extra=_body(
            {"name": _STR, "unique_key": _STR, "func": _STR, "code_url": _STR}, ["name", "unique_key", "func"]
        ),
    )
    async def register(kind: str, request: Request) -> JSONResponse:
        kinds = {"rollout": "rollout", "reward": "reward", "group-reward": "group_reward"}
        if kind not in kinds:
            raise ApiError(
                404, "NotFound", f"unknown function type {kind!r}; use rollout, reward or group-reward"
            )
        body = await json_body(request)
        name, func, key = body.get("name"), body.get("func"), body.get("unique_key")
        for field, value in (("name", name), ("func", func), ("unique_key", key)):
            if not isinstance(value, str) or not value.strip():
                raise ApiError(400, "InvalidParameter", f"{field} is required (a non-empty string)")
        if not func.isidentifier():
            raise ApiError(400, "InvalidParameter", f"func {func!r} is not a Python class name")
        upload = await run_in_threadpool(store.one, "SELECT * FROM uploads WHERE key = ?", key)
        if upload is None or not upload["path"]:
            raise ApiError(
                400,
                "InvalidParameter",
                f"no zip was uploaded for unique_key {key!r}; PUT it to the "
                "URL from /fine-tunes/generate/faas/upload/url first",
            )
        rel, processor = processor_path(name, func)
        entity_id = new_id(KIND_PREFIX[kinds[kind]])
        code_dir = data_dir / "functions" / entity_id / "code"
        code_dir.parent.mkdir(parents=True, exist_ok=True)
        await run_in_threadpool(unpack, Path(upload["path"]), code_dir)
        if not (code_dir / rel).is_file():
            shutil.rmtree(code_dir.parent, ignore_errors=True)
            raise ApiError(400, "InvalidParameter", f"function file {rel!r} is not in the uploaded zip")
        await run_in_threadpool(
            store.run,
            "INSERT INTO functions VALUES (?,?,?,?,?,?,?,?)",
            entity_id,
            kinds[kind],
            name,
            func,
            processor,
            key,
            str(code_dir),
            now_text(),
        )
        return ok({f"{kinds[kind]}_id": entity_id, "name": name, "func": func})

    @app.post("/api/v1/fine-tunes/online/faas/{tag}/{entity_id}", tags=["functions"], openapi_extra=_body({}))
    async def load(tag: str, entity_id: str, request: Request) -> JSONResponse:
        runtime = await json_body(request, required=False)
        return ok(await run_in_threadpool(instances.load, entity_id, tag, runtime))

    @app.post(
        "/api/v1/fine-tunes/query/faas/log/{instance_id}",
        tags=["functions"],
        openapi_extra=_body(
            {
                "pageNumber": {"type": "integer"},
                "pageSize": {"type": "integer"},
                "keywords": {"type": "array"},
            }
        ),
    )
    async def instance_logs(instance_id: str, request: Request) -> JSONResponse:
        body = await json_body(request, required=False)
        page, size = body.get("pageNumber", 1), body.get("pageSize", 100)
        if not isinstance(page, int) or not isinstance(size, int) or page < 1 or not 1 <= size <= 1000:
            raise ApiError(400, "InvalidParameter", "pageNumber must be >= 1 and pageSize within 1..1000")
        keywords = body.get("keywords") or []
        if not isinstance(keywords, list):
            raise ApiError(400, "InvalidParameter", "keywords must be a list of strings")
        lines = await run_in_threadpool(instances.log_entries, instance_id)
        lines = [ln for ln in lines if all(str(k) in ln for k in keywords)]
        chunk = lines[(page - 1) * size : page * size]
        return ok(
            {
                "page_number": page,
                "page_size": size,
                "total_count": len(lines),
                "log_entries": [{"message": ln} for ln in chunk],
            }
        )

    @app.post("/api/v1/fine-tunes/query/faas/{instance_id}", tags=["functions"])
    async def query_instance(instance_id: str, request: Request) -> JSONResponse:
        await json_body(request, required=False)
        return ok(await run_in_threadpool(instances.query, instance_id))

    @app.post("/api/v1/fine-tunes/delete/faas/{instance_id}", tags=["functions"])
    async def delete_instance(instance_id: str, request: Request) -> JSONResponse:
        await json_body(request, required=False)
        await run_in_threadpool(instances.delete, instance_id)
        return JSONResponse(
            {
                "request_id": _rid(),
                "code": 0,
                "message": "success",
                "data": {"status": "deleted", "sandbox_code": instance_id},
            }
        )

    # ---- files --------------------------------------------------------------------------------
    @app.post("/api/v1/files", tags=["files"])
    async def upload_files(request: Request) -> JSONResponse:
        ctype = request.headers.get("content-type", "")
        if not ctype.startswith("multipart/form-data"):
            raise ApiError(
                400, "InvalidParameter", "POST /files takes multipart/form-data with 'files' parts"
            )
        try:
            form = await request.form(max_part_size=MAX_DATASET_BYTES)
        except Exception as exc:  # malformed multipart
            raise ApiError(400, "InvalidParameter", f"malformed multipart body: {exc}") from None
        uploads = [f for f in form.getlist("files") if hasattr(f, "filename")]
        if not uploads:
            raise ApiError(400, "InvalidParameter", "no 'files' part in the upload")
        descriptions = [str(d) for d in form.getlist("descriptions")]
        purpose = str(form.get("purpose") or "fine-tune")
        done, failed = [], []
        for i, up in enumerate(uploads):
            data = await up.read()
            name = Path(up.filename or "data.jsonl").name or "data.jsonl"
            problem, lines = _check_jsonl(data)
            if problem:
                failed.append({"name": name, "reason": problem})
                continue
            file_id = new_id("file-ft")
            dest = data_dir / "files" / file_id / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            await run_in_threadpool(dest.write_bytes, data)
            desc = descriptions[i] if i < len(descriptions) else None
            await run_in_threadpool(
                store.run,
                "INSERT INTO files VALUES (?,?,?,?,?,?,?,?)",
                file_id,
                name,
                str(dest),
                len(data),
                lines,
                purpose,
                desc,
                now_text(),
            )
            done.append({"file_id": file_id, "name": name, "bytes": len(data), "lines": lines})
        return JSONResponse(
            {"request_id": _rid(), "data": {"uploaded_files": done, "failed_uploads": failed}}
        )

    def _file(row: Any) -> dict:
        return {
            "file_id": row["file_id"],
            "name": row["name"],
            "bytes": row["bytes"],
            "lines": row["lines"],
            "purpose": row["purpose"],
            "description": row["description"],
            "created_at": row["created_at"],
        }

    @app.get("/api/v1/files", tags=["files"])
    def list_files(
        page_no: int = Query(1, ge=1, le=MAX_PAGE), page_size: int = Query(10, ge=1, le=100)
    ) -> JSONResponse:
        total = store.one("SELECT COUNT(*) FROM files")[0]
        rows = store.all(
            "SELECT * FROM files ORDER BY created_at DESC, file_id LIMIT ? OFFSET ?",
            page_size,
            (page_no - 1) * page_size,
        )
        return ok(
            {"files": [_file(r) for r in rows], "total": total, "page_no": page_no, "page_size": page_size}
        )

    @app.get("/api/v1/files/{file_id}", tags=["files"])
    def get_file(file_id: str) -> JSONResponse:
        row = store.one("SELECT * FROM files WHERE file_id = ?", file_id)
        if row is None:
            raise ApiError(404, "FileNotFound", f"file {file_id!r} does not exist")
        return ok(_file(row))

    @app.delete("/api/v1/files/{file_id}", tags=["files"])
    def delete_file(file_id: str) -> JSONResponse:
        row = store.one("SELECT * FROM files WHERE file_id = ?", file_id)
        if row is None:
            raise ApiError(404, "FileNotFound", f"file {file_id!r} does not exist")
        store.run("DELETE FROM files WHERE file_id = ?", file_id)
        shutil.rmtree(Path(row["path"]).parent, ignore_errors=True)
        return ok({"file_id": file_id, "status": "DELETED"})

    # ---- jobs ---------------------------------------------------------------------------------
    @app.post("/api/v1/fine-tunes", tags=["jobs"], openapi_extra=JOB_BODY)
    async def create_job(request: Request) -> JSONResponse:
        body = await json_body(request)
        job = await run_in_threadpool(_submit, store, registry, manager, body)
        return ok(job_output(job))

    @app.get("/api/v1/fine-tunes", tags=["jobs"])
    async def list_jobs(
        page_no: int = Query(1, ge=1, le=MAX_PAGE), page_size: int = Query(10, ge=1, le=100)
    ) -> JSONResponse:
        jobs, total = store.jobs((page_no - 1) * page_size, page_size)
        return ok(
            {
                "page_no": page_no,
                "page_size": page_size,
                "total": total,
                "jobs": [job_output(j) for j in jobs],
            }
        )

    def _job(job_id: str) -> dict:
        job = store.job(job_id)
        if job is None:
            raise ApiError(404, "JobNotFound", f"fine-tune job {job_id!r} does not exist")
        return job

    @app.get("/api/v1/fine-tunes/{job_id}", tags=["jobs"])
    async def get_job(job_id: str) -> JSONResponse:
        return ok(job_output(_job(job_id)))

    @app.post("/api/v1/fine-tunes/{job_id}/cancel", tags=["jobs"])
    def cancel_job(job_id: str) -> JSONResponse:
        job = _job(job_id)
        if job["status"] in ("SUCCEEDED", "FAILED"):
            raise ApiError(
                400, "JobFinished", f"job {job_id} already finished ({job['status']}); nothing to cancel"
            )
        status = manager.cancel(job_id)
        return ok({"job_id": job_id, "status": status})

    @app.delete("/api/v1/fine-tunes/{job_id}", tags=["jobs"])
    def delete_job(job_id: str) -> JSONResponse:
        job = _job(job_id)
        if job["status"] not in TERMINAL:
            raise ApiError(
                400, "JobRunning", f"job {job_id} is {job['status']}; cancel it before deleting it"
            )
        store.set_job(job_id, deleted=1)
        return ok({"job_id": job_id, "status": "DELETED"})

    @app.get("/api/v1/fine-tunes/{job_id}/logs", tags=["jobs"])
    async def job_logs(
        job_id: str, offset: int = Query(1, ge=0, le=MAX_OFFSET), line: int = Query(1000, ge=1, le=10000)
    ) -> JSONResponse:
        _job(job_id)
        start = max(offset, 1)  # 1-based line number, as the SDK's default offset=1 implies
        rows = store.logs(job_id, start, line)
        total = store.log_count(job_id)
        nxt = rows[-1][0] + 1 if rows else max(start, 1)
        return ok(
            {
                "job_id": job_id,
                "logs": [r[1] for r in rows],
                "offset": start,
                "line": line,
                "total": total,
                "next_offset": nxt,
            }
        )

    @app.get("/api/v1/fine-tunes/{job_id}/stream", tags=["jobs"])
    async def job_stream(
        job_id: str, request: Request, offset: int = Query(1, ge=0, le=MAX_OFFSET)
    ) -> StreamingResponse:
        await run_in_threadpool(_job, job_id)
        last_id = request.headers.get("last-event-id", "")
        start = min(int(last_id), MAX_OFFSET) + 1 if last_id.isdigit() else max(offset, 1)
        return StreamingResponse(
            _sse(store, job_id, start, request),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )

    @app.get("/api/v1/fine-tunes/{job_id}/metrics", tags=["local-only"])
    def job_metrics(job_id: str) -> JSONResponse:
        """Local-only: one row per training step with Bailian's metric names."""
        _job(job_id)
        return ok({"job_id": job_id, "metrics": store.metrics(job_id)})

    @app.get("/api/v1/fine-tunes/{job_id}/checkpoints", tags=["local-only"])
    def job_checkpoints(job_id: str) -> JSONResponse:
        """Local-only: saved checkpoints; the published one is the job's finetuned_output."""
        job = _job(job_id)
        final = job["meta"].get("final_checkpoint")
        cps = store.checkpoints(job_id)
        for cp in cps:
            cp["published"] = bool(final) and Path(cp["path"]).resolve() == Path(final).resolve()
        if final and not any(cp["published"] for cp in cps):
            meta = job["meta"]
            cps.append(
                {
                    "name": Path(final).name,
                    "step": int(meta.get("steps") or 0),
                    "path": final,
                    "created_at": job.get("end_time"),
                    "metrics": meta.get("metrics_tail") or {},
                    "published": True,
                }
            )
        return ok(
            {
                "job_id": job_id,
                "checkpoints": cps,
                "finetuned_output": job.get("finetuned_output"),
                "final_checkpoint": final,
            }
        )

    # ---- models (local-only) ------------------------------------------------------------------
    @app.get("/api/v1/models", tags=["local-only"])
    def list_models() -> JSONResponse:
        """Local-only: what the local engine can run, and the stand-ins used for cloud model ids."""
        from opd_nb.server.models import STUDENT_ID, TEACHER_ID

        return ok(
            {"models": registry.listing(), "default_student": STUDENT_ID, "default_teacher": TEACHER_ID}
        )

    @app.get("/api/v1/models/{model_id:path}", tags=["local-only"])
    def get_model(model_id: str, role: str = Query("student", pattern="^(student|teacher)$")) -> JSONResponse:
        try:
            resolved = registry.resolve(model_id, role)  # type: ignore[arg-type]
        except ModelNotServable as exc:
            return err(404, "ModelNotFound", str(exc))
        return ok(resolved.model_dump())

    return app


# ---- helpers ---------------------------------------------------------------------------------
def _check_jsonl(data: bytes) -> tuple[str | None, int]:
    """(problem, line count): a dataset must be UTF-8 JSON Lines, one object per line."""
    if not data.strip():
        return "the file is empty", 0
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "the file is not UTF-8 text", 0
    count = 0
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            return f"line {n} is not valid JSON ({exc.msg})", count
        if not isinstance(obj, dict):
            return f"line {n} is not a JSON object", count
        count += 1
    return None, count


def job_output(job: dict) -> dict:
    """A job as Bailian answers it: every field dashscope's FineTuneOutput declares, plus local extras."""
    req, meta = job["request"], job["meta"]
    out = {
        "job_id": job["job_id"],
        "job_name": job["job_name"],
        "status": job["status"],
        "model": req.get("model"),
        "base_model": req.get("model"),
        "finetuned_output": job.get("finetuned_output"),
        "training_file_ids": [
            d.get("file_id") for d in req.get("training_datasets") or [] if d.get("file_id")
        ],
        "validation_file_ids": [
            d.get("file_id") for d in req.get("validation_datasets") or [] if d.get("file_id")
        ],
        "hyper_parameters": req.get("hyper_parameters") or {},
        "training_type": req.get("training_type"),
        "teacher_model": req.get("teacher_model"),
        "create_time": job["create_time"],
        "end_time": job.get("end_time"),
        "start_time": job.get("start_time"),
        "user_identity": "local",
        "modifier": "local",
        "creator": "local",
        "group": "llm",
        "usage": None,
        "progress": job.get("progress"),
        "local": {
            "substitutions": meta.get("substitutions", []),
            "student_path": meta.get("student_path"),
            "teacher_path": meta.get("teacher_path"),
            "final_checkpoint": meta.get("final_checkpoint"),
        },
    }
    if job["status"] == "FAILED":
        out["code"] = job.get("code") or "JobFailed"
        out["message"] = job.get("message") or ""
    elif job.get("message"):
        out["message"] = job["message"]
    return out


def _submit(store: Store, registry: ModelRegistry, manager: JobManager, body: dict) -> dict:
    """Validate a submission like the cloud would (4xx on anything wrong) and queue it."""

    def bad(message: str, code: str = "InvalidParameter") -> ApiError:
        return ApiError(400, code, message)

    ttype = body.get("training_type", "reinforcement")
    if ttype not in ("reinforcement", "pg_opd"):
        raise bad(f"training_type {ttype!r} is not supported; use 'pg_opd' (OPD) or 'reinforcement'")
    teacher = body.get("teacher_model")
    if ttype == "pg_opd" and (not isinstance(teacher, str) or not teacher.strip()):
        raise bad("training_type 'pg_opd' needs a teacher_model (set `teacher_model:` in config.yaml)")
    if teacher is not None and not isinstance(teacher, str):
        raise bad("teacher_model must be a string")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise bad("model is required (set `model: name:` in config.yaml)")
    for key in ("hyper_parameters", "resource_config"):
        if body.get(key) is not None and not isinstance(body[key], dict):
            raise bad(f"{key} must be a JSON object")
    job_name = body.get("job_name")
    if job_name is not None and (not isinstance(job_name, str) or not 1 <= len(job_name) <= 256):
        raise bad("job_name must be a string of 1..256 characters")

    substitutions: list[str] = []
    try:
        student = registry.resolve(model, "student")
        teacher_res = registry.resolve(teacher, "teacher") if teacher else None
    except ModelNotServable as exc:
        raise bad(str(exc), "ModelNotFound") from None
    if student.note:
        substitutions.append(student.note)
    if teacher_res and teacher_res.note:
        substitutions.append(teacher_res.note)

    def dataset_file(kind: str) -> str | None:
        entries = body.get(f"{kind}_datasets") or []
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise bad(f"{kind}_datasets must be a list of objects")
        if kind == "training" and not entries:
            raise bad("training_datasets is empty; upload a training JSONL file first (POST /files)")
        if len(entries) > 1:
            raise bad(f"{kind}_datasets has {len(entries)} entries; the local engine takes one {kind} file")
        if not entries:
            return None
        entry = entries[0]
        src = entry.get("data_source_type", "file_id")
        if src != "file_id":
            raise bad(
                f"{kind}_datasets[0].data_source_type {src!r} is not available locally; upload the file "
                "(data_source_type: file_id with file_name)"
            )
        file_id = entry.get("file_id")
        row = (
            store.one("SELECT path FROM files WHERE file_id = ?", file_id)
            if isinstance(file_id, str)
            else None
        )
        if row is None:
            raise bad(
                f"{kind}_datasets[0].file_id {file_id!r} is not a file uploaded to this server",
                "FileNotFound",
            )
        return row["path"]

    train_file = dataset_file("training")
    validation_file = dataset_file("validation")

    functions: list[dict] = []
    rewards = body.get("rewards") or []
    if not isinstance(rewards, list):
        raise bad("rewards must be a list")
    entries = [("rewards", i, r, "reward_id") for i, r in enumerate(rewards)]
    rollout = body.get("rollout")
    if rollout:
        entries.append(("rollout", None, rollout, "rollout_id"))
    for field, idx, entry, id_key in entries:
        where = f"{field}[{idx}]" if idx is not None else field
        if not isinstance(entry, dict):
            raise bad(f"{where} must be an object")
        entity_id = entry.get(id_key)
        row = (
            store.one("SELECT * FROM functions WHERE entity_id = ?", entity_id)
            if isinstance(entity_id, str)
            else None
        )
        if (
            row is None
            or (field == "rewards" and kind_of(entity_id) not in ("reward", "group_reward"))
            or (field == "rollout" and row["kind"] != "rollout")
        ):
            raise bad(
                f"{where}.{id_key} {entity_id!r} is not a {field.rstrip('s')} function registered on this "
                "server",
                "FunctionNotFound",
            )
        try:
            weight = float(entry["weight"]) if entry.get("weight") is not None else None
            timeout = float(entry["timeout"]) if entry.get("timeout") is not None else None
            concurrency = int(entry["concurrency"]) if entry.get("concurrency") is not None else None
        except (TypeError, ValueError):
            raise bad(f"{where}: weight/timeout must be numbers and concurrency an integer") from None
        rmw = entry.get("reward_metric_weight")
        functions.append(
            {
                "entity_id": entity_id,
                "kind": row["kind"],
                "name": entry.get("name") or row["name"],
                "processor": row["processor"],
                "code_dir": row["code_dir"],
                "weight": weight,
                "timeout": timeout,
                "concurrency": concurrency,
                "reward_metric_weight": rmw if isinstance(rmw, dict) else None,
                "env": runtime_env({"env": entry.get("env")}),
            }
        )
    if ttype == "reinforcement" and not any(f["kind"] != "rollout" for f in functions):
        raise bad(
            "training_type 'reinforcement' needs at least one reward function (or use pg_opd with a "
            "teacher_model)"
        )

    job_id = f"ft-{time.strftime('%Y%m%d%H%M')}-{secrets.token_hex(3)}"
    name = job_name or f"opd-{secrets.token_hex(4)}"
    meta = {
        "training_type": ttype,
        "student_path": student.path,
        "teacher_path": teacher_res.path if teacher_res else student.path,
        "substitutions": substitutions,
        "train_file": train_file,
        "validation_file": validation_file,
        "functions": functions,
        "student_kind": student.kind,
    }
    request = {k: v for k, v in body.items()}
    store.insert_job(job_id, name, request, meta)
    store.add_log(
        job_id,
        f"[server] {now_text()} job {job_id} ({name}) queued: {ttype}, model {model!r}"
        + (f", teacher {teacher!r}" if teacher else ""),
        *[f"[server] {s}" for s in substitutions],
    )
    manager.wake()
    return store.job(job_id)  # type: ignore[return-value]


async def _sse(store: Store, job_id: str, start: int, request: Request):  # noqa: ANN202
    """Server-sent events: `status` on every state change, `log` per log line, until a terminal state."""
    seq = start
    last_status = None
    last_beat = time.monotonic()
    while True:
        job = await run_in_threadpool(store.job, job_id)
        rows = await run_in_threadpool(store.logs, job_id, seq, 500)
        for n, line in rows:
            yield f"id: {n}\nevent: log\ndata: {line}\n\n"
            seq = n + 1
        status = job["status"] if job else "DELETED"
        if status != last_status:
            last_status = status
            payload = json.dumps(
                {"job_id": job_id, "status": status, "progress": job.get("progress") if job else None}
            )
            yield f"event: status\ndata: {payload}\n\n"
        if status in TERMINAL or job is None:
            if not rows or len(rows) < 500:
                return
            continue
        if len(rows) == 500:
            continue
        if await request.is_disconnected():
            return
        if time.monotonic() - last_beat > 10:
            last_beat = time.monotonic()
            yield ": keep-alive\n\n"
        await asyncio.sleep(0.5)
