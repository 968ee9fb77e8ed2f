"""What an agent reads before it acts: the metric dictionary, the troubleshooting table, the preflight rules.

None of it is written twice. The metric names and their one-line meanings are ``constants.py``'s
(the comment beside each name); the troubleshooting table is what ``health/rules.py``'s rules say when each
fires, produced by running the rules on a small history that trips them (so its wording and fixes are
the monitor's, `opd watch`'s and the guard's); the preflight rules are ``checks.RULES``.
"""

from __future__ import annotations

import inspect
import io
import tokenize
from collections.abc import Callable
from typing import Any

from opd_nb import constants
from opd_nb.constants import (
    LOSS,
    REWARD_FAILURE_RATE,
    REWARD_MEAN,
    TOOL_ERROR_RATE,
    TRACE_REFUSED_EXPORTS,
    TRAIN_REWARD_MEAN,
    TRUNCATED_FRACTION,
    VALID_TOKEN_RATE,
    ZERO_VARIANCE_GROUPS,
)
from opd_nb.health import rules as health

# The docs' metrics whose names carry no comment in constants.py: what each means (Bailian's wording).
DOCS_MEANINGS = {
    "LOSS": "the distillation loss the student minimises; should fall, then level off",
    "VALID_TOKEN_RATE": "share of student tokens the teacher scored; must be 1 (below: fix the teacher first)",
    "REWARD_MEAN": "mean reward of the validation answers (one sample each); the best checkpoint's measure",
    "VALIDATION_ACCURACY": "share of validation answers scored correct",
    "LEARNING_RATE": "the learning rate of this step",
    "TOKENS_PER_S": "tokens the step processed per second",
    "GRAD_NORM": "gradient norm before clipping; spikes go with unstable steps",
}


_NOT_METRICS = ("http", "/", constants.LOCAL_OUTPUT_PREFIX)  # URLs, paths and the output prefix


def _comments() -> dict[str, str]:
    """`NAME = "value"  # comment` lines of constants.py: name -> comment."""
    out: dict[str, str] = {}
    source = inspect.getsource(constants)
    name: str | None = None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME and tok.start[1] == 0:
            name = tok.string
        elif tok.type == tokenize.COMMENT and name and tok.start[1] > 0:
            out.setdefault(name, tok.string.lstrip("# ").strip())
        elif tok.type == tokenize.NEWLINE:
            name = None
    return out


def metric_dictionary() -> list[dict[str, str]]:
    """Every metric name the engine writes (a ``constants`` string with a ``/``), with its meaning."""
    comments = _comments()
    rows = []
    for attr, value in vars(constants).items():
        if attr.isupper() and isinstance(value, str) and "/" in value and not value.startswith(_NOT_METRICS):
            meaning = DOCS_MEANINGS.get(attr) or comments.get(attr, "")
            kind = "prefix" if value.endswith("/") else "metric"
            rows.append({"name": value, "kind": kind, "meaning": meaning})
    return rows


def _rows(n: int, values: dict[str, Callable[[int], float]]) -> list[dict[str, Any]]:
    return [{"step": s, **{name: f(s) for name, f in values.items()}} for s in range(1, n + 1)]


# A short history that trips each rule (eval_steps 1, so "after three evaluations" is step 3).
SCENARIOS: tuple[tuple[str, list[dict[str, Any]]], ...] = (
    (VALID_TOKEN_RATE, _rows(4, {VALID_TOKEN_RATE: lambda s: 0.8, LOSS: lambda s: 1.0 / s})),
    (TRUNCATED_FRACTION, _rows(4, {TRUNCATED_FRACTION: lambda s: 0.9, LOSS: lambda s: 1.0 / s})),
    (LOSS, _rows(6, {LOSS: lambda s: 1.0 + 0.1 * s})),
    (REWARD_FAILURE_RATE, _rows(4, {REWARD_FAILURE_RATE: lambda s: 0.6, LOSS: lambda s: 1.0 / s})),
    (TOOL_ERROR_RATE, _rows(4, {TOOL_ERROR_RATE: lambda s: 0.25, LOSS: lambda s: 1.0 / s})),
    (TRACE_REFUSED_EXPORTS, _rows(4, {TRACE_REFUSED_EXPORTS: lambda s: float(s), LOSS: lambda s: 1.0 / s})),
    (
        REWARD_MEAN,
        _rows(4, {REWARD_MEAN: lambda s: 0.0, TRAIN_REWARD_MEAN: lambda s: 0.0, LOSS: lambda s: 1.0 / s}),
    ),
    (ZERO_VARIANCE_GROUPS, _rows(6, {ZERO_VARIANCE_GROUPS: lambda s: 1.0, LOSS: lambda s: 1.0 / s})),
    (LOSS, [{"step": 1, LOSS: 1.0}, {"step": 2, LOSS: float("nan")}]),
    (LOSS, _rows(4, {LOSS: lambda s: 10.0**s})),
)
_WHY = {
    "valid_token_rate": health.valid_token_rate_alert,
    "truncated": health.truncation_alert,
    "loss_not_decreasing": health.loss_trend_alert,
    "reward_failures": health.reward_failure_alert,
    "tool_failures": health.tool_failure_alert,
    "traces_refused": health.trace_refusal_alert,
    "reward_zero": health.reward_zero_alert,
    "zero_variance_groups": health.zero_variance_alert,
}


def troubleshooting(job_id: str = "JOB") -> list[dict[str, str]]:
    """The docs' troubleshooting table as our health rules encode it: each rule, the metric it reads,
    when the guard cancels for it, an example of what it says, and its fix."""
    seen: dict[tuple[str, str], dict[str, str]] = {}
    for metric, rows in SCENARIOS:
        shown = [
            (a, "monitor and opd watch") for a in health.health_alerts(rows, eval_steps=1, job_id=job_id)
        ]
        guarded = [(a, "guard (opd watch --guard cancels)") for a in health.guard_alerts(rows, eval_steps=1)]
        for alert, source in [*shown, *guarded]:
            why = _WHY.get(alert.rule) if source.startswith("monitor") else None
            seen.setdefault((alert.rule, source), {
                "rule": alert.rule,
                "severity": alert.severity,
                "metric": metric,
                "shown_by": source,
                "why": (inspect.getdoc(why) or "").split("\n")[0] if why else "",
                "example": alert.message,
                "fix": alert.fix,
            })  # fmt: skip
    from opd_nb.health.guard import log_error_alert

    failed = health.job_alerts([], status=constants.FAILED, job_id=job_id)[0]
    log_line = log_error_alert("ERROR reward function raised ValueError", job_id)
    for alert, metric, source in ((failed, "status", "monitor and opd watch"),
                                  (log_line, "the job's log", "guard, on Bailian (no metrics API)")):  # fmt: skip
        assert alert is not None
        seen[(alert.rule, source)] = {"rule": alert.rule, "severity": alert.severity, "metric": metric,
                                      "shown_by": source, "why": "", "example": alert.message, "fix": alert.fix}  # fmt: skip
    return list(seen.values())


def preflight_rules() -> list[dict[str, str]]:
    """Every preflight rule id and what it catches (each finding of `check` carries its own fix)."""
    from opd_nb.checks import RULES

    return [{"rule": rule, "catches": what} for rule, what in RULES.items()]
