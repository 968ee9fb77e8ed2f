"""Local-only: what the student wrote at one step (``GET /fine-tunes/{job_id}/rollouts``).

A record is the engine's file format (``opd_nb.engine.rollouts``, where every key is described): the
keys named here are typed, the others (reward components, an agentic call's status) kept as sent."""

from __future__ import annotations

from typing import Any

from opd_nb.wire.base import Forwarded, Scalar


class RolloutToken(Forwarded):
    """One completion token with the student's and the teacher's log-probability of it (None: not scored)."""

    id: int | None = None
    text: str = ""
    student_logprob: float | None = None
    teacher_logprob: float | None = None


class RolloutRecord(Forwarded):
    kind: str | None = None  # train | validation
    step: int | None = None
    group: int | None = None
    sample: int | None = None
    messages: list[dict[str, Any]] = []
    completion: str | None = None
    tokens: list[RolloutToken] = []
    truncated: bool | None = None
    reward_score: float | None = None
    reward_metrics: dict[str, Scalar] | None = None
    reward_status: str | None = None
    reward_error: str | None = None


class RolloutsPage(Forwarded):
    """The records of ``step`` (the latest recorded one by default) and which steps have any, by kind
    (every field set by the route; the records as the engine wrote them)."""

    job_id: str
    step: int | None = None
    kind: str | None = None
    steps: list[int] = []
    steps_by_kind: dict[str, list[int]] = {}
    rollouts: list[RolloutRecord] = []
