"""What a model id tells about the model: its size class (the docs' presets) and whether Bailian serves it.

Why here: the hyper-parameter table's two starting-point columns are defined by model size (<=14B
small, >=30B large) and the teacher rules compare a teacher with its student, so the size is read
from an id in exactly one place. Bailian ids carry the parameter count (`qwen3.5-9b`,
`qwen3.5-397b-a17b`: 397B total, 17B active); the total count is what the presets mean.
"""

from __future__ import annotations

import re
from typing import Literal

SMALL_MAX_B = 14.0  # the docs: a model of <= 14B parameters takes the "small" column
LARGE_MIN_B = 30.0  # ... and one of >= 30B the "large" column
# Model families Bailian does not serve (another vendor's API models): the FAQ's "teacher_model error".
NOT_ON_BAILIAN = ("gpt-", "gpt4", "chatgpt", "o1", "o3", "o4-", "claude", "gemini", "text-davinci")
_SIZE = re.compile(r"(?:^|[-_/:])(\d+(?:\.\d+)?)\s*[bB](?=$|[-_/:.])")


def size_b(model_id: str) -> float | None:
    """Total parameters in billions read from the id (`qwen3.5-397b-a17b` -> 397.0), or None."""
    sizes = [float(m.group(1)) for m in _SIZE.finditer(model_id.strip())]
    return max(sizes) if sizes else None


def size_class(model_id: str) -> Literal["small", "large"] | None:
    """The docs' preset column for this model, or None when the id has no size or falls between."""
    size = size_b(model_id)
    if size is None:
        return None
    if size <= SMALL_MAX_B:
        return "small"
    return "large" if size >= LARGE_MIN_B else None


def other_vendor(model_id: str) -> bool:
    """True for an id of another vendor's API model (gpt-4o, claude-…), which Bailian cannot serve."""
    ident = model_id.strip().lower()
    return any(ident == p.rstrip("-") or ident.startswith(p) for p in NOT_ON_BAILIAN)
