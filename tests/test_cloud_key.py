"""The cloud key goes only where the user configured it (issue 46), on every surface that sends it.

A listener on this machine stands in for what an agent or a crafted argument could point a request at; it
records every ``Authorization`` header. The user's cloud key is in the environment (and in the workspace's
``.env``, ``FC_API_KEY`` too). No surface may hand the key to the listener: the Python client, `opd`, the
`%opd` magic, `opd check`, `opd mcp`'s tools, and the workspace's own `submit_job.py`. A cloud request to a
URL the user did not configure is refused with one line that says how to configure it; a local plane gets its
own key (``OPD_SERVE_API_KEY``, else the placeholder), never the cloud one.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import anyio
import pytest
from conftest import tiny_workspace
from loopback import QuietHandler

from opd_nb.client import JobClient, resolve_target
from opd_nb.constants import DEFAULT_CLOUD_API, LOCAL_API_KEY
from opd_nb.errors import OpdError
from opd_nb.loopback import is_loopback_url
from opd_nb.workspace.connection import is_bailian_url, resolve_connection

CLOUD_KEY = "sk-" + secrets.token_hex(16)
FC_KEY = "sk-fc-" + secrets.token_hex(16)


class Recorder:
    """A listener on a loopback alias that records each request's Authorization header and answers 404."""

    def __init__(self, host: str = "127.0.0.1"):
        self.headers: list[str] = []
        box = self

        class Handler(QuietHandler):
            def _any(self) -> None:
                box.headers.append(self.headers.get("Authorization", ""))
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = b'{"code": "NotFound", "message": "nothing here"}'
                self.answer(404, {"Content-Type": "application/json"}, body)

            do_GET = do_POST = do_PUT = do_DELETE = _any

        self.server = ThreadingHTTPServer((host, 0), Handler)
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        self.host = host

    @property
    def api_base(self) -> str:
        return f"http://{self.host}:{self.server.server_address[1]}/api/v1"

    def saw_cloud_key(self) -> bool:
        return any(CLOUD_KEY in h or FC_KEY in h for h in self.headers)


@pytest.fixture()
def listener() -> Iterator[Recorder]:
    rec = Recorder()
    try:
        yield rec
    finally:
        rec.server.shutdown()


@pytest.fixture()
def cloud_user(monkeypatch, tmp_path) -> Path:
    """A user with a cloud key in the environment and in the workspace's .env, and no base URL set."""
    for name in ("DASHSCOPE_HTTP_BASE_URL", "OPD_CLOUD_BASE_URL", "OPD_SERVE_API_KEY", "OPD_NB_LOCAL_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DASHSCOPE_API_KEY", CLOUD_KEY)
    monkeypatch.setenv("FC_API_KEY", FC_KEY)
    monkeypatch.chdir(tmp_path)
    ws = tiny_workspace("pure-distill", tmp_path / "ws", train_rows=16)
    (ws / ".env").write_text(f"DASHSCOPE_API_KEY={CLOUD_KEY}\nFC_API_KEY={FC_KEY}\n", encoding="utf-8")
    return ws


# ---------------------------------------------------------------- the rule itself


def test_a_cloud_url_named_by_a_caller_is_refused_before_any_request(cloud_user, listener):
    for url in (listener.api_base, "https://attacker.example/api/v1", "http://0.0.0.0:9/api/v1"):
        with pytest.raises(OpdError) as refused:
            resolve_target("cloud", base_url=url)
        assert "refusing to send your cloud API key" in refused.value.message
        assert "OPD_CLOUD_BASE_URL" in (refused.value.fix or "") and CLOUD_KEY not in str(refused.value)
    assert listener.headers == []


