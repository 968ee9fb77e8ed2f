"""Bearer-key check for ``/api/*``: the SDK always sends one, so a missing key is a client mistake."""

from __future__ import annotations

from typing import Any

from opd_nb.server.responses import err

OSS_PREFIX = "/api/v1/local-oss/"  # the signed-URL zip PUT: exempt, as OSS URLs are on the cloud


class BearerAuth:
    """Pure ASGI middleware (cheaper than BaseHTTPMiddleware): /api/* needs a non-empty Bearer.

    Any value is accepted locally; the key is never logged or echoed.
    """

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and _needs_key(scope.get("path", "")) and not _has_bearer(scope):
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


def _needs_key(path: str) -> bool:
    return path.startswith("/api/") and not path.startswith(OSS_PREFIX)


def _has_bearer(scope: dict) -> bool:
    auth = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"authorization"), "")
    scheme, _, token = auth.partition(" ")
    return scheme.lower() == "bearer" and bool(token.strip())
