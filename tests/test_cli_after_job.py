"""`opd checkpoints`, `opd export`, `opd logs --search/--tail` and `opd deploy --plan` in a terminal, and the
`--json` shapes the README documents. They run as a user runs them (`python -m opd_nb`), against the
session's `opd serve` and its finished pure-distillation job."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def opd(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "opd_nb", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_PROXY": "127.0.0.1,localhost", **env},
    )


@pytest.fixture(scope="module")
def job_id(finished_job) -> str:
    return finished_job("pure-distill").job_id


def test_checkpoints_table_and_json(job_id, local_server):
    url = local_server.base_url
    proc = opd("checkpoints", job_id, "--local", url)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert (
        re.search(r"expires in 1[45] days", text)
        and "best" in text
        and f"opd export {job_id} CHECKPOINT" in text
    )
    assert f"opd-local/{job_id}" in text  # the published final checkpoint is exported already
    out = json.loads(opd("checkpoints", job_id, "--local", url, "--json").stdout)
    assert set(out) == {"job_id", "checkpoints", "best_reason", "export_hint"}
    first = out["checkpoints"][0]
    assert {
        "checkpoint",
        "checkpoint_id",
        "step",
        "status",
        "expire_time",
        "expires_in_days",
        "model_name",
    } <= set(first)
    assert sum(c["best"] for c in out["checkpoints"]) == 1 and 14 < first["expires_in_days"] <= 15


def test_export_prints_the_name_to_deploy(job_id, local_server):
    url = local_server.base_url
    proc = opd("export", job_id, "checkpoint-2", "--model-name", "early", "--local", url)
    assert proc.returncode == 0, proc.stderr
    assert "exported checkpoint-2" in proc.stdout and "opd deploy " in proc.stdout
    out = json.loads(opd("export", job_id, "2", "--local", url, "--json").stdout)
    assert out["name"] == "checkpoint-2" and out["model_name"] and out["expire_time"]
    # the display name is shown where checkpoints are listed, beside the deploy name (test_after_job may have
    # exported checkpoint-2 first, under its own display name: an export is idempotent)
    listed = json.loads(opd("checkpoints", job_id, "--local", url, "--json").stdout)["checkpoints"]
    entry = next(c for c in listed if c["checkpoint"] == "checkpoint-2")
    display, deploy = entry["display_name"], entry["model_name"]
    assert display in ("early", "my early step") and deploy != display and out["display_name"] == display
    assert f"{display!r} is its display name" in proc.stdout and f"opd deploy {deploy}`" in proc.stdout
    table = opd("checkpoints", job_id, "--local", url, COLUMNS="80").stdout
    row = next(line for line in table.splitlines() if line.startswith("checkpoint-2 "))
    assert row.split()[-len(display.split()) - 1 :] == [deploy, *display.split()]  # deploy name, display name
    assert "deploy name" in table and "display name" in table and "not by its display name" in table
    missing = opd("export", job_id, "checkpoint-999", "--local", url)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert "404" in missing.stderr and f"opd checkpoints {job_id}" in missing.stderr


def test_logs_search_and_tail(job_id, local_server):
    url = local_server.base_url
    proc = opd("logs", job_id, "--search", "SAVED CHECKPOINT", "--local", url)
    assert proc.returncode == 0, proc.stderr
    hits = proc.stdout.strip().splitlines()
    assert hits and all("saved checkpoint" in h.lower() for h in hits)
    out = json.loads(
        opd("logs", job_id, "--search", "checkpoint", "--tail", "1", "--local", url, "--json").stdout
    )
    assert set(out) == {"job_id", "search", "tail", "matched", "lines"} and out["matched"] >= 1
    assert len(out["lines"]) == 1 and set(out["lines"][0]) == {"line", "text"}
    assert len(opd("logs", job_id, "--tail", "3", "--local", url).stdout.strip().splitlines()) == 3


def test_deploy_plan_is_checked_before_sending_and_a_paid_one_needs_yes(local_server):
    url = local_server.base_url
    refused = opd("deploy", "qwen3-8b", "--plan", "mu", "--billing-method", "POST_PAY", "--local", url)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "plan 'mu' needs deploy_spec" in refused.stderr
    bad_json = opd("deploy", "qwen3-8b", "--plan", "ptu", "--deploy-spec", "{nope", "--local", url)
    assert bad_json.returncode == 2 and "--deploy-spec is not JSON" in bad_json.stderr
    paid = opd("deploy", "qwen3-8b", "--cloud", DASHSCOPE_API_KEY="sk-test-not-sent")
    assert paid.returncode == 1 and "paid Bailian deployment" in paid.stderr and "--yes" in paid.stderr
    spec = '{"input_tpm": 1000, "output_tpm": 200}'
    args = ["--plan", "ptu", "--deploy-spec", spec, "--suffix", "cliptu", "--no-wait", "--json"]
    made = opd("deploy", "qwen3-8b", *args, "--local", url)
    assert made.returncode == 0, made.stderr
    dep = json.loads(made.stdout)
    try:
        assert dep["deployed_model"] == "qwen3-8b-cliptu" and dep["plan"] == "ptu"
        assert dep["charge_type"] == "ptu" and dep["raw"]["deploy_spec"]["input_tpm"] == 1000
    finally:
        assert opd("undeploy", dep["deployed_model"], "--local", url).returncode == 0
