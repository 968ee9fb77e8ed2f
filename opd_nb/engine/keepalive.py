"""Keep-alive HTTP/1.1 POSTs from the engine to the function servers (reward and rollout calls).

Why the standard library's ``http.client`` and not httpx: on the demo's calls (64 small POSTs at once
to the SDK's function server) httpx's client took 3-4 ms of CPU per call (async) and 1.8 ms (sync, in
threads); ``http.client`` 0.3 ms. That CPU is the engine's: the same process and GIL as the trainer.

A function server that died is restarted on the same port by the job's worker (once, as the cloud
restarts a dead instance: :mod:`opd_nb.server.job.function_deaths`); a call that finds it refusing or
resetting connections meanwhile tries again for up to ``reconnect_s`` (the endpoint's), instead of
failing its samples as if the user's code had. One the worker has given up on (it died again:
:func:`give_up_on`) is not waited for: its calls fail at once, and the step with them.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from typing import Any

RECONNECT_POLL_S = 0.25
_GIVEN_UP: set[str] = set()  # function servers (URLs) this process will not restart again


def give_up_on(url: str) -> None:
    """Say that the server at ``url`` will not come back: calls waiting for it stop waiting."""
    _GIVEN_UP.add(url.rstrip("/"))


class KeptConnections:
    """Keep-alive connections to one function server, one per calling thread (threads of a pool
    sized to the function's ``concurrency``), POSTing to its ``/api/v1``."""

    def __init__(self, url: str, reconnect_s: float = 0.0):
        self.url = url
        self.reconnect_s = reconnect_s  # how long a refused or reset call waits for a restarted server
        parts = urllib.parse.urlsplit(url.rstrip("/"))
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port
        self.path = f"{parts.path}/api/v1"
        self._local = threading.local()
        self._all: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _connection(self, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn, False
        kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = self._local.conn = kind(self._host, self._port, timeout=timeout)
        with self._lock:
            self._all.append(conn)
        return conn, True

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        self._local.conn = None
        with self._lock:
            self._all.remove(conn)

    def post(self, body: bytes, timeout: float) -> tuple[int, bytes]:
        """(status, body) of one POST; a server that refuses or drops it (it died, and its worker
        restarts it) is tried again every :data:`RECONNECT_POLL_S` for up to ``reconnect_s``."""
        deadline = time.monotonic() + self.reconnect_s
        while True:
            try:
                return self._post_once(body, timeout)
            except ConnectionError:  # refused, reset, a broken pipe
                if time.monotonic() >= deadline or self.url.rstrip("/") in _GIVEN_UP:
                    raise
                time.sleep(RECONNECT_POLL_S)

    def _post_once(self, body: bytes, timeout: float) -> tuple[int, bytes]:
        """One POST. A kept connection that the server has closed meanwhile (it ends idle ones) is
        reopened and the call made again; a new connection's failure raises."""
        while True:
            conn, fresh = self._connection(timeout)
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            try:
                conn.request("POST", self.path, body=body, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
            except (BrokenPipeError, ConnectionResetError):  # RemoteDisconnected is one
                self._drop(conn)
                if fresh:
                    raise
                continue
            except BaseException:
                self._drop(conn)  # a half-read reply must not be read as the next one's
                raise
            if resp.will_close:
                self._drop(conn)
            return resp.status, data

    def post_json(self, payload: dict[str, Any], timeout: float) -> tuple[int, bytes] | str:
        """(status, body) of POSTing `payload` as JSON, or in words why there is no reply: a failed
        call is counted by the caller, not raised."""
        try:
            return self.post(json.dumps(payload, ensure_ascii=False).encode(), timeout)
        except TimeoutError:
            return f"timed out after {timeout:g}s"
        except (OSError, http.client.HTTPException) as exc:
            return f"could not reach {self.url}: {exc.__class__.__name__}: {exc}"

    def close(self) -> None:
        """Close every thread's connection (once the pool's calls are done)."""
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
