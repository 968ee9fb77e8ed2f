"""The docs' health rules and best-checkpoint rule, as pure functions over a job's metrics.

One definition for every front end: the notebook's job monitor shows these alerts and `opd watch`
prints them in a terminal, so the two never disagree about what is wrong with a run. Inputs are
plain metric rows (``{"step": 3, "actor/distillation/loss": 0.4, ...}``) and checkpoints (the
client's ``Checkpoint`` objects or plain dicts); nothing here talks to a service.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from opd_nb.constants import FAILED, LOSS, REWARD_FAILURE_RATE, REWARD_MEAN, VALID_TOKEN_RATE
from opd_nb.plots import metric_series
from opd_nb.results import ResultMixin

DEFAULT_EVAL_STEPS = 10  # Bailian's default when the job does not set eval_steps
FULL_VALID_TOKEN_RATE = 0.999  # below this, the teacher did not score every student token
PLATEAU_TOLERANCE = 0.05  # a smoothed loss within 5% of its range above the minimum has levelled off

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class HealthAlert(ResultMixin):
    """One broken health rule: which rule, how bad, what the metrics show, and what to do first."""

    rule: str
    severity: Severity
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.message} (fix: {self.fix})"


class BestCheckpoint(NamedTuple):
    """The checkpoint the docs' rule picks, and why (unpacks as ``checkpoint, reason``)."""

    checkpoint: Any
    reason: str


def _points(rows: Sequence[Mapping[str, Any]], name: str) -> list[tuple[float, float]]:
    steps, values = metric_series(rows, name)
    return list(zip(steps, values, strict=True))


def _field(obj: Any, key: str) -> Any:
    """A checkpoint's field, whether it is a model or a plain dict."""
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def eval_steps_of(hyper_parameters: Any) -> int | None:
    """The job's ``eval_steps`` (None when unset or not a number)."""
    value = hyper_parameters.get("eval_steps") if isinstance(hyper_parameters, Mapping) else None
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def valid_token_rate_alert(rows: Sequence[Mapping[str, Any]]) -> HealthAlert | None:
    """valid_token_rate below 1: the teacher's scores are incomplete, so every other metric means
    less until the teacher is fixed."""
    low = [(s, v) for s, v in _points(rows, VALID_TOKEN_RATE) if v < FULL_VALID_TOKEN_RATE]
    if not low:
        return None
    step, value = min(low, key=lambda sv: sv[1])
    return HealthAlert(
        "valid_token_rate",
        "error",
        f"valid_token_rate is below 1 ({value:.3f} at step {step:g}, {len(low)} step(s)): "
        "the teacher did not score every student token",
        "check the teacher first (teacher_model name, max_length vs. prompt+response) before tuning anything",
    )


