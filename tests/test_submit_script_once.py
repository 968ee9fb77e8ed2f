"""The workspace's own `python submit_job.py --yes` (Bailian's documented workflow, without opd) sends a paid
start once (issue 50): its job name carries a request id, and a create whose answer was lost (a 5xx, a cut
connection) is found by that id on the plane, never sent again; when the plane shows nothing, it says so,
names the id and exits non-zero without a resend.

The script runs in a subprocess with the real SDK against Bailian's stand-in (:mod:`bailian_standin`), a
counting proxy in front of the session's `opd serve` that loses answers (slow: a server and the SDK).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from bailian_standin import DROP, JOB_CREATE, CountingProxy
from conftest import stop_jobs, tiny_workspace

from opd_nb.client import JobClient, resolve_target

KEY = "sk-standin-0000000000000000"
CARRIED = re.compile(r"-(r[0-9a-f]{10})-[0-9a-f]{8}$")  # NAME-rid-<8 hex>: the id where the package puts it
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_workspace("pure-distill", tmp_path_factory.mktemp("ws") / "ws", train_rows=16)


@pytest.fixture()
def proxy(local_server):
    standin = CountingProxy(local_server.base_url)
    yield standin
    standin.close()
    local = JobClient(resolve_target("local", base_url=local_server.api_base))
    stop_jobs(local)


def run_script(ws: Path, proxy: CountingProxy, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    """`python submit_job.py --yes` as a user runs it, its host being the stand-in; (process, result file)."""
    result_file = ws.parent / "result.json"
    result_file.unlink(missing_ok=True)
    env = {**os.environ, "DASHSCOPE_API_KEY": KEY, "DASHSCOPE_HTTP_BASE_URL": proxy.api_base}
    env["NO_PROXY"] = "127.0.0.1,localhost"
    cmd = [
        sys.executable,
        str(ws / "submit_job.py"),
        "--yes",
        "--no-check",
        "--result-file",
        str(result_file),
    ]
    proc = subprocess.run([*cmd, *extra], cwd=ws, env=env, capture_output=True, text=True, timeout=300)
    data = json.loads(result_file.read_text()) if result_file.is_file() else {}
    return proc, data


def jobs_named(local_server, rid: str) -> list[str]:
    """The ids of the plane's jobs whose name carries request id `rid`."""
    local = JobClient(resolve_target("local", base_url=local_server.api_base))
    return [j.job_id for j in local.list(size=100).jobs if f"-{rid}-" in (j.job_name or "")]


@pytest.mark.parametrize("loss", [500, 502, DROP], ids=["500", "502", "connection-cut"])
def test_a_lost_answer_after_the_create_finds_the_one_job_it_started(workspace, proxy, local_server, loss):
    proxy.fault(*JOB_CREATE, loss)  # carried out upstream; the answer never arrives
    proc, result = run_script(workspace, proxy)
    assert proc.returncode == 0, proc.stderr
    assert proxy.job_creations() == 1  # looked for, not sent again
    rid = result["request_id"]
    assert jobs_named(local_server, rid) == [result["job_id"]]
    assert f"job id: {result['job_id']}" in proc.stdout
    assert "the answer to this start was lost" in proc.stderr and result["answer_lost"]


@pytest.mark.parametrize("loss", [500, 503, DROP], ids=["500", "503", "connection-cut"])
def test_a_lost_answer_the_plane_shows_nothing_for_is_not_sent_again(workspace, proxy, local_server, loss):
    proxy.fault(*JOB_CREATE, loss, forward=False)  # the request never reached the plane
    proc, result = run_script(workspace, proxy)
    assert proc.returncode == 1 and not result, proc.stderr
    assert proxy.job_creations() == 1 and proxy.count("GET", "/api/v1/fine-tunes") == 1  # one look, no resend
    named = re.search(r"request id is (r[0-9a-f]{10})\b", proc.stderr)
    assert named and "may or may not" in proc.stderr, proc.stderr
    rid = named.group(1)
    assert "opd jobs" in proc.stderr and "not sent again" in proc.stderr
    assert jobs_named(local_server, rid) == []


@pytest.mark.parametrize(
    ("job_name", "carried"),
    [(None, None), ("mine", None), ("mine-r0123456789", "r0123456789")],
    ids=["config-name", "job-name", "id-given-by-opd"],
)
def test_a_paid_submit_carries_one_request_id_in_its_job_name(
    workspace, proxy, local_server, job_name, carried
):
    proc, result = run_script(workspace, proxy, *(["--job-name", job_name] if job_name else []))
    assert proc.returncode == 0, proc.stderr
    assert proxy.job_creations() == 1 and result["answer_lost"] is None
    rid = result["request_id"]
    assert jobs_named(local_server, rid) == [result["job_id"]]
    local = JobClient(resolve_target("local", base_url=local_server.api_base))
    name = local.get(result["job_id"]).job_name or ""
    found = CARRIED.search(name)
    assert found and found.group(1) == rid, name
    if carried:  # `opd submit` named it: kept, not a second id
        assert rid == carried and name.count("-r") == 1
    if job_name and not carried:
        assert name.startswith(f"{job_name}-{rid}-")


def test_a_dry_run_is_unchanged_and_carries_no_request_id(workspace, proxy):
    env = {**os.environ, "DASHSCOPE_API_KEY": KEY, "DASHSCOPE_HTTP_BASE_URL": proxy.api_base}
    cmd = [sys.executable, str(workspace / "submit_job.py"), "--dry-run", "--no-check"]
    proc = subprocess.run(cmd, cwd=workspace, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)
    assert job["job_name"].endswith("-<8 hex>") and not re.search(r"-r[0-9a-f]{10}", job["job_name"])
    assert proxy.requests == []  # nothing sent


def test_a_5xx_naming_a_remembered_function_is_not_a_reason_to_send_again(proxy, local_server, tmp_path):
    """The script re-registers a function the plane no longer knows and submits again only after a clean
    refusal (a 4xx); a 5xx saying FunctionNotFound may come from a create that ran, so it is looked up."""
    ws = tiny_workspace("reward", tmp_path / "ws", train_rows=16)
    first, _ = run_script(ws, proxy)  # registers the reward and remembers it in .opd/entities.json
    assert first.returncode == 0, first.stderr
    proxy.fault(*JOB_CREATE, 503, forward=False, code="FunctionNotFound")
    proc, result = run_script(ws, proxy)
    assert proc.returncode == 1 and not result, proc.stderr
    assert proxy.job_creations() == 2  # the first submit's and this one's: no resend
    assert "registering it again" not in proc.stderr and "not sent again" in proc.stderr
