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

import random
import re

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


def make_row(digits: str) -> dict:
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


def make_rows(n: int, seed: int = 0, *, exclude: set[str] | None = None) -> list[dict]:
    """`n` distinct rows (by prompt), deterministic for a seed, skipping prompts in `exclude`."""
    rng = random.Random(seed)
    seen: set[str] = set(exclude or ())
    rows: list[dict] = []
    while len(rows) < n:
        digits = random_digits(rng)
        if digits in seen:
            continue
        seen.add(digits)
        rows.append(make_row(digits))
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
