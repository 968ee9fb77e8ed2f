"""Local-only: what the student wrote at one step (``GET /fine-tunes/{job_id}/rollouts``).

A record is the engine's file format (``opd_nb.engine.rollouts``, where every key is described). The
engine writes it as the ``TypedDict`` rows below (checked where it builds them, at no cost per token);
the routes read it through the models, which name every key a row has (`tests/test_wire_models.py`
holds the two equal) and keep any other as sent."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from opd_nb.wire.base import Forwarded, Scalar


class TokenRow(TypedDict):
    """One completion token as the engine writes it (agentic: which assistant message, and whether it was
    trained or cut to fit ``max_length``)."""

    id: int
    text: str
    student_logprob: float | None
    teacher_logprob: float | None
    turn: NotRequired[int | None]
    trained: NotRequired[bool]


class RolloutRow(TypedDict):
    """One recorded rollout as the engine writes it: the sample, its tokens, its reward (with a reward
    function) and, agentic, whether the user's rollout function succeeded."""

    kind: str
    step: int
    group: int
    sample: int
    messages: list[dict[str, Any]]
    completion: str
    tokens: list[TokenRow]
    truncated: bool
    reward_score: NotRequired[float | None]
    reward_metrics: NotRequired[dict[str, Any] | None]
    reward_status: NotRequired[str | None]
    reward_error: NotRequired[str | None]
    rollout_status: NotRequired[str]
    rollout_error: NotRequired[str | None]


class RolloutToken(Forwarded):
    """One completion token with the student's and the teacher's log-probability of it (None: not scored)."""

    id: int | None = None
    text: str = ""
    student_logprob: float | None = None
    teacher_logprob: float | None = None
    turn: int | None = None  # agentic: the assistant message it belongs to
    trained: bool | None = None  # agentic: False for tokens cut to fit max_length


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
    rollout_status: str | None = None  # agentic: success | failed
    rollout_error: str | None = None


class RolloutsPage(Forwarded):
    """The records of ``step`` (the latest recorded one by default) and which steps have any, by kind
    (every field set by the route; the records as the engine wrote them)."""

    job_id: str
    step: int | None = None
    kind: str | None = None
    steps: list[int] = []
    steps_by_kind: dict[str, list[int]] = {}
    rollouts: list[RolloutRecord] = []
