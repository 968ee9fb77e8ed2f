"""Jobs into the trackers a team reads, read back with each tracker's own reader: trackio's API, the W&B
offline run's transaction log (`wandb leet inspect`), TensorBoard's EventAccumulator, MlflowClient. The
names, steps and values equal the job's `/metrics`, for a job (`opd report`, backfilled) and its
continued job (`opd watch --report-to`, streamed while it trains), whose steps go on from its parent's."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import tiny_workspace, wait_status
from pydantic import SecretStr

from opd_nb.cli import invoke
from opd_nb.client import JobClient, Target, resolve_target, submit
from opd_nb.errors import OpdError
from opd_nb.trackers import DEFAULT_PROJECT
from opd_nb.trackers.reporter import metric_values

ALL = "trackio,wandb,tensorboard,mlflow"
PROJECT = DEFAULT_PROJECT  # what `opd watch --report-to` writes to


def tracker_env(root: Path) -> dict[str, str]:
    """Every tracker's store under `root` (the user's own are never touched), W&B left to decide offline."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_", "TRACKIO_"))}
    (root / "wandb").mkdir(parents=True, exist_ok=True)
    env.update(
        TRACKIO_DIR=str(root / "trackio"),
        WANDB_DIR=str(root / "wandb"),
        WANDB_DATA_DIR=str(root / "wandb-data"),
        WANDB_CACHE_DIR=str(root / "wandb-cache"),
        WANDB_CONFIG_DIR=str(root / "wandb-config"),
        MLFLOW_TRACKING_URI=f"sqlite:///{root / 'mlflow.db'}",
        OPD_TENSORBOARD_DIR=str(root / "runs"),
        NETRC=str(root / "no-netrc"),
    )
    return env


def expected(rows: list[dict], offset: int) -> dict[int, dict[str, float]]:
    """What every tracker must hold: each row's metrics at the job's global step."""
    out: dict[int, dict[str, float]] = {}
    for row in rows:
        out.setdefault(offset + int(row["step"]), {}).update(metric_values(row))
    return out


