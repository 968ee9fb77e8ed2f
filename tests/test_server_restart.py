"""A control plane killed with SIGKILL mid-job, with `opd serve --no-resume`, restarts consistently.

With ``--no-resume`` the job that was RUNNING is marked FAILED (code ServerRestarted) with the
reason and its last checkpoint in its log; PENDING jobs stay queued and run after the restart.
(Without it the job resumes: see ``test_server_reliability.py``.)
"""

from __future__ import annotations

import json
import os
import time

import httpx
import pytest
from server_http import H, wait_until

from opd_nb.engine.task import make_rows

pytestmark = pytest.mark.slow


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


def test_sigkill_mid_job_then_restart(tmp_path):
    from opd_nb.server import start

    server = start(port=0, data_dir=tmp_path, resume=False)
    api = server.api_base
    try:
        body = "".join(json.dumps(r) + "\n" for r in make_rows(64, seed=3)).encode()
        up = httpx.post(api + "/files", headers=H, files={"files": ("train.jsonl", body)}).json()
        file_id = up["data"]["uploaded_files"][0]["file_id"]
        job = {
            "model": "qwen3-8b",
            "teacher_model": "qwen3-max",
            "training_type": "pg_opd",
            "training_datasets": [{"type": "training", "data_source_type": "file_id", "file_id": file_id}],
            "hyper_parameters": {
                "n_epochs": 50,
                "batch_size": 8,
                "n_rollouts": 2,
                "ppo_mini_batch_size": 16,
                "max_prompt_length": 40,
                "max_length": 64,
                "eval_steps": 1000,
            },
        }
        first = httpx.post(api + "/fine-tunes", headers=H, json=job).json()["output"]["job_id"]
        second = httpx.post(api + "/fine-tunes", headers=H, json=job).json()["output"]["job_id"]

        def running_with_progress():  # noqa: ANN202
            out = httpx.get(f"{api}/fine-tunes/{first}", headers=H).json()["output"]
            return out if out["status"] == "RUNNING" and out.get("progress") else None

        wait_until(running_with_progress, 240, "the first job to make progress")
        assert httpx.get(f"{api}/fine-tunes/{second}", headers=H).json()["output"]["status"] == "PENDING"
        worker_pid = next(
            int(line.split("worker pid ")[1].rstrip(")"))
            for line in httpx.get(f"{api}/fine-tunes/{first}/logs", headers=H).json()["output"]["logs"]
            if "worker pid" in line
        )
        server.kill()
        # the orphaned worker notices its parent is gone and stops by itself
        wait_until(lambda: not _pid_alive(worker_pid), 15, "the orphaned worker to exit")
    finally:
        server.kill()

    with start(port=0, data_dir=tmp_path, resume=False) as again:
        api = again.api_base
        out = httpx.get(f"{api}/fine-tunes/{first}", headers=H).json()["output"]
        assert out["status"] == "FAILED" and out["code"] == "ServerRestarted", out
        assert out["end_time"]
        logs = httpx.get(f"{api}/fine-tunes/{first}/logs", headers=H, params={"line": 10000}).json()[
            "output"
        ]["logs"]
        assert any("control plane stopped while this job was running" in line for line in logs), logs[-5:]
        assert any("--no-resume" in line for line in logs), logs[-5:]
        assert httpx.get(f"{api}/files/{file_id}", headers=H).status_code == 200
        listed = httpx.get(f"{api}/fine-tunes", headers=H).json()["output"]
        assert {j["job_id"] for j in listed["jobs"]} == {first, second} and listed["total"] == 2
        # the queued job survived and runs now; cancel stops it within a few seconds
        wait_until(
            lambda: (
                httpx.get(f"{api}/fine-tunes/{second}", headers=H).json()["output"]["status"] == "RUNNING"
            ),
            60,
            "the queued job to start after the restart",
        )
        assert httpx.post(f"{api}/fine-tunes/{second}/cancel", headers=H).status_code == 200
        t0 = time.monotonic()
        wait_until(
            lambda: (
                httpx.get(f"{api}/fine-tunes/{second}", headers=H).json()["output"]["status"] == "CANCELED"
            ),
            20,
            "cancel",
        )
        assert time.monotonic() - t0 < 15
