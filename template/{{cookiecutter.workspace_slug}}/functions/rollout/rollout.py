"""Rollout function: lets the student use a tool over a few turns (Agentic OPD).

The control plane calls ``{{ cookiecutter.rollout_class }}.process`` once per sample with the dataset
row's ``messages``, optional ``tools`` and ``sampling_params``, and ``model_resource``: an
OpenAI-compatible endpoint serving the current student. We call it, run any tool the student asks
for, feed the result back, and return the whole conversation; the teacher then scores the student's
turns. Failures are reported through ``status``/``error``, never raised.

Tracing: ``@observe_processor`` (the whole rollout), ``@observe_llm`` (each model call: the messages
the student saw, its answer, token usage) and ``@observe_tool`` (each tool run: arguments, result, an
error span if it raises) are the SDK's documented wrappers. They cost nothing unless tracing is on:
`opd serve` turns it on and shows the spans (``opd traces JOB``, the rollout viewer's trajectory);
on Bailian they go to the console's Trajectory tab.

Only the SDK, ``httpx`` (an SDK dependency) and the standard library are imported: this file runs
in Function Compute.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
from dashscope.finetune.reinforcement import (
    AbstractRolloutProcessor,
    AgentOutput,
    RolloutInput,
    RolloutOutput,
    TaskStatus,
)
from dashscope.finetune.reinforcement.component.observability import (
    observe_llm,
    observe_processor,
    observe_tool,
    openai_completion_to_output_messages,
)

MAX_TURNS = 4  # model calls per rollout; a conversation still asking for tools after that is cut
REQUEST_TIMEOUT_S = 60.0
# Keys we set ourselves; a sampling parameter with one of these names is ignored.
RESERVED_KEYS = {"model", "messages", "tools", "stream"}


@observe_tool
def count_digits(digits: str) -> dict[str, int]:
    """Example tool: how often each digit occurs (enough to write the sorted answer)."""
    counts = Counter(ch for ch in str(digits) if ch.isdigit())
    return {digit: counts[digit] for digit in sorted(counts)}


# Tools the student may call: name -> (implementation, OpenAI function schema).
TOOLS: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "count_digits": (
        count_digits,
        {
            "type": "function",
            "function": {
                "name": "count_digits",
                "description": "Count how often each digit 0-9 occurs in a string of digits.",
                "parameters": {
                    "type": "object",
                    "properties": {"digits": {"type": "string", "description": "the digits, e.g. 93418"}},
                    "required": ["digits"],
                },
            },
        },
    ),
}


def run_tool(name: str, arguments: str | dict[str, Any] | None) -> str:
    """Run one tool call and return its result as the text of a ``tool`` message."""
    if name not in TOOLS:
        return json.dumps({"error": f"unknown tool {name!r}; available: {sorted(TOOLS)}"})
    try:
        args = json.loads(arguments) if isinstance(arguments, str) and arguments.strip() else (arguments or {})
        if not isinstance(args, dict):
            raise ValueError("arguments must be a JSON object")
        return json.dumps(TOOLS[name][0](**args))
    except Exception as exc:  # a bad call is shown to the model, not raised
        return json.dumps({"error": f"{type(exc).__name__}: {exc}"})


def request_body(model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                 sampling_params: dict[str, Any] | None) -> dict[str, Any]:
    """The chat-completions request: sampling parameters passed through (max_new_tokens -> max_tokens)."""
    body: dict[str, Any] = {}
    for key, value in (sampling_params or {}).items():
        if key in RESERVED_KEYS or value is None:
            continue
        body["max_tokens" if key == "max_new_tokens" else key] = value
    body.update(model=model, messages=messages, stream=False)
    if tools:
        body["tools"] = tools
    return body


class RolloutError(Exception):
    """The model endpoint failed or answered something unusable."""


def llm_span_result(invocation: Any, completion: dict[str, Any]) -> None:
    """What an LLM span records of a chat-completions answer (a plain dict here): its messages and usage."""
    usage = completion.get("usage") or {}
    invocation.input_tokens = usage.get("prompt_tokens")
    invocation.output_tokens = usage.get("completion_tokens")
    invocation.response_model_name = completion.get("model")
    invocation.response_id = completion.get("id")
    invocation.output_messages = openai_completion_to_output_messages(completion)


@observe_llm(provider="openai", result_mapper=llm_span_result)
async def chat_completion(client: httpx.AsyncClient, url: str, headers: dict[str, str], *, model: str,
                          messages: list[dict[str, Any]], body: dict[str, Any]) -> dict[str, Any]:
    """One chat-completions call (an LLM span with `model` and `messages` when tracing is on)."""
    response = await client.post(url, json=body, headers=headers)
    if response.status_code != 200:
        raise RolloutError(f"HTTP {response.status_code}: {response.text[:300]}")
    try:
        completion = response.json()
        if not isinstance(completion["choices"][0]["message"], dict):
            raise TypeError("the message is not an object")
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise RolloutError(f"not a chat-completions answer ({exc!r}): {response.text[:300]}") from None
    return completion


class {{ cookiecutter.rollout_class }}(AbstractRolloutProcessor):
    """Multi-turn rollout with tool calls against the OpenAI-compatible student endpoint."""

    max_turns: int = MAX_TURNS
    timeout_s: float = REQUEST_TIMEOUT_S

    @observe_processor
    async def process(self, input_data: RolloutInput) -> RolloutOutput:
        messages: list[dict[str, Any]] = [dict(m) for m in input_data.messages]
        # Tools given with the sample win (a sample's `tools: []` offers none); otherwise the example tools above.
        tools = input_data.tools if input_data.tools is not None else [schema for _, schema in TOOLS.values()]
        resource = input_data.model_resource
        url = resource.base_url.rstrip("/") + "/chat/completions"
        headers = {"Authorization": f"Bearer {resource.api_key.get_secret_value()}"}
        turns = tool_calls = 0
        finished = False
        try:
            client = self._client()
            for _ in range(self.max_turns):
                body = request_body(resource.model_name, messages, tools, input_data.sampling_params)
                message = await self._complete(client, url, headers, body)
                turns += 1
                messages.append(message)
                calls = message.get("tool_calls") or []
                if not calls:
                    finished = True
                    break
                for call in calls:
                    tool_calls += 1
                    function = call.get("function") or {}
                    messages.append({
                        "role": "tool",
                        "tool_call_id": call.get("id", ""),
                        "name": function.get("name", ""),
                        "content": run_tool(function.get("name", ""), function.get("arguments")),
                    })
        except (RolloutError, httpx.HTTPError) as exc:
            return self._output(input_data, messages, turns, tool_calls, finished,
                                error=f"model endpoint {url}: {exc}")
        return self._output(input_data, messages, turns, tool_calls, finished)

    def _client(self) -> httpx.AsyncClient:
        """One HTTP client per event loop, kept across rollouts: a new client builds a TLS context
        (about 60 ms of CPU) and opens new connections, which at 64 rollouts a step is seconds."""
        loop = asyncio.get_running_loop()
        if getattr(self, "_http_loop", None) is not loop:
            self._http, self._http_loop = httpx.AsyncClient(timeout=self.timeout_s), loop
        return self._http

    @staticmethod
    async def _complete(client: httpx.AsyncClient, url: str, headers: dict[str, str],
                        body: dict[str, Any]) -> dict[str, Any]:
        completion = await chat_completion(client, url, headers, model=body["model"],
                                           messages=body["messages"], body=body)
        message = completion["choices"][0]["message"]
        result = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("tool_calls"):
            result["tool_calls"] = message["tool_calls"]
        return result

    @staticmethod
    def _output(input_data: RolloutInput, messages: list[dict[str, Any]], turns: int, tool_calls: int,
                finished: bool, error: str | None = None) -> RolloutOutput:
        agent_output = AgentOutput(
            messages=messages,
            rollout_extra=input_data.rollout_extra,
            rollout_metrics={"turns": float(turns), "tool_calls": float(tool_calls),
                             "truncated": float(not finished)},
        )
        if error:
            return RolloutOutput(agent_output=agent_output, status=TaskStatus.FAILED, error=error,
                                 error_code="model_endpoint_error")
        return RolloutOutput(agent_output=agent_output, status=TaskStatus.SUCCESS)
