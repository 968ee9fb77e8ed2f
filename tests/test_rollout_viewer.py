"""The rollout viewer (`%opd rollouts JOB`) on its state and widget values, against a real `opd serve`.

One tiny reward job: the viewer opens while it runs, follows it with refresh, then every control
(step, kind, sort, row) is driven through the widgets as a user would.
"""

from __future__ import annotations

import time

import pytest
from conftest import tiny_workspace, wait_status
from pydantic import SecretStr

from opd_nb.client import JobClient, Target
from opd_nb.constants import SUCCEEDED, TERMINAL_STATUSES
from opd_nb.errors import OpdError

pytestmark = pytest.mark.slow


def _client(server, kind: str = "local") -> JobClient:
    return JobClient(Target(kind=kind, base_url=server.api_base, api_key=SecretStr("test")))


@pytest.fixture(scope="module")
def viewed_job(local_server, tmp_path_factory: pytest.TempPathFactory):
    """(job id, the viewer opened while the job ran, the first step it saw)."""
    from opd_nb.client import resolve_target, submit
    from opd_nb.notebook.rollout_viewer import RolloutViewer

    ws = tiny_workspace(
        "reward", tmp_path_factory.mktemp("rv") / "sorter", val_rows=4, eval_steps=1, n_epochs=2
    )
    job_id = submit(ws, resolve_target("local", base_url=local_server.api_base)).job_id
    client = _client(local_server)
    deadline = time.monotonic() + 240
    while not (page := client.rollouts(job_id)).steps and time.monotonic() < deadline:
        time.sleep(0.3)
    from opd_nb.notebook.follow import JobFollower
    from opd_nb.notebook.trajectory_view import TrajectoryView

    viewer = RolloutViewer(job_id, client)  # the job is still running (or has just ended)
    traces = TrajectoryView(job_id, client)
    first = viewer.step
    # what displaying them in a kernel starts: they follow the job with no press on refresh
    followers = [JobFollower(view, every_s=0.2).start() for view in (viewer, traces)]
    assert wait_status(client, job_id, set(TERMINAL_STATUSES), timeout=300).status == SUCCEEDED
    deadline = time.monotonic() + 30
    while any(f.running for f in followers) and time.monotonic() < deadline:
        time.sleep(0.1)
    viewer.followed = followers[0]  # type: ignore[attr-defined]
    viewer.followed_traces = (traces, followers[1])  # type: ignore[attr-defined]
    return job_id, viewer, first, page


def test_viewer_follows_a_running_job(viewed_job) -> None:
    job_id, viewer, first, _ = viewed_job
    assert first is not None and viewer.available is True
    follower = viewer.followed
    assert not follower.running and follower.refreshes >= 1  # it stopped by itself once the job ended
    assert viewer.step == 4 and viewer.steps[-1] == 4  # the last step, with no refresh pressed
    traces, traced = viewer.followed_traces
    assert not traced.running and traces.state["step"] == traces.state["steps"][-1]
    viewer.refresh()
    assert viewer.step == 4 and viewer.steps[-1] == 4 and viewer.step >= first  # 16 rows x 2 epochs / 8
    assert viewer.state["steps_by_kind"] == {"train": [1, 2, 3, 4], "validation": [0, 1, 2, 3, 4]}


def test_controls_drive_the_state(viewed_job) -> None:
    job_id, viewer, _, _ = viewed_job
    box = viewer.widget()
    w = viewer._widgets
    assert box is not None and "opd-rollout-viewer" in box._dom_classes
    w.kind.value = "validation"  # what a click on the toggle does
    assert viewer.kind == "validation" and viewer.steps == [0, 1, 2, 3, 4] and viewer.step == 4
    assert {r["kind"] for r in viewer.state["rows"]} == {"validation"} and len(viewer.state["rows"]) == 4
    w.step.value = 0
    assert viewer.step == 0 and [o[1] for o in w.step.options] == [0, 1, 2, 3, 4]
    assert len(w.table.options) == 4 and w.table.value == viewer.selected

    w.sort.value = "reward_desc"
    rewards = [r["reward"] for r in viewer.state["rows"]]
    assert rewards == sorted(rewards, reverse=True) and viewer.selected == viewer.state["order"][0]
    w.sort.value = "ratio_asc"
    ratios = [r["mean_log_ratio"] for r in viewer.state["rows"]]
    assert ratios == sorted(ratios)  # most disagreement first

    last = viewer.state["order"][-1]
    w.table.value = last  # pick a row
    sample = viewer.state["sample"]
    assert viewer.selected == last and sample["index"] == last
    assert sample["reward"] is not None and sample["reward_metrics"]  # the reward's verdict beside it
    assert "".join(t["text"] for t in sample["tokens"]) == sample["completion"]
    assert w.sample.value.count('class="opd-tok"') >= len([t for t in sample["tokens"] if t["text"]])
    assert "teacher log p" in w.sample.value and "student log p" in w.sample.value  # the tooltip
    assert "reward score" in w.sample.value

    w.kind.value = "all"  # step 0 has validation answers only
    assert viewer.kind is None and viewer.step == 0 and viewer.steps == [0, 1, 2, 3, 4]
    w.kind.value = "train"  # step 0 has no train samples: the latest train step
    assert viewer.step == 4 and {r["kind"] for r in viewer.state["rows"]} == {"train"}


