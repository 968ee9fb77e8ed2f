"""The docs' health rules and best-checkpoint rule (opd_nb.health.rules), on metric rows as the engine writes them.

(The sample-level rules on real jobs, a constant reward and a too small max_length, are in
tests/test_watch_cli.py.)"""

from __future__ import annotations

import json

from opd_nb.client import Checkpoint
from opd_nb.constants import (
    LOSS,
    REWARD_FAILURE_RATE,
    REWARD_MEAN,
    TRAIN_REWARD_MEAN,
    TRUNCATED_FRACTION,
    VALID_TOKEN_RATE,
    ZERO_VARIANCE_GROUPS,
)
from opd_nb.health.rules import (
    AlertTracker,
    BestCheckpoint,
    HealthAlert,
    best_checkpoint,
    eval_steps_of,
    health_alerts,
    job_alerts,
)


def _rows(losses, vtr=1.0, reward=None, failure_rate=None):
    rows = []
    for i, loss in enumerate(losses, start=1):
        row = {"step": i, "epoch": 1, LOSS: loss, VALID_TOKEN_RATE: vtr}
        if reward is not None and i in reward:
            row[REWARD_MEAN] = reward[i]
        if failure_rate is not None:
            row[REWARD_FAILURE_RATE] = failure_rate.get(i, 0.0)
        rows.append(row)
    return rows


def test_health_alerts_follow_the_docs() -> None:
    assert health_alerts(_rows([1.0, 0.8, 0.6, 0.5, 0.4, 0.35]), eval_steps=2) == []
    rules = {a.rule for a in health_alerts(_rows([1.0, 0.8], vtr=0.9), eval_steps=2)}
    assert rules == {"valid_token_rate"}
    flat = health_alerts(_rows([0.5, 0.52, 0.5, 0.51, 0.53, 0.52]), eval_steps=2)
    assert [a.rule for a in flat] == ["loss_not_decreasing"] and "eval_steps × 3 = 6" in flat[0].message
    assert health_alerts(_rows([0.5, 0.52, 0.5, 0.51, 0.53]), eval_steps=2) == []  # too early to judge


def test_valid_token_rate_alert_names_the_worst_step_and_says_check_the_teacher() -> None:
    rows = _rows([1.0, 0.9, 0.8])
    rows[1][VALID_TOKEN_RATE] = 0.7
    rows[2][VALID_TOKEN_RATE] = 0.95
    (alert,) = health_alerts(rows, eval_steps=10)
    assert alert.severity == "error"
    assert "0.700 at step 2" in alert.message and "2 step(s)" in alert.message
    assert "teacher" in alert.fix
    assert str(alert) == f"{alert.message} (fix: {alert.fix})"


def test_loss_rule_uses_the_default_eval_steps_when_unset() -> None:
    flat = _rows([0.5] * 29)
    assert health_alerts(flat) == []  # 29 < 3 × 10
    assert [a.rule for a in health_alerts(_rows([0.5] * 30))] == ["loss_not_decreasing"]


def test_reward_failures_report_the_worst_rate() -> None:
    rows = _rows([1.0, 0.9, 0.8], failure_rate={2: 0.25, 3: 0.5})
    (alert,) = health_alerts(rows, eval_steps=10)
    assert alert.rule == "reward_failures" and "50%" in alert.message and "step 3" in alert.message


def test_non_numbers_are_not_metrics() -> None:
    rows = [{"step": 1, VALID_TOKEN_RATE: "n/a"}, {"step": 2, VALID_TOKEN_RATE: float("nan")}]
    rows.append({"step": 3, VALID_TOKEN_RATE: True})
    assert health_alerts(rows) == []


def test_a_failed_job_is_the_first_alert() -> None:
    alerts = job_alerts(_rows([1.0, 0.9], vtr=0.5), status="FAILED", job_id="ft-1", eval_steps=2)
    assert [a.rule for a in alerts] == ["failed", "valid_token_rate"]
    assert "opd logs ft-1" in alerts[0].fix
    assert [a.rule for a in job_alerts([], status="RUNNING", job_id="ft-1")] == []


