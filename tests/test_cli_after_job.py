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


# ---- issue 42: the best checkpoint is picked only from scores measured at its own step ----------------


@pytest.fixture(scope="module")
def misaligned_job(local_server, tmp_path_factory):
    """A reward job evaluating every 2 steps and saving every 3 (the audit's eval 2 / save 5, shorter):
    56 rows / batch 8 = 7 steps, so checkpoint-3 falls between two evaluations, checkpoint-6 and the final
    (step 7, always evaluated) do not."""
    from conftest import tiny_workspace, wait_status

    from opd_nb.client import JobClient, resolve_target, submit

    ws = tiny_workspace(
        "reward", tmp_path_factory.mktemp("misaligned") / "ws", train_rows=56, eval_steps=2, save_steps=3
    )
    client = JobClient(resolve_target("local", base_url=local_server.api_base))
    job_id = submit(ws, client.target, no_check=True).job_id  # planted: preflight warns about exactly this
    job = wait_status(client, job_id, {"SUCCEEDED", "FAILED", "CANCELED"}, timeout=540)
    assert job.status == "SUCCEEDED", job.message
    return job_id, ws, client


def _measured(client, job_id: str) -> dict[int, float]:
    from opd_nb.constants import REWARD_MEAN

    return {r["step"]: r[REWARD_MEAN] for r in client.metrics(job_id) if REWARD_MEAN in r}


def test_preflight_warns_about_the_misaligned_save_steps_of_that_job(misaligned_job):
    from opd_nb.checks import check

    job_id, ws, client = misaligned_job  # (the first test of the job: it trains here)
    measured = _measured(client, job_id)
    assert 3 not in measured and 6 in measured and 7 in measured  # the job is the case we mean
    (hit,) = check(ws, "local", base_url="http://127.0.0.1:9/api/v1").by_rule("config.save-steps-unscored")
    assert "save_steps 3 is not a multiple of eval_steps 2" in hit.message and "set save_steps: 4" in hit.fix


def test_opd_checkpoints_and_watch_name_the_best_scored_at_its_own_step(misaligned_job, local_server):
    from opd_nb.constants import REWARD_MEAN

    job_id, _, client = misaligned_job
    measured = _measured(client, job_id)
    # opd checkpoints --json: checkpoint-3 is unscored, never credited with step 2's reward
    out = json.loads(opd("checkpoints", job_id, "--local", local_server.base_url, "--json").stdout)
    three = {c["checkpoint"]: c for c in out["checkpoints"]}["checkpoint-3"]
    assert three["unscored"] and not three["best"] and three["score"] is None
    assert REWARD_MEAN not in three["metrics"]
    (best,) = [c for c in out["checkpoints"] if c["best"]]
    assert best["step"] in measured and best["score"] == pytest.approx(measured[best["step"]])
    assert best["score"] == max(c["score"] for c in out["checkpoints"] if c["score"] is not None)
    assert f"= {measured[best['step']]:.4g}, measured at its step {best['step']}" in out["best_reason"]
    assert f"the docs' rule picks {best['checkpoint']}" in out["export_hint"]
    # opd checkpoints (text): the same marks
    text = opd("checkpoints", job_id, "--local", local_server.base_url).stdout
    assert "unscored" in next(line for line in text.splitlines() if line.startswith("checkpoint-3 "))
    assert f"best: {out['best_reason']}" in text
    # opd watch: its last line names the same checkpoint and the unscored one
    watch = opd("watch", job_id, "--local", local_server.base_url)
    assert watch.returncode == 0, watch.stderr
    line = (
        "best checkpoint:" + watch.stdout.split("best checkpoint:", 1)[1].splitlines()[0]
    )  # after Live's codes
    assert line.startswith(f"best checkpoint: {best['checkpoint']} (step {best['step']})")
    assert "checkpoint-3" in line.split("unscored", 1)[1]


def test_the_monitor_and_compare_pick_the_same_checkpoint(misaligned_job, local_server, finished_job):
    from opd_nb.experiments.compare import compare_jobs
    from opd_nb.health.checkpoint_table import checkpoint_table
    from opd_nb.notebook import monitor_html
    from opd_nb.notebook.monitor import JobMonitor

    job_id, _, client = misaligned_job
    table = checkpoint_table(job_id, client.checkpoints(job_id), client.metrics(job_id))
    (best,) = [c for c in table.checkpoints if c.best]
    # the notebook's monitor (its view and its saved HTML)
    view = JobMonitor(job_id, client).start().wait(timeout_s=60).state["jobs"][job_id]
    assert (
        view["best_checkpoint"]["name"] == best.checkpoint and "checkpoint-3" in view["unscored_checkpoints"]
    )
    html = monitor_html.checkpoints_html({"jobs": {job_id: view}})
    assert "unscored" in html and f"picks {best.checkpoint}" in html
    # opd compare judges a reward job at its best checkpoint's own score
    judged = compare_jobs(client, [job_id, finished_job("pure-distill").job.job_id]).jobs[0]
    assert judged.best_checkpoint["name"] == best.checkpoint
    assert judged.checkpoint_reward == pytest.approx(_measured(client, job_id)[best.step])
