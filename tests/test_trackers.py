"""Jobs into the trackers a team reads, read back with each tracker's own reader: trackio's API, the W&B
offline run's transaction log (`wandb leet inspect`), TensorBoard's EventAccumulator, MlflowClient.

One module fixture: the shared reward job backfilled twice (`opd report`), a reward job continuing it and
an agentic job each streamed live (`opd watch --report-to`) and then exported again. A snapshot of the
stores taken between the watches and the second exports is the streamed run alone. Every tracker must
hold, for every job, one run whose points are the job's final `/metrics` point for point (one value per
name and step): the streamed run equals the backfill, and a second export leaves the same one run."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
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
TRACKERS = ALL.split(",")
PROJECT = DEFAULT_PROJECT  # what `opd watch --report-to` writes to
STORES = ("trackio", "wandb", "mlflow.db", "runs")  # what tracker_env puts under a root
Points = dict[tuple[int, str], list[float]]  # (global step, metric name) -> every value a tracker holds


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
    return _by_step(tensorboard_points(run_dir))


def _by_step(points: Points) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for (step, name), values in points.items():
        out.setdefault(step, {})[name] = values[-1]
    return out


def tensorboard_points(run_dir: Path) -> Points:
    """Every scalar point of a TensorBoard run directory (all its event files), by step and tag."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    found: Points = {}
    for tag in acc.Tags()["scalars"]:
        for event in acc.Scalars(tag):
            found.setdefault((event.step, tag), []).append(event.value)
    return found


_READ: dict[tuple[str, str], Any] = {}  # (reader, store) -> what it read: each store is read once


def wandb_runs(root: Path, env: dict[str, str]) -> list[tuple[str, list[dict]]]:
    """(run name, its records) of each W&B offline run under `root`, read by `wandb leet inspect`."""
    if ("wandb", str(root)) in _READ:
        return _READ["wandb", str(root)]
    runs = _READ["wandb", str(root)] = []
    for path in sorted((root / "wandb" / "wandb").glob("offline-run-*")):
        out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(path)],
                             env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
        records = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        runs.append((next(r["run"]["display_name"] for r in records if r["type"] == "run"), records))
    return runs


def wandb_points(records: list[dict]) -> Points:
    found: Points = {}
    for r in (r["history"] for r in records if r["type"] == "history"):
        for name, value in r["item"].items():
            if not name.startswith(("_", "rollouts/samples")):
                found.setdefault((int(r["step"]["num"]), name), []).append(value)
    return found


TRACKIO_READER = (
    "import json, sys, trackio\nfrom trackio.sqlite_storage import SQLiteStorage\n"
    "project = sys.argv[1]\nout = []\n"
    "for r in trackio.Api().runs(project):\n"
    "    out.append({'name': r.name, 'config': r.config, 'alerts': r.alerts(),"
    " 'logs': SQLiteStorage.get_logs(project, r.name)})\n"
    "print(json.dumps(out, default=str))\n"
)