def test_the_configured_cloud_and_bailians_documented_hosts_get_the_key(cloud_user, monkeypatch):
    assert resolve_target("cloud").base_url == DEFAULT_CLOUD_API
    for url in (
        "https://dashscope-intl.aliyuncs.com/api/v1",
        "https://cn-hongkong.dashscope.aliyuncs.com/api/v1",
        "https://ws-1a2b.ap-southeast-1.maas.aliyuncs.com/api/v1",
    ):
        target = resolve_target("cloud", base_url=url)
        assert target.api_key is not None and target.api_key.get_secret_value() == CLOUD_KEY
    for url in (
        "http://dashscope.aliyuncs.com/api/v1",
        "https://dashscope.aliyuncs.com.attacker.example/api/v1",
    ):
        assert not is_bailian_url(url)
        with pytest.raises(OpdError):
            resolve_target("cloud", base_url=url)
    # What the user configures: the SDK's own variable (in the environment or the .env), or OPD_CLOUD_BASE_URL.
    (cloud_user / ".env").write_text(
        f"DASHSCOPE_API_KEY={CLOUD_KEY}\nDASHSCOPE_HTTP_BASE_URL=https://gateway.corp.example/api/v1\n"
    )
    target = resolve_target(workspace=cloud_user)
    assert (target.kind, target.base_url) == ("cloud", "https://gateway.corp.example/api/v1")
    assert "ws/.env" in target.url_source
    assert resolve_target("cloud", base_url="https://gateway.corp.example", workspace=cloud_user).api_key
    monkeypatch.setenv("OPD_CLOUD_BASE_URL", "http://127.0.0.1:18080/api/v1")
    proxied = resolve_target("cloud", base_url="http://127.0.0.1:18080")
    assert proxied.kind == "cloud" and proxied.api_key.get_secret_value() == CLOUD_KEY  # type: ignore[union-attr]
    assert resolve_target(base_url="http://127.0.0.1:18080").kind == "cloud"


def test_a_local_plane_gets_its_own_key_never_the_cloud_one(cloud_user, monkeypatch):
    for kind, url in (("local", None), ("local", "http://127.0.0.2:8765"), (None, "http://[::1]:8765")):
        target = resolve_target(kind, base_url=url)
        assert target.kind == "local" and target.api_key.get_secret_value() == LOCAL_API_KEY  # type: ignore[union-attr]
        assert target.env()["FC_API_KEY"] == LOCAL_API_KEY  # the SDK's function key too
    monkeypatch.setenv("OPD_SERVE_API_KEY", "server-key-" + secrets.token_hex(8))
    target = resolve_target(
        "local", base_url="http://binder-peer.example:8765"
    )  # a local plane on a peer host
    assert target.api_key.get_secret_value() == os.environ["OPD_SERVE_API_KEY"]  # type: ignore[union-attr]
    assert target.key_source == "OPD_SERVE_API_KEY (environment)"


def test_one_precedence_environment_then_workspace_env_then_working_directory_env(
    cloud_user, monkeypatch, tmp_path
):
    (tmp_path / ".env").write_text("DASHSCOPE_HTTP_BASE_URL=http://127.0.0.3:1/api/v1\n")
    assert resolve_connection(workspace=tmp_path / "elsewhere").base_url == "http://127.0.0.3:1/api/v1"
    (cloud_user / ".env").write_text("DASHSCOPE_HTTP_BASE_URL=http://127.0.0.4:1/api/v1\n")
    ws = resolve_connection(workspace=cloud_user)
    assert (ws.kind, ws.base_url, ws.url_source) == (
        "local",
        "http://127.0.0.4:1/api/v1",
        f"DASHSCOPE_HTTP_BASE_URL ({cloud_user / '.env'})",
    )
    monkeypatch.setenv("DASHSCOPE_HTTP_BASE_URL", "http://127.0.0.5:1/api/v1")
    assert resolve_connection(workspace=cloud_user).url_source == "DASHSCOPE_HTTP_BASE_URL (environment)"


# ---------------------------------------------------------------- every surface


def _python_client(url: str, ws: Path) -> None:
    JobClient(resolve_target(base_url=url, workspace=ws), retries=0, timeout=5).list()


def _cli(url: str, ws: Path) -> None:
    from opd_nb.cli import main

    main(["jobs", "--local", url])


def _magic(url: str, ws: Path) -> None:
    from opd_nb.cli import invoke

    invoke(["jobs", "--local", url])


def _check(url: str, ws: Path) -> None:
    from opd_nb.checks import check

    check(ws, "local", base_url=url)  # preflight asks the local plane whether it serves the model ids


def _mcp(url: str, ws: Path) -> None:
    from mcp import Client

    from opd_nb.agent.server import build

    async def go() -> None:
        async with Client(build()) as client:
            for args in ({"target": "local", "base_url": url}, {"base_url": url}):
                await client.call_tool("list_jobs", args)
            refused = await client.call_tool("list_jobs", {"target": "cloud", "base_url": url})
            assert refused.is_error and "refusing to send your cloud API key" in refused.content[0].text

    anyio.run(go)


