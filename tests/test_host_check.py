"""Issue 46: every HTTP server opd-nb runs answers only requests addressed to it (DNS rebinding).

A web page in the user's browser can reach a keyless loopback server by resolving its own name to
127.0.0.1: the browser then sends ``Host: attacker.example:PORT`` and the page's ``Origin``. Each
server is started here as a real process (`opd serve`, `opd mcp --http` on 127.0.0.1 and on the
loopback alias 127.0.0.2, the SDK's function server, a deployment's serving process, the agentic
engine's student endpoint) and must answer
such a request 421 (a foreign Origin 403) before anything runs, and its own Host as before. The key
rules are one rule: the same Authorization values are accepted and refused by `opd serve` and
`opd mcp --http` alike. The predicates of :mod:`opd_nb.loopback` are checked on one corpus.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from opd_nb import loopback
from opd_nb.agent.server import KeyCheck
from opd_nb.server.auth import BearerAuth

KEY = "opd-host-check-key-5c2e8d41a7"
TOKEN = "deployment-token-91b3"
MCP_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
TINY_STUDENT = Path(__file__).resolve().parent.parent / "opd_nb" / "engine" / "assets" / "tiny-student"
REWARD = """
from dashscope.finetune.reinforcement import AbstractRewardProcessor, Reward, RewardInput, RewardOutput


class ExactReward(AbstractRewardProcessor):
    async def process(self, input_data: RewardInput) -> RewardOutput:
        return RewardOutput(reward=Reward(reward_score=1.0, reward_metrics={}))
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASHSCOPE_", "OPD_SERVE_API_KEY"))}
    env.update(NO_PROXY="*", **extra)
    return env


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _wait_listening(host: str, port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{what} exited with {proc.returncode}"
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{what} did not listen on {host}:{port}")


@dataclass
class Served:
    """A started server: where it listens and the request it answers normally (with its status)."""

    name: str
    host: str
    port: int
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict[str, str])
    body: Any = None
    ok: int = 200

    def ask(self, host_header: str | None = None, **extra: str) -> httpx.Response:
        headers = {**self.headers, **extra}
        if host_header is not None:
            headers["Host"] = host_header
        url = f"http://{self.host}:{self.port}{self.path}"
        with httpx.Client(trust_env=False, timeout=60) as client:
            return client.request(self.method, url, headers=headers, json=self.body)


