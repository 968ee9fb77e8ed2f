"""One call to a user's reward function in the SDK's function server: the request, and what came back.

Why one module: training (:mod:`opd_nb.engine.rewards`), ``opd eval`` (:mod:`opd_nb.experiments.evaluation`) and
the notebook's reward playground all score through the same server, so they build the request the
same way and read every reply (a score, a ``status: failed``, a raise, a wrong shape, a timeout)
into the same :class:`CallOutcome` with the same words. The transport is the caller's (the engine
keeps connections alive, the others post once); it only has to hand back ``(HTTP status, body)``
or raise what :mod:`http.client` raises.
"""

from __future__ import annotations

import http.client
import json
import math
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Send = Callable[[bytes, float], tuple[int, bytes]]  # (JSON body, timeout s) -> (HTTP status, reply body)
FUNCTION_PATH = "/api/v1"  # the SDK's function server's one route (the cloud posts there too)
DEFAULT_TIMEOUT_S = 120.0  # per call where no function config says otherwise (the template's `timeout`)
SUCCESS = "success"
CALL_FAILED = "error"  # our status for a call that got no usable reply (the function's own is kept)
SNIPPET = 200  # characters of a reply quoted in an error


# ---- the request (the SDK's RewardInput / GroupRewardInput, as the cloud posts it) ----------------
class AgentOutput(BaseModel):
    messages: list[dict[str, Any]]
    rollout_extra: dict[str, Any] | None = None


class RequestMetadata(BaseModel):
    job_id: str
    sample_id: str
    rollout_id: str
    attempt_id: str = "0"


class RewardRequest(BaseModel):
    """The body of one reward call (one answer)."""

    func_type: Literal["reward"] = "reward"
    ground_truth: Any = None
    agent_output: AgentOutput
    request_metadata: RequestMetadata


class GroupRewardRequest(BaseModel):
    """The body of one group-reward call (every answer to one prompt)."""

    func_type: Literal["group_reward"] = "group_reward"
    agent_outputs: list[AgentOutput]
    ground_truth: Any = None
    request_metadata: RequestMetadata


Request = RewardRequest | GroupRewardRequest


# ---- the outcome ------------------------------------------------------------------------------
class CallOutcome(BaseModel):
    """What one answer got from its reward call. ``score`` is None exactly when ``error`` is set."""

    model_config = ConfigDict(frozen=True)

    score: float | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)  # as returned: a non-number is flagged later
    status: str = SUCCESS  # the function's own status, or CALL_FAILED when there was no usable reply
    error: str | None = None
    error_code: str | None = None
    seconds: float = 0.0  # the call's wall time (a group's answers share their call's)
    finished: float = 0.0  # time.perf_counter() when the reply came (a batch's wall time ends at the last)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def numeric_metrics(self) -> dict[str, float]:
        """The metrics the console can plot (numbers; a bool is not one)."""
        return {
            k: float(v)
            for k, v in self.metrics.items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }


def call(send: Send, request: Request, timeout: float, *, url: str) -> list[CallOutcome]:
    """Make one call with `send` and read its reply: one outcome per answer in `request`."""
    body = request.model_dump_json().encode()
    started = time.perf_counter()
    try:
        status, data = send(body, timeout)
        reply: tuple[int, bytes] | str = (status, data)
    except TimeoutError:
        reply = f"timed out after {timeout:g}s (the function's timeout)"
    except (OSError, http.client.HTTPException) as exc:
        reply = f"could not reach the function server at {url}: {type(exc).__name__}: {exc}"
    finished = time.perf_counter()
    n = len(request.agent_outputs) if isinstance(request, GroupRewardRequest) else 1
    outcomes = read_reply(reply, n=n, group=isinstance(request, GroupRewardRequest))
    timing = {"seconds": finished - started, "finished": finished}
    return [o.model_copy(update=timing) for o in outcomes]


def read_reply(reply: tuple[int, bytes] | str, *, n: int = 1, group: bool = False) -> list[CallOutcome]:
    """`n` outcomes from one reply: ``(HTTP status, body)``, or in words why there is none."""
    body, failure = _body(reply)
    if failure is not None:
        return [failure] * n
    assert body is not None
    if not group:
        return [_scored(body.get("reward"), "reward.reward_score", body)]
    rewards = (body.get("reward") or {}).get("rewards") if isinstance(body.get("reward"), dict) else None
    if not isinstance(rewards, list) or len(rewards) != n:
        got = len(rewards) if isinstance(rewards, list) else 0
        return [_failed(f"the group reward returned {got} rewards for {n} answers")] * n
    return [_scored(r, "reward_score in each of reward.rewards", r) for r in rewards]