def test_alerts_are_typed_results_with_one_json_shape() -> None:
    alert = health_alerts(_rows([1.0], vtr=0.5))[0]
    assert isinstance(alert, HealthAlert)
    assert json.loads(alert.to_json()) == {
        "rule": "valid_token_rate",
        "severity": "error",
        "message": alert.message,
        "fix": alert.fix,
    }


def test_tracker_reports_each_rule_once() -> None:
    tracker = AlertTracker()
    first = health_alerts(_rows([1.0], vtr=0.5))
    assert [a.rule for a in tracker.fresh(first)] == ["valid_token_rate"]
    later = health_alerts(_rows([1.0, 0.9], vtr=0.4, failure_rate={2: 0.5}))
    assert [a.rule for a in tracker.fresh(later)] == ["reward_failures"]  # valid_token_rate already shown
    assert tracker.fresh(later) == []


def test_eval_steps_of_the_job() -> None:
    assert eval_steps_of({"eval_steps": 5}) == 5
    assert eval_steps_of({"eval_steps": "7"}) == 7
    assert eval_steps_of({"eval_steps": "often"}) is None
    assert eval_steps_of({}) is None and eval_steps_of(None) is None


def test_best_checkpoint_rule() -> None:
    ckpts = [Checkpoint(name=f"checkpoint-{s}", step=s, metrics={}) for s in (2, 4, 6)]
    rows = _rows([1, 0.9, 0.8, 0.7, 0.6, 0.5], reward={2: 0.2, 4: 0.7, 6: 0.6})
    best, reason = best_checkpoint(ckpts, rows)
    assert best.name == "checkpoint-4" and "mean@1" in reason  # not the last one
    plateau = _rows([1.0, 0.6, 0.3, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2])
    ckpts = [Checkpoint(name=f"checkpoint-{s}", step=s, metrics={}) for s in (3, 6, 9)]
    best, reason = best_checkpoint(ckpts, plateau)
    assert best.name == "checkpoint-6" and "plateau" in reason


def test_best_checkpoint_prefers_its_own_metrics_and_handles_little_data() -> None:
    ckpts = [
        Checkpoint(name="checkpoint-1", step=1, path="/c1", metrics={REWARD_MEAN: 0.9}),
        Checkpoint(name="checkpoint-2", step=2, path="/c2", metrics={}),
    ]
    rows = _rows([1.0, 0.9], reward={2: 0.5})
    chosen = best_checkpoint(ckpts, rows)
    assert isinstance(chosen, BestCheckpoint)
    assert chosen.checkpoint.name == "checkpoint-1" and "0.9" in chosen.reason
    few = best_checkpoint([Checkpoint(name="c-2", step=2), Checkpoint(name="c-1", step=1)], _rows([1.0, 0.9]))
    assert few.checkpoint.name == "c-2" and "too few" in few.reason  # the latest scored, by step
    assert best_checkpoint([], rows) is None
    assert best_checkpoint([Checkpoint(name="no-step")], rows) is None


# ---- the sample-level rules: truncation, zero-variance groups, a reward stuck at 0 ---------------
def _with(rows, name, values):
    for row, value in zip(rows, values, strict=True):
        if value is not None:
            row[name] = value
    return rows


def test_truncation_alert_reads_the_latest_step_or_its_samples() -> None:
    rows = _with(_rows([1.0, 0.9, 0.8]), TRUNCATED_FRACTION, [0.9, 0.9, 0.75])
    (alert,) = health_alerts(rows, eval_steps=10, job_id="ft-1")
    assert alert.rule == "truncated" and "75% of the samples of step 3" in alert.message
    assert "raise max_length" in alert.fix and "opd rollouts ft-1 --step 3" in alert.fix
    assert health_alerts(_with(_rows([1.0, 0.9]), TRUNCATED_FRACTION, [0.9, 0.5])) == []  # recovered
    # No truncation metric (agentic): the latest step's recorded samples decide.
    records = [{"kind": "train", "step": 4, "truncated": t} for t in (True, True, False)]
    records.append({"kind": "validation", "step": 4, "truncated": False})
    (alert,) = health_alerts(_rows([1.0]), records=records)
    assert alert.rule == "truncated" and "67% of the recorded samples of step 4" in alert.message
    assert health_alerts(_rows([1.0]), records=records[2:]) == []


