"""Widget behaviour on widget state (no browser): config form, reward playground, job monitor."""

from __future__ import annotations

import html
import json
import re
import time
from pathlib import Path

import pytest
import yaml

from opd_nb.errors import OpdError


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from opd_nb.workspace.new import create

    return create("reward", tmp_path_factory.mktemp("wsw") / "sorter").path


# ----------------------------------------------------------------------------- config form
@pytest.fixture()
def form_ws(workspace: Path, tmp_path: Path) -> Path:
    import shutil

    dest = tmp_path / "ws"
    shutil.copytree(workspace, dest)
    return dest


def test_form_fields_come_from_the_spec_table(form_ws: Path) -> None:
    from opd_nb.notebook.form import ConfigForm
    from opd_nb.spec.hyperparams import PARAMS

    form = ConfigForm(form_ws)
    assert set(form.values) == {p.name for p in PARAMS}
    current = yaml.safe_load((form_ws / "config.yaml").read_text())["training"]["hyper_parameters"]
    for name, value in current.items():
        assert form.values[name] == value
    fields = form._widgets["fields"]
    assert type(fields["lr_scheduler_type"]).__name__ == "Dropdown"
    assert type(fields["learning_rate"]).__name__ == "Text"
    assert form.ok and not form._widgets["save"].disabled


def test_form_live_validation_blocks_save(form_ws: Path) -> None:
    from opd_nb.notebook.form import ConfigForm

    form = ConfigForm(form_ws)
    before = (form_ws / "config.yaml").read_text()
    form._widgets["fields"]["n_rollouts"].value = "lots"  # what a user types
    assert "n_rollouts" in form.field_problems()
    assert "not a whole number" in form._widgets["notes"]["n_rollouts"].value
    assert form._widgets["save"].disabled
    form.set("n_rollouts", 1000)  # out of the spec's range
    assert "above the maximum" in form.field_problems()["n_rollouts"]
    result = form.save()
    assert not result.written and (form_ws / "config.yaml").read_text() == before


def test_form_save_keeps_comments_and_shows_diff(form_ws: Path) -> None:
    from opd_nb.notebook.form import ConfigForm

    form = ConfigForm(form_ws)
    form.set("learning_rate", "2e-6")
    form.set("eval_steps", 7)
    form.set("lr_warmup_steps", "")  # unset -> key removed
    form.set("algorithm", "grpo")  # the template has it commented out: uncommented in place
    assert form.ok, form.report
    assert "+    eval_steps: 7" in form.diff()
    result = form.save()
    text = (form_ws / "config.yaml").read_text()
    assert result.written
    data = yaml.safe_load(text)["training"]["hyper_parameters"]
    assert data["learning_rate"] == 2e-6 and isinstance(data["learning_rate"], float)
    assert data["eval_steps"] == 7 and "lr_warmup_steps" not in data
    assert "# validate every 5 steps" in text or "# validate every" in text  # trailing comment kept
    assert "# OPD job configuration" in text  # header comment kept
    algo = next(line for line in text.splitlines() if "algorithm:" in line)
    assert algo.strip().startswith("algorithm: grpo") and "#" in algo and data["algorithm"] == "grpo"
    assert "eval_steps" in form._widgets["result"].value


@pytest.mark.slow
def test_form_presets(form_ws: Path) -> None:
    from opd_nb.notebook.form import ConfigForm
    from opd_nb.spec.hyperparams import starting_point

    form = ConfigForm(form_ws)
    form._widgets["large"].click()
    for section in starting_point("large").values():
        for name, value in section.items():
            assert form.values[name] == value, name
    form._widgets["small"].click()
    assert form.values["batch_size"] == starting_point("small")["hyper_parameters"]["batch_size"]


def test_form_missing_config_is_a_message(tmp_path: Path) -> None:
    from opd_nb.notebook.form import ConfigForm

    with pytest.raises(OpdError, match="config.yaml not found"):
        ConfigForm(tmp_path)


