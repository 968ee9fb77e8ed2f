"""The job client and the `opd` job commands against a real local control plane."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
from conftest import tiny_workspace, wait_status
from pydantic import SecretStr

from opd_nb.client import AsyncJobClient, JobClient, resolve_target, submit, use_target
from opd_nb.client.target import Target
from opd_nb.constants import DEFAULT_CLOUD_API, DEFAULT_LOCAL_API, LOCAL_API_KEY
from opd_nb.errors import OpdError


@pytest.fixture(scope="module")
def client(local_server):
    return JobClient(resolve_target("local", base_url=local_server.base_url))


def test_target_resolution_and_key_masking(tmp_path, monkeypatch):
    monkeypatch.delenv("DASHSCOPE_HTTP_BASE_URL", raising=False)
    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("DASHSCOPE_API_KEY=sk-secret-value\n")
    cloud = resolve_target()
    assert cloud.kind == "cloud" and cloud.base_url == "https://dashscope.aliyuncs.com/api/v1"
    assert "sk-secret-value" not in repr(cloud) and "sk-secret-value" not in str(cloud)
    assert cloud.api_key.get_secret_value() == "sk-secret-value"  # read from .env, re-read on every call
    monkeypatch.setenv("DASHSCOPE_HTTP_BASE_URL", "http://127.0.0.1:9999/api/v1")
    local = resolve_target()
    assert local.kind == "local" and local.base_url == "http://127.0.0.1:9999/api/v1"
    assert (
        resolve_target("local", base_url="http://localhost:8000").base_url == "http://localhost:8000/api/v1"
    )
    with pytest.raises(OpdError):
        resolve_target("moon")


def test_errors_are_opd_errors(client, local_server):
    with pytest.raises(OpdError, match="JobNotFound") as info:
        client.get("ft-missing")
    assert (info.value.status, info.value.code) == (404, "JobNotFound")  # what callers branch on
    unreachable = JobClient(Target(kind="local", base_url="http://127.0.0.1:9/api/v1"), retries=1, timeout=2)
    with pytest.raises(OpdError, match="cannot reach the local control plane") as info:
        unreachable.list()
    assert "opd serve" in str(info.value) and info.value.status is None
    no_key = JobClient(Target(kind="local", base_url=local_server.api_base, api_key=None), retries=0)
    with pytest.raises(OpdError, match="401") as info:
        no_key.list()
    assert (info.value.status, info.value.code) == (401, "InvalidApiKey")
    with pytest.raises(OpdError, match="job id '' is empty") as info:
        client.get("")
    assert "opd jobs" in info.value.fix


def test_local_only_calls_on_an_unknown_job_raise_and_on_the_cloud_answer_none(client):
    for call in (client.metrics, client.checkpoints):
        with pytest.raises(OpdError) as info:
            call("ft-missing")
        assert (info.value.status, info.value.code) == (404, "JobNotFound")
    cloud = JobClient(Target(kind="cloud", base_url="http://127.0.0.1:9/api/v1"), retries=0, timeout=2)
    assert cloud.metrics("ft-any") is None and cloud.models() is None  # checkpoints: asked there too


def test_use_target_switches_this_process_and_never_shows_the_key(tmp_path, monkeypatch):
    for name in ("DASHSCOPE_HTTP_BASE_URL", "DASHSCOPE_API_KEY", "OPD_NB_LOCAL_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    local = use_target("local", shell_exports=True)
    assert local.base_url == DEFAULT_LOCAL_API == os.environ["DASHSCOPE_HTTP_BASE_URL"]
    assert (
        os.environ["DASHSCOPE_API_KEY"] == LOCAL_API_KEY
        and local.key_source == "placeholder for the local server"
    )
    assert local.exports == [f"export DASHSCOPE_HTTP_BASE_URL={DEFAULT_LOCAL_API}"]
    assert json.loads(local.to_json())["kind"] == "local"
    cloud = use_target("cloud")
    assert cloud.base_url == DEFAULT_CLOUD_API and not cloud.key_set and cloud.exports == []
    assert "DASHSCOPE_API_KEY" not in os.environ  # only the placeholder `use local` set is removed
    secret = "sk-from-the-user-123"
    monkeypatch.setenv("DASHSCOPE_API_KEY", secret)
    assert use_target("local", "http://localhost:9000").base_url == "http://localhost:9000/api/v1"
    info = use_target("cloud")
    assert os.environ["DASHSCOPE_API_KEY"] == secret and info.key_set
    assert secret not in str(info) + repr(info) + info.to_json() + info._repr_html_()
    for kind, url, needle in (
        ("moon", None, "unknown target"),
        ("local", "http://10.1.2.3:8765", "not a loopback"),
        ("cloud", "http://127.0.0.1:8765", "is a loopback"),
        ("local", "127.0.0.1:8765", r"not an http\(s\) URL"),
    ):
        with pytest.raises(OpdError, match=needle) as err:
            use_target(kind, url)
        assert err.value.fix


@pytest.mark.slow
def test_use_in_a_terminal_prints_the_export_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASHSCOPE_", "OPD_NB_"))}
    env["XDG_CACHE_HOME"] = str(tmp_path)  # no background server recorded here
    proc = subprocess.run(
        [sys.executable, "-m", "opd_nb", "use", "local"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert f"target: local  {DEFAULT_LOCAL_API}" in proc.stdout
    assert f"export DASHSCOPE_HTTP_BASE_URL={DEFAULT_LOCAL_API}" in proc.stdout


def test_models_listing(client):
    models = client.models()
    assert models and {m["kind"] for m in models} >= {"stand-in"}


@pytest.mark.slow
def test_submit_watch_metrics_events_cancel_delete(client, local_server, tmp_path):
    """`submit()` runs the workspace's own submit_job.py through the SDK; the client follows the job."""
    ws = tiny_workspace("pure-distill", tmp_path / "ws", train_rows=9)  # more rows than batch_size 8
    result = submit(ws, client.target, no_check=True)
    assert result.runner == "submit_job.py" and result.job_id.startswith("ft-")
    assert "sk-" not in json.dumps(result.model_dump())
    events = list(client.events(result.job_id))  # SSE until the job ends
    assert events[-1].kind == "status" and events[-1].status == "SUCCEEDED", [e.data for e in events[-5:]]
    assert any(e.kind == "log" and "progress: step" in e.data for e in events)
    job = client.wait(result.job_id, poll_s=0.2, timeout_s=60)
    assert job.terminal and job.finetuned_output == f"opd-local/{job.job_id}"
    rows = client.metrics(job.job_id)
    assert rows and all("step" in r for r in rows)
    page = client.logs(job.job_id, offset=0, lines=3)
    more = client.logs(job.job_id, offset=page.next_offset, lines=3)
    assert len(page.lines) == 3 and more.offset == page.next_offset and more.lines != page.lines
    assert "SUCCEEDED" in job._repr_html_() and job.job_id in str(client.list())
    cps = client.checkpoints(job.job_id)
    assert cps and cps[0].published and cps[0].path == job.raw["local"]["final_checkpoint"]

    async def async_side() -> tuple[str, int]:
        aclient = AsyncJobClient(client.target)
        got = await aclient.get(job.job_id)
        listed = await aclient.list()
        return got.status, listed.total

    status, total = asyncio.run(async_side())
    assert status == "SUCCEEDED" and total >= 1
    client.delete(job.job_id)
    with pytest.raises(OpdError, match="404"):
        client.get(job.job_id)