def test_zero_variance_alert_waits_three_eval_intervals() -> None:
    early = _with(_rows([1.0] * 5), ZERO_VARIANCE_GROUPS, [1.0] * 5)
    assert health_alerts(early, eval_steps=2) == []  # 5 < 2 × 3: too early to judge
    rows = _with(_rows([1.0, 0.9, 0.8, 0.7, 0.6, 0.5]), ZERO_VARIANCE_GROUPS, [0.0, 0.5, 1.0, 1.0, 1.0, 0.95])
    (alert,) = health_alerts(rows, eval_steps=2, job_id="ft-1")
    assert alert.rule == "zero_variance_groups" and "98% over the last 2 step(s)" in alert.message
    assert "playground" in alert.fix and "opd rollouts ft-1 --step 6" in alert.fix
    rows[-1][ZERO_VARIANCE_GROUPS] = 0.5  # the last interval has signal again
    assert health_alerts(rows, eval_steps=2) == []


def test_a_reward_that_never_leaves_zero_points_at_the_last_rollouts() -> None:
    rows = _rows([1.0, 0.9, 0.8, 0.7, 0.6, 0.5], reward={2: 0.0, 4: 0.0, 6: 0.0})
    (alert,) = health_alerts(_with(rows, TRAIN_REWARD_MEAN, [0.0] * 6), eval_steps=2, job_id="ft-9")
    assert alert.rule == "reward_zero" and "to step 6" in alert.message
    assert "opd rollouts ft-9 --step 6" in alert.fix and "parser" in alert.fix
    rows[2][TRAIN_REWARD_MEAN] = 0.25  # it left 0 once: the parser can find answers
    assert health_alerts(rows, eval_steps=2) == []
    assert health_alerts(_rows([1.0, 0.9, 0.8, 0.7, 0.6, 0.5]), eval_steps=2) == []  # no reward at all


def test_best_checkpoint_line_names_the_docs_pick():
    """Issue 26: `opd watch` ends with this line; the rule is best_checkpoint's, the id is what to deploy."""
    from opd_nb.health.rules import best_checkpoint_line

    cps = [
        Checkpoint(name=f"checkpoint-{s}", step=s, path=f"/runs/checkpoint-{s}", model_name=f"m-{s}")
        for s in (2, 4, 6)
    ]
    rewarded = [{"step": s, "validation/data/reward/mean@1": r} for s, r in ((2, 0.2), (4, 0.7), (6, 0.5))]
    assert best_checkpoint_line(cps, rewarded) == (
        "best checkpoint: checkpoint-4 (step 4), highest validation/data/reward/mean@1 = 0.7, measured at its "
        "step 4; deploy or continue from m-4"
    )
    loss = [
        {"step": s, "actor/distillation/loss": v} for s, v in enumerate([5, 1, 1, 1, 1, 1, 1, 1, 1], start=1)
    ]
    line = best_checkpoint_line(cps, loss)  # levelled off by step 4 (smoothed): not the last checkpoint
    assert line.endswith("; deploy or continue from m-4")
    assert line.startswith("best checkpoint: checkpoint-4 (step 4), loss plateau reached at step 4")
    assert "in the console" in best_checkpoint_line(None, None)  # Bailian: no metrics, no listing
    assert "none kept" in best_checkpoint_line([], loss)