# ----------------------------------------------------------------------------- playground
@pytest.fixture()
def pg_ws(workspace: Path, tmp_path: Path) -> Path:
    import shutil

    dest = tmp_path / "pg"
    shutil.copytree(workspace, dest)
    return dest


@pytest.mark.slow
def test_playground_scores_a_sample_with_the_workspace_processor(pg_ws: Path) -> None:
    from opd_nb.notebook.playground import RewardPlayground

    pg = RewardPlayground(pg_ws)
    w = pg._widgets
    assert pg.samples and w["prompt"].value
    truth = w["truth"].value
    hit = pg.score(f"<think>n={len(truth)}</think>{truth}")
    assert hit.reward_score == 1.0 and hit.status == "success" and hit.cleaned == truth
    assert hit.reward_metrics and all(isinstance(v, float) for v in hit.reward_metrics.values())
    assert "1" in w["result"].value and truth in w["result"].value
    miss = pg.score(truth[::-1] + "9")
    assert miss.reward_score == 0.0
    w["truth"].value = ""
    w["sample"].value = -1  # typed prompt, no ground truth
    w["prompt"].value = "31"
    nog = pg.score("13")  # the docs: with no ground truth and no solution the score is 0, not a failure
    assert nog.status == "success" and nog.reward_score == 0.0 and not nog.error


@pytest.mark.slow
def test_playground_picks_up_edits_without_restarting(pg_ws: Path) -> None:
    from opd_nb.notebook.playground import score_one

    before = score_one(pg_ws, "123", prompt="321", ground_truth="123")
    assert before.reward_score == 1.0
    reward = pg_ws / "functions" / "reward" / "reward.py"
    reward.write_text(
        reward.read_text().replace(
            '"reward_score": float(any(answer_n == t for t in truths_n))', '"reward_score": 0.25'
        )
    )
    after = score_one(pg_ws, "123", prompt="321", ground_truth="123")
    assert after.reward_score == 0.25


@pytest.mark.slow
def test_playground_button_scores_in_the_background(pg_ws: Path) -> None:
    """The Score button returns at once (the kernel stays free while a changed reward's server
    restarts); its thread fills the result field and enables the button again."""
    from opd_nb.notebook.playground import RewardPlayground

    pg = RewardPlayground(pg_ws)
    w = pg._widgets
    truth = w["truth"].value
    reward = pg_ws / "functions" / "reward" / "reward.py"
    reward.write_text(reward.read_text() + "\n# an edit: the next score starts a fresh server\n")
    w["candidate"].value = truth
    w["score"].click()
    assert w["score"].disabled and pg.last is None  # still scoring, yet the click has returned
    deadline = time.monotonic() + 120
    while w["score"].disabled and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not w["score"].disabled and pg.last is not None and pg.last.reward_score == 1.0
    assert truth in w["result"].value


@pytest.mark.slow
def test_playground_batch_progress_distribution_and_failures(pg_ws: Path) -> None:
    from opd_nb.notebook.playground import RewardPlayground

    rows = [json.loads(line) for line in (pg_ws / "data" / "train.jsonl").read_text().splitlines()[:12]]
    lines = []
    for i, row in enumerate(rows):
        sol = row["rollout_extra"]["solution"]
        lines.append({**row, "candidate": f"<think>x</think>{sol if i % 2 == 0 else sol[::-1] + '0'}"})
    lines.append({"prompt": "21", "candidate": "12"})  # no ground truth -> 0, as the docs say
    lines.append({"prompt": "21", "candidate": "boom", "ground_truth": "12"})  # a scoring bug -> a failure
    reward = pg_ws / "functions" / "reward" / "reward.py"
    code = reward.read_text()
    bug = '    if answer == "boom":\n        raise ValueError("a scoring bug")\n'
    reward.write_text(code.replace("    truths = [str(t)", bug + "    truths = [str(t)", 1))
    path = pg_ws / "candidates.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    pg = RewardPlayground(pg_ws, concurrency=4)
    seen: list[int] = []
    pg._widgets["progress"].observe(lambda ch: seen.append(ch["new"]), names="value")
    batch = pg.score_batch("candidates.jsonl")
    assert len(batch.results) == 14 and [r.index for r in batch.results] == list(range(14))
    assert batch.scores.count(1.0) == 6 and batch.results[12].reward_score == 0.0
    assert len(batch.failures) == 1 and batch.failures[0].index == 13
    assert seen and seen[-1] == 14 and seen == sorted(seen)
    assert pg._widgets["progress"].description == "14/14"
    assert bytes(pg._widgets["hist"].value).startswith(b"\x89PNG")
    assert "failures" in pg._widgets["failures"].value and "a scoring bug" in pg._widgets["failures"].value


