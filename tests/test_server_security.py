"""Safe by default (issue 12, defect 1): no open bind without a key, only the key with one, signed uploads.

Nothing here sends traffic to a non-loopback address: ``--host 0.0.0.0`` is only used to check
that it is refused before anything is bound.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest
from conftest import run_sdk

from opd_nb.server import ServerInfo, start

pytestmark = pytest.mark.slow
KEY = "opd-test-server-key-7f3a91"
OPD = str(Path(sys.executable).with_name("opd"))


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OPD_SERVE_API_KEY"}
    env.update(extra)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _zip(text: bytes = b"class R:\n    pass\n") -> bytes:
    """A one-file zip, the same bytes for the same text (a fixed entry time, not the clock's)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(zipfile.ZipInfo("r.py", date_time=(2026, 1, 1, 0, 0, 0)), text)
    return buf.getvalue()


@pytest.mark.parametrize(
    "argv",
    [
        [sys.executable, "-m", "opd_nb.server"],
        [OPD, "serve", "run"],
        [OPD, "serve", "start"],
    ],
    ids=["python -m opd_nb.server", "opd serve run", "opd serve start"],
)
def test_a_non_loopback_bind_without_a_key_is_refused(tmp_path, argv):
    port = _free_port()
    done = subprocess.run(
        [*argv, "--host", "0.0.0.0", "--port", str(port), "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(XDG_CACHE_HOME=str(tmp_path / "cache")),
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    assert "0.0.0.0" in lines[0] and "--api-key" in lines[0] and "OPD_SERVE_API_KEY" in lines[0]
    assert _port_is_free(port)  # refused before binding
    assert not (tmp_path / "server.json").exists()


def test_with_a_server_key_only_that_key_is_accepted_everywhere(tmp_path):
    with start(port=0, data_dir=tmp_path, api_key=KEY) as server:
        assert server.info.key_required and server.env()["DASHSCOPE_API_KEY"] == KEY
        for path in (
            "/api/v1/fine-tunes",
            "/api/v1/files",
            "/api/v1/models",
            "/health",
            "/openapi.json",
            "/docs",
        ):
            url = server.base_url + path
            for headers in ({}, {"Authorization": "Bearer local"}, {"Authorization": f"Bearer {KEY}x"}):
                resp = httpx.get(url, headers=headers)
                assert resp.status_code == 401, (path, headers, resp.status_code)
                assert resp.json()["code"] == "InvalidApiKey" and KEY not in resp.text
            assert httpx.get(url, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200, path
        bad = httpx.post(
            server.api_base + "/fine-tunes/create/faas/layer", headers={"Authorization": "Bearer x"}, json={}
        )
        assert bad.status_code == 401

        # The key is in memory only: not in the command line, the log, the owner record, the database.
        cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes()
        assert KEY.encode() not in cmdline
        for path in [p for p in tmp_path.rglob("*") if p.is_file()]:
            assert KEY.encode() not in path.read_bytes(), path
        assert ServerInfo.from_json((tmp_path / "server.json").read_text()).key_required


def test_the_bearer_key_is_compared_exactly(tmp_path):
    """``Bearer`` (any case), one or more spaces (RFC 6750's ``1*SP``), then exactly the key: a no-break
    space or a tab beside it is another key (issue 37: they were stripped and the key accepted)."""
    key = KEY.encode()
    accepted = [b"Bearer " + key, b"bearer " + key, b"BEARER " + key, b"Bearer  " + key, b"Bearer   " + key]
    refused = [
        b"Bearer \xa0" + key,
        b"Bearer " + key + b"\xa0",
        b"Bearer\xa0" + key,
        b"Bearer\t" + key,
        b"Bearer \t" + key,
        b"Bearer " + key + b"\t\xa0",
        b"Token " + key,
        b"Bearer" + key,
        key,
    ]
    with start(port=0, data_dir=tmp_path / "keyed", api_key=KEY) as server:
        url = server.api_base + "/fine-tunes"
        for value in accepted:
            assert httpx.get(url, headers={"Authorization": value}).status_code == 200, value
        for value in refused:
            resp = httpx.get(url, headers={"Authorization": value})
            assert resp.status_code == 401 and KEY not in resp.text, (value, resp.status_code)
    with start(port=0, data_dir=tmp_path / "open") as server:  # loopback, no key: any non-empty key
        url = server.api_base + "/fine-tunes"
        assert httpx.get(url, headers={"Authorization": b"Bearer  local"}).status_code == 200
        for value in (b"Bearer \xa0", b"Bearer \xa0\xa0", b"Bearer \xa0\t\xa0"):
            resp = httpx.get(url, headers={"Authorization": value})
            assert resp.status_code == 401 and "missing or empty" in resp.json()["message"], value


def test_the_zip_put_needs_the_signed_token_and_an_upload_is_written_once(local_server, api):
    url = api.post("/fine-tunes/generate/faas/upload/url", json={"unique_key": "reward-once"}).json()[
        "output"
    ]["url"]
    bare, _, query = url.partition("?")
    assert query.startswith("token=")
    for target in (
        bare,
        bare + "?token=",
        bare + "?token=" + "0" * 64,
        url.replace("reward-once", "reward-twice"),
    ):
        resp = httpx.put(target, content=_zip())
        assert resp.status_code == 403, (target, resp.text)
        assert resp.json()["code"] == "AccessDenied"
    assert not (Path(local_server.data_dir) / "uploads" / "reward-twice.zip").exists()
    assert httpx.put(url, content=_zip()).status_code == 200
    assert httpx.put(url, content=_zip()).status_code == 200  # the same bytes again: an SDK retry
    other = httpx.put(url, content=_zip(b"class R:\n    evil = 1\n"))
    assert other.status_code == 409 and other.json()["code"] == "UploadExists", other.text
    with zipfile.ZipFile(Path(local_server.data_dir) / "uploads" / "reward-once.zip") as zf:
        assert b"evil" not in zf.read("r.py")


REGISTER = r"""
import asyncio, json
from dashscope.finetune.agentic_rl import AgenticRL
rl = AgenticRL().init(config_path="config.yaml")
print(json.dumps(asyncio.run(rl.register_functions(lazy_load=False)), default=str))
"""


def test_the_unmodified_sdk_uploads_and_registers_against_a_keyed_server(tmp_path):
    from opd_nb.workspace.new import create

    ws = create("reward", tmp_path / "ws").path
    with start(port=0, data_dir=tmp_path / "data", api_key=KEY) as server:
        done = run_sdk(server, REGISTER, ws, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "rw-" in done.stdout, done.stdout
        # The loaded function server (user code) does not inherit the server key.
        from opd_nb.server.store import Store

        (instance,) = Store(tmp_path / "data").instances_with_status("RUNNING")
        assert KEY.encode() not in Path(f"/proc/{instance['pid']}/environ").read_bytes()
        wrong = run_sdk(server, REGISTER, ws, timeout=120, DASHSCOPE_API_KEY="not-the-key")
        assert wrong.returncode != 0 and "rw-" not in wrong.stdout


def test_the_banner_shows_the_real_bind_address_and_warns_off_loopback(tmp_path, capsys):
    from opd_nb.cli.serve import print_banner

    print_banner(ServerInfo.at(4242, "127.0.0.2", 8765, tmp_path))
    out = capsys.readouterr()
    assert "listening on 127.0.0.2:8765" in out.out and "WARNING" not in out.out + out.err
    assert "DASHSCOPE_API_KEY=local" in out.out
    print_banner(ServerInfo.at(4242, "0.0.0.0", 8765, tmp_path, key_required=True))
    out = capsys.readouterr()
    assert "listening on 0.0.0.0:8765" in out.out
    assert "WARNING: 0.0.0.0 is not a loopback address" in out.err
    assert "DASHSCOPE_API_KEY=<the server key" in out.out  # where to put it, never the key


def test_a_loopback_alias_binds_without_a_key(tmp_path):
    with start(host="127.0.0.2", port=0, data_dir=tmp_path) as server:
        assert server.base_url.startswith("http://127.0.0.2:")
        assert (
            httpx.get(server.api_base + "/fine-tunes", headers={"Authorization": "Bearer k"}).status_code
            == 200
        )
        log = Path(tmp_path / "server.log").read_text()
        assert f"listening on 127.0.0.2:{server.port}" in log and "WARNING" not in log


WEAK_KEYS = {
    "a space": " ",
    "one letter": "a",
    "one letter repeated": "a" * 40,
    "a common word": "password12345678",
    # long but guessable (issue 37; every kind with more members in test_server_keys.py)
    "a run of the alphabet": "abcdefghijklmnopqrstuvwxyz",
    "hex digits in order": "0123456789abcdef0123456789abcdef",
    "a word twice with digits": "passwordpassword1234",
    "a capitalised word twice": "Password123!Password123!",
    "a keyboard row": "qwertyuiopasdfghjklzxcvbnm",
    "four dictionary words": "correct-horse-battery-staple",
    "repeated blocks": "abc123abc123abc123abc123",
    "a no-break space around a strong key": "\u00a0Xq7pL2vH9kd4mW8sRz3nT6yB5cF1gJ0\u00a0",
}


@pytest.mark.parametrize("key", list(WEAK_KEYS.values()), ids=list(WEAK_KEYS))
@pytest.mark.parametrize(
    "argv", [[sys.executable, "-m", "opd_nb.server"], [OPD, "serve", "start"]], ids=["module", "serve start"]
)
def test_a_weak_key_is_refused_for_a_non_loopback_bind(tmp_path, argv, key):
    port = _free_port()
    done = subprocess.run(
        [*argv, "--host", "0.0.0.0", "--port", str(port), "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(XDG_CACHE_HOME=str(tmp_path / "cache"), OPD_SERVE_API_KEY=key),
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    assert "OPD_SERVE_API_KEY" in lines[0] and ("too weak" in lines[0] or "whitespace" in lines[0])
    assert "secrets.token_urlsafe(32)" in lines[0]  # how to make a strong key
    if len(key.strip()) > 1:
        assert key not in lines[0]  # the key itself is never printed
    assert _port_is_free(port)
    assert not (tmp_path / "server.json").exists()
