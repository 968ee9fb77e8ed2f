"""Bailian's stand-in for tests of the paid plane: a loopback proxy that counts every request and forwards
it to a local control plane, so a job it lets through is a real job and a job it never saw was never sent.
Only the real host is stood in for; our own code runs unchanged.

Faults are the network's and the host's, injected here (:meth:`CountingProxy.fault`): an answer lost after
the request was carried out (forwarded, then a 500 instead of its answer, or the connection cut with no
answer: :data:`DROP`), or a busy host (a 503 for a request never forwarded, or a cut connection)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

JOB_CREATE = ("POST", "/api/v1/fine-tunes")  # what starting a job sends
DEPLOY_CREATE = ("POST", "/api/v1/deployments")  # what starting a deployment sends
CHAT = ("POST", "/compatible-mode/v1/chat/completions")  # one billed model call
DROP = 0  # a fault's status that answers nothing: the connection is cut (the client sees it dropped)


@dataclass
class Fault:
    method: str
    path: str  # without the query
    status: int  # DROP: the connection closes with no answer at all
    forward: bool  # True: the upstream carries it out, and its answer is lost
    times: int  # how many matching requests it hits (then it is spent)
    code: str = ""  # the error code it answers (else ServiceUnavailable / InternalError)


class CountingProxy:
    """Bailian's stand-in: counts requests, forwards each to `upstream` (the local control plane)."""

    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self.requests: list[tuple[str, str]] = []
        self.faults: list[Fault] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _forward(self) -> None:
                proxy.requests.append((self.command, self.path))
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fault = proxy._take_fault(self.command, self.path.split("?")[0])
                if fault is not None and not fault.forward and fault.status == DROP:
                    self.close_connection = True
                    return
                if fault is not None and not fault.forward:
                    code = fault.code or "ServiceUnavailable"
                    self._answer(fault.status, {"code": code, "message": "busy (injected)"})
                    return
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")
                }
                reply = httpx.request(
                    self.command, proxy.upstream + self.path, headers=headers, content=body, timeout=120
                )
                if fault is not None and fault.status == DROP:  # carried out upstream, then cut off
                    self.close_connection = True
                    return
                if fault is not None:  # carried out upstream; the caller never learns it
                    code = fault.code or "InternalError"
                    self._answer(fault.status, {"code": code, "message": "answer lost (injected)"})
                    return
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

    def fault(
        self,
        method: str,
        path: str,
        status: int = 500,
        *,
        forward: bool = True,
        times: int = 1,
        code: str = "",
    ) -> None:
        """Hit the next `times` requests to `path`: forward=True loses the answer of a request carried out;
        False answers `status` without forwarding it (a busy host). `status` DROP answers nothing."""
        with self._lock:
            self.faults.append(Fault(method, path, status, forward, times, code))

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.times > 0 and (fault.method, fault.path) == (method, path):
                    fault.times -= 1
                    return fault
        return None

    def clear_faults(self) -> None:
        """The network is well again: every fault not yet spent is dropped."""
        with self._lock:
            self.faults.clear()

    def count(self, method: str, path: str) -> int:
        """How many `method` requests to `path` (without the query) reached the stand-in."""
        return sum(1 for m, p in self.requests if (m, p.split("?")[0]) == (method, path))

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/v1"

    def job_creations(self) -> int:
        """How many jobs were asked to start through this stand-in."""
        return sum(1 for method, path in self.requests if (method, path.split("?")[0]) == JOB_CREATE)

    def close(self) -> None:
        self.server.shutdown()