def _body(reply: tuple[int, bytes] | str) -> tuple[dict | None, CallOutcome | None]:
    """The reply's JSON object if the function succeeded, else the outcome that says why not."""
    if isinstance(reply, str):
        return None, _failed(reply)
    status, data = reply
    text = data.decode("utf-8", "replace")
    try:
        body = json.loads(text)
    except ValueError:
        return None, _failed(f"HTTP {status}, and the reply is not JSON: {text[:SNIPPET]}")
    if status != 200:
        return None, _failed(_http_error(status, body))
    if not isinstance(body, dict):
        return None, _failed(f"the reply is not a JSON object: {str(body)[:SNIPPET]}")
    own = str(body.get("status", SUCCESS))
    if own != SUCCESS:
        code = body.get("error_code")
        text = body.get("error") or code or "no error text"
        return None, _failed(f"status {own}: {text}", status=own, code=None if code is None else str(code))
    return body, None


def _http_error(status: int, body: Any) -> str:
    """The words for a non-200 reply. The SDK's server answers 500 with the exception's text when
    ``process`` raises, 422 when it cannot parse the request, 503 when its queue is full."""
    msg = body
    if isinstance(body, dict):
        key = next((k for k in ("message", "detail", "error") if k in body), None)
        msg = body if key is None else body[key]
    if status == 500:
        return f"the function raised: {msg or '(an exception with no message)'} (HTTP 500; its traceback is in the function server's log)"
    return f"HTTP {status}: {str(msg)[: SNIPPET * 2]}"


def _scored(reward: Any, what: str, shown: Any) -> CallOutcome:
    """A success reply's score, or the wrong-shape error that names the field it lacks."""
    raw = reward.get("reward_score") if isinstance(reward, dict) else None
    try:
        score = float(raw)  # pyright: ignore[reportArgumentType]
    except (TypeError, ValueError):
        score = math.nan
    if math.isnan(score):
        return _failed(f"the function returned no numeric {what}: {str(shown)[:SNIPPET]}")
    metrics = reward.get("reward_metrics") or {}
    return CallOutcome(
        score=score, metrics=metrics if isinstance(metrics, dict) else {"reward_metrics": metrics}
    )


def _failed(error: str, *, status: str = CALL_FAILED, code: str | None = None) -> CallOutcome:
    return CallOutcome(status=status, error=error, error_code=code)


# ---- building requests ------------------------------------------------------------------------
def reward_request(
    messages: Sequence[dict[str, Any]],
    rollout_extra: dict[str, Any] | None,
    ground_truth: Any,
    *,
    job_id: str,
    sample_id: str,
    rollout_id: str,
) -> RewardRequest:
    """One answer's call: the whole conversation (ending with the answer) and its ground truth."""
    return RewardRequest(
        ground_truth=ground_truth,
        agent_output=AgentOutput(messages=list(messages), rollout_extra=rollout_extra),
        request_metadata=RequestMetadata(job_id=job_id, sample_id=sample_id, rollout_id=rollout_id),
    )


def group_request(answers: Sequence[RewardRequest]) -> GroupRewardRequest:
    """One prompt's answers in one call; the ground truth and metadata are the first answer's."""
    first = answers[0]
    return GroupRewardRequest(
        agent_outputs=[a.agent_output for a in answers],
        ground_truth=first.ground_truth,
        request_metadata=first.request_metadata,
    )


# ---- a plain transport ------------------------------------------------------------------------
def post_once(url: str, path: str = FUNCTION_PATH) -> Send:
    """A `send` that opens one connection per call (``opd eval`` and the playground: a few calls,
    where keeping connections alive buys nothing)."""
    parts = urllib.parse.urlsplit(url.rstrip("/"))
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection

    def send(body: bytes, timeout: float) -> tuple[int, bytes]:
        conn = kind(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
        try:
            conn.request(
                "POST", f"{parts.path}{path}", body=body, headers={"Content-Type": "application/json"}
            )
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    return send
