"""What happens on the connection itself: after an unexpected error, and when uvicorn's parser refuses a
request before the app runs (issue 28).

An unexpected exception (a bug, not a user mistake) answers Bailian's error shape with a 500, and the
kept-alive connection still serves the client's next request: it used to be closed, so the next request
on it met a reset. No input reaches such a bug any more, so the first test adds a route that raises to
a real app served by uvicorn.
"""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

pytestmark = pytest.mark.slow


@pytest.fixture()
def failing_server(tmp_path):  # noqa: ANN001, ANN201
    """The real control-plane app with one extra route that raises, on a free port."""
    import uvicorn

    from opd_nb.server import ServeOptions
    from opd_nb.server.app import create_app

    app = create_app(ServeOptions(data_dir=str(tmp_path / "data")))

    @app.get("/api/v1/test-only/boom")
    def boom() -> None:
        raise RuntimeError("a bug in a route")

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=15)


def test_a_500_is_bailian_shaped_and_the_connection_serves_the_next_request(failing_server):
    ports = set()
    with httpx.Client(base_url=failing_server, headers={"Authorization": "Bearer t"}) as http:
        for _ in range(3):
            resp = http.get("/api/v1/test-only/boom")
            assert resp.status_code == 500
            body = resp.json()
            assert body["code"] == "InternalError" and "request_id" in body, body
            assert "a bug in a route" not in body["message"] and "Traceback" not in body["message"]
            assert resp.headers.get("connection") != "close"
            after = http.get("/api/v1/models")  # on the same kept-alive connection
            assert after.status_code == 200, after.text[:200]
            for r in (resp, after):
                ports.add(r.extensions["network_stream"].get_extra_info("client_addr")[1])
    assert len(ports) == 1, ports  # one TCP connection served all six requests


def _raw_reply(base_url: str, data: bytes) -> bytes:
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):  # the server closes after its 400
            chunks.append(chunk)
    return b"".join(chunks)


UNPARSABLE = {
    "garbage request line": b"GARBAGE\r\n\r\n",
    "request line with a fourth part": b"GET /health HTTP/1.1 extra\r\nHost: x\r\n\r\n",
    "a 100 KB URL": b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "a header without a colon": b"GET /health HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
}


@pytest.mark.parametrize("data", list(UNPARSABLE.values()), ids=list(UNPARSABLE))
def test_a_request_the_parser_refuses_is_a_bailian_shaped_400(local_server, data):
    import json

    head, _, body = _raw_reply(local_server.base_url, data).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").lower().splitlines()
    assert lines[0].startswith("http/1.1 400"), lines
    assert "content-type: application/json" in lines and "connection: close" in lines
    error = json.loads(body)
    assert set(error) == {"request_id", "code", "message"} and error["code"] == "BadRequest"
    assert "could not be parsed" in error["message"]
