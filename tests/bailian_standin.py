"""Bailian's stand-in for tests of the paid plane: a loopback proxy that counts every request and forwards
it to a local control plane, so a job it lets through is a real job and a job it never saw was never sent.
Only the real host is stood in for; our own code runs unchanged."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

JOB_CREATE = ("POST", "/api/v1/fine-tunes")  # what starting a job sends


class CountingProxy:
    """Bailian's stand-in: counts requests, forwards each to `upstream` (the local control plane)."""

    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self.requests: list[tuple[str, str]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                proxy.requests.append((self.command, self.path))
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")
                }
                reply = httpx.request(
                    self.command, proxy.upstream + self.path, headers=headers, content=body, timeout=120
                )
                self.send_response(reply.status_code)
                for k, v in reply.headers.items():
                    if k.lower() not in (
                        "content-length",
                        "transfer-encoding",
                        "content-encoding",
                        "connection",
                    ):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(reply.content)))
                self.end_headers()
                self.wfile.write(reply.content)

            do_GET = do_POST = do_DELETE = do_PUT = _forward

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/v1"

    def job_creations(self) -> int:
        """How many jobs were asked to start through this stand-in."""
        return sum(1 for method, path in self.requests if (method, path.split("?")[0]) == JOB_CREATE)

    def close(self) -> None:
        self.server.shutdown()
