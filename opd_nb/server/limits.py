"""Caps on what one request may send, and the body checks no route should have to repeat.

Why here: a 200 MB JSON body used to cost the server 1.7 GB of memory before any route could say
no, and a body nested 100,000 deep or a lone UTF-16 surrogate (``"\\ud800"``, valid JSON but not
text) broke whatever touched it next. :class:`BodyGuard` reads a body at most once up to its cap
(413 above it, from ``Content-Length`` before a byte is read), undoes its ``Content-Encoding``
(:mod:`opd_nb.server.content_encoding`: gzip and deflate, to the same cap; another coding is a 415), and hands every non-multipart body,
whatever its content type, to the one decoder (:mod:`opd_nb.server.decoding`), which refuses JSON
that is not UTF-8, too deep, holds a lone surrogate, a non-finite number or a huge integer with a
400. Every cap is documented in the README.
"""

from __future__ import annotations

from typing import Any

import anyio
from starlette.exceptions import HTTPException

from opd_nb.server.auth import OSS_PREFIX
from opd_nb.server.content_encoding import IDENTITY, EncodingRefused, decoded
from opd_nb.server.decoding import body_problem
from opd_nb.server.responses import INVALID, err
from opd_nb.server.tracing.env import OTLP_PREFIX

MAX_JSON_BYTES = 16 * 2**20  # any non-multipart body
MAX_FORM_BYTES = 512 * 2**20  # a multipart dataset upload (POST /files)
MAX_CONCURRENT_UPLOADS = 4  # multipart uploads in flight at once (each spools to disk); more: 429
UPLOAD_RETRY_AFTER_S = 2
MAX_REQUIREMENTS_CHARS = 2**20  # a layer's requirements_content
MAX_ENV_BYTES = 64 * 1024  # a function's environment map ("NAME=value\0" each), far below exec's limit
MAX_FILE_NAME_CHARS = 200  # an uploaded dataset's file name
MAX_ZIP_ENTRIES = 10_000  # entries of a function zip
MAX_ZIP_DIRECTORY_BYTES = MAX_ZIP_ENTRIES * 512  # its central directory, read before the entries
MAX_UNPACKED_BYTES = 1024 * 2**20  # what a function zip may expand to
MAX_ENTRY_NAME_BYTES = 255  # one path component of a zip entry (the file-system limit)
MAX_ENTRY_PATH_BYTES = 1024  # a whole zip entry name
_THREAD_ABOVE = 64 * 1024  # bodies bigger than this are checked off the event loop


def too_large(what: str, cap: int) -> str:
    return f"{what} is over the {cap / 2**20:g} MiB cap of the local control plane"


class BodyGuard:
    """Pure ASGI middleware: body size caps (413), then the one body decoder's checks (400)."""

    def __init__(
        self,
        app: Any,
        max_json: int = MAX_JSON_BYTES,
        max_form: int = MAX_FORM_BYTES,
        max_uploads: int = MAX_CONCURRENT_UPLOADS,
    ):
        self.app = app
        self.max_json = max_json
        self.max_form = max_form
        self.max_uploads = max_uploads
        self._uploads = 0  # multipart bodies being received (one event loop: no lock needed)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path", "").startswith(OSS_PREFIX):
            await self.app(scope, receive, send)  # the zip PUT streams to disk under its own cap
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        ctype = headers.get("content-type", "").lower()
        multipart = ctype.startswith("multipart/")
        cap = self.max_form if multipart else self.max_json
        what = "the multipart upload" if multipart else "the request body"
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > cap:
            await err(413, "RequestTooLarge", too_large(what, cap))(scope, receive, send)
            return
        encoding = headers.get("content-encoding")
        if multipart:
            if encoding and encoding.strip().lower() != IDENTITY:  # an upload is stored as it comes
                message = f"a multipart upload is sent uncompressed (got Content-Encoding {encoding[:40]!r})"
                await err(415, "UnsupportedContentEncoding", message)(scope, receive, send)
                return
            await self._upload(scope, _counting(receive, cap, what), send)
            return
        if not length and "transfer-encoding" not in headers:
            await self.app(scope, receive, send)  # no body
            return
        body = await _read(receive, cap)
        if body is None:
            await err(413, "RequestTooLarge", too_large(what, cap))(scope, receive, send)
            return
        # A span export goes to its route as sent: the intake decodes it once it knows the job, so a job
        # whose spans are refused hears of it (tracing.intake), and checks a JSON one then.
        if scope.get("path", "").startswith(OTLP_PREFIX) and (
            encoding or ctype.startswith("application/x-protobuf")
        ):
            await self.app(scope, _replay(body, receive), send)
            return
        if encoding:
            try:
                body = await anyio.to_thread.run_sync(decoded, body, encoding, cap)
            except EncodingRefused as exc:
                await err(exc.status, exc.code, exc.message)(scope, receive, send)
                return
            scope = {**scope, "headers": _plain_headers(scope, len(body))}
        # Every body, whatever its Content-Type: a route may read any body as JSON.
        big = len(body) > _THREAD_ABOVE
        problem = await anyio.to_thread.run_sync(body_problem, body) if big else body_problem(body)
        if problem:
            await err(400, INVALID, problem)(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _upload(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """A multipart upload, unless :data:`MAX_CONCURRENT_UPLOADS` are under way: then a 429 at once."""
        if self._uploads >= self.max_uploads:
            message = (
                f"{self._uploads} uploads are already in progress (the local control plane takes "
                f"{self.max_uploads} at once); retry when one has finished"
            )
            headers = {"Retry-After": str(UPLOAD_RETRY_AFTER_S)}
            await err(429, "TooManyUploads", message, headers=headers)(scope, receive, send)
            return
        self._uploads += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self._uploads -= 1


async def _read(receive: Any, cap: int) -> bytes | None:
    """The whole body, or None as soon as it passes ``cap`` (the rest is never buffered)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _plain_headers(scope: dict[str, Any], length: int) -> list[tuple[bytes, bytes]]:
    """The request's headers for its decoded body: no Content-Encoding, the decoded Content-Length."""
    kept = [
        (k, v)
        for k, v in scope.get("headers", [])
        if k.lower() not in (b"content-encoding", b"content-length")
    ]
    return [*kept, (b"content-length", str(length).encode())]


def _replay(body: bytes, receive: Any) -> Any:
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # then the client's disconnect, as the app expects

    return replay


def _counting(receive: Any, cap: int, what: str) -> Any:
    size = 0

    async def counted() -> dict[str, Any]:
        nonlocal size
        message = await receive()
        if message["type"] == "http.request":
            size += len(message.get("body", b""))
            if size > cap:
                raise HTTPException(413, too_large(what, cap))
        return message

    return counted
