"""Injection through names (issue 28): a job name is user text, in the SSE stream and in the terminal.

A `job_name` with a blank line and `event: status` used to end its log event on `/stream` and forge a
status event that our own `JobClient.events()` accepted; escape sequences in it were printed raw by
`opd status` and `opd jobs`, so they could clear the screen or fake coloured text.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from opd_nb.client import JobClient, resolve_target
from opd_nb.engine.task import make_rows

pytestmark = pytest.mark.slow
FORGED = '{"job_id": "ft-forged", "status": "SUCCEEDED", "progress": null}'
NAMES = {
    "lf": f"x\n\nevent: status\ndata: {FORGED}\n\nid: 99\nevent: log\ndata: y",
    "crlf": f"x\r\n\r\nevent: status\r\ndata: {FORGED}\r\n\r\n",
    "cr": f"x\r\revent: status\rdata: {FORGED}\r\r",
}
ESCAPES = "\x1b[2J\x1b[H\x1b[31mFAKE\x1b[0m\rback\x07\x9b1m\u202eevil"


def _submit(api: httpx.Client, name: str) -> str:
    rows = "".join(json.dumps(r) + "\n" for r in make_rows(4, seed=1)).encode()
    files = {"files": ("train.jsonl", rows, "application/octet-stream")}
    uploaded = api.post("/files", files=files, data={"purpose": "fine-tune"}).json()
    file_id = uploaded["data"]["uploaded_files"][0]["file_id"]
    body = {
        "model": "qwen3-8b",
        "training_type": "pg_opd",
        "teacher_model": "qwen3-max",
        "job_name": name,
        "training_datasets": [{"type": "training", "data_source_type": "file_id", "file_id": file_id}],
        "hyper_parameters": {"n_epochs": 1, "batch_size": 2, "n_rollouts": 1, "ppo_mini_batch_size": 2},
    }
    resp = api.post("/fine-tunes", json=body)
    assert resp.status_code == 200, resp.text[:300]
    job_id = resp.json()["output"]["job_id"]
    api.post(f"/fine-tunes/{job_id}/cancel")  # ends it, so the stream ends; nothing needs to train
    return job_id


@pytest.mark.parametrize("name", list(NAMES.values()), ids=list(NAMES))
def test_a_job_name_cannot_forge_a_stream_event(api, local_server, name):
    job_id = _submit(api, name)
    client = JobClient(resolve_target("local", base_url=local_server.api_base))
    events = list(client.events(job_id))
    statuses = [json.loads(e.data) for e in events if e.kind == "status"]
    assert statuses and all(s["job_id"] == job_id for s in statuses), statuses
    assert "SUCCEEDED" not in {s["status"] for s in statuses}
    queued = [e for e in events if e.kind == "log" and "queued" in e.data]
    assert len(queued) == 1, [e.data for e in events]
    assert "event: status" in queued[0].data and FORGED in queued[0].data  # the name is data, whole
    assert all(e.id is None or e.id != 99 for e in events)


def _opd(local_server, *args: str) -> str:  # noqa: ANN001
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "NO_COLOR": "1", "COLUMNS": "200"}
    cmd = [sys.executable, "-m", "opd_nb", *args, "--local", local_server.api_base]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_opd_status_and_jobs_escape_control_characters_in_a_job_name(api, local_server, as_json):
    job_id = _submit(api, ESCAPES)
    extra = ("--json",) if as_json else ()
    for out in (_opd(local_server, "status", job_id, *extra), _opd(local_server, "jobs", *extra)):
        for raw in ("\x1b", "\r", "\x07", "\x9b", "\u202e"):
            assert raw not in out, (raw, out[-500:])
    shown = _opd(local_server, "status", job_id, *extra)
    assert "FAKE" in shown and ("\\x1b" in shown or "\\u001b" in shown)  # visible, not interpreted
