"""What to show of one span: its key attributes as short facts, and its payloads (messages, arguments,
results, metrics) for the detail view. One reading for the CLI's tree and the notebook's waterfall.

Span attributes are user text (a model's words, a tool's output): callers escape them for their
medium (``terminal_text`` in a terminal, ``render.esc`` in HTML).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from opd_nb.traces.spans import Span

MAX_FACT = 80  # characters of one fact in a one-line view


def loads(value: Any) -> Any:
    """A JSON-valued attribute, decoded (the SDK writes messages, arguments and payloads as JSON text)."""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def one_line(text: Any, width: int = MAX_FACT) -> str:
    s = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
    s = s.replace("\r", "").replace("\n", "⏎")
    return s if len(s) <= width else s[: width - 1] + "…"


def error_text(span: Span) -> str:
    """Why a failed span failed: the exception the SDK recorded, else its status message."""
    for event in span.events:
        if event.name == "exception":
            a = event.attributes
            kind, msg = a.get("exception.type") or "", a.get("exception.message") or ""
            return f"{kind}: {msg}" if kind and msg else str(kind or msg)
    return span.status_message


def _payload(span: Span, key: str) -> Any:
    return loads(span.attributes.get(key))


def reward_metrics(span: Span) -> dict[str, Any]:
    out = _payload(span, "output.value")
    reward = out.get("reward") if isinstance(out, Mapping) else None
    metrics = reward.get("reward_metrics") if isinstance(reward, Mapping) else None
    return dict(metrics) if isinstance(metrics, Mapping) else {}


def facts(span: Span) -> list[tuple[str, str]]:
    """The span's key attributes, (name, short value), in the order a reader wants them."""
    a = span.attributes
    out: list[tuple[str, Any]] = []
    if span.kind == "LLM":
        out += [("model", a.get("gen_ai.request.model") or a.get("gen_ai.response.model"))]
        out += [
            ("tokens in", a.get("gen_ai.usage.input_tokens")),
            ("out", a.get("gen_ai.usage.output_tokens")),
        ]
        out += [("finish", ",".join(map(str, a.get("gen_ai.response.finish_reasons") or [])) or None)]
    elif span.kind == "TOOL":
        out += [("args", a.get("gen_ai.tool.call.arguments")), ("result", a.get("gen_ai.tool.call.result"))]
    elif span.kind == "REWARD":
        out += [("score", a.get("agentic_rl.result.reward_score"))]
        out += [(f"metric {k}", v) for k, v in sorted(reward_metrics(span).items())]
    elif span.kind == "ROLLOUT":
        out += [("status", a.get("agentic_rl.result.status")), ("model", a.get("gen_ai.request.model"))]
    if span.failed:
        out.append(("error", error_text(span)))
    return [(k, one_line(v)) for k, v in out if v not in (None, "")]


def messages(value: Any) -> list[dict[str, str]]:
    """GenAI messages (``gen_ai.input.messages``/``output.messages``: role and typed parts) as
    ``{"role", "text"}``, each part in words (a tool call as ``name(arguments)``)."""
    out = []
    for m in loads(value) if isinstance(loads(value), list) else []:
        if not isinstance(m, Mapping):
            continue
        texts = []
        for part in m.get("parts") or []:
            if not isinstance(part, Mapping):
                continue
            kind = part.get("type")
            if kind == "tool_call":
                args = part.get("arguments")
                texts.append(f"→ {part.get('name')}({one_line(args, 10_000) if args is not None else ''})")
            elif kind == "tool_call_response":
                texts.append(f"← {one_line(part.get('response'), 10_000)}")
            else:
                texts.append(str(part.get("content") or ""))
        out.append({"role": str(m.get("role") or "?"), "text": "\n".join(t for t in texts if t)})
    return out


def details(span: Span) -> dict[str, Any]:
    """The span's payloads for a detail pane: messages in/out (LLM), arguments/result (tool), reward
    metrics, the error; absent keys are left out."""
    a = span.attributes
    out: dict[str, Any] = {}
    if span.kind == "LLM":
        out["input messages"] = messages(a.get("gen_ai.input.messages"))
        out["output messages"] = messages(a.get("gen_ai.output.messages"))
        usage = {k: a.get(f"gen_ai.usage.{k}") for k in ("input_tokens", "output_tokens")}
        out["usage"] = {k: v for k, v in usage.items() if v is not None}
    elif span.kind == "TOOL":
        out["arguments"] = loads(a.get("gen_ai.tool.call.arguments"))
        out["result"] = loads(a.get("gen_ai.tool.call.result"))
    elif span.kind == "REWARD":
        out["reward score"] = a.get("agentic_rl.result.reward_score")
        out["reward metrics"] = reward_metrics(span)
    if span.failed:
        out["error"] = error_text(span)
    return {k: v for k, v in out.items() if v not in (None, "", [], {})}