def test_playground_reads_the_reward_class_through_the_spec(pg_ws: Path) -> None:
    from opd_nb.notebook.playground import reward_classpath

    cfg = pg_ws / "config.yaml"
    data = yaml.safe_load(cfg.read_text())
    reward = next(f for f in data["functions"] if f["type"] == "reward")
    reward["fcmodel"]["classpath"] = "functions/reward/reward.py:MyScorer"  # the file defines RewardProcessor
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    assert reward_classpath(pg_ws) == "functions/reward/reward.py:MyScorer"  # config.yaml wins
    reward["fcmodel"] = {"zipdir": "./", "filepath": "functions/reward/reward.py", "classname": "Other"}
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    assert reward_classpath(pg_ws) == "functions/reward/reward.py:Other"  # the SDK's filepath + classname
    data["functions"] = [f for f in data["functions"] if f["type"] != "reward"]
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    assert reward_classpath(pg_ws) == "functions/reward/reward.py:RewardProcessor"  # found in functions/
    (pg_ws / "functions" / "reward" / "reward.py").unlink()
    with pytest.raises(OpdError, match="no reward function"):
        reward_classpath(pg_ws)


def test_playground_bad_batch_file_says_where(pg_ws: Path) -> None:
    from opd_nb.notebook.playground import load_candidates

    bad = pg_ws / "bad.jsonl"
    bad.write_text('{"candidate": "1"}\n{not json\n')
    with pytest.raises(OpdError) as err:
        load_candidates(bad)
    assert f"{bad}:2" in str(err.value)


@pytest.mark.slow
def test_playground_broken_processor_is_a_message(pg_ws: Path) -> None:
    from opd_nb.notebook.playground import score_one

    reward = pg_ws / "functions" / "reward" / "reward.py"
    reward.write_text(reward.read_text() + "\nraise RuntimeError('half-edited file')\n")
    with pytest.raises(OpdError, match="half-edited file"):
        score_one(pg_ws, "1", prompt="1", ground_truth="1")


# (the health rules and the best-checkpoint rule are tested in tests/test_health.py)


# ----------------------------------------------------------------------------- monitor on real jobs
@pytest.fixture(scope="module")
def server(local_server):
    """The session's control plane: the monitor tests submit their own jobs and only read them."""
    return local_server


def _client(server, kind: str = "local"):
    from pydantic import SecretStr

    from opd_nb.client import JobClient, Target

    return JobClient(Target(kind=kind, base_url=server.api_base, api_key=SecretStr("local")))


