"""Issue 46: secrets stay out of argv. Every secret-bearing option (`opd serve --api-key`, `--otlp-header`,
`opd watch --notify`, `--notify-secret`, `opd mcp --http --api-key`) also comes from its variable or its
`--...-file PATH`; the processes it starts get it in their environment, never on a command line (`ps`);
typed on the command line it still works, with one warning line that does not hold it.

Each test starts the real processes as a user does and reads `/proc/<pid>/cmdline` of every one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import httpx
import psutil
import pytest
from loopback import Loopback
from otlp_receiver import OtlpReceiver
from server_http import wait_until

WARNING = "on the command line is shown to every user by `ps`"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A clean environment: no key or webhook of the caller's, a cache of the test's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASHSCOPE_", "OPD_"))}
    env.update(NO_PROXY="127.0.0.1,localhost", XDG_CACHE_HOME=str(tmp_path / "cache"), **extra)
    env["OPD_WATCH_DIR"] = str(tmp_path / "watchers")
    return env


def _opd(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "opd_nb", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=_env(tmp_path, **env),
    )


def _cmdlines(pid: int) -> str:
    """The command lines of `pid` and every process it started, as one text."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return ""
    lines = []
    for proc in procs:
        try:
            lines.append(Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(errors="replace"))
        except OSError:
            pass  # ended meanwhile
    return "\n".join(lines)


def _source(tmp_path: Path, how: str, flag: str, var: str, value: str) -> tuple[list[str], dict[str, str]]:
    """The arguments and variables that give `value` the way `how` says: variable, file or typed."""
    if how == "variable":
        return [], {var: value}
    if how == "file":
        path = tmp_path / f"{flag.strip('-')}.txt"
        path.write_text(value + "\n")
        path.chmod(0o600)
        return [f"{flag}-file", str(path)], {}
    return [flag, value], {}


def _check_warning(how: str, flag: str, stderr: str, *hidden: str) -> None:
    lines = [line for line in stderr.splitlines() if WARNING in line]
    if how == "typed":
        assert len(lines) == 1 and lines[0].startswith(f"warning: {flag} "), stderr
    else:
        assert lines == [], stderr
    assert not any(h in stderr for h in hidden), stderr


HOWS = ("variable", "file", "typed")


@pytest.mark.slow
@pytest.mark.parametrize("how", HOWS)
def test_serve_start_hands_its_key_to_the_background_server_in_its_environment(tmp_path, how) -> None:
    key = "opd-" + secrets.token_hex(24)
    args, env = _source(tmp_path, how, "--api-key", "OPD_SERVE_API_KEY", key)
    started = _opd(
        tmp_path, "serve", "start", "--port", "0", "--data-dir", str(tmp_path / "d"), "--json", *args, **env
    )
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    try:
        assert key not in _cmdlines(info["pid"]) + started.stdout
        _check_warning(how, "--api-key", started.stderr, key)
        jobs = f"{info['api_base']}/fine-tunes"
        assert httpx.get(jobs, headers={"Authorization": f"Bearer {key}"}).status_code == 200
        assert httpx.get(jobs, headers={"Authorization": "Bearer not-the-key"}).status_code == 401
    finally:
        assert _opd(tmp_path, "serve", "stop").returncode == 0


