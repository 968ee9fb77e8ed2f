"""Multi-turn trajectories returned by a rollout function: shape checks and per-turn training samples.

Why a module of its own: the rollout function is code users write, and its mistakes (a tool
result sent as ``user``, a call nobody answered) would otherwise be trained on silently. The checks
name the message and the fix; :func:`turn_samples` cuts a trajectory into one training sequence per
assistant turn, the earlier turns and the ``tool`` messages being context only (never trained on,
never counted in ``valid_token_rate``'s denominator), so the teacher scores each assistant token in
the full conversation before it. Pure Python over a tokenizer: no torch here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

ROLES = ("system", "user", "assistant", "tool")
MALFORMED = "malformed trajectory:"  # the prefix of every job-log line about a bad trajectory

TOOL_MESSAGE = '{"role": "tool", "tool_call_id": <the call\'s id>, "content": <result>}'
# kind -> how to fix it (the problem's own text names the message index)
FIXES = {
    "unknown role": f"give every message one of the roles {', '.join(ROLES)}",
    "tool result with another role": f"send each tool result as {TOOL_MESSAGE}",
    "unanswered tool call": f"append one {TOOL_MESSAGE} per call right after the assistant turn that made it",
    "tool message without a call": "set tool_call_id to the id of the call it answers (from the assistant's "
    "tool_calls just before it)",
    "no final answer": "end the trajectory with the model's last assistant message (one without tool_calls); "
    "when the tool loop hits its turn limit, return it as failed instead",
}


@dataclass(frozen=True)
class Problem:
    """One shape problem of a trajectory: its kind (a key of :data:`FIXES`) and where it is."""

    kind: str
    index: int
    detail: str

    def line(self, count: int, total: int, where: str) -> str:
        """The job-log line: what, which message, how many trajectories, how to fix it."""
        return (
            f"{MALFORMED} {self.kind} at messages[{self.index}]: {self.detail} ({count} of {total} "
            f"rollouts in {where}); fix the rollout function: {FIXES[self.kind]}"
        )


def _call_ids(message: dict[str, JsonValue]) -> list[str]:
    calls = message.get("tool_calls") or []
    return [str(c.get("id", "")) for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def _unanswered(pending: list[str]) -> str:
    return f"call id(s) {', '.join(map(repr, pending))} have no tool message with a matching tool_call_id"


def check_trajectory(messages: Sequence[JsonValue]) -> list[Problem]:
    """Every shape problem of a trajectory (empty: well formed), first occurrence per kind."""
    found: dict[str, Problem] = {}

    def add(kind: str, index: int, detail: str) -> None:
        found.setdefault(kind, Problem(kind, index, detail))

    pending: list[str] = []  # ids of the last assistant turn's calls still without a tool message
    caller = -1
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if not isinstance(m, dict) or role not in ROLES:
            add("unknown role", i, f"role {role!r} is not one of {', '.join(ROLES)}")
            continue
        if role == "tool":
            tid = str(m.get("tool_call_id", ""))
            if tid in pending:
                pending.remove(tid)
            else:
                add("tool message without a call", i, f"tool_call_id {tid!r} matches no pending call")
            continue
        if pending:
            if role != "assistant" or "tool_call_id" in m:
                add(
                    "tool result with another role",
                    i,
                    f"the tool call(s) of messages[{caller}] are answered by a {role!r} message",
                )
            else:
                add("unanswered tool call", caller, _unanswered(pending))
        elif "tool_call_id" in m:
            add("tool result with another role", i, f"a message with a tool_call_id has role {role!r}")
        pending = _call_ids(m) if role == "assistant" else []
        caller = i
    if pending and "tool result with another role" not in found:
        add("unanswered tool call", caller, _unanswered(pending))
    last = messages[-1] if messages else None
    if not isinstance(last, dict) or last.get("role") != "assistant" or last.get("tool_calls"):
        role = last.get("role") if isinstance(last, dict) else None
        add(
            "no final answer",
            len(messages) - 1,
            f"the last message has role {role!r}, not an assistant answer",
        )
    return list(found.values())


@dataclass
class TurnSample:
    """One assistant turn cut for training: context + completion ids, True where trained on."""

    index: int  # the message index of the assistant turn
    ids: list[int]  # context then completion, cut to max_total
    mask: list[bool]  # True on the completion tokens kept within max_total
    dropped: list[int]  # completion ids cut by max_total
    no_eos: bool  # generated without an EOS (cut by max_tokens)
    generated: bool  # False: not found among the endpoint's records (templated tokens used)


def turn_samples(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    records: Sequence[tuple[list[int], list[int], bool]],
    max_total: int,
) -> list[TurnSample]:
    """One sample per assistant turn; `records` are the endpoint's (prompt ids, generated ids, ended).

    The ids the student generated are used when the turn's templated context matches a record;
    otherwise the turn's templated tokens. Raises what the chat template raises."""
    from opd_nb.engine.data import template_ids

    out: list[TurnSample] = []
    for a, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        ctx = template_ids(tokenizer, messages[:a], tools=tools, add_generation_prompt=True)
        hit = next(((c, e) for p, c, e in records if p == ctx), None)
        generated = hit is not None
        if hit is None:
            full = template_ids(tokenizer, messages[: a + 1], tools=tools)
            if full[: len(ctx)] != ctx:
                continue
            hit = (full[len(ctx) :], True)
        comp, ended = hit
        seq = (ctx + comp)[:max_total]
        n_comp = max(0, len(seq) - len(ctx))
        out.append(
            TurnSample(a, seq, [False] * len(ctx) + [True] * n_comp, comp[n_comp:], not ended, generated)
        )
    return out
