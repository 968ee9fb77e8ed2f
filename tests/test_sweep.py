"""`opd sweep`: one variable, one job per value, the functions registered once; refusals send nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import stop_jobs, tiny_workspace
from sweep_jobs import VALUES, finished_sweep, uploads

from opd_nb.cli import invoke
from opd_nb.errors import OpdError
from opd_nb.experiments import plan_sweep

OPD = [sys.executable, "-c", "from opd_nb.cli import main; main()"]


def _opd(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASHSCOPE_", "OPD_NB_"))}
    return subprocess.run([*OPD, *args], capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def client(local_server):
    from opd_nb.client import JobClient, resolve_target

    return JobClient(resolve_target("local", base_url=local_server.api_base))


def _sent(local_server, client) -> tuple[int, int, int]:
    """What the server has received: jobs, uploaded datasets, function zips."""
    import httpx

    files = httpx.get(f"{local_server.api_base}/files", headers={"Authorization": "Bearer t"}, timeout=30)
    return client.list(size=1).total, files.json()["output"]["total"], uploads(local_server)


@pytest.mark.slow
def test_refusals_and_dry_run_send_nothing(local_server, client, tmp_path, monkeypatch):
    ws = tiny_workspace("reward", tmp_path / "ws", train_rows=9)  # rows > batch_size
    before = _sent(local_server, client)
    local = ["--local", local_server.base_url]
    refusals = [
        (
            ["--param", "learning_rate=5e-7,2e-6", "--param", "batch_size=4,8", *local],
            "one variable at a time",
        ),
        (["--param", "learning_rate=5e-7,20", *local], "above the maximum 1"),
        (["--param", "n_rollouts=2,2.5", *local], "expected int"),
        (["--param", "learnig_rate=1e-6", *local], "did you mean learning_rate"),
    ]
    for args, message in refusals:
        with pytest.raises(OpdError, match=message):
            invoke(["sweep", str(ws), *args])
    grid = plan_sweep(str(ws), ["learning_rate=5e-7,1e-6", "batch_size=4,8"], grid=True)  # --grid: every pair
    name = yaml.safe_load((ws / "config.yaml").read_text())["name"]
    assert [p.job_name for p in grid.points][1:3] == [
        f"{name}-learning_rate-5e-7-batch_size-8",
        f"{name}-learning_rate-1e-6-batch_size-4",
    ]
    assert grid.points[3].sets == {
        "training.hyper_parameters.learning_rate": 1e-6,
        "training.hyper_parameters.batch_size": 8,
    }
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-not-a-real-key-0000000000")
    monkeypatch.delenv("DASHSCOPE_HTTP_BASE_URL", raising=False)
    with pytest.raises(OpdError, match=r"2 paid job\(s\) on Bailian") as paid:
        invoke(["sweep", str(ws), "--param", "learning_rate=5e-7,2e-6", "--cloud"])
    assert "--yes" in str(paid.value)

    dry = _opd("sweep", str(ws), "--param", "learning_rate=5e-7,2e-6", *local, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["param"] == "learning_rate" and [j["value"] for j in plan["jobs"]] == [5e-7, 2e-6]
    config = yaml.safe_load((ws / "config.yaml").read_text())
    for job, (label, value) in zip(plan["jobs"], (("5e-7", 5e-7), ("2e-6", 2e-6)), strict=True):
        hp = config["training"]["hyper_parameters"]
        assert job["request"]["hyper_parameters"] == {**hp, "learning_rate": value}  # the one change
        assert job["job_name"] == f"{config['name']}-learning_rate-{label}"
    assert plan["registrations"][0].startswith("registering reward-1")
    text = str(invoke(["sweep", str(ws), "--param", "learning_rate=5e-7,2e-6", *local, "--dry-run"]))
    assert "nothing sent" in text and "learning_rate: 2.0e-06" in text
    assert "the other jobs reuse what the first job registers" in text
    assert _sent(local_server, client) == before  # no job, no dataset, no function zip


@pytest.mark.slow
def test_cli_json_submits_one_job_per_value_and_registers_once(local_server, client, tmp_path):
    ws = tiny_workspace("reward", tmp_path / "ws", train_rows=9)  # rows > batch_size
    zips = uploads(local_server)
    run = _opd("sweep", str(ws), "--param", "lr_warmup_steps=0,1", "--local", local_server.base_url, "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    stop_jobs(
        client, [job["job_id"] for job in out["jobs"]]
    )  # the shape and registrations are what this tests
    assert out["param"] == "lr_warmup_steps" and [j["value"] for j in out["jobs"]] == [0, 1]
    assert all(set(j) == {"value", "job_id"} for j in out["jobs"])
    first, second = (client.get(j["job_id"]).functions for j in out["jobs"])
    assert first == second and first[0]["entity_id"].startswith("rw-")
    assert uploads(local_server) == zips + 1


@pytest.mark.slow
def test_two_values_succeed_with_one_registration(local_server, client, tmp_path_factory):
    swept = finished_sweep(local_server, tmp_path_factory.mktemp("swept"))
    jobs = [client.get(job_id) for job_id in swept.monitor.job_ids]
    assert [j.status for j in jobs] == ["SUCCEEDED", "SUCCEEDED"]
    assert swept.uploads == 1  # the first job registered the reward, the second reused it
    (first,), (second,) = (j.functions for j in jobs)
    assert first == second and first["name"] == "reward-1" and first["entity_id"].startswith("rw-")
    notes = [f["note"] for job in swept.monitor.sweep.jobs for f in job.functions]
    assert (
        notes[0].startswith("registering reward-1")
        and notes[1] == f"reusing reward-1 ({first['entity_id']}), code unchanged"
    )
    name = yaml.safe_load(swept.config_before)["name"]
    assert [j.job_name.rsplit("-", 1)[0] for j in jobs] == [f"{name}-learning_rate-{v}" for v in VALUES]
    assert [j.hyper_parameters["learning_rate"] for j in jobs] == [5e-7, 2e-6]
    rest = [{k: v for k, v in j.hyper_parameters.items() if k != "learning_rate"} for j in jobs]
    assert rest[0] == rest[1]
    assert (swept.workspace / "config.yaml").read_bytes() == swept.config_before  # never edited

    # The notebook's monitor: the sweep's table on top, both jobs live and overlaid, their functions shown.
    widgets = swept.monitor._ensure_widgets()
    assert widgets["box"].children[0] is widgets["sweep"]
    assert "learning_rate=5e-7" in widgets["sweep"].value and jobs[1].job_id in widgets["sweep"].value
    assert f"runs: reward-1 (reward, {first['entity_id']})" in widgets["status"].value
    assert {c["job"] for c in swept.monitor._chart.data()["series"]} == {j.job_id for j in jobs}
    assert Path(swept.workspace / ".opd" / "entities.json").is_file()
