"""One contract on both planes (issue 51): each documented submit rule answers alike through preflight
(`opd check --target local`), the SDK's `AgenticRL().run()`, the official `dashscope rl run` and a raw
POST to the local control plane, as Bailian answers it: a 400 in Bailian's error shape at submit, or a job
that FAILS with the rule's message where the platform fails it later.

The rules and their messages are :mod:`opd_nb.spec.submit_rules`'s; each test reads the expected words
from there, so a surface that words it otherwise, or lets the job through, fails here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from conftest import run_sdk, sdk_env, stop_jobs, tiny_workspace, wait_status

from opd_nb.checks import check
from opd_nb.spec.submit_rules import (
    TEACHER_ID,
    TOO_FEW_SAMPLES,
    signal_problem,
    teacher_problem,
    too_few_samples,
    type_by_hand_problem,
)

pytestmark = pytest.mark.slow

# `AgenticRL().run()` from the workspace's config, its answer printed whole (refused or not).
SDK_RUN = r"""
import asyncio, json
from dashscope.finetune.agentic_rl import AgenticRL
try:
    res = asyncio.run(AgenticRL().init(config_path="config.yaml").run())
except Exception as exc:  # the SDK's own refusals raise (e.g. error 3006)
    print(json.dumps({"raised": str(exc)}))
else:
    out = res.output
    print(json.dumps({"status_code": res.status_code, "code": res.code, "message": res.message,
                      "job_id": getattr(out, "job_id", None) if out else None,
                      "training_type": getattr(out, "training_type", None) if out else None}))