def _mcp(host: str, key: str | None = None) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port(host)
    extra = {"OPD_SERVE_API_KEY": key} if key else {}
    argv = [sys.executable, "-m", "opd_nb", "mcp", "--http", "--host", host, "--port", str(port)]
    proc = subprocess.Popen(argv, env=_env(**extra), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_listening(host, port, proc, f"opd mcp --http --host {host}")
    return proc, port


def _serving(tmp: Path) -> tuple[subprocess.Popen[bytes], int]:
    ready = tmp / "ready"
    argv = [sys.executable, "-m", "opd_nb.engine.serving", "--model", str(TINY_STUDENT), "--name", "tiny",
            "--ready-file", str(ready), "--device", "cpu"]  # fmt: skip
    proc = subprocess.Popen(argv, env=_env(OPD_SERVING_TOKEN=TOKEN, OMP_NUM_THREADS="1"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 180
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the serving process did not start"
        time.sleep(0.2)
    return proc, int(ready.read_text())


def _function_server(tmp: Path) -> Any:
    from opd_nb.functions.server import FunctionServer

    pkg = tmp / "functions" / "reward"
    pkg.mkdir(parents=True)
    (tmp / "functions" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "reward.py").write_text(textwrap.dedent(REWARD))
    return FunctionServer.start(tmp, "reward", "functions/reward/reward.py:ExactReward")


SERVERS = [
    "opd serve",
    "opd mcp 127.0.0.1",
    "opd mcp 127.0.0.2",
    "function server",
    "deployment serving",
    "agentic endpoint",
]


@pytest.fixture(scope="module", params=SERVERS)
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Each server, started for real on loopback without a key (a deployment with its own token)."""
    name: str = request.param
    tmp = tmp_path_factory.mktemp(name.replace(" ", "-"))
    if name == "opd serve":
        from opd_nb.server import start

        with start(port=0, data_dir=tmp) as server:
            yield Served(
                name, "127.0.0.1", server.port, "GET", "/api/v1/fine-tunes", {"Authorization": "Bearer x"}
            )
        return
    if name == "function server":
        with _function_server(tmp) as fn:
            yield Served(name, "127.0.0.1", int(fn.url.rsplit(":", 1)[1]), "GET", "/health")
        return
    if name == "agentic endpoint":  # the engine's uvicorn thread, here in the test process
        from transformers import AutoTokenizer

        from opd_nb.engine.agentic.endpoint import StudentEndpoint

        endpoint = StudentEndpoint(AutoTokenizer.from_pretrained(TINY_STUDENT), "tiny", 64)
        try:
            yield Served(name, "127.0.0.1", endpoint.port, "GET", "/v1/models")
        finally:
            endpoint.close()
        return
    if name == "deployment serving":
        proc, port = _serving(tmp)
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        auth = {"Authorization": f"Bearer {TOKEN}"}
        served = Served(name, "127.0.0.1", port, "POST", "/v1/chat/completions", auth, body)
    else:
        host = name.rsplit(" ", 1)[1]
        proc, port = _mcp(host)
        served = Served(name, host, port, "POST", "/mcp", dict(MCP_HEADERS), MCP_INIT)
    try:
        yield served
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_a_foreign_host_is_refused_421_before_anything_runs(served: Served):
    port = served.port
    for host in (f"attacker.example:{port}", f"localhost.attacker.example:{port}", f"127.0.0.1.nip.io:{port}",
                 f"{served.host}:{port + 1}", served.host, "", f"{served.host}.:{port}x"):  # fmt: skip
        resp = served.ask(host)
        assert resp.status_code == 421, (served.name, host, resp.status_code, resp.text[:200])
        assert resp.json()["code"] == "MisdirectedRequest"
        assert "mcp-session-id" not in resp.headers  # no MCP session was opened


@pytest.mark.slow
def test_the_servers_own_host_gets_the_normal_answer(served: Served):
    port = served.port
    own = [None, f"{served.host}:{port}", f"{served.host.upper()}:{port}"]
    if served.host == "127.0.0.1":  # localhost and ::1 name the same server
        own += [f"localhost:{port}", f"LOCALHOST.:{port}", f"[::1]:{port}"]
    else:  # 127.0.0.2 is not what localhost names
        assert served.ask(f"localhost:{port}").status_code == 421
        assert served.ask(f"127.0.0.1:{port}").status_code == 421
    for host in own:
        resp = served.ask(host)
        assert resp.status_code == served.ok, (served.name, host, resp.status_code, resp.text[:200])


@pytest.mark.slow
def test_a_foreign_origin_is_refused_403(served: Served):
    port = served.port
    for origin in ("http://attacker.example", f"http://attacker.example:{port}", "null",
                   f"http://{served.host}:{port + 1}", f"http://{served.host}"):  # fmt: skip
        resp = served.ask(Origin=origin)
        assert resp.status_code == 403, (served.name, origin, resp.status_code)
        assert "mcp-session-id" not in resp.headers
    assert served.ask(Origin=f"http://{served.host}:{port}").status_code == served.ok


@pytest.mark.slow
def test_the_upload_url_names_the_bound_address_whatever_the_host(local_server, tmp_path):
    """The signed URL is built from the address `opd serve` is bound to, never from the request's Host;
    a foreign Host gets no URL and cannot PUT code to a URL it learnt."""
    port, api = local_server.port, local_server.api_base
    auth = {"Authorization": "Bearer x"}
    for host in (None, f"localhost:{port}", f"[::1]:{port}"):
        headers = auth if host is None else {**auth, "Host": host}
        resp = httpx.post(api + "/fine-tunes/generate/faas/upload/url", headers=headers,
                          json={"unique_key": "host-check"}, trust_env=False)  # fmt: skip
        assert resp.status_code == 200, resp.text
        assert resp.json()["output"]["url"].startswith(
            f"{local_server.base_url}/api/v1/local-oss/host-check.zip?token="
        )
    url = resp.json()["output"]["url"]
    foreign = {**auth, "Host": f"attacker.example:{port}"}
    refused = httpx.post(api + "/fine-tunes/generate/faas/upload/url", headers=foreign,
                         json={"unique_key": "host-check"}, trust_env=False)  # fmt: skip
    assert refused.status_code == 421 and "token=" not in refused.text
    put = httpx.put(url, content=b"PK\x05\x06" + bytes(18), headers={"Host": f"attacker.example:{port}"})
    assert put.status_code == 421
    assert not (Path(local_server.data_dir) / "uploads" / "host-check.zip").exists()


# One corpus of Authorization values (raw bytes) for both keyed servers: (value, accepted).
KEY_CORPUS = [
    (b"Bearer " + KEY.encode(), True),
    (b"bearer " + KEY.encode(), True),
    (b"Bearer   " + KEY.encode(), True),
    # Trailing spaces and tabs end the header line: HTTP (RFC 9110 5.5) drops them before any app sees
    # the value, so both servers see exactly the key.
    (b"Bearer " + KEY.encode() + b"\t", True),
    (b"Bearer " + KEY.encode() + b" \t ", True),
    (b"Bearer \t" + KEY.encode(), False),  # `opd mcp` stripped this one and let it in
    (b"Bearer\t" + KEY.encode(), False),
    (b"Bearer " + KEY.encode() + b"\t\xa0", False),
    (b"Bearer " + KEY.encode() + b"\xa0", False),
    (b"Bearer \xa0" + KEY.encode(), False),
    (b"Bearer " + KEY.encode() + b"x", False),
    (b"Bearer " + KEY.encode()[:-1], False),
    (b"Token " + KEY.encode(), False),
    (b"Bearer" + KEY.encode(), False),
    (KEY.encode(), False),
    (b"Bearer \xa0", False),
    (b"Bearer", False),
]


def _raw_status(
    host: str,
    port: int,
    method: str,
    path: str,
    auth: bytes,
    body: bytes,
    extra: bytes,
    host_header: str = "",
) -> int:
    """The status of one request written byte for byte (httpx will not send a trailing tab)."""
    head = (f"{method} {path} HTTP/1.1\r\nHost: {host_header or f'{host}:{port}'}\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n").encode() + extra + b"Authorization: " + auth + b"\r\n\r\n"  # fmt: skip
    with socket.create_connection((host, port), timeout=60) as sock:
        sock.sendall(head + body)
        line = b""
        while b"\r\n" not in line:
            chunk = sock.recv(4096)
            assert chunk, "the server closed the connection without an answer"
            line += chunk
    return int(line.split(b" ", 2)[1])


@pytest.mark.slow
def test_one_key_rule_for_opd_serve_and_opd_mcp(tmp_path):
    from opd_nb.server import start

    proc, mcp_port = _mcp("127.0.0.1", KEY)
    body = json.dumps(MCP_INIT).encode()
    mcp_extra = b"".join(f"{k}: {v}\r\n".encode() for k, v in MCP_HEADERS.items())
    try:
        with start(port=0, data_dir=tmp_path, api_key=KEY) as server:
            for value, accepted in KEY_CORPUS:
                serve = _raw_status("127.0.0.1", server.port, "GET", "/api/v1/fine-tunes", value, b"", b"")
                mcp = _raw_status("127.0.0.1", mcp_port, "POST", "/mcp", value, body, mcp_extra)
                assert (serve, mcp) == ((200, 200) if accepted else (401, 401)), value
            # A right key does not open the Host check: the rebinding page may have guessed it.
            assert _raw_status("127.0.0.1", server.port, "GET", "/api/v1/fine-tunes", b"Bearer " + KEY.encode(),
                               b"", b"", f"attacker.example:{server.port}") == 421  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def _middleware_status(middleware: Any, value: bytes) -> int:
    """The status the key middleware answers for `value`, as the app behind it would answer 200."""
    statuses: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/api/v1/fine-tunes",
        "headers": [(b"authorization", value)],
    }
    await middleware(app, KEY)(scope, receive, send)
    return statuses[0]


@pytest.mark.parametrize(
    ("value", "status"),
    [(b"Bearer " + KEY.encode() + b"\t", 200), (b"Bearer " + KEY.encode() + b" ", 200),
     (b"Bearer \t" + KEY.encode(), 401), (b"Bearer " + KEY.encode() + b"\xa0", 401),
     (b"Bearer " + KEY.encode() + b"\t\xa0", 401), (b"Bearer \t\t", 401)],
)  # fmt: skip
def test_the_two_key_checks_agree_byte_for_byte(value, status):
    """The same bytes, as a server that kept the field's outer whitespace would hand them on: the outer
    spaces and tabs are the field's (HTTP drops them), any other whitespace beside the key makes
    another key, for both middlewares."""
    statuses = {m.__name__: anyio.run(_middleware_status, m, value) for m in (BearerAuth, KeyCheck)}
    assert statuses == {"BearerAuth": status, "KeyCheck": status}


LOOPBACK = ["127.0.0.1", "127.0.0.2", "127.255.255.254", "::1", "[::1]", "::ffff:127.0.0.1", "localhost",
            "LOCALHOST.", "[::1]", " 127.0.0.1 "]  # fmt: skip
NOT_LOOPBACK = ["0.0.0.0", "::", "", "10.0.0.1", "128.0.0.1", "126.255.255.255", "attacker.example",
                "localhost.attacker.example", "127.0.0.1.nip.io", "::2", "::ffff:10.0.0.1"]  # fmt: skip


@pytest.mark.parametrize("host", LOOPBACK)
def test_loopback_hosts(host):
    assert loopback.is_loopback_host(host)
    bare = host.strip().strip("[]")
    assert loopback.is_loopback_url(f"http://[{bare}]:1/" if ":" in bare else f"http://{bare}:1/")
    assert loopback.binds_loopback_only(host)


@pytest.mark.parametrize("host", NOT_LOOPBACK)
def test_not_loopback_hosts(host):
    assert not loopback.is_loopback_host(host)
    if host.replace(".", "").replace(":", "").replace("f", "").isdigit() or host in ("", "::"):
        assert not loopback.binds_loopback_only(host)  # a literal: no name looked up
    assert not loopback.is_loopback_url(f"http://{host}/" if ":" not in host else f"http://[{host}]/")


def test_the_host_check_rules():
    assert loopback.allowed_host_names("127.0.0.1") == {"localhost", "127.0.0.1", "::1"}
    assert loopback.allowed_host_names("LOCALHOST.") == {"localhost", "127.0.0.1", "::1"}
    assert loopback.allowed_host_names("127.0.0.2") == {"127.0.0.2"}
    assert loopback.allowed_host_names("[::1]") == {"localhost", "127.0.0.1", "::1"}
    allowed = ["127.0.0.1:8765", "localhost:8765", "[::1]:8765", "LocalHost.:8765"]
    refused = ["attacker.example:8765", "127.0.0.1:8766", "127.0.0.1", "127.0.0.2:8765", "[::ffff:127.0.0.1]:8765",
               "127.0.0.1.nip.io:8765", "localhost.attacker.example:8765", "", "127.0.0.1:x", "[::1:8765"]  # fmt: skip
    assert all(loopback.host_allowed(h, "127.0.0.1", 8765) for h in allowed)
    assert not any(loopback.host_allowed(h, "127.0.0.1", 8765) for h in refused)
    assert loopback.host_allowed("127.0.0.1:1234", "127.0.0.1", None)  # the port not known yet: the name only
    assert loopback.host_allowed("127.0.0.1", "127.0.0.1", 80)
    assert loopback.origin_allowed("http://localhost:8765", "127.0.0.1", 8765)
    for origin in (
        "null",
        "http://attacker.example:8765",
        "https://127.0.0.1",
        "file://",
        "http://127.0.0.1",
        "",
    ):
        assert not loopback.origin_allowed(origin, "127.0.0.1", 8765), origin


def test_a_bind_beyond_loopback_keeps_its_app_and_the_key_parse():
    app = object()
    assert loopback.guard(app, "0.0.0.0", 1) is app and loopback.guard(app, "10.0.0.1", 1) is app
    assert isinstance(loopback.guard(app, "127.0.0.2", 1), loopback.HostGuard)
    assert loopback.bearer_token(b"Bearer  k") == "k" and loopback.bearer_token("bearer k\t") == "k"
    assert loopback.bearer_token("Bearer \tk") == "\tk"
    assert loopback.bearer_token("Bearer \xa0") == "" and loopback.bearer_token(None) == ""
    assert loopback.same_key("k", "k") and not loopback.same_key("", "") and not loopback.same_key("k\t", "k")