def _submit_job_py(url: str, ws: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DASHSCOPE_API_KEY", "FC_API_KEY")}
    env["NO_PROXY"] = "127.0.0.1,localhost"  # the keys come from the workspace's .env, as people keep them
    cmd = [sys.executable, "submit_job.py", "--local", url, "--no-check", "--no-reward"]
    done = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=300)
    assert CLOUD_KEY not in done.stdout + done.stderr


SURFACES = {
    "python client": _python_client,
    "opd": _cli,
    "%opd": _magic,
    "opd check": _check,
    "opd mcp": _mcp,
    "submit_job.py": _submit_job_py,
}


@pytest.mark.slow
@pytest.mark.parametrize("surface", SURFACES, ids=list(SURFACES))
def test_no_surface_sends_the_cloud_key_to_a_url_an_argument_named(surface, cloud_user, listener):
    try:
        SURFACES[surface](listener.api_base, cloud_user)
    except (OpdError, SystemExit):
        pass  # the listener answers 404: what matters is what it was sent
    assert listener.headers, f"{surface} sent nothing: the test proves nothing"
    assert not listener.saw_cloud_key(), f"{surface} sent the cloud key to {listener.api_base}"
    assert all(h == f"Bearer {LOCAL_API_KEY}" for h in listener.headers if h), listener.headers


def test_the_notebook_target_follows_the_one_loopback_rule(cloud_user, monkeypatch):
    from opd_nb.notebook.configcell import default_target

    for url, plane in (
        ("http://127.0.0.2:8765/api/v1", "local"),
        ("http://[::1]:8765/api/v1", "local"),
        ("http://0.0.0.0:8765/api/v1", "cloud"),
        ("https://dashscope.aliyuncs.com/api/v1", "cloud"),
    ):
        monkeypatch.setenv("DASHSCOPE_HTTP_BASE_URL", url)
        assert default_target() == plane, url


# ---------------------------------------------------------------- submit_job.py's copy of the rule

URLS = [
    "http://127.0.0.1:8765/api/v1",
    "http://127.0.0.2:1",
    "http://127.255.255.254/",
    "http://localhost:8765",
    "http://LOCALHOST.:8765",
    "http://[::1]:8765/api/v1",
    "http://[::ffff:127.0.0.1]:8765",
    "https://127.0.0.1",
    "http://0.0.0.0:8765",
    "http://[::]:8765",
    "http://10.0.0.1:8765",
    "http://128.0.0.1",
    "http://attacker.example",
    "http://localhost.attacker.example",
    "http://127.0.0.1.nip.io",
    "ftp://127.0.0.1",
    "127.0.0.1:8765",
    "",
    "http://[::1",
]


def test_submit_job_py_keeps_the_packages_loopback_rule():
    path = Path(__file__).parents[1] / "template" / "{{cookiecutter.workspace_slug}}" / "submit_job.py"
    spec = importlib.util.spec_from_file_location("template_submit_job_loopback", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    assert [module.is_loopback(u) for u in URLS] == [is_loopback_url(u) for u in URLS]
    assert sum(is_loopback_url(u) for u in URLS) == 8


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs"],
        ["status", "ft-202601010000-abcd"],
        ["logs", "ft-202601010000-abcd"],
        ["checkpoints", "ft-1"],
        ["deployments"],
        ["cancel", "ft-202601010000-abcd"],
    ],
)
def test_a_cloud_request_without_a_key_fails_at_once_and_says_how_to_go_local(
    argv, tmp_path, monkeypatch, capsys
):
    """`opd jobs` in a new shell with no key went to Bailian and failed seconds later with a ConnectError (issue
    51): without a cloud key nothing is sent, and one line says how to point at the local plane."""
    from opd_nb.cli import main

    for var in ("DASHSCOPE_API_KEY", "DASHSCOPE_HTTP_BASE_URL", "OPD_CLOUD_BASE_URL", "OPD_NB_LOCAL_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)  # no .env here
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2, err
    assert "no API key for the cloud control plane" in err and "`opd use local`" in err and "--local" in err
    assert "ConnectError" not in err and "Traceback" not in err
    with pytest.raises(OpdError) as refused:  # the Python client alike, before any request
        JobClient(resolve_target("cloud")).list()
    assert refused.value.code == "no-api-key" and refused.value.status is None
