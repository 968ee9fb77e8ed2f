"""Who may call the control plane: the Bearer key check, and the signed token of the zip upload URL.

Without a server key (loopback only), ``/api/*`` needs any non-empty Bearer, as before: the SDK
always sends one, so a missing key is a client mistake. With a server key (``--api-key`` or
``OPD_SERVE_API_KEY``, required for a non-loopback bind) only that key is accepted, on every
endpoint. The zip PUT cannot carry a key (the SDK PUTs to the signed URL with no headers, as to OSS),
so it carries a token in the URL's query string instead: an HMAC of the upload key under a secret
that lives only in this process. The key is never logged or echoed.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

from opd_nb.loopback import bearer_token, same_key
from opd_nb.server.responses import err
from opd_nb.server.tracing.env import OTLP_PREFIX  # span exports: checked by their job's token instead

OSS_PREFIX = "/api/v1/local-oss/"  # the signed-URL zip PUT: checked by its token, not by the key


class BearerAuth:
    """Pure ASGI middleware (cheaper than BaseHTTPMiddleware) for the Bearer key."""

    def __init__(self, app: Any, api_key: str | None = None):
        self.app = app
        self._key = api_key or None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            problem = self._problem(scope)
            if problem:
                await err(401, "InvalidApiKey", problem)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _problem(self, scope: dict[str, Any]) -> str | None:
        path = scope.get("path", "")
        if path.startswith((OSS_PREFIX, OTLP_PREFIX)):
            return None
        if self._key is None and not path.startswith(("/api/", "/compatible-mode/")):
            return None
        auth = next((v for k, v in scope.get("headers", []) if k == b"authorization"), b"")
        token = bearer_token(auth)  # the one parse and comparison `opd mcp --http` uses too
        if not token:
            how = "the server's key" if self._key else "any non-empty value works locally"
            return (
                "missing or empty API key: send 'Authorization: Bearer <key>' "
                f"({how}; set DASHSCOPE_API_KEY before importing dashscope)"
            )
        if self._key is not None and not same_key(token, self._key):
            if same_key(token.strip(), self._key):
                return "the API key has a tab or a no-break space beside it: send exactly the key after 'Bearer '"
            return "the API key is not this server's key: set DASHSCOPE_API_KEY to the key `opd serve` was started with"
        return None


class UploadSigner:
    """Tokens for the zip upload URLs this process hands out (a fresh secret per server run)."""

    def __init__(self) -> None:
        self._secret = secrets.token_bytes(32)

    def sign(self, key: str) -> str:
        return hmac.new(self._secret, key.encode(), hashlib.sha256).hexdigest()

    def valid(self, key: str, token: str | None) -> bool:
        given = str(token or "").encode("utf-8", "replace")
        return bool(given) and hmac.compare_digest(self.sign(key).encode(), given)