def test_snapshot_and_errors(local_server, viewed_job) -> None:
    from opd_nb.notebook.rollout_viewer import RolloutViewer

    job_id, _, _, _ = viewed_job
    viewer = RolloutViewer(job_id, _client(local_server), step=2, kind="validation", sort="reward_asc")
    html = viewer._repr_mimebundle_()["text/html"]
    assert f"rollouts of {job_id}" in html and "step <b>2</b>" in html
    assert html.count("<td>validation</td>") == 4 and html.count("▶") == 1  # the table, its selected row
    assert 'class="opd-tok"' in html and "title=" in html and "reward score" in html  # the sample
    # Saved, it stays a viewer: every row names its sample, every sample has its pane (one shown), and
    # the snapshot script sorts and switches them with no kernel (tests/test_chart_export.py clicks it).
    assert html.count('<tr data-sample="') == 4 and html.count('class="opd-sample"') == 4
    assert html.count('class="opd-sample" data-sample="') - html.count('style="display:none"') == 1
    assert "<script>" in html and "opd-snap" in html
    assert job_id in str(viewer)
    with pytest.raises(OpdError, match="has no recorded rollouts"):
        viewer.set_step(99)
    with pytest.raises(OpdError, match="no sample #9"):
        viewer.select(9)
    with pytest.raises(OpdError) as missing:
        RolloutViewer("ft-202001010000-0000", _client(local_server))
    assert missing.value.status == 404


def test_cloud_says_the_console_shows_trajectories(local_server, viewed_job) -> None:
    from opd_nb.client.rollout_results import CLOUD_NOTE
    from opd_nb.notebook.rollout_viewer import RolloutViewer

    job_id, _, _, _ = viewed_job
    viewer = RolloutViewer(job_id, _client(local_server, kind="cloud"))
    assert viewer.available is False and viewer.state["note"] == CLOUD_NOTE and viewer.state["rows"] == []
    viewer.widget()
    assert CLOUD_NOTE in viewer._widgets.header.value and viewer._widgets.step.disabled
    assert CLOUD_NOTE in viewer.to_html() and "Bailian console" in str(viewer)
    assert viewer.final  # nothing to pick or refresh: shown (and saved) as its note alone


def test_the_magic_opens_the_viewer(local_server, viewed_job) -> None:
    from opd_nb.cli import invoke
    from opd_nb.cli.intents import RolloutsRequest
    from opd_nb.notebook.rollout_viewer import RolloutViewer
    from opd_nb.notebook.views import open_view

    job_id, _, _, _ = viewed_job
    argv = ["rollouts", job_id, "--local", local_server.api_base, "--step", "1", "--kind", "train"]
    request = invoke([*argv, "--sort", "reward_desc"])
    assert isinstance(request, RolloutsRequest) and (request.step, request.kind) == (1, "train")
    viewer = open_view(request)
    assert isinstance(viewer, RolloutViewer) and viewer.step == 1 and viewer.kind == "train"
    assert viewer.sort == "reward_desc"
    assert len(viewer.records) > 2  # the step has more samples than the limit below


def test_the_magics_limit_keeps_that_many_samples(local_server, viewed_job) -> None:
    """`%opd rollouts JOB --limit N` shows, and saves in the notebook, N samples of the step (the
    request dropped --limit, and a tutorial saved all 64 validation answers of a step)."""
    from opd_nb.cli import invoke
    from opd_nb.notebook.views import open_view

    job_id, _, _, _ = viewed_job
    argv = ["rollouts", job_id, "--local", local_server.api_base, "--step", "1", "--kind", "train"]
    everything = open_view(invoke(argv))
    viewer = open_view(invoke([*argv, "--sort", "reward_desc", "--limit", "2"]))
    assert len(everything.records) > 2 and len(viewer.records) == 2
    assert viewer.state["rows"] and len(viewer.state["rows"]) == 2
    assert viewer.to_html().count('class="opd-sample"') == 2  # the saved snapshot's sample panes
    viewer.set_step(2)  # another step keeps the limit
    assert viewer.step == 2 and len(viewer.records) == 2


def test_the_magic_rejects_bad_kind_and_sort(viewed_job) -> None:
    from opd_nb.cli import invoke

    job_id, _, _, _ = viewed_job
    with pytest.raises(OpdError, match="--kind"):
        invoke(["rollouts", job_id, "--kind", "eval"])
    with pytest.raises(OpdError, match="--sort"):
        invoke(["rollouts", job_id, "--sort", "length"])
