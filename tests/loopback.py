"""A loopback HTTP server standing in for a control plane or a plain webhook (the watcher tests).

It records POSTed JSON bodies and answers GETs from a table (path -> JSON): enough for a watcher to
poll a job that does what a test needs (runs forever, has ended, failed at step 1) without a server.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    """A handler that logs nothing and answers whole replies, quietly if the client already left."""

    def answer(self, status: int, headers: dict[str, str], data: bytes) -> None:
        try:
            self.send_response(status)
            for key, value in {"Content-Length": str(len(data)), **headers}.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting (a timeout test): nobody to answer

    def log_message(self, *args: object) -> None:
        pass


def serve(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """`handler` on a free loopback port, in a daemon thread (quick to shut down)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


class Loopback:
    """A loopback HTTP server: records POSTed JSON bodies, answers GETs from `answers` (path -> JSON)."""

    def __init__(self, answers: dict[str, dict] | None = None):
        self.posts: list[tuple[str, dict]] = []
        self.gets: list[str] = []
        self.answers = answers or {}
        self.status: int | None = None  # set: every GET answers this status (a gateway whose backend is gone)
        box = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                box.posts.append((self.path, json.loads(body) if body else {}))
                self._reply(200, {"request_id": "r", "output": {"status": "success"}})

            def do_GET(self) -> None:
                box.gets.append(self.path)
                if box.status is not None:
                    return self._reply(box.status, {"code": "BadGateway", "message": "upstream unavailable"})
                found = box.answers.get(self.path.split("?")[0])
                self._reply(200 if found else 404, found or {"code": "NotFound", "message": "Not Found!"})

            def _reply(self, status: int, data: dict) -> None:
                self.answer(status, {"Content-Type": "application/json"}, json.dumps(data).encode())

        self.server = serve(Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"