@pytest.mark.slow
def test_cli_commands(local_server, client, tmp_path):
    """`opd submit --local URL`, `opd status`, `opd jobs`, `opd logs`, `opd cancel` in a terminal."""
    ws = tiny_workspace("pure-distill", tmp_path / "cli", train_rows=64, n_epochs=50)
    opd = [sys.executable, "-c", "from opd_nb.cli import main; main()"]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*opd, *args], capture_output=True, text=True, timeout=240)

    sub = run("submit", str(ws), "--local", local_server.base_url, "--json")
    assert sub.returncode == 0, sub.stderr[-2000:]
    job_id = json.loads(sub.stdout)["job_id"]
    wait_status(client, job_id, {"RUNNING"}, timeout=240)
    status = run("status", job_id, "--local", local_server.base_url)
    assert status.returncode == 0 and "RUNNING" in status.stdout
    assert job_id in run("jobs", "--local", local_server.base_url).stdout
    assert "[server]" in run("logs", job_id, "--local", local_server.base_url).stdout
    cancel = run("cancel", job_id, "--local", local_server.base_url)
    assert cancel.returncode == 0, cancel.stderr
    assert wait_status(client, job_id, {"CANCELED"}, timeout=30).status == "CANCELED"
    missing = run("status", "ft-missing", "--local", local_server.base_url)
    assert missing.returncode == 2 and "JobNotFound" in missing.stderr and "Traceback" not in missing.stderr

    # under the %opd magic the same commands return objects; watch opens the notebook's live monitor
    from opd_nb.cli import invoke
    from opd_nb.client import JobList
    from opd_nb.notebook.monitor import JobMonitor
    from opd_nb.notebook.views import open_view

    assert isinstance(invoke(["jobs", "--local", local_server.base_url]), JobList)
    monitor = open_view(invoke(["watch", job_id, "--local", local_server.base_url]))
    assert isinstance(monitor, JobMonitor) and monitor.job_ids == [job_id]
    monitor.wait(timeout_s=30)
    with pytest.raises(OpdError, match="JobNotFound"):
        invoke(["status", "ft-missing", "--local", local_server.base_url])


def test_a_deploy_on_bailian_from_python_needs_yes_and_sends_nothing_without_it(local_server):
    """The consent rule sits in the paid call itself, not in a front end: `JobClient.deploy` (and the
    async one) refuse a Bailian deploy without `yes`, before a request leaves (the control plane, standing
    in for Bailian here, sees no new deployment)."""
    key = SecretStr(LOCAL_API_KEY)
    cloud = JobClient(Target(kind="cloud", base_url=local_server.api_base, api_key=key), retries=0)
    before = cloud.deployments().total
    with pytest.raises(OpdError) as info:
        cloud.deploy("qwen3-8b", suffix="no-consent")
    assert info.value.code == "needs-confirmation" and "paid Bailian deployment" in str(info.value)
    aio = AsyncJobClient(Target(kind="cloud", base_url=local_server.api_base, api_key=key), retries=0)
    with pytest.raises(OpdError) as ainfo:
        asyncio.run(aio.deploy("qwen3-8b", suffix="no-consent"))
    assert ainfo.value.code == "needs-confirmation"
    assert cloud.deployments().total == before
