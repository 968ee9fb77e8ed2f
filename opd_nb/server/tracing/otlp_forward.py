"""``opd serve --otlp-forward URL``: every accepted trace export, also sent to the user's own collector.

Jaeger, Phoenix, Langfuse and other collectors take OTLP/HTTP; the body goes on unchanged (protobuf or
JSON, as the function server sent it), with the collector's headers (its key: from ``$OPD_OTLP_HEADERS``,
``--otlp-header-file`` or ``--otlp-header``, they travel in :data:`HEADERS_ENV`, never in the server's
options, its command line or its log). Sending runs on one background
thread from a bounded queue, so a slow or absent collector never holds up a job or the API: when the
queue is full the oldest export is dropped and counted, and failures are logged once a minute.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from urllib.parse import urlsplit, urlunsplit

from opd_nb import settings
from opd_nb.errors import OpdError
from opd_nb.wire import http_client

HEADERS_ENV = settings.OTLP_FORWARD_HEADERS.name  # JSON object: the collector's headers (may hold its key)
QUEUE_SIZE = 256  # export requests waiting to be forwarded
TIMEOUT_S = 10.0
LOG_EVERY_S = 60.0


def forward_url(url: str) -> str:
    """The collector's traces URL: ``http://host:4318`` gets OTLP/HTTP's ``/v1/traces``; a path is kept."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise OpdError(
            f"--otlp-forward {url!r} is not an http(s) URL",
            fix="e.g. --otlp-forward http://127.0.0.1:4318/v1/traces (Jaeger, Phoenix and Langfuse take OTLP/HTTP)",
        )
    path = parts.path if parts.path not in ("", "/") else "/v1/traces"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def parse_headers(items: list[str] | None) -> dict[str, str]:
    """``--otlp-header K=V`` (repeatable) as a dict."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or any(c in key + value for c in "\r\n"):
            raise OpdError(
                "--otlp-header must look like NAME=VALUE (one header per flag)",
                fix=f"e.g. --otlp-header Authorization='Bearer <key>' (a key is better in "
                f"${settings.OTLP_HEADERS.name} or --otlp-header-file)",
            )
        out[key.strip()] = value.strip()
    return out


def headers_from_env() -> dict[str, str]:
    """The headers `opd serve` passed in :data:`HEADERS_ENV`, else the user's ``$OPD_OTLP_HEADERS`` (a server
    started as ``python -m opd_nb.server``); both taken out of the environment: no child gets them."""
    handed, users = settings.OTLP_FORWARD_HEADERS.pop(), settings.OTLP_HEADERS.pop()
    return handed or users or {}


class Forwarder:
    """Posts export bodies to one collector, in order, off the request path."""

    def __init__(self, url: str, headers: dict[str, str] | None = None):
        self.url = forward_url(url)
        self.headers = dict(headers or {})
        self.sent = 0
        self.dropped = 0
        self.failed = 0
        self._q: queue.Queue[tuple[bytes, str] | None] = queue.Queue(QUEUE_SIZE)
        self._logged = 0.0
        self._thread = threading.Thread(target=self._run, name="opd-otlp-forward", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:  # the headers may hold the collector's key
        return f"Forwarder({self.url!r}, headers={sorted(self.headers)})"

    def send(self, body: bytes, content_type: str) -> None:
        """Queue one export (never blocks: the oldest waiting one is dropped when the queue is full)."""
        while True:
            try:
                self._q.put_nowait((body, content_type))
                return
            except queue.Full:
                try:
                    self._q.get_nowait()
                    self.dropped += 1
                except queue.Empty:
                    pass

    def close(self, timeout_s: float = 5.0) -> None:
        """Send what is queued (for up to `timeout_s`), then stop."""
        try:
            self._q.put(None, timeout=timeout_s)
        except queue.Full:
            return
        self._thread.join(timeout_s)

    def _run(self) -> None:
        import httpx

        with http_client.client(timeout=TIMEOUT_S) as client:
            while (item := self._q.get()) is not None:
                body, content_type = item
                try:
                    reply = client.post(
                        self.url, content=body, headers={**self.headers, "Content-Type": content_type}
                    )
                    ok = reply.status_code < 300
                    problem = f"HTTP {reply.status_code}"
                except httpx.HTTPError as exc:
                    ok, problem = False, f"{type(exc).__name__}: {exc}"
                if ok:
                    self.sent += 1
                else:
                    self.failed += 1
                    self._log(problem)

    def _log(self, problem: str) -> None:
        now = time.monotonic()
        if now - self._logged >= LOG_EVERY_S:
            self._logged = now
            print(
                f"opd serve: forwarding traces to {self.url} failed ({problem}); "
                f"{self.failed} export(s) not delivered so far",
                file=sys.stderr,
            )
