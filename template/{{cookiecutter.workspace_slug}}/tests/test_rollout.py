"""Tests for the rollout function against a tiny OpenAI-compatible stand-in for the student endpoint."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from dashscope.finetune.reinforcement import RolloutInput, RolloutOutput, TaskStatus

from functions.rollout.rollout import TOOLS, {{ cookiecutter.rollout_class }}, count_digits, run_tool

API_KEY = "sk-test-not-a-real-key"
DATA = Path(__file__).resolve().parents[1] / "data"


class StandIn:
    """Answers with a tool call first, then with a final answer; records every request."""

    def __init__(self, status: int = 200) -> None:
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.status = status
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stand_in.requests.append(body)
                stand_in.headers.append(dict(self.headers))
                if self.path != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                elif stand_in.status != 200:
                    self._send(stand_in.status, {"error": {"message": "model overloaded"}})
                elif not any(m["role"] == "tool" for m in body["messages"]):
                    call = {"id": "call-1", "type": "function",
                            "function": {"name": "count_digits", "arguments": json.dumps({"digits": "93418"})}}
                    self._send(200, {"choices": [{"message": {"role": "assistant", "content": None,
                                                              "tool_calls": [call]}}]})
                else:
                    self._send(200, {"choices": [{"message": {"role": "assistant",
                                                              "content": "<think>n=5</think>13489"}}]})

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    server = StandIn()
    yield server
    server.server.shutdown()


def rollout(base_url: str, **extra: object) -> RolloutOutput:
    payload = {
        "messages": [{"role": "system", "content": "Sort the digits."}, {"role": "user", "content": "93418"}],
        "rollout_extra": {"solution": "13489"},
        "sampling_params": {"temperature": 0.7, "max_new_tokens": 64},
        "model_resource": {"model_name": "student-under-training", "base_url": base_url, "api_key": API_KEY},
        **extra,
    }
    output = asyncio.run({{ cookiecutter.rollout_class }}().process(RolloutInput.model_validate(payload)))
    return RolloutOutput.model_validate(output.model_dump(mode="json"))


def test_tool_call_then_final_answer(stand_in: StandIn) -> None:
    out = rollout(stand_in.base_url)
    assert out.status == TaskStatus.SUCCESS, out.error
    messages = out.agent_output.messages
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert json.loads(messages[3]["content"]) == {"1": 1, "3": 1, "4": 1, "8": 1, "9": 1}
    assert messages[3]["tool_call_id"] == "call-1"
    assert messages[-1]["content"] == "<think>n=5</think>13489"
    assert out.agent_output.rollout_extra == {"solution": "13489"}
    assert out.agent_output.rollout_metrics == {"turns": 2.0, "tool_calls": 1.0, "truncated": 0.0}


def test_request_uses_model_resource_sampling_params_and_tools(stand_in: StandIn) -> None:
    tools = [{"type": "function", "function": {"name": "count_digits", "parameters": {"type": "object"}}}]
    rollout(stand_in.base_url, tools=tools)
    first = stand_in.requests[0]
    assert first["model"] == "student-under-training"
    assert first["temperature"] == 0.7 and first["max_tokens"] == 64
    assert first["tools"] == tools
    assert stand_in.headers[0]["Authorization"] == f"Bearer {API_KEY}"
    assert len(stand_in.requests) == 2


def test_example_tools_are_offered_when_the_sample_has_none(stand_in: StandIn) -> None:
    rollout(stand_in.base_url)
    assert [t["function"]["name"] for t in stand_in.requests[0]["tools"]] == ["count_digits"]


def test_endpoint_error_is_reported_not_raised() -> None:
    server = StandIn(status=503)
    try:
        out = rollout(server.base_url)
    finally:
        server.server.shutdown()
    assert out.status == TaskStatus.FAILED
    assert "503" in out.error and "overloaded" in out.error
    assert API_KEY not in out.error


def test_unreachable_endpoint_is_reported() -> None:
    out = rollout("http://127.0.0.1:9/v1")
    assert out.status == TaskStatus.FAILED
    assert out.error


def test_tools() -> None:
    assert count_digits("1121") == {"1": 3, "2": 1}
    assert "unknown tool" in json.loads(run_tool("nope", "{}"))["error"]
    assert "error" in json.loads(run_tool("count_digits", "not json"))


def test_sample_rows_offer_the_example_tool_and_the_rollout_passes_it_on(stand_in: StandIn) -> None:
    row = json.loads((DATA / "train.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert [t["function"]["name"] for t in row["tools"]] == list(TOOLS)
    out = rollout(stand_in.base_url, messages=row["messages"], rollout_extra=row["rollout_extra"], tools=row["tools"])
    assert out.status == TaskStatus.SUCCESS, out.error
    assert stand_in.requests[0]["tools"] == row["tools"]
    assert [m["role"] for m in out.agent_output.messages][-3:] == ["assistant", "tool", "assistant"]
