"""The job monitor's status table, notes and text as a user reads them (pure functions of its state).

The validation reward is logged every eval_steps: between evaluations the table shows its last value
and the step it is from, never a blank. The epoch reads as epochs done ("0.91/2"), not "0.9062/2".
The submit's note says where the job went without a status that goes stale once it moves on.
"""

from __future__ import annotations

from rich.console import Console

from opd_nb.client import Job, SubmitResult
from opd_nb.constants import LOSS, REWARD_MEAN, VALID_TOKEN_RATE
from opd_nb.notebook import monitor_html
from opd_nb.notebook.job_state import JobState, job_view
from opd_nb.notebook.monitor import STATUS_KEYS

JOB = "ft-202612010000-abcdef"


def _state(status: str = "RUNNING") -> dict:
    """A job at step 10 of 32 (2 epochs of 16 steps), the reward evaluated at steps 4 and 8."""
    rows = []
    for step in range(1, 11):
        row = {"step": step, "epoch": step / 16 * 1.45, LOSS: 1.0 / step, VALID_TOKEN_RATE: 1.0}
        if step % 4 == 0:
            row[REWARD_MEAN] = 0.125 * step / 4
        rows.append(row)
    job = Job.from_output({"job_id": JOB, "status": status, "hyper_parameters": {"n_epochs": 2}})
    st = JobState(job_id=JOB, status=status, job=job, metrics=rows)
    return {"jobs": {JOB: job_view(st, log_tail=5, latest=STATUS_KEYS)}, "notes": [], "done": False}


def test_the_reward_between_evaluations_shows_its_last_value_and_step() -> None:
    state = _state()
    html = monitor_html.status_html(state)
    assert "0.25 (step 8)" in html  # the last evaluation, not a blank cell at step 10
    assert "<td>0.1</td>" in html  # the loss is from this step: no step beside it
    view = state["jobs"][JOB]
    assert monitor_html.latest_text(view, REWARD_MEAN) == "0.25 (step 8)"
    console = Console(width=200, record=True)
    console.print(monitor_html.rich_table(state))
    assert "0.25 (step 8)" in console.export_text()  # the terminal's table too


def test_the_epoch_reads_as_epochs_done() -> None:
    view = _state()["jobs"][JOB]
    assert monitor_html.epoch_text(view["epoch"], view["n_epochs"]) == "0.91/2"
    assert "0.91/2" in monitor_html.status_html(_state()) and "0.9062" not in monitor_html.status_html(
        _state()
    )
    assert monitor_html.epoch_text(2.0, 2) == "2/2" and monitor_html.epoch_text(1, None) == "1"
    assert monitor_html.epoch_text(None, 2) == ""
    assert "epoch 0.91/2" in monitor_html.snapshot_text(_state())


def test_the_submit_note_carries_no_status_that_goes_stale() -> None:
    job = Job.from_output({"job_id": JOB, "status": "RUNNING"})
    result = SubmitResult(
        job_id=JOB,
        job=job,
        target_kind="local",
        base_url="http://127.0.0.1:1/api/v1",
        workspace="ws",
        runner="sdk",
    )
    assert (
        result.headline() == f"submitted {JOB} (RUNNING) to local http://127.0.0.1:1/api/v1"
    )  # the terminal's
    assert (
        result.headline(status=False) == f"submitted {JOB} to local http://127.0.0.1:1/api/v1"
    )  # the monitor's


def test_the_log_tail_is_folded_under_a_line_that_counts_it() -> None:
    """A finished monitor in a saved notebook repeats each job's log tail: folded, it keeps the alerts
    and curves in view, and a click (no script: `<details>`) opens it."""
    state = _state()
    state["jobs"][JOB]["log_tail"] = ["[INFO] step 9", "[INFO] step 10"]
    html = monitor_html.logs_html(state)
    assert html.startswith("<details><summary><b>log tail of ft-202612010000-abcdef</b> (2 lines)</summary>")
    assert "<pre>[INFO] step 9\n[INFO] step 10</pre></details>" in html