@pytest.fixture(scope="module")
def job_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A reward workspace shrunk to a job of a few steps (trains in seconds on a CPU)."""
    from conftest import tiny_workspace

    return tiny_workspace("reward", tmp_path_factory.mktemp("job") / "sorter", n_epochs=3)


def _submit(server, workspace: Path, **overrides) -> str:
    from opd_nb.client import resolve_target, submit

    return submit(workspace, resolve_target("local", base_url=server.api_base), **overrides).job_id


@pytest.mark.slow
def test_monitor_follows_a_job_to_succeeded(server, job_ws: Path) -> None:
    """One job, watched twice: through the local API (metrics) and as the cloud API sees it (none)."""
    from opd_nb.notebook.monitor import CLOUD_NOTE, JobMonitor

    job_id = _submit(server, job_ws)
    monitor = JobMonitor([job_id], _client(server), poll_s=0.5)
    cloud = JobMonitor(job_id, _client(server, kind="cloud"), poll_s=0.5).start()
    w = monitor._ensure_widgets()
    seen_status, seen_steps, guard_enabled = set(), [], []
    monitor.start()
    while not monitor._done.wait(0.3):
        view = monitor.state["jobs"][job_id]
        seen_status.add(view["status"])
        seen_steps.append(view["step"])
        guard_enabled.append(not w["guard"].disabled)
    monitor.wait(timeout_s=5)
    # the guard acts on unfinished jobs only: its switch is off limits once every job ended
    assert any(guard_enabled) and w["guard"].disabled
    view = monitor.state["jobs"][job_id]
    assert view["status"] == "SUCCEEDED" and monitor.done
    assert seen_steps == sorted(seen_steps) and view["step"] >= 1
    assert seen_status & {"PENDING", "QUEUING", "RUNNING"}, seen_status
    assert view["n_metric_rows"] >= view["step"] and view["metrics_available"] is True
    assert "actor/distillation/loss" in view["last_metrics"]
    assert monitor.plot_updates >= 1 and w["plot"].delta["seq"] == monitor._chart.updates
    curves = {(c["job"], c["metric"]): c for c in monitor._chart.data()["series"]}
    assert curves[(job_id, "actor/distillation/loss")]["steps"][-1] == view["step"]
    assert w["bars"][job_id].value == 1.0 and w["bars"][job_id].bar_style == "success"
    assert w["cancel"][job_id].disabled
    assert "SUCCEEDED" in w["status"].value
    assert view["log_tail"], "no log lines were collected"
    if view["checkpoints"]:
        assert view["best_checkpoint"]["name"] in {c["name"] for c in view["checkpoints"]}
        assert "best" in w["checkpoints"].value
    samples = view["samples"]  # the latest step's best and worst sample, and how to open them all
    assert samples["step"] == view["step"] and samples["records"]
    best, worst = (samples["records"][samples[k]] for k in ("best", "worst"))
    assert (best.get("reward_score") or 0) >= (worst.get("reward_score") or 0)
    assert f"%opd rollouts {job_id} --step {samples['step']}" in w["samples"].value
    assert 'class="opd-tok"' in w["samples"].value
    bundle = monitor._repr_mimebundle_()
    assert 'class="opd-chart-frame"' in bundle["text/html"] and "SUCCEEDED" in bundle["text/html"]
    page = html.unescape(bundle["text/html"].split('srcdoc="', 1)[1].split('"', 1)[0])
    assert "function opdChart" in page and f'"job":"{job_id}"' in page  # the script and the points, inlined
    assert not re.search(r"<(script|link)[^>]+(src|href)=", page)  # nothing fetched: no kernel, no network
    assert job_id in bundle["text/plain"] and "SUCCEEDED" in bundle["text/plain"]
    # The cloud API has status, logs and events but no metrics: the monitor says so.
    cloud.wait(timeout_s=60)
    cview = cloud.state["jobs"][job_id]
    assert cview["status"] == "SUCCEEDED" and cview["metrics_available"] is False
    assert cview["n_metric_rows"] == 0 and cloud.plot_updates == 0
    assert CLOUD_NOTE in cloud.to_html() and CLOUD_NOTE in str(cloud) and cview["log_tail"]
    assert "billed hour(s)" in cloud.to_html() and cview["meter"] and view["meter"] is None  # paid plane only
    assert "Bailian console shows the trajectories" in cview["samples"]["note"]


@pytest.mark.slow
def test_monitor_cancel_button_cancels(server, job_ws: Path, tmp_path: Path) -> None:
    import shutil

    from opd_nb.notebook.monitor import JobMonitor

    ws = tmp_path / "long"
    shutil.copytree(job_ws, ws)
    cfg = ws / "config.yaml"
    cfg.write_text(re.sub(r"n_epochs: \d+", "n_epochs: 50", cfg.read_text()))
    job_id = _submit(server, ws)
    monitor = JobMonitor([job_id], _client(server), poll_s=0.3)
    w = monitor._ensure_widgets()
    monitor.start()
    deadline = time.monotonic() + 60
    while monitor.state["jobs"][job_id]["status"] not in ("RUNNING",) and time.monotonic() < deadline:
        time.sleep(0.2)
    w["cancel"][job_id].click()
    assert "cancel sent" in w["message"].value
    monitor.wait(timeout_s=60)
    assert monitor.state["jobs"][job_id]["status"] == "CANCELED"
    assert w["cancel"][job_id].disabled and w["bars"][job_id].bar_style == "warning"


def test_monitor_unknown_job_shows_the_error(server) -> None:
    from opd_nb.notebook.monitor import JobMonitor

    monitor = JobMonitor(["ft-does-not-exist"], _client(server), poll_s=0.2)
    state = monitor.poll_once()
    view = state["jobs"]["ft-does-not-exist"]
    assert view["status"] == "NOT_FOUND" and "ft-does-not-exist" in (view["error"] or "")
    assert monitor.done and "ft-does-not-exist" in monitor.to_html()
    with pytest.raises(OpdError, match="ft-does-not-exist"):
        JobMonitor(["ft-does-not-exist"], _client(server)).start()
    with pytest.raises(OpdError):
        JobMonitor([])


def test_the_chart_widget_receives_only_each_polls_new_points() -> None:
    """A poll assigns the chart only the points it has not sent (never the whole job again); a view
    that missed a delta asks for everything and gets it."""
    from opd_nb.notebook.monitor import JobMonitor

    monitor = JobMonitor("ft-plot", poll_s=0.1)
    st = monitor._jobs["ft-plot"]
    st.metrics = [{"step": 1, "actor/distillation/loss": 1.0}]
    monitor._update_chart()
    chart = monitor._chart
    widget = chart.widget()
    assert widget.data["series"][0]["steps"] == [1] and widget.data["seq"] == 0
    st.metrics = [
        *st.metrics,
        {"step": 2, "actor/distillation/loss": 0.5},
        {"step": 3, "actor/distillation/loss": 0.25},
    ]
    monitor._update_chart()
    assert widget.delta["seq"] == 1 and monitor.plot_updates == 1
    assert [(p["steps"], p["values"]) for p in widget.delta["points"]] == [([2, 3], [0.5, 0.25])]
    monitor._update_chart()  # the same rows again: nothing is sent
    assert widget.delta["seq"] == 1 and monitor.plot_updates == 1
    chart._on_msg(widget, {"kind": "sync"}, [])
    assert widget.data["series"][0]["steps"] == [1, 2, 3] and widget.data["seq"] == 1


def test_a_jobs_first_offset_of_zero_goes_out_as_a_delta_and_a_late_parent_redraws() -> None:
    """The first poll that finds a job's offset (0: no parent) sends its points as a delta, so a job
    that ends within one poll still reaches the view by delta; a parent found later moves the
    series, which only a full redraw can do."""
    from opd_nb.notebook.chart import MetricChart

    chart = MetricChart()
    widget = chart.widget()
    rows = {
        "ft-a": [{"step": 1, "actor/distillation/loss": 1.0}, {"step": 2, "actor/distillation/loss": 0.5}]
    }
    panels = ["actor/distillation/loss"]
    assert chart.update(rows, panels, offsets={"ft-a": 0.0}) == 2
    assert widget.delta["seq"] == 1 and chart.updates == 1
    assert [(p["steps"], p["values"]) for p in widget.delta["points"]] == [([1, 2], [1.0, 0.5])]
    assert widget.data["series"] == []  # nothing went through the full document

    assert chart.update(rows, panels, offsets={"ft-a": 120.0}) == 2  # a parent's last step, found late
    assert widget.delta["seq"] == 1 and chart.updates == 1  # no delta: the whole document instead
    (series,) = widget.data["series"]
    assert series["steps"] == [1, 2] and series["offset"] == 120.0