def tensorboard_scalars(run_dir: Path) -> dict[int, dict[str, float]]:
    """Every scalar a TensorBoard run directory holds, by step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    found: dict[int, dict[str, float]] = {}
    for tag in acc.Tags()["scalars"]:
        for event in acc.Scalars(tag):
            found.setdefault(event.step, {})[tag] = event.value
    return found


@pytest.fixture(scope="module")
def reported(local_server, finished_job, tmp_path_factory) -> Iterator[dict[str, Any]]:
    """The shared reward job backfilled with `opd report`, and a job continuing it streamed with
    `opd watch --report-to` from its submit to its end; both to all four trackers, from fresh shells."""
    root = tmp_path_factory.mktemp("trackers")
    env = tracker_env(root)
    api = local_server.api_base
    client = JobClient(resolve_target("local", base_url=api))
    parent = finished_job("reward").job_id
    opd = [sys.executable, "-m", "opd_nb"]
    backfill = subprocess.run([*opd, "report", parent, "--to", ALL, "--project", PROJECT, "--local", api],
                              env=env, cwd=root, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert backfill.returncode == 0, backfill.stderr[-3000:]
    ws = tiny_workspace("reward", root / "ws")
    child = submit(ws, client.target, model=f"opd-local/{parent}").job_id
    watch = subprocess.run([*opd, "watch", child, "--report-to", ALL, "--local", api, "--json"],
                           env=env, cwd=root, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert watch.returncode == 0, watch.stderr[-3000:]
    wait_status(client, child, {"SUCCEEDED"}, timeout=10)
    rows = {parent: client.metrics(parent), child: client.metrics(child)}
    last = max(int(r["step"]) for r in rows[parent])
    yield {
        "root": root,
        "env": env,
        "parent": parent,
        "child": child,
        "offset": {parent: 0, child: last},
        "rows": rows,
        "printed": backfill.stdout + watch.stderr,
    }


def _check_job(
    found: dict[int, dict[str, float]], reported: dict, job: str, tracker: str, exact: bool = True
) -> None:
    want = expected(reported["rows"][job], reported["offset"][job])
    assert set(found) == set(want), f"{tracker} {job}: steps {sorted(found)} != {sorted(want)}"
    for step, values in want.items():
        got = found[step]
        assert set(got) == set(values), f"{tracker} {job} step {step}: {set(got) ^ set(values)}"
        for name, value in values.items():
            same = got[name] == value if exact else np.float32(value) == np.float32(got[name])
            assert same, f"{tracker} {job} step {step} {name}: {got[name]} != {value}"


@pytest.mark.slow  # trains a job (the shared one, then a continued one)
def test_where_each_run_went_is_said(reported):
    printed = reported["printed"]
    for tracker in ALL.split(","):
        assert tracker in printed
    assert "wandb sync" in printed and "tensorboard --logdir" in printed and "mlflow ui" in printed


@pytest.mark.slow  # trains a job (the shared one, then a continued one)
def test_trackio_holds_the_metrics_config_samples_and_end(reported):
    code = (
        "import json, trackio\nfrom trackio.sqlite_storage import SQLiteStorage\n"
        f"runs = trackio.Api().runs({PROJECT!r})\n"
        "print(json.dumps({r.name: {'config': r.config, 'alerts': r.alerts(),"
        f" 'logs': SQLiteStorage.get_logs({PROJECT!r}, r.name)}} for r in runs}}, default=str))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=reported["env"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    runs = json.loads(out.stdout.strip().splitlines()[-1])
    for job in (reported["parent"], reported["child"]):
        run = runs[job]
        found: dict[int, dict[str, float]] = {}
        tables = 0
        for entry in run["logs"]:
            tables += "rollouts/samples" in entry
            values = {k: v for k, v in entry.items() if k not in ("step", "timestamp", "rollouts/samples")}
            if values:
                found.setdefault(entry["step"], {}).update(values)
        _check_job(found, reported, job, "trackio")
        assert tables > 0 and run["config"]["student"] and run["config"]["hyper_parameters"]
        assert any(a["title"] == "final_status" and "SUCCEEDED" in a["text"] for a in run["alerts"])
    child = runs[reported["child"]]["config"]
    assert (
        child["parent_job_id"] == reported["parent"]
        and child["step_offset"] == reported["offset"][reported["child"]]
    )
    assert child["_Group"] == reported["parent"]  # the chain is one group


def _wandb_runs(reported: dict) -> dict[str, list[dict]]:
    runs = {}
    for path in sorted((reported["root"] / "wandb" / "wandb").glob("offline-run-*")):
        out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(path)],
                             env=reported["env"], capture_output=True, text=True, timeout=120)  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
        records = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        name = next(r["run"]["display_name"] for r in records if r["type"] == "run")
        runs[name] = records
    return runs


@pytest.mark.slow  # trains a job (the shared one, then a continued one)
def test_the_wandb_offline_run_holds_the_metrics_config_samples_and_end(reported):
    runs = _wandb_runs(reported)
    for job in (reported["parent"], reported["child"]):
        records = runs[job]
        found: dict[int, dict[str, float]] = {}
        tables = 0
        for r in (r["history"] for r in records if r["type"] == "history"):
            item = r["item"]
            tables += "rollouts/samples._type" in item
            values = {k: v for k, v in item.items() if not k.startswith(("_", "rollouts/samples"))}
            if values:
                found.setdefault(int(r["step"]["num"]), {}).update(values)
        _check_job(found, reported, job, "wandb")
        run = next(r["run"] for r in records if r["type"] == "run")
        config = run["config"]["update"]
        assert tables > 0 and config["student"] and config["mode"] == "pg_opd" and run["project"] == PROJECT
        summary = {
            k: v for r in records if r["type"] == "summary" for k, v in r["summary"].get("update", {}).items()
        }
        assert summary["final_status"] == "SUCCEEDED"
        assert any(r["type"] == "exit" and r["exit"]["exit_code"] == 0 for r in records)
    assert runs[reported["child"]][1]["run"]["config"]["update"]["parent_job_id"] == reported["parent"]


@pytest.mark.slow  # trains a job (the shared one, then a continued one)
def test_tensorboard_event_files_hold_the_metrics_at_global_steps(reported):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for job in (reported["parent"], reported["child"]):
        acc = EventAccumulator(str(reported["root"] / "runs" / job))
        acc.Reload()
        found: dict[int, dict[str, float]] = {}
        for tag in acc.Tags()["scalars"]:
            for event in acc.Scalars(tag):
                found.setdefault(event.step, {})[tag] = event.value
        _check_job(found, reported, job, "tensorboard", exact=False)  # TensorBoard keeps float32
        texts = set(acc.Tags()["tensors"])
        assert {"opd/config/text_summary", "opd/final_status/text_summary", "rollouts/samples/text_summary"} <= texts or {
            "opd/config", "opd/final_status", "rollouts/samples"} <= texts, texts  # fmt: skip


@pytest.mark.slow  # trains a job (the shared one, then a continued one)
def test_mlflow_holds_the_metrics_params_samples_and_end(reported):
    from mlflow import MlflowClient

    from opd_nb.trackers.mlflow_run import mlflow_key

    client = MlflowClient(tracking_uri=reported["env"]["MLFLOW_TRACKING_URI"])
    experiment = client.get_experiment_by_name(PROJECT)
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    for job in (reported["parent"], reported["child"]):
        run = runs[job]
        want = expected(reported["rows"][job], reported["offset"][job])
        names = {n for values in want.values() for n in values}
        found: dict[int, dict[str, float]] = {}
        for name in names:
            for m in client.get_metric_history(run.info.run_id, mlflow_key(name)):
                found.setdefault(m.step, {})[name] = m.value
        assert set(run.data.metrics) == {mlflow_key(n) for n in names}  # nothing but the job's metrics
        _check_job(found, reported, job, "mlflow")
        assert run.info.status == "FINISHED" and run.data.tags["opd.final_status"] == "SUCCEEDED"
        assert run.data.params["student"] and "hyper_parameters.learning_rate" in run.data.params
        artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "rollouts")]
        assert artifacts and all(p.endswith(".json") for p in artifacts)
    assert runs[reported["child"]].data.tags["opd.parent_job_id"] == reported["parent"]


# ---------------------------------------------------------------- Bailian, and mistakes
@pytest.mark.slow  # trains a job (the shared one, then a continued one)
def test_on_bailian_the_report_says_what_it_cannot_see_and_writes_the_end(
    local_server, finished_job, tmp_path, monkeypatch
):
    from bailian_standin import CountingProxy
    from mlflow import MlflowClient

    from opd_nb.trackers import report_job

    for key, value in tracker_env(tmp_path).items():
        if key.startswith(("MLFLOW_", "OPD_")):
            monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)  # MLflow keeps a new experiment's artifacts under ./mlruns
    proxy = CountingProxy(local_server.base_url)
    try:
        cloud = JobClient(Target(kind="cloud", base_url=proxy.api_base, api_key=SecretStr("sk-standin-0000")))
        job = finished_job("reward").job_id
        result = report_job(cloud, job, ["tensorboard", "mlflow"], project=PROJECT)
    finally:
        proxy.close()
    assert result.metric_rows == 0 and result.status == "SUCCEEDED"
    assert any("no metrics API" in note for note in result.notes)
    assert not any("/metrics" in path or "/rollouts" in path for _, path in proxy.requests)
    run = MlflowClient().search_runs([MlflowClient().get_experiment_by_name(PROJECT).experiment_id])[0]
    assert (
        run.data.tags["opd.final_status"] == "SUCCEEDED" and run.data.tags["opd.checkpoints"] != "none listed"
    )
    assert not run.data.metrics


def test_an_unknown_or_missing_tracker_is_one_line_before_any_request(monkeypatch):
    import importlib.util

    with pytest.raises(OpdError) as unknown:
        invoke(["report", "ft-202601010000-abcdef", "--to", "wandb,neptune", "--local", "http://127.0.0.1:9"])
    assert "unknown tracker 'neptune'" in str(unknown.value) and "trackio,wandb,tensorboard,mlflow" in str(
        unknown.value
    )
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    with pytest.raises(OpdError) as missing:  # port 9 answers nothing: the error must come first
        invoke(["report", "ft-202601010000-abcdef", "--to", "trackio,wandb", "--local", "http://127.0.0.1:9"])
    assert "pip install 'opd-nb[wandb]'" in str(missing.value)
    with pytest.raises(OpdError) as watching:
        invoke(["watch", "ft-202601010000-abcdef", "--report-to", "wandb", "--local", "http://127.0.0.1:9"])
    assert "opd-nb[wandb]" in str(watching.value)


def test_metric_values_keep_every_finite_number_but_the_step():
    row = {"step": 3, "epoch": 1.0, "a/b": 0.5, "flag": True, "note": "x", "bad": math.nan, "none": None}
    assert metric_values(row) == {"epoch": 1.0, "a/b": 0.5}


@pytest.mark.slow  # trains a job (the shared one, then a continued one)
def test_the_monitor_reports_to_trackers_from_its_polling_thread_without_printing(
    local_server, finished_job, tmp_path, monkeypatch, capfd
):

    from opd_nb.notebook.monitor import JobMonitor

    for key, value in tracker_env(tmp_path).items():
        if key.startswith(("MLFLOW_", "OPD_")):
            monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)  # MLflow keeps a new experiment's artifacts under ./mlruns
    job = finished_job("reward").job_id
    client = JobClient(resolve_target("local", base_url=local_server.api_base))
    monitor = JobMonitor(job, client, poll_s=0.2, report_to="tensorboard,mlflow").start()
    monitor.wait(timeout_s=120)
    assert monitor.done
    out, err = capfd.readouterr()
    assert out == "" and "mlflow" not in err.lower(), (out, err)  # the thread sets state only
    notes = monitor.state["notes"]
    assert any(n.startswith("report-to tensorboard: event files in") for n in notes), notes
    assert any(n.startswith("report-to mlflow: run ") for n in notes), notes
    found = tensorboard_scalars(tmp_path / "runs" / job)
    want = expected(client.metrics(job), 0)
    assert set(found) == set(want) and all(set(found[s]) == set(want[s]) for s in want)


def test_the_monitor_refuses_an_unknown_tracker_at_once():
    from opd_nb.notebook.monitor import JobMonitor

    with pytest.raises(OpdError) as refused:
        JobMonitor("ft-202601010000-abcdef", JobClient(resolve_target("local")), report_to="tensorbored")
    assert "unknown tracker 'tensorbored'" in str(refused.value)


@pytest.mark.slow  # runs a job (it fails at once)
def test_on_bailian_a_failed_jobs_log_errors_become_alerts(local_server, tmp_path, monkeypatch):
    from bailian_standin import CountingProxy
    from mlflow import MlflowClient

    from opd_nb.trackers import report_job

    for key, value in tracker_env(tmp_path).items():
        if key.startswith(("MLFLOW_", "OPD_")):
            monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)  # MLflow keeps a new experiment's artifacts under ./mlruns
    ws = tiny_workspace("reward", tmp_path / "ws")
    reward = ws / "functions" / "reward" / "reward.py"
    reward.write_text('raise RuntimeError("the reward module cannot load")\n' + reward.read_text())
    local = JobClient(resolve_target("local", base_url=local_server.api_base))
    job = submit(ws, local.target, no_check=True).job_id
    wait_status(local, job, {"FAILED"}, timeout=300)
    proxy = CountingProxy(local_server.base_url)
    try:
        cloud = JobClient(Target(kind="cloud", base_url=proxy.api_base, api_key=SecretStr("sk-standin-0000")))
        result = report_job(cloud, job, ["mlflow"], project=PROJECT)
    finally:
        proxy.close()
    assert result.status == "FAILED" and result.alerts >= 2
    client = MlflowClient()
    run = client.search_runs([client.get_experiment_by_name(PROJECT).experiment_id])[0]
    assert run.info.status == "FAILED"
    assert "the job FAILED" in run.data.tags["opd.alert.failed"]
    assert "error line in the job's log" in run.data.tags["opd.alert.log_error"]


def test_a_row_that_grows_in_place_reaches_the_tracker_whole(
    local_server, finished_job, tmp_path, monkeypatch
):
    """A live job's step row grows in place (an agentic step's trace numbers arrive while it runs, the
    engine's when it ends): the reporter reads such a row again, as the chart feed does, and writes the
    keys it gained at that step, so TensorBoard ends up holding every number of every row."""

    from opd_nb.trackers.reporter import Reporter

    monkeypatch.setenv("OPD_TENSORBOARD_DIR", str(tmp_path / "runs"))
    client = JobClient(resolve_target("local", base_url=local_server.api_base))
    job_id = finished_job("reward").job_id
    job, rows = client.get(job_id), client.metrics(job_id)
    assert rows and all(len(metric_values(row)) >= 2 for row in rows)
    reporter = Reporter(client, job_id, ["tensorboard"])
    for i, row in enumerate(rows):  # each step arrives with half its numbers, then grows to all of them
        names = sorted(metric_values(row))
        half = {k: v for k, v in row.items() if k not in names[len(names) // 2 :]}
        reporter.poll(job, [*rows[:i], half])
        reporter.poll(job, rows[: i + 1])
    result = reporter.end(job)
    assert result.metric_rows == len({int(r["step"]) for r in rows})
    found = tensorboard_scalars(tmp_path / "runs" / job_id)
    want = expected(rows, 0)
    assert set(found) == set(want)
    for step, values in want.items():
        assert set(found[step]) == set(values), f"step {step}: missing {set(values) - set(found[step])}"
        assert all(np.float32(v) == np.float32(found[step][k]) for k, v in values.items())