@pytest.mark.slow
def test_serve_start_forwards_spans_with_the_headers_of_the_variable_the_file_and_the_command_line(
    tmp_path,
) -> None:
    """One job on a background `opd serve start`: its collector gets the header from each of the three
    sources; no process of the server's tree shows any of them; the typed one is warned about once."""
    from conftest import tiny_workspace

    from opd_nb.client import resolve_target, submit

    values = {k: f"{k}-{secrets.token_hex(8)}" for k in ("env", "file", "typed")}
    header_file = tmp_path / "headers"
    header_file.write_text(f"Authorization=Bearer {values['file']}\n")
    receiver = OtlpReceiver()
    started = _opd(
        tmp_path, "serve", "start", "--port", "0", "--data-dir", str(tmp_path / "d"), "--json",
        "--otlp-forward", receiver.url, "--otlp-header-file", str(header_file), "--otlp-header", f"X-Typed={values['typed']}",
        OPD_OTLP_HEADERS=f"X-Env={values['env']}",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    _check_warning("typed", "--otlp-header", started.stderr, *values.values())
    try:
        target = resolve_target("local", base_url=info["api_base"])
        submit(tiny_workspace("reward", tmp_path / "ws"), target, no_check=True)
        shown: list[str] = []

        def forwarded() -> bool:
            shown.append(_cmdlines(info["pid"]))  # the worker and its function servers, while they run
            return bool(receiver.headers)

        wait_until(forwarded, 300, "a forwarded span export")
        assert len(shown) > 1 and "opd_nb.server" in shown[0]
        assert not any(v in "".join(shown) for v in values.values())
        got = receiver.headers[0]
        assert got["authorization"] == f"Bearer {values['file']}", sorted(got)
        assert got["x-env"] == values["env"] and got["x-typed"] == values["typed"]
    finally:
        assert _opd(tmp_path, "serve", "stop").returncode == 0
        receiver.close()


def _dingtalk_signed(query: str, signing: str) -> bool:
    """DingTalk's signature check: base64(HMAC-SHA256(secret, "<timestamp>\\n<secret>"))."""
    params = parse_qs(query)
    stamp, sign = params["timestamp"][0], unquote(params["sign"][0])
    mac = hmac.new(signing.encode(), f"{stamp}\n{signing}".encode(), hashlib.sha256).digest()
    return sign == base64.b64encode(mac).decode()


@pytest.mark.slow
@pytest.mark.parametrize("how", HOWS)
def test_a_detached_watcher_gets_the_webhook_and_its_secret_in_its_environment(tmp_path, how) -> None:
    job_id = "ft-202612020000-46ab"
    job = {"job_id": job_id, "job_name": "x", "status": "RUNNING", "hyper_parameters": {}}
    plane = Loopback(
        {
            f"/api/v1/fine-tunes/{job_id}": {"request_id": "r", "output": job},
            f"/api/v1/fine-tunes/{job_id}/metrics": {"request_id": "r", "output": {"metrics": []}},
        }
    )
    token, signing = "TOK" + secrets.token_hex(10), "SEC" + secrets.token_hex(10)
    hook = f"{plane.url}/hook/{token}"
    url_args, url_env = _source(tmp_path, how, "--notify", "OPD_NOTIFY_URL", hook)
    sec_args, sec_env = _source(tmp_path, how, "--notify-secret", "OPD_NOTIFY_SECRET", signing)
    try:
        parent = _opd(tmp_path, "watch", job_id, "--local", plane.url, "--detach", "--notify-format", "dingtalk",
                      *url_args, *sec_args, **url_env, **sec_env)  # fmt: skip
        assert parent.returncode == 0, parent.stderr
        assert "notify dingtalk signed" in parent.stdout
        (record,) = (tmp_path / "watchers").glob("*.json")
        pid = json.loads(record.read_text())["pid"]
        shown = _cmdlines(pid)
        assert "watch" in shown and token not in shown and signing not in shown
        if how == "typed":
            assert [ln.split(" on ")[0] for ln in parent.stderr.splitlines() if WARNING in ln] == [
                "warning: --notify",
                "warning: --notify-secret",
            ], parent.stderr
        else:
            _check_warning(how, "--notify", parent.stderr)
        assert token not in parent.stderr + parent.stdout and signing not in parent.stderr + parent.stdout
        plane.answers[f"/api/v1/fine-tunes/{job_id}"] = {
            "request_id": "r",
            "output": {**job, "status": "SUCCEEDED"},
        }
        wait_until(lambda: any(p.startswith(f"/hook/{token}") for p, _ in plane.posts), 60, "the final post")
        path = next(p for p, _ in plane.posts if p.startswith(f"/hook/{token}"))
        assert _dingtalk_signed(urlsplit(path).query, signing), path
    finally:
        _opd(tmp_path, "watch", job_id, "--stop")
        plane.server.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("how", HOWS)
def test_opd_mcp_http_takes_its_key_from_the_variable_a_file_or_the_command_line(tmp_path, how) -> None:
    pytest.importorskip("mcp")
    key, port = "mcp-" + secrets.token_hex(20), _free_port()
    args, env = _source(tmp_path, how, "--api-key", "OPD_SERVE_API_KEY", key)
    proc = subprocess.Popen([sys.executable, "-m", "opd_nb", "mcp", "--http", "--port", str(port), *args],
                            env=_env(tmp_path, **env), stderr=subprocess.PIPE, text=True, cwd=tmp_path)  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:

        def status(headers: dict[str, str]) -> int | None:
            try:
                return httpx.post(url, json={}, headers=headers).status_code
            except httpx.TransportError:
                return None

        assert wait_until(lambda: status({}), 60, "opd mcp --http") == 401
        assert status({"Authorization": f"Bearer {key}"}) not in (None, 401)
        if how != "typed":
            assert key not in _cmdlines(proc.pid)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    _check_warning(how, "--api-key", err, key)


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "start", "--api-key-file", "MISSING"],
        ["serve", "start", "--otlp-forward", "http://127.0.0.1:9", "--otlp-header-file", "MISSING"],
        ["watch", "ft-1", "--local", "http://127.0.0.1:9", "--notify-file", "MISSING"],
        [
            "watch",
            "ft-1",
            "--local",
            "http://127.0.0.1:9",
            "--notify",
            "http://x/y",
            "--notify-secret-file",
            "MISSING",
        ],
        ["mcp", "--http", "--api-key-file", "MISSING"],
    ],
    ids=["api-key-file", "otlp-header-file", "notify-file", "notify-secret-file", "mcp-api-key-file"],
)
@pytest.mark.slow
def test_a_missing_secret_file_is_one_line(tmp_path, args) -> None:
    if args[0] == "mcp":
        pytest.importorskip("mcp")
    missing = str(tmp_path / "no-such-file")
    out = _opd(tmp_path, *[missing if a == "MISSING" else a for a in args])
    flag = args[args.index("MISSING") - 1]
    errors = [
        line for line in out.stderr.splitlines() if not line.startswith("warning: ")
    ]  # the typed --notify
    assert out.returncode == 2 and errors == [
        f"error: {flag} {missing}: no such file (fix: write the secret into that file, or fix the path)"
    ], out.stderr


@pytest.mark.slow
def test_a_secret_and_its_file_together_are_one_line(tmp_path) -> None:
    (tmp_path / "url").write_text("http://127.0.0.1:9/hook/x\n")
    out = _opd(tmp_path, "watch", "ft-1", "--local", "http://127.0.0.1:9", "--notify", "http://x/TYPED",
               "--notify-file", str(tmp_path / "url"))  # fmt: skip
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        "error: --notify and --notify-file both given (fix: keep --notify-file)"
    ]


@pytest.mark.slow
def test_under_the_magic_the_warning_says_the_notebook_keeps_it(capsys) -> None:
    """`%opd watch JOB --notify URL --detach` goes through the same parser: the warning names the notebook."""
    from opd_nb.cli import invoke
    from opd_nb.errors import OpdError

    hook = "https://oapi.dingtalk.com/robot/send?access_token=" + "a1" * 16
    with pytest.raises(OpdError):  # nothing answers at that address
        invoke(["watch", "ft-1", "--local", "http://127.0.0.1:9", "--notify", hook, "--detach"])
    err = capsys.readouterr().err
    assert "warning: --notify on the %opd line is saved in the notebook's source" in err and "a1a1" not in err
