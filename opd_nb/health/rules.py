"""The docs' health rules and best-checkpoint rule, as pure functions over a job's metrics.

One definition for every front end: the notebook's job monitor shows these alerts and `opd watch`
prints them in a terminal, so the two never disagree about what is wrong with a run. Inputs are
plain metric rows (``{"step": 3, "actor/distillation/loss": 0.4, ...}``) and the client's
``Checkpoint`` records; nothing here talks to a service.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from opd_nb.constants import (
    FAILED,
    LOSS,
    REWARD_FAILURE_RATE,
    REWARD_MEAN,
    TOOL_ERROR_RATE,
    TOOL_METRIC_PREFIX,
    TRACE_REFUSED_EXPORTS,
    TRACE_REJECTED_SPANS,
    TRAIN_REWARD_MEAN,
    TRUNCATED_FRACTION,
    VALID_TOKEN_RATE,
    ZERO_VARIANCE_GROUPS,
)
from opd_nb.plots.png import metric_series
from opd_nb.results import ResultMixin
from opd_nb.spec.hyperparams import DEFAULTS

if TYPE_CHECKING:  # annotations only: the rules run on rows and records, never on a connection
    from opd_nb.client import Checkpoint

DEFAULT_EVAL_STEPS: int = DEFAULTS.eval_steps  # when the job does not set eval_steps
FULL_VALID_TOKEN_RATE = 0.999  # below this, the teacher did not score every student token
PLATEAU_TOLERANCE = 0.05  # a smoothed loss within 5% of its range above the minimum has levelled off
MAX_TRUNCATED = 0.5  # above this share of truncated samples, the teacher mostly scores unfinished answers
MAX_ZERO_VARIANCE = 0.9  # above this share of same-score prompts, the reward carries almost no signal

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

    checkpoint: Checkpoint
    reason: str


def _points(rows: Sequence[Mapping[str, Any]], name: str) -> list[tuple[float, float]]:
    steps, values = metric_series(rows, name)
    return list(zip(steps, values, strict=True))


def eval_steps_of(hyper_parameters: Mapping[str, Any] | None) -> int | None:
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


def tool_failure_alert(rows: Sequence[Mapping[str, Any]], job_id: str | None = None) -> HealthAlert | None:
    """A tool that raises (from the SDK's tool spans): the student sees an error where it wanted a result."""
    failures = [(s, v) for s, v in _points(rows, TOOL_ERROR_RATE) if v > 0]
    if not failures:
        return None
    step, value = max(failures, key=lambda sv: sv[1])
    row = next((r for r in rows if r.get("step") == step), {})
    worst = sorted(
        (
            k[len(TOOL_METRIC_PREFIX) : -len("/error_rate")]
            for k, v in row.items()
            if k != TOOL_ERROR_RATE
            and k.startswith(TOOL_METRIC_PREFIX)
            and k.endswith("/error_rate")
            and isinstance(v, int | float)
            and v > 0
        ),
    )
    which = f" ({', '.join(worst)})" if worst else ""
    where = f"`opd traces {job_id} --step {step:g}`" if job_id else "the step's traces (`opd traces JOB`)"
    return HealthAlert(
        "tool_failures",
        "warning",
        f"tool calls failed in up to {value:.0%} of a step's tool spans{which} (step {step:g})",
        f"read the failed tool spans' errors in {where}; fix the tool or how the rollout calls it",
    )


def trace_refusal_alert(rows: Sequence[Mapping[str, Any]], job_id: str | None = None) -> HealthAlert | None:
    """Spans the control plane refused (an export it could not read, spans it left out): the job's traces
    miss them, though its function servers traced them."""
    exports = max((v for _, v in _points(rows, TRACE_REFUSED_EXPORTS)), default=0.0)
    spans = max((v for _, v in _points(rows, TRACE_REJECTED_SPANS)), default=0.0)
    if exports <= 0 and spans <= 0:
        return None
    logs = f"`opd logs {job_id}`" if job_id else "the job's log"
    return HealthAlert(
        "traces_refused",
        "warning",
        f"opd serve refused {exports:g} of the job's span exports and left out {spans:g} span(s): its "
        "traces miss them",
        f"read why in {logs} (a compression other than gzip or deflate, a step's span cap, a "
        "malformed span); fix the exporter's settings and rerun to have every trace",
    )


def _after_three_evals(rows: Sequence[Mapping[str, Any]], eval_steps: int | None) -> bool:
    """True once the job ran eval_steps × 3 steps: the docs' point to judge a trend."""
    every = max(1, int(eval_steps or DEFAULT_EVAL_STEPS))
    last = max((float(r.get("step", 0) or 0) for r in rows), default=0.0)
    return last >= 3 * every


def _rollouts_hint(job_id: str | None, step: float | None = None) -> str:
    at = f" --step {step:g}" if step is not None else ""
    return f"`opd rollouts {job_id}{at}`" if job_id else "the job's rollouts (`opd rollouts JOB`)"


def truncated_share(records: Sequence[Mapping[str, Any]]) -> float | None:
    """Share of truncated samples among rollout records (None without records)."""
    flags = [bool(r.get("truncated")) for r in records]
    return sum(flags) / len(flags) if flags else None


def truncation_alert(
    rows: Sequence[Mapping[str, Any]],
    *,
    records: Sequence[Mapping[str, Any]] | None = None,
    job_id: str | None = None,
) -> HealthAlert | None:
    """More than half the samples hit max_length: the teacher scores answers that never finished.

    The figure is the engine's ``completions/truncated_fraction`` of the latest step; a job without
    it (agentic) is judged on the latest step's recorded rollouts when `records` are given.
    """
    points = _points(rows, TRUNCATED_FRACTION)
    if points:
        step, share = points[-1]
        source = "samples"
    else:
        share = truncated_share([r for r in records or () if r.get("kind", "train") == "train"])
        if share is None:
            return None
        step = float((records or [{}])[0].get("step") or 0)
        source = "recorded samples"
    if share <= MAX_TRUNCATED:
        return None
    return HealthAlert(
        "truncated",
        "warning",
        f"{share:.0%} of the {source} of step {step:g} were cut off at max_length: "
        "the teacher scores answers that never finished",
        f"raise max_length; the completions of {_rollouts_hint(job_id, step)} show where they stop "
        "(an answer that repeats itself needs training, not room)",
    )


def zero_variance_alert(
    rows: Sequence[Mapping[str, Any]], eval_steps: int | None = None, *, job_id: str | None = None
) -> HealthAlert | None:
    """The reward gives every sample of a prompt the same score: group advantages are 0, no task signal.

    Judged after eval_steps × 3 steps, on the mean over the last eval interval (one step is noise).
    """
    points = _points(rows, ZERO_VARIANCE_GROUPS)
    if not points or not _after_three_evals(rows, eval_steps):
        return None
    every = max(1, int(eval_steps or DEFAULT_EVAL_STEPS))
    window = points[-min(every, len(points)) :]
    share = sum(v for _, v in window) / len(window)
    if share <= MAX_ZERO_VARIANCE:
        return None
    step = points[-1][0]
    return HealthAlert(
        "zero_variance_groups",
        "warning",
        f"{ZERO_VARIANCE_GROUPS} is {share:.0%} over the last {len(window)} step(s) (to step {step:g}): "
        "the reward gives every sample of a prompt the same score, so it adds no signal",
        "check the parser with the reward playground (`%opd playground WS`) on the samples shown by "
        + _rollouts_hint(job_id, step),
    )


def reward_zero_alert(
    rows: Sequence[Mapping[str, Any]], eval_steps: int | None = None, *, job_id: str | None = None
) -> HealthAlert | None:
    """A reward that never leaves 0 (sampled and validation answers alike) is usually a parser that
    never finds the answer; the last step's completions show what it saw."""
    points = _points(rows, REWARD_MEAN) + _points(rows, TRAIN_REWARD_MEAN)
    if len(points) < 3 or not _after_three_evals(rows, eval_steps) or any(v != 0 for _, v in points):
        return None
    step = max(s for s, _ in points)
    return HealthAlert(
        "reward_zero",
        "warning",
        f"the reward has been 0 on every sample so far ({len(points)} readings of {REWARD_MEAN} "
        f"and {TRAIN_REWARD_MEAN}, to step {step:g})",
        f"read the completions of the last step ({_rollouts_hint(job_id, step)}): they are what the "
        "parser saw; then score one in the playground",
    )


def health_alerts(
    rows: Sequence[Mapping[str, Any]],
    *,
    eval_steps: int | None = None,
    job_id: str | None = None,
    records: Sequence[Mapping[str, Any]] | None = None,
) -> list[HealthAlert]:
    """Every metric rule the docs give, in order of what to fix first.

    `records` (the latest step's rollouts, when the caller has them) stand in for a truncation
    figure the metrics lack; `job_id` names the job in the fixes.
    """
    found = (
        valid_token_rate_alert(rows),
        truncation_alert(rows, records=records, job_id=job_id),
        loss_trend_alert(rows, eval_steps),
        reward_failure_alert(rows),
        tool_failure_alert(rows, job_id),
        trace_refusal_alert(rows, job_id),
        reward_zero_alert(rows, eval_steps, job_id=job_id),
        zero_variance_alert(rows, eval_steps, job_id=job_id),
    )
    return [alert for alert in found if alert is not None]


def job_alerts(
    rows: Sequence[Mapping[str, Any]],
    *,
    status: str,
    job_id: str,
    eval_steps: int | None = None,
    records: Sequence[Mapping[str, Any]] | None = None,
) -> list[HealthAlert]:
    """What a watcher shows for one job: a failure first, then the metric rules."""
    alerts = health_alerts(rows, eval_steps=eval_steps, job_id=job_id, records=records)
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


class CheckpointPick(NamedTuple):
    """The docs' rule over one job's checkpoints: what it ranks by, each checkpoint's score measured at
    its own step (None: nothing was measured there, so it is unscored), and the pick or why none."""

    metric: str  # REWARD_MEAN with a reward, else LOSS
    scores: dict[str, float | None]  # checkpoint name -> its own step's value
    best: BestCheckpoint | None
    note: str  # why no checkpoint is best ("" when one is)

    def unscored(self) -> list[str]:
        """The checkpoints with no score of their own (never credited with a neighbour's)."""
        return [name for name, value in self.scores.items() if value is None]


def rewarded(rows: Sequence[Mapping[str, Any]], checkpoints: Sequence[Checkpoint] = ()) -> bool:
    """Whether the job reports a reward (pure distillation reports none): what the docs' rule ranks by."""
    return any(REWARD_MEAN in r or TRAIN_REWARD_MEAN in r for r in rows) or any(
        REWARD_MEAN in c.metrics for c in checkpoints
    )


def _measured_at(rows: Sequence[Mapping[str, Any]], name: str) -> dict[float, float]:
    """step -> value of `name` in the row of that step (only rows that recorded it)."""
    return dict(_points(rows, name))


def _own_score(checkpoint: Checkpoint, at: dict[float, float], metric: str) -> float | None:
    """The metric measured at the checkpoint's own step: its step's row, else the values it was saved with
    (the local plane keeps its step's row); never a neighbour's."""
    value = at.get(float(checkpoint.step)) if checkpoint.step is not None else None
    if value is None:
        own = checkpoint.metrics.get(metric)
        value = own if isinstance(own, int | float) and not isinstance(own, bool) else None
    return None if value is None or not math.isfinite(value) else float(value)


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


def _by_reward(scored: list[tuple[Checkpoint, float]]) -> BestCheckpoint:
    top = max(v for _, v in scored)
    chosen = next(c for c, v in scored if v == top)
    return BestCheckpoint(chosen, f"highest {REWARD_MEAN} = {top:.4g}, measured at its step {chosen.step}")


def _by_plateau(scored: list[tuple[Checkpoint, float]], loss: list[tuple[float, float]]) -> BestCheckpoint:
    if len(loss) < 3:
        return BestCheckpoint(scored[-1][0], "latest scored (too few loss points to find a plateau)")
    plateau = _loss_plateau_step(loss)
    after = [c for c, _ in scored if c.step is not None and c.step >= plateau]
    why = f"loss plateau reached at step {plateau:g} (smoothed loss within 5% of its minimum)"
    if after:
        return BestCheckpoint(after[0], why)
    return BestCheckpoint(scored[-1][0], f"{why}; no scored checkpoint at or after it, so the latest scored")


def pick_checkpoint(
    checkpoints: Sequence[Checkpoint], rows: Sequence[Mapping[str, Any]]
) -> CheckpointPick | None:
    """The docs' rule (seed 002): with a reward, the highest validation/data/reward/mean@1; without, the
    first checkpoint where actor/distillation/loss has levelled off; not necessarily the last.

    A checkpoint is a candidate only with a score measured at its own step; one saved between two
    evaluations (or at a step with no loss row) is unscored and never credited with a neighbour's
    score. None: no checkpoint carries a step number."""
    stepped = sorted((c for c in checkpoints if c.step is not None), key=lambda c: c.step or 0)
    if not stepped:
        return None
    metric = REWARD_MEAN if rewarded(rows, stepped) else LOSS
    at = _measured_at(rows, metric)
    scores = {c.name: _own_score(c, at, metric) for c in stepped}
    scored = [(c, v) for c in stepped if (v := scores[c.name]) is not None]
    if not scored:
        steps = ", ".join(str(c.step) for c in stepped)
        if metric == REWARD_MEAN:
            note = (
                f"none is scored: no checkpoint step ({steps}) was an evaluation step, so none has its own "
                f"{metric} (next time make save_steps a multiple of eval_steps)"
            )
        else:
            note = f"none is scored: no checkpoint step ({steps}) has a {metric} row"
        return CheckpointPick(metric, scores, None, note)
    best = _by_reward(scored) if metric == REWARD_MEAN else _by_plateau(scored, _points(rows, LOSS))
    return CheckpointPick(metric, scores, best, "")


def best_checkpoint(
    checkpoints: Sequence[Checkpoint], rows: Sequence[Mapping[str, Any]]
) -> BestCheckpoint | None:
    """The checkpoint :func:`pick_checkpoint` picks (None: none has a step, or none is scored)."""
    pick = pick_checkpoint(checkpoints, rows)
    return pick.best if pick is not None else None


def best_checkpoint_line(
    checkpoints: Sequence[Checkpoint] | None, rows: Sequence[Mapping[str, Any]] | None
) -> str:
    """One line naming a finished job's best checkpoint by the docs' rule (what `opd watch` ends with)."""
    if checkpoints is None or rows is None:  # Bailian's API has no metrics: the rule cannot be applied here
        return (
            "best checkpoint: this control plane reports no metrics here, so pick by "
            f"{REWARD_MEAN} (with a reward) or where {LOSS} levels off, in the console"
        )
    if not checkpoints:
        return "best checkpoint: none kept (save_strategy no, or the job saved none)"
    pick = pick_checkpoint(checkpoints, rows)
    if pick is None:
        return "best checkpoint: none with a step number"
    unscored = pick.unscored()
    tail = f" (unscored, nothing measured at their step: {', '.join(unscored)})" if unscored else ""
    if pick.best is None:
        return f"best checkpoint: {pick.note}"
    cp = pick.best.checkpoint
    use = cp.model_name or cp.path or cp.name
    return f"best checkpoint: {cp.name} (step {cp.step}), {pick.best.reason}; deploy or continue from {use}{tail}"


# ---------------------------------------------------------------- guard rules (severity error)
# What `opd watch --guard` cancels a job for: a run these rules flag only spends money from here on.


@dataclass(frozen=True)
class GuardThresholds:
    """When a guard cancels; each is a flag of `opd watch --guard` (defaults are the flags' defaults)."""

    valid_token_steps: int = 3  # valid_token_rate below 1 for this many consecutive steps
    reward_failure_rate: float = 0.5  # a step whose reward calls failed at or above this share
    loss_divergence: float = 10.0  # |loss| above this multiple of max(|first loss|, 1)
    zero_variance_evals: int = 3  # every group zero-variance for this many evaluation intervals


def _not_finite(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("nan", "inf", "-inf", "infinity", "-infinity")
    return isinstance(value, float) and not math.isfinite(value)


def _trailing(points: list[tuple[float, float]], bad: Any) -> list[tuple[float, float]]:
    """The run of points at the end of the series for which `bad(value)` holds."""
    run: list[tuple[float, float]] = []
    for point in reversed(points):
        if not bad(point[1]):
            break
        run.insert(0, point)
    return run


def _guard_vtr(rows: Sequence[Mapping[str, Any]], t: GuardThresholds) -> HealthAlert | None:
    run = _trailing(_points(rows, VALID_TOKEN_RATE), lambda v: v < FULL_VALID_TOKEN_RATE)
    if len(run) < t.valid_token_steps:
        return None
    values = ", ".join(f"{v:.3f}" for _, v in run[-t.valid_token_steps :])
    return HealthAlert(
        "valid_token_rate",
        "error",
        f"valid_token_rate below 1 for {len(run)} consecutive step(s) to step {run[-1][0]:g} ({values}; "
        f"guard: {t.valid_token_steps})",
        "check the teacher first (teacher_model, opd_teacher_max_model_len vs. max_length)",
    )


def _guard_reward(rows: Sequence[Mapping[str, Any]], t: GuardThresholds) -> HealthAlert | None:
    high = [(s, v) for s, v in _points(rows, REWARD_FAILURE_RATE) if v >= t.reward_failure_rate]
    if not high:
        return None
    step, value = high[-1]
    return HealthAlert(
        "reward_failures",
        "error",
        f"reward calls failed on {value:.0%} of samples at step {step:g} (guard: {t.reward_failure_rate:.0%})",
        "run `%opd test` and the reward playground on failing samples; see the log tail",
    )


def _guard_loss(rows: Sequence[Mapping[str, Any]], t: GuardThresholds) -> HealthAlert | None:
    for i, row in enumerate(rows):
        if LOSS in row and _not_finite(row[LOSS]):
            step = row.get("step", i + 1)
            return HealthAlert(
                "loss_not_finite",
                "error",
                f"{LOSS} is {row[LOSS]} at step {step}",
                "lower learning_rate; check the data for empty answers",
            )
    loss = _points(rows, LOSS)
    if len(loss) < 2 or abs(loss[-1][1]) <= t.loss_divergence * max(abs(loss[0][1]), 1.0):
        return None
    return HealthAlert(
        "loss_diverging",
        "error",
        f"{LOSS} is {loss[-1][1]:.4g} at step {loss[-1][0]:g}, from {loss[0][1]:.4g} at step {loss[0][0]:g} "
        f"(guard: {t.loss_divergence:g}x)",
        "lower learning_rate (by 2-5x) and submit again",
    )


def _guard_zero_variance(
    rows: Sequence[Mapping[str, Any]], eval_steps: int | None, t: GuardThresholds
) -> HealthAlert | None:
    need = t.zero_variance_evals * max(1, int(eval_steps or DEFAULT_EVAL_STEPS))
    run = _trailing(_points(rows, ZERO_VARIANCE_GROUPS), lambda v: v >= FULL_VALID_TOKEN_RATE)
    if len(run) < need:
        return None
    return HealthAlert(
        "zero_variance_groups",
        "error",
        f"every group had zero reward variance for {len(run)} step(s) to step {run[-1][0]:g} "
        f"({t.zero_variance_evals} evaluation intervals of the guard)",
        "check the reward parser in the playground (`%opd playground WS`)",
    )


def guard_alerts(
    rows: Sequence[Mapping[str, Any]],
    *,
    eval_steps: int | None = None,
    thresholds: GuardThresholds | None = None,
) -> list[HealthAlert]:
    """The error rules a guard acts on, over a job's metric rows (empty: nothing to cancel for)."""
    t = thresholds or GuardThresholds()
    found = (
        _guard_vtr(rows, t),
        _guard_reward(rows, t),
        _guard_loss(rows, t),
        _guard_zero_variance(rows, eval_steps, t),
    )
    return [alert for alert in found if alert is not None]
