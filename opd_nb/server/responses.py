"""How this server answers: every route through its wire model, every error in Bailian's error body.

dashscope 2.0.2 reads a job or function answer under ``output`` (``POST /files`` under ``data``) and an
error from any non-200 answer with ``code`` and ``message``. A route returns a model of
:mod:`opd_nb.wire` (its ``response_model``).
Every error this server gives, whether a bad body caught by pydantic, an unknown route or an
:class:`ApiError`, goes out as :class:`~opd_nb.wire.envelope.ErrorBody`, as a 4xx: a bad request is
never a 500. A message echoes at most a few hundred characters of what was sent (:func:`shown`;
:func:`err` clips whatever slips through), so a 10 MB field never comes back. The OpenAPI schema
documents that 400 body (FastAPI's default would promise a 422 we never send).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from opd_nb.constants import COMPATIBLE_PATH
from opd_nb.server.db_safety import DB_FILE
from opd_nb.server.disk_space import DISK_FULL, DISK_FULL_STATUS, full_disk_reason, is_disk_full
from opd_nb.server.errors import ApiError
from opd_nb.wire.base import new_request_id
from opd_nb.wire.envelope import ErrorBody, OpenAIError, OpenAIErrorDetail

INVALID = "InvalidParameter"
_MAX_REPORTED = 5  # validation problems named in one message
_NOT_AN_OBJECT = ("model_attributes_type", "dict_type", "model_type")
MAX_SHOWN = 200  # characters of a client's value quoted back in a message
MAX_MESSAGE = 1000  # characters of any error message


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters (and safe to encode as UTF-8)."""
    text = repr(value) if isinstance(value, str) else repr(str(value))
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(str(value))} characters)"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def request_id() -> str:
    return new_request_id()


def err(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    message = str(message)
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE] + "... (message cut)"
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")  # no lone surrogates
    body = ErrorBody(request_id=request_id(), code=code, message=message)
    return JSONResponse(body.wire(), status_code=status, headers=headers)


def describe_validation(errors: Sequence[Mapping[str, Any]]) -> str:
    """One line a person can act on, from pydantic's error list (at most five problems)."""
    return "; ".join(_describe_one(e) for e in errors[:_MAX_REPORTED]) or "invalid request"


def _describe_one(error: Mapping[str, Any]) -> str:
    loc = [p for p in error.get("loc", ()) if p not in ("query", "path", "body")]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    kind = error.get("type", "")
    if not where and kind == "missing":
        return "request body is empty; send a JSON object"
    if not where and kind in _NOT_AN_OBJECT:
        return "request body must be a JSON object (sent as Content-Type: application/json)"
    if kind == "json_invalid":
        return f"malformed JSON in request body: {error.get('ctx', {}).get('error', error.get('msg'))}"
    if kind == "value_error":  # our own validators: the message already names the field
        return str(error.get("ctx", {}).get("error") or error.get("msg", "")).removeprefix("Value error, ")
    if kind == "missing":
        return f"{where} is required"
    return f"{where}: {error.get('msg')}" if where else str(error.get("msg"))


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error in Bailian's error body."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return err(exc.status, exc.code, exc.message)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return err(400, INVALID, describe_validation(list(exc.errors())))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        """A bug, not the caller's mistake: Bailian's shape, and no traceback in the answer."""
        return err(
            500,
            "InternalError",
            f"the local control plane failed on {request.method} {request.url.path} "
            f"({type(exc).__name__}); the server log has the details",
        )

    @app.exception_handler(OSError)
    @app.exception_handler(sqlite3.Error)
    async def _storage(request: Request, exc: Exception) -> JSONResponse:
        """A full disk is Bailian's shape with 507 and the reason; other storage faults name the file."""
        data_dir = request.app.state.services.data_dir
        if is_disk_full(exc):
            return err(DISK_FULL_STATUS, DISK_FULL, await run_in_threadpool(full_disk_reason, data_dir))
        if isinstance(exc, sqlite3.DatabaseError):
            return err(
                503,
                "DatabaseError",
                f"the database {data_dir / DB_FILE} cannot be used ({exc}); stop `opd serve`, whose next "
                "start names the backup to restore",
            )
        where = getattr(exc, "filename", None) or data_dir
        return err(503, "StorageError", f"a file under the data dir could not be used: {exc} ({where})")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "NotFound", 405: "MethodNotAllowed", 413: "RequestTooLarge"}.get(
            exc.status_code, "BadRequest"
        )
        path = request.url.path
        if exc.status_code in (404, 405) and path.startswith(f"{COMPATIBLE_PATH}/"):
            return openai_error(exc.status_code, code, _not_served(request), request_id())
        if exc.status_code == 404:
            return err(404, "NotFound", f"no such endpoint: {request.method} {path}")
        return err(exc.status_code, code, str(exc.detail), headers=getattr(exc, "headers", None))


def _not_served(request: Request) -> str:
    """What the compatible mode serves, for a call to what it does not (legacy completions, embeddings)."""
    paths = request.app.openapi()["paths"]  # the routes as served (built once, then cached by FastAPI)
    served = [
        f"{method.upper()} {path}"
        for path in sorted(paths)
        if path.startswith(COMPATIBLE_PATH)
        for method in paths[path]
    ]
    return (
        f"{request.method} {shown(request.url.path)} is not served by the local control plane; its "
        f"OpenAI-compatible API serves {', '.join(served)} (no legacy completions, no embeddings)"
    )


def openai_error(status: int, code: str, message: str, rid: str) -> JSONResponse:
    """OpenAI's error object (with ``request_id``), as Bailian answers under ``/compatible-mode/v1``."""
    kind = "authentication_error" if status == 401 else "invalid_request_error"
    if status >= 500:
        kind = "server_error"
    detail = OpenAIErrorDetail(message=message, type=kind, param=None, code=code)
    return JSONResponse(OpenAIError(error=detail, request_id=rid).wire(), status_code=status)