def trackio_runs(env: dict[str, str]) -> list[dict]:
    """Each trackio run of the project (name, config, alerts, logs), by trackio's own API."""
    if ("trackio", env["TRACKIO_DIR"]) in _READ:
        return _READ["trackio", env["TRACKIO_DIR"]]
    out = subprocess.run([sys.executable, "-c", TRACKIO_READER, PROJECT], env=env, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    runs = _READ["trackio", env["TRACKIO_DIR"]] = json.loads(out.stdout.strip().splitlines()[-1])
    return runs


def trackio_points(run: dict) -> Points:
    found: Points = {}
    for entry in run["logs"]:
        for name, value in entry.items():
            if name not in ("step", "timestamp", "rollouts/samples"):
                found.setdefault((entry["step"], name), []).append(value)
    return found


def mlflow_runs(env: dict[str, str]) -> tuple[Any, list[Any]]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    experiment = client.get_experiment_by_name(PROJECT)
    return client, client.search_runs([experiment.experiment_id])


def mlflow_points(client: Any, run: Any, names: set[str]) -> Points:
    from opd_nb.trackers.mlflow_run import mlflow_key

    back = {mlflow_key(n): n for n in names}
    found: Points = {}
    for key in run.data.metrics:
        for m in client.get_metric_history(run.info.run_id, key):
            found.setdefault((m.step, back.get(key, key)), []).append(m.value)
    return found


def read_back(
    root: Path, env: dict[str, str], jobs: dict[str, dict]
) -> dict[str, dict[str, tuple[int, Points]]]:
    """tracker -> job -> (how many runs it has, the points of its run(s)), each by the tracker's reader."""
    out: dict[str, dict[str, tuple[int, Points]]] = {t: {} for t in TRACKERS}
    runs = trackio_runs(env)
    for job in jobs:
        mine = [r for r in runs if r["name"] == job]
        out["trackio"][job] = (len(mine), trackio_points(mine[0]) if mine else {})
    w = wandb_runs(root, env)
    for job in jobs:
        mine = [records for name, records in w if name == job]
        out["wandb"][job] = (len(mine), wandb_points(mine[0]) if mine else {})
    for job in jobs:
        files = list((root / "runs" / job).glob("events.out.tfevents.*"))
        out["tensorboard"][job] = (len(files), tensorboard_points(root / "runs" / job))
    client, found = mlflow_runs(env)
    for job, info in jobs.items():
        mine = [r for r in found if r.info.run_name == job]
        names = {n for values in expected(info["rows"], info["offset"]).values() for n in values}
        out["mlflow"][job] = (len(mine), mlflow_points(client, mine[0], names) if mine else {})
    return out


def held(reported: dict, which: str) -> dict[str, dict[str, tuple[int, Points]]]:
    """`read_back` of the stores `which` ("live": as the watches left them; "final"), read once."""
    if which not in reported["read"]:
        root, env = (
            (reported["live"], reported["live_env"])
            if which == "live"
            else (reported["root"], reported["env"])
        )
        jobs = (
            reported["jobs"]
            if which == "final"
            else {j: reported["jobs"][j] for j in (reported["child"], reported["agentic"])}
        )
        reported["read"][which] = read_back(root, env, jobs)
    return reported["read"][which]


def assert_same_points(found: Points, rows: list[dict], offset: int, where: str, exact: bool = True) -> None:
    """One value per name and step, the names and steps of the job's final rows, each value equal
    (TensorBoard keeps float32: equal as float32)."""
    want = {(s, n): v for s, values in expected(rows, offset).items() for n, v in values.items()}
    twice = {k: v for k, v in found.items() if len(v) != 1}
    assert not twice, f"{where}: {len(twice)} point(s) held more than once, e.g. {next(iter(twice.items()))}"
    assert set(found) == set(want), f"{where}: missing {sorted(set(want) - set(found))[:5]}, extra {sorted(set(found) - set(want))[:5]}"  # fmt: skip
    for key, value in want.items():
        got = found[key][0]
        same = got == value if exact else np.float32(value) == np.float32(got)
        assert same, f"{where} {key}: {got} != {value} (the final value)"


def _opd(args: list[str], env: dict[str, str], cwd: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "opd_nb", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def reported(local_server, finished_job, tmp_path_factory) -> Iterator[dict[str, Any]]:
    """The shared reward job exported twice (`opd report`); a reward job continuing it and an agentic job,
    each streamed with `opd watch --report-to` from its submit to its end, then exported again; all to
    all four trackers, from fresh shells. `live` is a copy of the stores taken before the second exports."""
    began = time.monotonic()
    timings: list[str] = []

    def stage(what: str) -> None:
        timings.append(f"{what}: {time.monotonic() - began:.0f} s")

    root = tmp_path_factory.mktemp("trackers")
    env = tracker_env(root)
    api = local_server.api_base
    client = JobClient(resolve_target("local", base_url=api))
    parent = finished_job("reward").job_id
    stage("the shared reward job")
    report = ["--to", ALL, "--project", PROJECT, "--local", api]
    printed = _opd(["report", parent, *report], env, root)
    printed += _opd(["report", parent, *report], env, root)  # a second export: the same run
    stage("two exports of it")
    streamed = []
    # agentic: 3 steps and step 0, so steps 0 and 1 settle (and are written) while the job runs
    for mode, model in (("reward", f"opd-local/{parent}"), ("agentic", None)):
        ws = tiny_workspace(mode, root / f"ws-{mode}", train_rows=16 if model else 24)
        job = submit(ws, client.target, model=model).job_id
        printed += _opd(["watch", job, "--report-to", ALL, "--local", api, "--json"], env, root)
        wait_status(client, job, {"SUCCEEDED"}, timeout=10)
        streamed.append(job)
        stage(f"the live {mode} job, watched")
    child, agentic = streamed
    live = tmp_path_factory.mktemp("trackers-live")
    for store in STORES:  # the streamed runs alone
        shutil.copytree(root / store, live / store) if (root / store).is_dir() else shutil.copy(
            root / store, live / store
        )
    for job in streamed:  # watch, then export: still one run
        printed += _opd(["report", job, *report], env, root)
    stage("each exported after its watch")
    last = max(int(r["step"]) for r in client.metrics(parent))
    jobs = {
        job: {"rows": client.metrics(job), "offset": last if job == child else 0}
        for job in (parent, child, agentic)
    }
    yield {
        "root": root,
        "env": env,
        "live": live,
        "live_env": tracker_env(live),
        "parent": parent,
        "child": child,
        "agentic": agentic,
        "jobs": jobs,
        "offset": {j: info["offset"] for j, info in jobs.items()},
        "rows": {j: info["rows"] for j, info in jobs.items()},
        "printed": printed,
        "timings": timings,
        "read": {},  # what each store holds, read once (by `held`)
    }


@pytest.mark.slow  # trains jobs (the shared one, a continued one, an agentic one)
@pytest.mark.timeout(900)  # whichever test runs first sets the module's jobs up
def test_where_each_run_went_is_said(reported):
    printed = reported["printed"]
    print("\n".join(reported["timings"]))
    for tracker in TRACKERS:
        assert tracker in printed
    assert "wandb sync" in printed and "tensorboard --logdir" in printed and "mlflow ui" in printed


@pytest.mark.slow  # trains jobs (the shared one, a continued one, an agentic one)
@pytest.mark.timeout(900)  # whichever test runs first sets the module's jobs up
def test_a_streamed_run_equals_the_backfill_point_for_point(reported):
    """The stores as `opd watch --report-to` left them, before any export: each live job (a reward job
    and an agentic one, whose step rows grow in place) is one run per tracker holding every name and
    step of its final rows once, at its final value, as `opd report` writes them."""
    live = {j: reported["jobs"][j] for j in (reported["child"], reported["agentic"])}
    counts = []
    for tracker, by_job in held(reported, "live").items():
        for job, (runs, points) in by_job.items():
            assert runs == 1, f"{tracker} {job}: {runs} runs"
            assert_same_points(points, live[job]["rows"], live[job]["offset"], f"{tracker} live {job}",
                               exact=tracker != "tensorboard")  # fmt: skip
            counts.append(f"{tracker} {job}: {len({n for _, n in points})} names, {len(points)} points")
    print("\n".join(counts))


@pytest.mark.slow  # trains jobs (the shared one, a continued one, an agentic one)
@pytest.mark.timeout(900)  # whichever test runs first sets the module's jobs up
def test_a_second_export_leaves_the_one_run_of_each_job(reported):
    """After export twice (the parent) and watch-then-export (the live jobs): one run per job in each
    tracker (one TensorBoard event file), no point twice, every point its final value."""
    counts = []
    for tracker, by_job in held(reported, "final").items():
        for job, (runs, points) in by_job.items():
            assert runs == 1, f"{tracker} {job}: {runs} runs (event files for tensorboard)"
            info = reported["jobs"][job]
            counts.append(f"{tracker} {job}: {len({n for _, n in points})} names, {len(points)} points")
            assert_same_points(points, info["rows"], info["offset"], f"{tracker} {job}",
                               exact=tracker != "tensorboard")  # fmt: skip
    print("\n".join(counts))


@pytest.mark.slow  # trains jobs (the shared one, a continued one, an agentic one)
@pytest.mark.timeout(900)  # whichever test runs first sets the module's jobs up
def test_trackio_holds_the_config_samples_and_end(reported):
    runs = {r["name"]: r for r in trackio_runs(reported["env"])}
    for job in reported["jobs"]:
        run = runs[job]
        assert any("rollouts/samples" in entry for entry in run["logs"])
        assert run["config"]["student"] and run["config"]["hyper_parameters"]
        finals = [a for a in run["alerts"] if a["title"] == "final_status"]
        assert len(finals) == 1 and "SUCCEEDED" in finals[0]["text"]
    child = runs[reported["child"]]["config"]
    assert (
        child["parent_job_id"] == reported["parent"]
        and child["step_offset"] == reported["offset"][reported["child"]]
    )
    assert child["_Group"] == reported["parent"]  # the chain is one group


@pytest.mark.slow  # trains jobs (the shared one, a continued one, an agentic one)
@pytest.mark.timeout(900)  # whichever test runs first sets the module's jobs up
def test_the_wandb_offline_run_holds_the_config_samples_and_end(reported):
    from opd_nb.trackers.wandb_run import run_id

    runs = dict(wandb_runs(reported["root"], reported["env"]))
    for job in reported["jobs"]:
        records = runs[job]
        tables = sum(
            "rollouts/samples._type" in r["history"]["item"] for r in records if r["type"] == "history"
        )
        run = next(r["run"] for r in records if r["type"] == "run")
        config = run["config"]["update"]
        assert tables > 0 and config["student"] and run["project"] == PROJECT
        assert run["run_id"] == run_id(PROJECT, job)  # the same id on every report: W&B's one run
        summary = {
            k: v for r in records if r["type"] == "summary" for k, v in r["summary"].get("update", {}).items()
        }
        assert summary["final_status"] == "SUCCEEDED"
        assert any(r["type"] == "exit" and r["exit"]["exit_code"] == 0 for r in records)
    assert runs[reported["child"]][1]["run"]["config"]["update"]["parent_job_id"] == reported["parent"]
    assert runs[reported["parent"]][1]["run"]["config"]["update"]["mode"] == "pg_opd"


@pytest.mark.slow  # trains jobs (the shared one, a continued one, an agentic one)
@pytest.mark.timeout(900)  # whichever test runs first sets the module's jobs up
def test_tensorboard_event_files_hold_the_config_samples_and_end(reported):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for job in reported["jobs"]:
        acc = EventAccumulator(str(reported["root"] / "runs" / job))
        acc.Reload()
        texts = set(acc.Tags()["tensors"])
        assert {"opd/config/text_summary", "opd/final_status/text_summary", "rollouts/samples/text_summary"} <= texts or {
            "opd/config", "opd/final_status", "rollouts/samples"} <= texts, texts  # fmt: skip


@pytest.mark.slow  # trains jobs (the shared one, a continued one, an agentic one)
@pytest.mark.timeout(900)  # whichever test runs first sets the module's jobs up
def test_mlflow_holds_the_params_samples_and_end(reported):
    from opd_nb.trackers.mlflow_run import mlflow_key

    client, found = mlflow_runs(reported["env"])
    runs = {r.info.run_name: r for r in found}
    for job, info in reported["jobs"].items():
        run = runs[job]
        names = {n for values in expected(info["rows"], info["offset"]).values() for n in values}
        assert set(run.data.metrics) == {mlflow_key(n) for n in names}  # nothing but the job's metrics
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


def test_a_row_is_settled_once_the_engine_has_written_two_later_steps():
    from opd_nb.constants import EPOCH, TOOL_ERROR_RATE
    from opd_nb.plots.series import settled_rows

    rows = [
        {"step": 0, EPOCH: 0.0, "a": 1.0},
        {"step": 1, EPOCH: 0.5, "a": 2.0, TOOL_ERROR_RATE: 0.1},
        {"step": 2, EPOCH: 1.0, "a": 3.0},  # its spans may still come in, a refused export still counts here
        {"step": 3, TOOL_ERROR_RATE: 0.2},  # running: trace numbers only
    ]
    assert settled_rows(rows, ended=False) == 1
    assert settled_rows(rows[:2], ended=False) == 0 and settled_rows([], ended=False) == 0
    assert settled_rows([*rows, {"step": 3, EPOCH: 1.5}], ended=False) == 2
    assert settled_rows(rows, ended=True) == 4  # the job ended: nothing adds to any row


@pytest.mark.slow  # reads the shared finished job (trained once per session)
def test_live_polls_write_each_step_once_at_its_final_value_in_step_order(
    local_server, finished_job, tmp_path, monkeypatch
):
    """Polled as a live job is: each step's row first holds early running totals of some numbers (its
    trace numbers while spans come in), then the engine's numbers join with the totals not final yet,
    then it is whole; and the rollouts page already lists steps whose rows are not final. Each step must
    reach W&B, TensorBoard and MLflow once, at its final values, every step from the first: a samples
    table committed at a later step made W&B drop the steps before it ("Tried to log to step 1 that is
    less than the current step 13")."""
    from opd_nb.constants import EPOCH
    from opd_nb.trackers.reporter import Reporter

    env = tracker_env(tmp_path)
    for key, value in env.items():
        if key.startswith(("MLFLOW_", "OPD_", "WANDB_", "NETRC")):
            monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)  # MLflow keeps a new experiment's artifacts under ./mlruns
    client = JobClient(resolve_target("local", base_url=local_server.api_base))
    job_id = finished_job("reward").job_id
    job, rows = client.get(job_id), client.metrics(job_id)
    assert len(rows) >= 3 and all(len(metric_values(row)) >= 2 for row in rows)
    reporter = Reporter(client, job_id, ["wandb", "tensorboard", "mlflow"])
    for i, row in enumerate(rows):
        names = sorted(n for n in metric_values(row) if n != EPOCH)  # EPOCH: the engine's numbers are in
        early = {"step": row["step"], **{k: row[k] + 1.0 for k in names[: len(names) // 2]}}
        reporter.poll(job, [*rows[:i], early])  # trace numbers, partial
        reporter.poll(job, [*rows[:i], {**row, **early}])  # the engine's joined, totals still partial
        reporter.poll(job, rows[: i + 1])
    result = reporter.end(job)
    assert result.metric_rows == len(rows) and not result.notes, result.notes
    assert_same_points(tensorboard_points(tmp_path / "runs" / job_id), rows, 0, "tensorboard", exact=False)
    ((name, records),) = wandb_runs(tmp_path, env)
    assert name == job_id
    assert_same_points(wandb_points(records), rows, 0, "wandb")
    names = {n for row in rows for n in metric_values(row)}
    mlflow, (run,) = mlflow_runs(env)
    assert_same_points(mlflow_points(mlflow, run, names), rows, 0, "mlflow")
    assert EPOCH in rows[0]  # the engine's mark that settles rows is in the job's own rows
