"""The OpenAI chat-completions wire format, as the engine's endpoints speak it.

Both OpenAI-compatible endpoints of the engine (the student served to a rollout function during
agentic training, :mod:`opd_nb.engine.agentic`, and a deployment's own process,
:mod:`opd_nb.engine.serving`) read requests and write answers by these rules, so a rollout function
sees the same API in training as from a deployed model.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def parse_tool_calls(text: str) -> tuple[str, list[dict]]:
    """Split `<tool_call>{json}</tool_call>` blocks out of generated text (OpenAI tool_calls shape)."""
    calls = []
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


def chat_inputs(
    tokenizer: Any, body: Any, max_total: int, *, temperature: float = 1.0, top_p: float = 1.0
) -> tuple[list[int], float, float, int]:
    """(prompt ids, temperature, top_p, max_tokens) of an OpenAI chat request; `temperature`/`top_p`
    are the defaults for a request without them. Raises :class:`ChatRequestError`."""
    from opd_nb.engine.data import template_ids

    msgs = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(msgs, list) or not msgs:
        raise ChatRequestError("'messages' must be a non-empty list")
    try:
        ids = template_ids(tokenizer, msgs, tools=body.get("tools"), add_generation_prompt=True)
    except Exception as exc:  # noqa: BLE001 - the caller sent messages the template cannot render
        raise ChatRequestError(f"the chat template failed on these messages: {exc}") from None
    if len(ids) >= max_total:
        raise ChatRequestError(f"prompt is {len(ids)} tokens; the context limit (max_length) is {max_total}")
    try:
        temperature = float(body["temperature"] if body.get("temperature") is not None else temperature)
        top_p = float(body["top_p"] if body.get("top_p") is not None else top_p)
        mt = body.get("max_tokens") or body.get("max_completion_tokens") or max_total
        max_tokens = max(1, min(int(mt), max_total - len(ids)))
    except (TypeError, ValueError):
        raise ChatRequestError("temperature, top_p and max_tokens must be numbers") from None
    return ids, temperature, top_p, max_tokens


def completion_body(model_name: str, n_prompt: int, n_completion: int, text: str, finish: str) -> dict:
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
