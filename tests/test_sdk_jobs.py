"""The unmodified dashscope SDK (Python API, `dashscope rl` CLI, v2 client) runs real jobs on `opd serve`.

Each SDK call runs in a subprocess whose environment holds only DASHSCOPE_HTTP_BASE_URL and
DASHSCOPE_API_KEY (plus PATH/HOME), exactly as a user's workspace would.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SDK_SUBMIT, run_sdk, sdk_env, tiny_workspace, wait_status

pytestmark = pytest.mark.slow


def _job_id(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("JOB "))
    return line.split()[1]


def _dashscope_cli() -> list[str]:
    exe = Path(sys.executable).parent / "dashscope"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "dashscope.cli"]


@pytest.fixture(scope="module")
def client(local_server):
    from opd_nb.client import JobClient, resolve_target

    return JobClient(resolve_target("local", base_url=local_server.api_base))


@pytest.fixture(scope="module")
def finished_jobs(finished_job):
    """The session's pure-distill, reward and agentic template jobs, each run by `AgenticRL().run()`."""
    return {mode: finished_job(mode).job for mode in ("pure-distill", "reward", "agentic")}


def test_three_workspaces_train_to_succeeded(finished_jobs, client):
    for mode, job in finished_jobs.items():
        log = "\n".join(client.logs(job.job_id, lines=10000).lines)
        assert job.status == "SUCCEEDED", f"{mode}: {job.message}\n{log[-3000:]}"
        assert job.training_type == "pg_opd"
        assert job.finetuned_output == f"opd-local/{job.job_id}"
        assert "runs locally on the bundled stand-in" in log  # the substitution is logged
        assert job.raw["local"]["substitutions"], job.raw  # ... and kept in the job's metadata
        rows = client.metrics(job.job_id)
        assert rows and any("actor/distillation/loss" in r for r in rows), rows
        assert client.checkpoints(job.job_id), f"{mode}: no checkpoint listed"
    reward_log = "\n".join(client.logs(finished_jobs["reward"].job_id, lines=10000).lines)
    assert "reward function" in reward_log and "serving at http://127.0.0.1:" in reward_log
    agentic_log = "\n".join(client.logs(finished_jobs["agentic"].job_id, lines=10000).lines)
    assert "rollout function" in agentic_log


def test_agentic_rl_classmethods(local_server, finished_jobs, tmp_path):
    job_id = finished_jobs["pure-distill"].job_id
    code = r"""
import json, sys
from dashscope.finetune.agentic_rl import AgenticRL
job_id = sys.argv[1]
got = AgenticRL.get(job_id)
listed = AgenticRL.list(page_no=1, page_size=50)
logs = AgenticRL.logs(job_id, offset=1, lines=5)
missing = AgenticRL.get("ft-does-not-exist")
print(json.dumps({"status": got.output.status, "creator": got.output.creator, "base_model": got.output.base_model,
                  "end_time": got.output.end_time, "ids": [j.job_id for j in listed.output.jobs],
                  "total": listed.output.total, "logs": logs.output["logs"], "missing": missing.status_code,
                  "missing_code": missing.code}))
"""
    proc = run_sdk(local_server, code, tmp_path, job_id, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["status"] == "SUCCEEDED" and out["creator"] and out["end_time"]
    assert job_id in out["ids"] and out["total"] >= 3
    assert len(out["logs"]) == 5 and out["logs"][0].startswith("[server]")
    assert out["missing"] == 404 and out["missing_code"] == "JobNotFound"


def test_rl_cli_run_get_list_logs_cancel_then_delete(local_server, client, tmp_path):
    ws = tiny_workspace("pure-distill", tmp_path / "long", train_rows=64, n_epochs=50)
    cli, env = _dashscope_cli(), sdk_env(local_server)

    def rl(*args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [*cli, "rl", *args], cwd=ws, env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, (args, proc.stdout[-1500:], proc.stderr[-1500:])
        return proc

    run = rl("run", "-c", "config.yaml", "--teacher-model", "qwen3-max", "-o", "json")
    job_id = json.loads(run.stdout[run.stdout.index("{") :])["job_id"]
    assert client.get(job_id).teacher_model == "qwen3-max"
    wait_status(client, job_id, {"RUNNING"}, timeout=300)
    assert job_id in rl("get", job_id, "-o", "json").stdout
    assert job_id in rl("list", "-o", "json").stdout
    assert "[server]" in rl("logs", job_id, "-o", "json").stdout
    rl("cancel", job_id)
    started = time.monotonic()
    job = wait_status(client, job_id, {"CANCELED", "FAILED", "SUCCEEDED"}, timeout=30)
    assert job.status == "CANCELED" and time.monotonic() - started < 15
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom dashscope.finetune.agentic_rl import AgenticRL\n"
            "print(AgenticRL.delete(sys.argv[1]).status_code, AgenticRL.get(sys.argv[1]).status_code)",
            job_id,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.split() == ["200", "404"], proc.stderr[-1500:]


def test_v2_client_stream_events_and_continue_training(local_server, finished_jobs, client, tmp_path):
    """A new job continues from a published checkpoint; v2 `rl.jobs` and `FineTunes.stream_events` follow it."""
    parent = finished_jobs["pure-distill"]
    ws = tiny_workspace("pure-distill", tmp_path / "cont", train_rows=9)  # > batch_size 8
    job_id = _job_id(run_sdk(local_server, SDK_SUBMIT, ws, parent.finetuned_output, timeout=120))
    code = r"""
import json, os, sys
import dashscope
from dashscope import FineTunes
job_id = sys.argv[1]
events = [e.output for e in FineTunes.stream_events(job_id, base_address=os.environ["DASHSCOPE_HTTP_BASE_URL"])]
c = dashscope.Client()
listed = c.rl.jobs.list(page_size=50)
fetched = c.rl.jobs.fetch(job_id)
done = c.rl.jobs.wait(job_id, poll_interval=0.5, timeout=300)
print(json.dumps({"events": events, "ids": [j.job_id for j in listed.jobs], "fetched": fetched.job_id,
                  "status": done.status, "finetuned": done.finetuned_model}))
"""
    proc = run_sdk(local_server, code, tmp_path, job_id, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["status"] == "SUCCEEDED" and out["finetuned"] == f"opd-local/{job_id}"
    assert job_id in out["ids"] and out["fetched"] == job_id
    assert any("progress: step" in e for e in out["events"]), out["events"][-10:]
    assert '"status": "SUCCEEDED"' in out["events"][-1]
    job = client.get(job_id)
    assert job.raw["local"]["student_path"] == parent.raw["local"]["final_checkpoint"]
    assert any(f"final checkpoint of job {parent.job_id}" in s for s in job.raw["local"]["substitutions"])
    # The continued job's curves start where its parent's stopped: the monitor's chart places it there.
    from opd_nb.notebook.monitor import JobMonitor

    parent_last = max(r["step"] for r in client.metrics(parent.job_id))
    monitor = JobMonitor([parent.job_id, job_id], client)
    monitor.poll_once()
    offsets = {s["job"]: s["offset"] for s in monitor._chart.data()["series"]}
    assert job.model == parent.finetuned_output and parent_last > 0
    assert offsets == {parent.job_id: 0.0, job_id: parent_last}
    assert 'class="opd-chart-frame"' in monitor.to_html()