# ---- issue 42: a checkpoint is scored only by what was measured at its own step ----------------------
def _issue_rows(n_steps: int, eval_steps: int, reward_at: dict[int, float]) -> list[dict]:
    """Rows as the engine writes them: loss every step, the validation reward every eval_steps and at the end."""
    rows = []
    for step in range(1, n_steps + 1):
        row = {"step": step, LOSS: 1.0 / step, TRAIN_REWARD_MEAN: 0.5}
        if step % eval_steps == 0 or step == n_steps:
            row[REWARD_MEAN] = reward_at.get(step, 0.5)
        rows.append(row)
    return rows


def test_a_checkpoint_saved_between_evaluations_is_unscored_not_credited_with_a_neighbours_score():
    """The audit's case: eval_steps=2, save_steps=5; step 24 measured 0.625, step 25 was never evaluated."""
    from opd_nb.health.rules import best_checkpoint_line, pick_checkpoint

    rows = _issue_rows(26, 2, {10: 0.5, 20: 0.55, 24: 0.625, 26: 0.6})
    cps = [Checkpoint(name=f"checkpoint-{s}", step=s, model_name=f"m-{s}") for s in (5, 10, 15, 20, 25)]
    pick = pick_checkpoint(cps, rows)
    assert pick.metric == REWARD_MEAN
    assert pick.scores == {
        "checkpoint-5": None,
        "checkpoint-10": 0.5,
        "checkpoint-15": None,
        "checkpoint-20": 0.55,
        "checkpoint-25": None,
    }
    assert pick.unscored() == ["checkpoint-5", "checkpoint-15", "checkpoint-25"]
    assert (
        pick.best.checkpoint.name == "checkpoint-20" and "= 0.55, measured at its step 20" in pick.best.reason
    )
    line = best_checkpoint_line(cps, rows)
    assert line.startswith("best checkpoint: checkpoint-20 (step 20)") and "0.625" not in line
    assert "unscored, nothing measured at their step: checkpoint-5, checkpoint-15, checkpoint-25" in line


def test_no_checkpoint_at_an_evaluation_step_means_no_best_and_says_why():
    from opd_nb.health.rules import best_checkpoint_line, pick_checkpoint

    rows = _issue_rows(26, 2, {24: 0.625})
    cps = [Checkpoint(name=f"checkpoint-{s}", step=s) for s in (15, 25)]
    pick = pick_checkpoint(cps, rows)
    assert pick.best is None and best_checkpoint(cps, rows) is None
    assert pick.unscored() == ["checkpoint-15", "checkpoint-25"]
    assert "no checkpoint step (15, 25) was an evaluation step" in pick.note
    assert "save_steps a multiple of eval_steps" in best_checkpoint_line(cps, rows)


def test_without_a_reward_only_checkpoints_with_a_loss_row_of_their_own_count():
    """Pure distillation ranks by where the loss levels off; a step with no loss row (a resumed run's gap)
    gives its checkpoint no score, and the plateau pick skips it."""
    from opd_nb.health.rules import pick_checkpoint

    plateau = _rows([1.0, 0.6, 0.3, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2])
    del plateau[5][LOSS]  # step 6 recorded no loss
    cps = [Checkpoint(name=f"checkpoint-{s}", step=s) for s in (3, 6, 9)]
    pick = pick_checkpoint(cps, plateau)
    assert pick.metric == LOSS and pick.unscored() == ["checkpoint-6"]
    assert pick.best.checkpoint.name == "checkpoint-9" and "plateau" in pick.best.reason


def test_pick_checkpoint_is_the_one_best_checkpoint_rule_the_engine_and_record_keep_none() -> None:
    """The engine once kept its own "best" (highest reward at a save), saved into the job record and never
    read; the one rule is `pick_checkpoint` over the metric rows. A record written before still loads."""
    from opd_nb.engine.api import EngineResult
    from opd_nb.server.store.job_record import TrainingOutcome

    assert not {name for name in EngineResult.model_fields if "best" in name}
    assert not {name for name in TrainingOutcome.model_fields if "best" in name}
    before = TrainingOutcome.model_validate(
        {"final_checkpoint": "/d/final", "best_checkpoint": "/d/c2", "steps": 4}
    )
    assert (before.final_checkpoint, before.steps) == ("/d/final", 4)
