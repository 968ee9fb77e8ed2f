"""`opd serve start|status|stop` from separate processes (a record per data dir), and what it prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest


@pytest.mark.slow
def test_serve_start_status_stop(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    opd = [sys.executable, "-c", "from opd_nb.cli import main; main()"]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*opd, "serve", *args], env=env, capture_output=True, text=True, timeout=120)

    started = run("start", "--port", "0", "--data-dir", str(tmp_path / "data"))
    assert started.returncode == 0, started.stderr
    assert "export DASHSCOPE_HTTP_BASE_URL=http://127.0.0.1:" in started.stdout
    assert "export DASHSCOPE_API_KEY=local" in started.stdout
    url = next(
        line.split("=", 1)[1] for line in started.stdout.splitlines() if "DASHSCOPE_HTTP_BASE_URL" in line
    )
    try:
        assert httpx.get(url + "/fine-tunes", headers={"Authorization": "Bearer k"}).status_code == 200
        again = run("start", "--port", "0", "--data-dir", str(tmp_path / "data"))
        assert again.returncode == 0 and "already running" in again.stdout
        status = run("status")
        assert status.returncode == 0 and "running at" in status.stdout
        other = run("start", "--port", "0", "--data-dir", str(tmp_path / "other"))  # its own server
        assert other.returncode == 0 and "already running" not in other.stdout, other.stdout
        assert (tmp_path / "other" / "server.json").is_file()
        two = run("stop")  # two run and neither is the default data dir's: say which, stop none
        assert two.returncode == 0 and "nothing to stop" in two.stdout and "--data-dir" in two.stdout
        assert str(tmp_path / "other") in two.stdout and str(tmp_path / "data") in two.stdout
        one = run("stop", "--data-dir", str(tmp_path / "other"))
        assert one.returncode == 0 and "stopped" in one.stdout and str(tmp_path / "other") in one.stdout
        assert "running at" in run("status", "--data-dir", str(tmp_path / "data")).stdout
    finally:
        stopped = run("stop")  # the one left
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    after = run("status")
    assert after.returncode == 1 and "not running" in after.stdout
    bad = run("start", "--model-map", "nope")
    assert bad.returncode == 2 and "ID=PATH" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
def test_serve_status_json_without_a_server(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-c", "from opd_nb.cli import main; main()", "serve", "status", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["running"] is False and data["pid"] is None and "opd serve start" in data["note"]
