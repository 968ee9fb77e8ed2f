"""The synthetic task the bundled tiny teacher/student pair is trained on: digit sorting.

A prompt is a short system turn plus a user turn of 3-8 random digits; the answer is a short
``<think>…</think>`` block followed by the digits in ascending order, e.g.::

    user:      93418
    assistant: <think>n=5</think>13489

The thinking block makes the template's reward cleanup matter: a reward that compares the raw
text with the solution scores 0, one that strips the block first scores 1. Everything here is
pure Python so that the template, the checks and the tests can use it without torch.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

SYSTEM_PROMPT = "Sort the digits."
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
MIN_DIGITS, MAX_DIGITS = 3, 8

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)


def solution_for(digits: str) -> str:
    """The ground truth: the digits sorted ascending."""
    return "".join(sorted(digits))


def target_completion(digits: str) -> str:
    """What the teacher is trained to answer (thinking block, then the sorted digits)."""
    return f"{THINK_OPEN}n={len(digits)}{THINK_CLOSE}{solution_for(digits)}"


def make_row(digits: str) -> dict[str, Any]:
    """One dataset row in Bailian's OPD format."""
    return {
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": digits},
        ],
        "rollout_extra": {"solution": solution_for(digits)},
    }


def random_digits(rng: random.Random, min_digits: int = MIN_DIGITS, max_digits: int = MAX_DIGITS) -> str:
    n = rng.randint(min_digits, max_digits)
    return "".join(rng.choice("0123456789") for _ in range(n))


def make_rows(
    n: int, seed: int = 0, *, exclude: set[str] | None = None, tools: bool = False
) -> list[dict[str, Any]]:
    """`n` distinct rows (by prompt), deterministic for a seed, skipping prompts in `exclude`;
    with `tools`, the tool-using variant (the example tool offered in each row's ``tools``)."""
    rng = random.Random(seed)
    seen: set[str] = set(exclude or ())
    rows: list[dict[str, Any]] = []
    while len(rows) < n:
        digits = random_digits(rng)
        if digits in seen:
            continue
        seen.add(digits)
        rows.append(make_tool_row(digits) if tools else make_row(digits))
    return rows


def strip_thinking(text: str) -> str:
    """Remove complete thinking blocks and anything before a dangling closing tag."""
    text = _THINK_BLOCK.sub("", text)
    if THINK_CLOSE in text:
        text = text.rsplit(THINK_CLOSE, 1)[1]
    return text.strip()


def is_correct(completion: str, solution: str) -> bool:
    """Exact match of the cleaned answer (the engine's greedy accuracy metric)."""
    return strip_thinking(completion) == solution


# ---- the tool-using variant ------------------------------------------------------------------
# When a row offers tools, the teacher first calls the example tool with the digits, then answers
# from the tool's per-digit counts. The name, schema and result format are the template rollout's
# (template/.../functions/rollout/rollout.py), which cannot import this module (it runs in FC).
TOOL_NAME = "count_digits"
TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Count how often each digit 0-9 occurs in a string of digits.",
        "parameters": {
            "type": "object",
            "properties": {"digits": {"type": "string", "description": "the digits, e.g. 93418"}},
            "required": ["digits"],
        },
    },
}


def count_digits(digits: str) -> dict[str, int]:
    """The example tool: how often each digit occurs (sorted by digit, enough to write the answer)."""
    counts: dict[str, int] = {}
    for ch in str(digits):
        if ch.isdigit():
            counts[ch] = counts.get(ch, 0) + 1
    return {d: counts[d] for d in sorted(counts)}


def tool_result(digits: str) -> str:
    """The text of the ``tool`` message the template rollout sends back for a call with `digits`."""
    return json.dumps(count_digits(digits))


def tool_call_message(digits: str, call_id: str = "call-1") -> dict[str, Any]:
    """The teacher's first turn when tools are offered: one call of the example tool on the digits."""
    args = json.dumps({"digits": digits})
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": TOOL_NAME, "arguments": args}}
        ],
    }


def answer_from_counts(counts: dict[str, int]) -> str:
    """The teacher's answer after the tool turn, built from the counts alone."""
    digits = "".join(d * int(n) for d, n in sorted(counts.items()))
    return f"{THINK_OPEN}n={len(digits)}{THINK_CLOSE}{digits}"


def make_tool_row(digits: str) -> dict[str, Any]:
    """One tool-using row: the plain row plus the example tool offered in ``tools``."""
    return {**make_row(digits), "tools": [TOOL_SCHEMA]}


def tool_trajectory(digits: str, call_id: str = "call-1") -> list[dict[str, Any]]:
    """The full conversation the teacher produces through the tool loop (prompt included)."""
    return [
        *make_row(digits)["messages"],
        tool_call_message(digits, call_id),
        {"role": "tool", "tool_call_id": call_id, "name": TOOL_NAME, "content": tool_result(digits)},
        {"role": "assistant", "content": answer_from_counts(count_digits(digits))},
    ]
