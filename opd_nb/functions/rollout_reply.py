"""One reading of a rollout function's reply: the trajectory, or what is wrong with the reply in words.

Shared by the engine's rollout calls and `opd probe`, so a job and a probe read a rollout alike.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import JsonValue

# A call's result: (agent_output, None) or (None, what went wrong).
CallResult = tuple[dict[str, Any] | None, str | None]


def agent_output(status: int, data: bytes) -> CallResult:
    """The trajectory in a rollout function's reply, or what is wrong with the reply."""
    try:
        body: JsonValue = json.loads(data)
    except ValueError:
        body = None
    if status != 200 or not isinstance(body, dict):
        msg = (
            body.get("message") or body.get("detail")
            if isinstance(body, dict)
            else data[:300].decode("utf-8", "replace")
        )
        return None, f"HTTP {status}: {msg}"
    if str(body.get("status", "success")) != "success":
        return None, f"status {body.get('status')}: {body.get('error') or body.get('error_code')}"
    ao = body.get("agent_output") or {}
    if not isinstance(ao, dict) or not isinstance(messages := ao.get("messages"), list) or not messages:
        return None, "agent_output.messages is empty; return the full trajectory"
    return ao, None