"""
SURFACES = ["preflight", "sdk-run", "rl-cli", "raw-post"]


@pytest.fixture(scope="module")
def client(local_server):
    from opd_nb.client import JobClient, resolve_target

    return JobClient(resolve_target("local", base_url=local_server.api_base))


def _config(ws: Path) -> dict:
    return yaml.safe_load((ws / "config.yaml").read_text())


def _edit(ws: Path, change) -> Path:
    cfg = _config(ws)
    change(cfg)
    (ws / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return ws


def _workspace(tmp_path: Path, change, **kw) -> Path:
    return _edit(tiny_workspace("pure-distill", tmp_path / "ws", **kw), change)


def _sdk_run(server, ws: Path) -> dict:
    proc = run_sdk(server, SDK_RUN, ws, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _rl_cli(server, ws: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "dashscope"
    cli = [str(exe)] if exe.exists() else [sys.executable, "-m", "dashscope.cli"]
    return subprocess.run(
        [*cli, "rl", "run", "-c", "config.yaml", "-o", "json"],
        cwd=ws,
        env=sdk_env(server),
        capture_output=True,
        text=True,
        timeout=180,
    )


def _raw_post(server, ws: Path) -> httpx.Response:
    """The job the workspace describes, POSTed by hand: upload the training file, then /fine-tunes."""
    cfg = _config(ws)
    headers = {"Authorization": "Bearer test"}
    train = ws / "data" / "train.jsonl"
    up = httpx.post(
        server.api_base + "/files", headers=headers, files={"files": ("train.jsonl", train.read_bytes())}
    )
    file_id = up.json()["data"]["uploaded_files"][0]["file_id"]
    body = {
        "model": cfg["model"]["name"],
        "training_datasets": [{"type": "training", "data_source_type": "file_id", "file_id": file_id}],
        "hyper_parameters": cfg["training"]["hyper_parameters"],
    }
    if cfg.get("teacher_model"):
        body["teacher_model"] = cfg["teacher_model"]
    if cfg["training"].get("type"):
        body["training_type"] = cfg["training"]["type"]
    return httpx.post(server.api_base + "/fine-tunes", headers=headers, json=body, timeout=60)


def _refused(surface: str, server, ws: Path, rule: str, words: str, code: str) -> None:
    """The rule's refusal, with its words, on `surface`: an error finding, or Bailian's 400 shape."""
    if surface == "preflight":
        report = check(ws, "local", base_url=server.api_base)
        hits = report.by_rule(rule)
        assert hits and hits[0].severity == "error" and words in hits[0].message, str(report)
    elif surface == "sdk-run":
        out = _sdk_run(server, ws)
        assert out.get("status_code") == 400 and out["code"] == code and words in out["message"], out
    elif surface == "rl-cli":
        proc = _rl_cli(server, ws)
        said = proc.stdout + proc.stderr
        # the official CLI prints the status and the message (not the code)
        assert proc.returncode != 0 and "status 400" in said and words in " ".join(said.split()), said[-2000:]
    else:
        resp = _raw_post(server, ws)
        body = resp.json()
        assert resp.status_code == 400 and set(body) >= {"request_id", "code", "message"}, body
        assert body["code"] == code and words in body["message"], body


# ---------------------------------------------------------------- the teacher: a model Bailian has


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(
    ("teacher", "rule"),
    [
        ("your-teacher-model-id", "config.model-placeholder"),  # seed 001's script, run verbatim
        ("gpt-4o", "config.teacher-not-bailian"),
        ("totally-made-up-model", TEACHER_ID.rule),
    ],
)
def test_a_teacher_bailian_does_not_have_is_refused_alike(local_server, tmp_path, surface, teacher, rule):
    ws = _workspace(tmp_path, lambda c: c.update(teacher_model=teacher))
    problem = teacher_problem(teacher)
    assert problem is not None
    _refused(surface, local_server, ws, rule, problem.message, TEACHER_ID.code or "")


@pytest.mark.parametrize("surface", ["preflight", "raw-post"])
def test_documented_and_stand_in_teachers_are_accepted(local_server, tmp_path, surface):
    """What the rule lets through: a documented id (on the stand-in) and the bundled teacher by name."""
    for teacher in ("qwen3.5-397b-a17b", "local/tiny-teacher"):
        (root := tmp_path / teacher.replace("/", "-")).mkdir()
        ws = _workspace(root, lambda c, t=teacher: c.update(teacher_model=t))
        if surface == "preflight":
            report = check(ws, "local", base_url=local_server.api_base)
            assert report.ok, str(report)
        else:
            resp = _raw_post(local_server, ws)
            assert resp.status_code == 200, resp.text
            job_id = resp.json()["output"]["job_id"]
            httpx.post(
                f"{local_server.api_base}/fine-tunes/{job_id}/cancel",
                headers={"Authorization": "Bearer test"},
            )


# ---------------------------------------------------------------- no teacher and no reward


@pytest.mark.parametrize("surface", SURFACES)
def test_functions_empty_list_without_a_teacher_is_refused_alike(local_server, tmp_path, surface):
    def change(cfg: dict) -> None:
        cfg.pop("teacher_model", None)
        cfg["functions"] = []
        cfg["training"].pop("type", None)

    ws = _workspace(tmp_path, change)
    words = signal_problem(None, 0) or ""
    _refused(surface, local_server, ws, "config.no-learning-signal", words, "InvalidParameter")


# ---------------------------------------------------------------- a training type set by hand


@pytest.mark.parametrize("surface", ["preflight", "raw-post"])
def test_a_hand_set_type_against_the_teacher_is_refused(local_server, tmp_path, surface):
    ws = _workspace(tmp_path, lambda c: c["training"].update(type="reinforcement"))
    words = type_by_hand_problem("reinforcement", _config(ws)["teacher_model"]) or ""
    _refused(surface, local_server, ws, "config.training-type-by-hand", words, "InvalidParameter")


def test_the_sdk_switches_a_hand_set_type_before_it_sends(local_server, tmp_path, client):
    """The SDK's own run() rewrites the type to pg_opd (the docs: a teacher forces it), so the plane gets a
    consistent body: this surface cannot carry the contradiction, and preflight is where it is caught."""
    ws = _workspace(tmp_path, lambda c: c["training"].update(type="reinforcement"), n_epochs=50)
    out = _sdk_run(local_server, ws)
    assert out.get("status_code") == 200 and out["training_type"] == "pg_opd", out
    stop_jobs(client, [out["job_id"]])


# ---------------------------------------------------------------- samples not more than batch_size


@pytest.mark.parametrize("surface", ["preflight", "sdk-run", "rl-cli", "raw-post"])
@pytest.mark.parametrize(("rows", "batch"), [(64, 128), (8, 8)], ids=["fewer", "equal"])
def test_too_few_samples_fail_the_job_alike(local_server, client, tmp_path, surface, rows, batch):
    """Bailian accepts such a job and fails it about ten minutes in; the local plane fails it at its start."""
    ws = tiny_workspace("pure-distill", tmp_path / "ws", train_rows=rows, batch_size=batch)
    words = too_few_samples(rows, batch) or ""
    if surface == "preflight":
        hits = check(ws, "local", base_url=local_server.api_base).by_rule(TOO_FEW_SAMPLES.rule)
        assert hits and hits[0].severity == "error" and words in hits[0].message
        return
    if surface == "sdk-run":
        job_id = _sdk_run(local_server, ws)["job_id"]
    elif surface == "rl-cli":
        proc = _rl_cli(local_server, ws)
        assert proc.returncode == 0, proc.stderr[-2000:]
        job_id = json.loads(proc.stdout[proc.stdout.index("{") :])["job_id"]
    else:
        resp = _raw_post(local_server, ws)
        assert resp.status_code == 200, resp.text
        job_id = resp.json()["output"]["job_id"]
    wait_status(client, job_id, {"SUCCEEDED", "FAILED", "CANCELED"}, timeout=300)
    job = client.get(job_id)
    assert job.status == "FAILED" and words in (job.message or ""), (job.status, job.message)
    assert words in "\n".join(client.logs(job_id, lines=200).lines)
