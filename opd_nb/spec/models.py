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


# Model ids Bailian documents (its model list, the RL/OPD page, the deployment reference): what an id
# that no `--model-map` maps must be for a local call to answer, so a typo fails here as in the cloud.
BAILIAN_MODEL_IDS = frozenset(
    {
        *(f"qwen3-{s}" for s in ("0.6b", "1.7b", "4b", "8b", "14b", "32b", "30b-a3b", "235b-a22b")),
        *(f"qwen3.5-{s}" for s in ("9b", "27b", "35b-a3b", "122b-a10b", "397b-a17b")),
        *(f"qwen2.5-{s}-instruct" for s in ("0.5b", "1.5b", "3b", "7b", "14b", "32b", "72b")),
        "qwen3-max",
        "qwen3.5-plus",
        "qwen3.5-flash",
        "qwen-max",
        "qwen-plus",
        "qwen-turbo",
        "qwen-flash",
        "qwen3-coder-plus",
        "qwen3-coder-flash",
        "deepseek-v3",
        "deepseek-v3.2",
        "deepseek-r1",
    }
)


def documented(model_id: str) -> bool:
    """True for a model id Bailian documents (see ``BAILIAN_MODEL_IDS``)."""
    return model_id.strip().lower() in BAILIAN_MODEL_IDS


# The OPD teachers Bailian documents: the teacher of every example in the OPD pages (seed 002's run(),
# YAML and CLI examples, its FAQ "改用百炼模型 ID（如 qwen3.5-397b-a17b）"). An id outside this list may
# still work, but the docs do not promise it: the checks warn and show the list.
OPD_TEACHER_IDS = ("qwen3.5-397b-a17b",)
# Words that mark an id as a blank to fill in, never a model: seed 001's `your-teacher-model-id`, `<...>`.
_PLACEHOLDER = re.compile(
    r"(?i)^(?:.*\byour\b.*|.*<[^>]*>.*|.*\b(?:xxx+|placeholder|changeme|todo|tbd)\b.*|"
    r"(?:teacher|student|base)?-?model(?:-id|-name)?|\.\.\.|\$\{?\w+\}?)$"
)
# The series a model belongs to: the docs' "teacher and student in the same model family" (their
# tokenizers align token by token, "如同属 Qwen3.5 系列"): the name up to its first size or variant part.
_FAMILY = re.compile(r"^([a-z]+(?:\d+(?:\.\d+)?)?)(?=$|[-_])")


def placeholder(model_id: str) -> bool:
    """True for an id that is a blank to fill in (`your-teacher-model-id`, `<teacher>`, `model-id`)."""
    ident = model_id.strip().replace("_", "-")
    return bool(_PLACEHOLDER.match(ident)) or ident.lower() in ("teacher", "student", "none", "null", "tbd")


def family(model_id: str) -> str | None:
    """The model series of a Bailian id (`qwen3.5-9b` -> `qwen3.5`, `qwen-plus` -> `qwen`), or None."""
    m = _FAMILY.match(model_id.strip().lower())
    return m.group(1) if m else None
