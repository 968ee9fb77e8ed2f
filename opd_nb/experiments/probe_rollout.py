"""An agentic workspace's probe: the user's rollout function drives each model, as in a job.

The rollout function runs in the SDK's function server (:mod:`opd_nb.functions.server`) and gets a
``model_resource`` per call, as the engine gives it: an OpenAI-compatible base URL, a model name and a
fresh key. Here that URL is a loopback relay of ours which sends each chat call through the probe's
own client (so the plane, its key, the budget and the call count are the probe's, and the plane's key
never reaches the function) and books the call's tokens and finish reason to the rollout whose key it
carried.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opd_nb.errors import OpdError
from opd_nb.loopback import bearer_token
from opd_nb.wire import http_client

CHAT_PATH = "/v1/chat/completions"
SAMPLING_KEYS = ("max_tokens", "temperature", "top_p", "seed", "tools")


@dataclass
class RolloutCalls:
    """What one rollout's chat calls cost and how they ended."""

    model: str
    calls: int = 0
    tokens: int = 0
    truncated: bool = False
    errors: list[str] = field(default_factory=list)


Chat = Callable[[str, list[dict[str, Any]], dict[str, Any]], Any]  # (model, messages, params) -> ChatReply
Admit = Callable[[int], bool]  # a call's worst-case tokens -> may it be sent (the budget)
Settle = Callable[[int, int | None], None]  # (worst case, tokens used)


class ChatRelay:
    """A loopback OpenAI-compatible endpoint: each rollout's key opens it for that rollout's model only."""

    def __init__(self, chat: Chat, admit: Admit, settle: Settle, worst_tokens: int):
        self.rollouts: dict[str, RolloutCalls] = {}
        self._lock = threading.Lock()
        relay = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, reply = relay.answer(self.path, self.headers.get("Authorization"), body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
                pass

        self._chat, self._admit, self._settle, self._worst = chat, admit, settle, worst_tokens
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True, name="opd-probe-relay")
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def open_rollout(self, model: str) -> str:
        """A fresh key for one rollout of `model`."""
        key = "opd-probe-" + secrets.token_hex(12)
        with self._lock:
            self.rollouts[key] = RolloutCalls(model)
        return key

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, path: str, authorization: str | None, raw: bytes) -> tuple[int, dict[str, Any]]:
        """One chat call of a rollout: (HTTP status, OpenAI's answer or error object)."""
        rollout = self.rollouts.get(bearer_token(authorization) or "")
        if path.rstrip("/") != CHAT_PATH or rollout is None:
            return 401 if rollout is None else 404, _error("not a probe rollout's chat call")
        try:
            body = json.loads(raw)
        except ValueError:
            return 400, _error("the body is not JSON")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return 400, _error("the body has no messages list")
        if not self._admit(self._worst):
            rollout.errors.append("the probe's --budget is spent")
            return 429, _error("the probe's --budget is spent: this call was not sent")
        params = {k: body[k] for k in SAMPLING_KEYS if body.get(k) is not None}
        try:
            reply = self._chat(rollout.model, body["messages"], params)
        except OpdError as exc:
            self._settle(self._worst, 0)
            rollout.errors.append(exc.message)
            return exc.status or 502, _error(exc.message)
        used = reply.usage.get("completion_tokens")
        total = reply.usage.get("total_tokens")
        self._settle(self._worst, int(total) if isinstance(total, int) else None)
        with self._lock:
            rollout.calls += 1
            rollout.tokens += int(used) if isinstance(used, int) else 0
            rollout.truncated = rollout.truncated or reply.finish_reason == "length"
        return 200, reply.raw


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error"}}


def rollout_payload(
    row: dict[str, Any], base_url: str, model: str, key: str, sampling: dict[str, Any], ids: tuple[str, str]
) -> dict[str, Any]:
    """The rollout call a job sends (:mod:`opd_nb.engine.agentic.calls`), its model behind the relay."""
    extra = row.get("rollout_extra") if isinstance(row.get("rollout_extra"), dict) else {}
    return {
        "func_type": "rollout",
        "messages": row["messages"],
        "tools": row.get("tools"),
        "ground_truth": (extra or {}).get("solution"),
        "rollout_extra": extra or {},
        "sampling_params": sampling,
        "model_resource": {"model_name": model, "base_url": base_url, "api_key": key},
        "request_metadata": {
            "job_id": "opd-probe",
            "sample_id": ids[0],
            "rollout_id": ids[1],
            "attempt_id": "0",
        },
    }


def call_rollout(
    url: str, payload: dict[str, Any], timeout: float
) -> tuple[dict[str, Any] | None, str | None]:
    """One rollout call: (the trajectory, None) or (None, what went wrong), read as the engine reads it."""
    import httpx

    from opd_nb.functions.reward_call import FUNCTION_PATH
    from opd_nb.functions.rollout_reply import agent_output

    try:
        reply = http_client.post(url.rstrip("/") + FUNCTION_PATH, json=payload, timeout=timeout)
    except httpx.HTTPError as exc:
        return None, f"the rollout function did not answer: {exc}"
    return agent_output(reply.status_code, reply.content)
