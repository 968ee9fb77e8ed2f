"""The OpenAI chat-completions wire format, as the engine's endpoints speak it.

Both OpenAI-compatible endpoints of the engine (the student served to a rollout function during
agentic training, :mod:`opd_nb.engine.agentic`, and a deployment's own process,
:mod:`opd_nb.engine.serving`) read requests and write answers by these rules, so a rollout function
sees the same API in training as from a deployed model.
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from typing import Any, cast

from pydantic import JsonValue

MAX_WHOLE = 2**63 - 1  # the largest whole number a request may carry (a torch seed, a token budget)
MAX_TOP_LOGPROBS = 20  # alternatives per token (OpenAI's range)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def parse_tool_calls(text: str) -> tuple[str, list[dict[str, Any]]]:
    """Split `<tool_call>{json}</tool_call>` blocks out of generated text (OpenAI tool_calls shape)."""
    calls: list[dict[str, Any]] = []
    for m in _TOOL_CALL.finditer(text):
        try:
            obj = json.loads(m.group(1))
            name = obj["name"]
        except (ValueError, KeyError, TypeError):
            continue
        args = obj.get("arguments", {})
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {
                    "name": str(name),
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
        )
    content = _TOOL_CALL.sub("", text).strip() if calls else text
    return content, calls


class ChatRequestError(ValueError):
    """A chat request the endpoint cannot serve; the message is the 400 answer's text."""


def whole(body: dict[str, Any], key: str, low: int, high: int) -> int | None:
    """``body[key]`` as a whole number in [low, high] (None when absent); a bool, a float or a string
    is refused, not coerced. Raises :class:`ChatRequestError`."""
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ChatRequestError(f"{key} must be a whole number in [{low}, {high}], got {value!r}")
    return value


def _real(
    body: dict[str, Any], key: str, default: float, low: float, high: float, *, open_low: bool = False
) -> float:
    """``body[key]`` as a finite number in its range (`default` when absent), never coerced from text."""
    value = body.get(key)
    if value is None:
        return default
    fits = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not fits or not (low < value if open_low else low <= value) or value > high:
        shown = f"in {'(' if open_low else '['}{low:g}, {high:g}]" if high < math.inf else f">= {low:g}"
        raise ChatRequestError(f"{key} must be a finite number {shown}, got {value!r}")
    return float(value)


def chat_inputs(
    tokenizer: Any, body: JsonValue, max_total: int, *, temperature: float = 1.0, top_p: float = 1.0
) -> tuple[list[int], float, float, int]:
    """(prompt ids, temperature, top_p, max_tokens) of an OpenAI chat request; `temperature`/`top_p`
    are the defaults for a request without them. Each is of its type (a bool or a string is no number)
    and in the range a vLLM endpoint takes (temperature finite and >= 0, top_p in (0, 1], max_tokens
    >= 1): a rollout function's request to the agentic endpoint is not held to a tighter range than the
    cloud's student endpoint, and the control plane holds public calls to the documented ones. What the
    sampler does at their edges is :mod:`opd_nb.engine.sampling`'s. Raises :class:`ChatRequestError`."""
    from opd_nb.engine.data import template_ids

    msgs = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(body, dict) or not isinstance(msgs, list) or not msgs:
        raise ChatRequestError("'messages' must be a non-empty list")
    temperature = _real(body, "temperature", temperature, 0.0, math.inf)
    top_p = _real(body, "top_p", top_p, 0.0, 1.0, open_low=True)
    wanted = whole(body, "max_tokens", 1, MAX_WHOLE) or whole(body, "max_completion_tokens", 1, MAX_WHOLE)
    try:
        # what the messages and tools hold is the chat template's to render or refuse (below)
        turns, tools = (
            cast("list[dict[str, Any]]", msgs),
            cast("list[dict[str, Any]] | None", body.get("tools")),
        )
        ids = template_ids(tokenizer, turns, tools=tools, add_generation_prompt=True)
    except Exception as exc:  # noqa: BLE001 - the caller sent messages the template cannot render
        raise ChatRequestError(f"the chat template failed on these messages: {exc}") from None
    if len(ids) >= max_total:
        raise ChatRequestError(f"prompt is {len(ids)} tokens; the context limit (max_length) is {max_total}")
    return ids, temperature, top_p, max(1, min(wanted or max_total, max_total - len(ids)))


def completion_body(
    model_name: str, n_prompt: int, n_completion: int, text: str, finish: str
) -> dict[str, Any]:
    """An OpenAI ``chat.completion`` for generated `text` (tool calls parsed out of it)."""
    content, calls = parse_tool_calls(text)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
        finish = "tool_calls" if finish == "stop" else finish
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_name,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": n_prompt,
            "completion_tokens": n_completion,
            "total_tokens": n_prompt + n_completion,
        },
    }