def loss_trend_alert(rows: Sequence[Mapping[str, Any]], eval_steps: int | None = None) -> HealthAlert | None:
    """No loss decrease after eval_steps × 3 steps (a trend is judged only after three eval intervals)."""
    every = max(1, int(eval_steps or DEFAULT_EVAL_STEPS))
    loss = _points(rows, LOSS)
    if len(loss) < 2 or loss[-1][0] < 3 * every:
        return None
    window = max(1, min(every, len(loss) // 3))
    first = sum(v for _, v in loss[:window]) / window
    last = sum(v for _, v in loss[-window:]) / window
    if last < first - 1e-9 * max(1.0, abs(first)):
        return None
    return HealthAlert(
        "loss_not_decreasing",
        "warning",
        f"{LOSS} has not decreased after {loss[-1][0]:g} steps "
        f"(eval_steps × 3 = {3 * every}): mean {first:.4g} at the start, {last:.4g} now",
        "check valid_token_rate and the data; then change one thing at a time (learning_rate first)",
    )


def reward_failure_alert(rows: Sequence[Mapping[str, Any]]) -> HealthAlert | None:
    """A reward function that raises scores 0 and drags the signal down."""
    failures = [(s, v) for s, v in _points(rows, REWARD_FAILURE_RATE) if v > 0]
    if not failures:
        return None
    step, value = max(failures, key=lambda sv: sv[1])
    return HealthAlert(
        "reward_failures",
        "warning",
        f"the reward function failed on up to {value:.0%} of samples (step {step:g})",
        "run `%opd test` and the reward playground on failing samples; see the log tail",
    )


def health_alerts(rows: Sequence[Mapping[str, Any]], *, eval_steps: int | None = None) -> list[HealthAlert]:
    """Every metric rule the docs give, in order of what to fix first."""
    found = (valid_token_rate_alert(rows), loss_trend_alert(rows, eval_steps), reward_failure_alert(rows))
    return [alert for alert in found if alert is not None]


def job_alerts(
    rows: Sequence[Mapping[str, Any]], *, status: str, job_id: str, eval_steps: int | None = None
) -> list[HealthAlert]:
    """What a watcher shows for one job: a failure first, then the metric rules."""
    alerts = health_alerts(rows, eval_steps=eval_steps)
    if status == FAILED:
        alerts.insert(
            0,
            HealthAlert("failed", "error", "the job FAILED", f"read the end of its log (opd logs {job_id})"),
        )
    return alerts


class AlertTracker:
    """Remembers which rules were already reported, so a terminal prints each alert once."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def fresh(self, alerts: Iterable[HealthAlert]) -> list[HealthAlert]:
        """The alerts whose rule has not been reported before (and marks them reported)."""
        out = [a for a in alerts if a.rule not in self._seen]
        self._seen.update(a.rule for a in out)
        return out


def _checkpoint_reward(checkpoint: Any, reward: list[tuple[float, float]]) -> float | None:
    """The checkpoint's own reward mean@1, else the last one validated at or before its step."""
    value = (_field(checkpoint, "metrics") or {}).get(REWARD_MEAN)
    if value is None:
        before = [v for s, v in reward if s <= _field(checkpoint, "step")]
        value = before[-1] if before else None
    return None if value is None else float(value)


def _loss_plateau_step(loss: list[tuple[float, float]]) -> float:
    """The first step where the smoothed loss is within PLATEAU_TOLERANCE of its minimum."""
    w = max(3, len(loss) // 10)
    smooth = []
    for i in range(len(loss)):
        chunk = loss[max(0, i - w + 1) : i + 1]
        smooth.append((loss[i][0], sum(v for _, v in chunk) / len(chunk)))
    lo, hi = min(v for _, v in smooth), max(v for _, v in smooth)
    tol = PLATEAU_TOLERANCE * (hi - lo) if hi > lo else 0.0
    return next(s for s, v in smooth if v <= lo + tol)


def best_checkpoint(checkpoints: Sequence[Any], rows: Sequence[Mapping[str, Any]]) -> BestCheckpoint | None:
    """The docs' rule: with a reward, the highest validation/data/reward/mean@1; without, the
    first checkpoint where actor/distillation/loss has levelled off. Not necessarily the last."""
    ckpts = sorted((c for c in checkpoints if _field(c, "step") is not None), key=lambda c: _field(c, "step"))
    if not ckpts:
        return None
    reward = _points(rows, REWARD_MEAN)
    scored = [(v, c) for c in ckpts if (v := _checkpoint_reward(c, reward)) is not None]
    if scored:
        top = max(v for v, _ in scored)
        chosen = next(c for v, c in scored if v == top)
        return BestCheckpoint(chosen, f"highest {REWARD_MEAN} = {top:.4g}")
    loss = _points(rows, LOSS)
    if len(loss) < 3:
        return BestCheckpoint(ckpts[-1], "latest (too few loss points to find a plateau)")
    plateau = _loss_plateau_step(loss)
    after = [c for c in ckpts if _field(c, "step") >= plateau]
    return BestCheckpoint(
        after[0] if after else ckpts[-1],
        f"loss plateau reached at step {plateau:g} (smoothed loss within 5% of its minimum)",
    )
