"""`opd compare` / `%opd compare` on finished jobs, and the notebook views of a sweep and a comparison.

The finished jobs come from `%opd sweep` itself (two tiny reward jobs on `opd serve`, shared with
test_sweep.py); the judging rules are also checked on plain job data, including Bailian's case
without metrics.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from sweep_jobs import finished_sweep

from opd_nb.client import Checkpoint, Job
from opd_nb.constants import LOSS, REWARD_MEAN, VALID_TOKEN_RATE
from opd_nb.errors import OpdError
from opd_nb.experiments import JobRecord, compare_records

OPD = [sys.executable, "-c", "from opd_nb.cli import main; main()"]


@pytest.fixture(scope="module")
def swept(local_server, tmp_path_factory):
    """The session's finished `%opd sweep` (two tiny reward jobs, learning_rate 5e-7 and 2e-6)."""
    return finished_sweep(local_server, tmp_path_factory.mktemp("swept")).monitor


@pytest.mark.slow
def test_compare_cli_json_and_text(swept, local_server):
    ids = swept.job_ids
    run = subprocess.run(
        [*OPD, "compare", *ids, "--local", local_server.base_url, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert [j["job_id"] for j in out["jobs"]] == ids
    for job, lr in zip(out["jobs"], (5e-7, 2e-6), strict=True):
        assert set(job) == {"job_id", "status", "params", "final", "best", "best_checkpoint"}
        assert job["status"] == "SUCCEEDED" and job["params"] == {"learning_rate": lr}  # only what differs
        assert {LOSS, VALID_TOKEN_RATE, REWARD_MEAN} <= set(job["final"]) <= set(job["best"])
        assert set(job["best_checkpoint"]) == {"name", "step", "reason"}
    assert out["winner"] in ids and f"{REWARD_MEAN} at its best checkpoint" in out["why"]
    assert any("too early to judge" in note for note in out["notes"])  # one step < eval_steps × 3
    text = subprocess.run(
        [*OPD, "compare", *ids, "--local", local_server.base_url], capture_output=True, text=True, timeout=120
    )
    assert text.returncode == 0 and "wins" in text.stdout and "best checkpoint" in text.stdout


@pytest.mark.slow
def test_compare_view_is_its_snapshot(swept, local_server):
    """A comparison is complete when shown: the view is final (its output the snapshot alone, so a saved
    notebook reopens as it; tests/test_saved_views.py runs it in a kernel) and its chart overlays every
    job, each named as the table names it, by the job's name where it has one."""
    from opd_nb.notebook.experiment_views import CompareView
    from opd_nb.notebook.magics import run_line

    view = run_line(f"compare {' '.join(swept.job_ids)} --local {local_server.base_url}")
    assert isinstance(view, CompareView) and view.final and view.widget() is None
    curves = view.chart.data()["series"]
    assert {c["job"] for c in curves} == set(swept.job_ids) and {c["metric"] for c in curves} >= {LOSS}
    names = {j.job_id: j.job_name for j in view.comparison.jobs}
    for c in curves:
        assert "learning_rate=" in c["label"] and c["label"].endswith(f"({names[c['job']] or c['job']})")
    assert view.state["winner"] in swept.job_ids and view.state["has_plot"]
    snapshot = view._repr_mimebundle_()["text/html"]
    assert (
        "wins" in snapshot and 'class="opd-chart-frame"' in snapshot and 'class="opd-chart-img"' in snapshot
    )


def _job(job_id: str, status: str = "SUCCEEDED", **hp: object) -> Job:
    params = {"learning_rate": 1e-6, "eval_steps": 1, **hp}
    return Job.from_output({"job_id": job_id, "status": status, "model": "m", "hyper_parameters": params})


def _rows(loss: list[float], reward: list[float] | None = None, vtr: float = 1.0) -> list[dict]:
    rows = []
    for step, value in enumerate(loss, start=1):
        row = {"step": step, LOSS: value, VALID_TOKEN_RATE: vtr}
        if reward:
            row[REWARD_MEAN] = reward[step - 1]
        rows.append(row)
    return rows


def test_winner_rules_on_job_data():
    ckpt = [Checkpoint(name="checkpoint-3", step=3, path="/x")]
    # With a reward: the highest reward at the best checkpoint wins; a broken teacher signal cannot.
    cmp = compare_records(
        [
            JobRecord(job=_job("a"), metrics=_rows([3, 2, 1], [0.1, 0.2, 0.3]), checkpoints=ckpt),
            JobRecord(
                job=_job("b", learning_rate=2e-6), metrics=_rows([3, 2, 2], [0.1, 0.5, 0.6]), checkpoints=ckpt
            ),
            JobRecord(
                job=_job("c", learning_rate=4e-6),
                metrics=_rows([3, 1, 1], [0.9, 0.9, 0.9], vtr=0.9),
                checkpoints=ckpt,
            ),
        ]
    )
    assert cmp.differing == ["learning_rate"] and cmp.winner == "b"
    assert "validation/data/reward/mean@1 at its best checkpoint" in cmp.why
    assert any("c left out" in n and "0.900 < 1" in n for n in cmp.notes)
    # Without a reward: the lowest final loss; a FAILED job cannot win; a short job is flagged.
    cmp = compare_records(
        [
            JobRecord(job=_job("a", eval_steps=5), metrics=_rows([3, 2]), checkpoints=[]),
            JobRecord(job=_job("b", "FAILED", eval_steps=5), metrics=_rows([3, 0.1]), checkpoints=[]),
        ]
    )
    assert cmp.winner == "a" and "lowest actor/distillation/loss at the end" in cmp.why
    assert any("b is FAILED" in n for n in cmp.notes) and any("eval_steps × 3 = 15" in n for n in cmp.notes)
    assert cmp.to_payload()["jobs"][1]["params"] == {}  # nothing differs but the status
    with pytest.raises(OpdError, match="at least two"):
        compare_records([JobRecord(job=_job("a"))])


def test_bailian_without_metrics_compares_status_params_and_checkpoints():
    cmp = compare_records(
        [
            JobRecord(job=_job("ft-1"), metrics=None, checkpoints=None),
            JobRecord(job=_job("ft-2", "RUNNING", learning_rate=3e-6), metrics=None, checkpoints=None),
        ]
    )
    assert not cmp.metrics_available and cmp.winner is None and cmp.metrics == []
    assert "no metrics (Bailian)" in cmp.why and "status, parameters and checkpoints" in cmp.why
    rows = dict(cmp.table_rows())
    assert rows["status"] == ["SUCCEEDED", "RUNNING"] and rows["learning_rate"] == ["1e-06", "3e-06"]
    assert "no metrics (Bailian)" in str(cmp) and cmp.plot_png() is None


def test_a_reward_job_and_a_pure_distillation_job_differ_in_kind_and_have_no_winner():
    """Issue 26, defect 13: the reward is a difference, and the distillation loss cannot judge across kinds."""
    reward_job = Job.from_output(
        {
            "job_id": "r",
            "status": "SUCCEEDED",
            "model": "m",
            "hyper_parameters": {"learning_rate": 1e-6},
            "local": {"functions": [{"name": "exact-match", "type": "reward", "entity_id": "rw-1"}]},
        }
    )
    pure_job = Job.from_output(
        {
            "job_id": "p",
            "status": "SUCCEEDED",
            "model": "m2",
            "hyper_parameters": {"learning_rate": 2e-6},
            "local": {"functions": []},
        }
    )
    cmp = compare_records(
        [
            JobRecord(job=reward_job, metrics=_rows([3, 2, 1], [0.1, 0.2, 0.3]), checkpoints=[]),
            JobRecord(job=pure_job, metrics=_rows([3, 2, 0.5]), checkpoints=[]),
        ]
    )
    assert cmp.differing == ["learning_rate", "model", "reward"]
    assert [j.params["reward"] for j in cmp.jobs] == ["yes", "no"]
    assert cmp.winner is None
    assert cmp.why.startswith("no winner: r trained with a reward and p by pure distillation")
    assert any("compare jobs of one kind" in n for n in cmp.notes)
    assert dict(cmp.table_rows())["reward"] == ["yes", "no"]
