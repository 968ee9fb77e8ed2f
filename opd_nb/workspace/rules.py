"""What makes a workspace's answers usable: the one list of rules for `opd new` and the template.

`opd_nb.workspace.new` raises the first problem as an :class:`OpdError` before cookiecutter runs; the
template's pre-generation hook imports this same module from the installed package (as
cookiecutter-data-science's hooks import ``ccds.hook_utils``) and prints every problem, so a plain
``cookiecutter template/`` run says the same thing. Standard library only: the hook runs it in a
fresh interpreter, where pulling in pydantic or the CLI would only cost time.
"""

from __future__ import annotations

import keyword
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass

MODES: tuple[str, ...] = ("pure-distill", "reward", "agentic")
MAX_NAME = 100
MAX_MODEL_ID = 200
SLUG = re.compile(r"^[a-z0-9][a-z0-9-]*$")
MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$")
# Names the generated function modules import; a processor class must not shadow them.
RESERVED = frozenset(
    {
        "AbstractRewardProcessor",
        "AbstractRolloutProcessor",
        "AgentOutput",
        "Reward",
        "RewardInput",
        "RewardOutput",
        "RolloutInput",
        "RolloutOutput",
        "TaskStatus",
        "observe_processor",
    }
)

# How each answer is named to the person: the cookiecutter key by default; `opd new` names its flags.
KEYS = ("mode", "workspace_name", "student_model", "teacher_model", "reward_class", "rollout_class")


@dataclass(frozen=True)
class Problem:
    """One unusable answer: which one, what is wrong, how to fix it."""

    key: str
    message: str
    fix: str


def _name_problems(name: str, slug: str, label: str) -> list[Problem]:
    if not name.strip():
        return [
            Problem("workspace_name", f"{label} is empty", "give the workspace a name, e.g. 'my-opd-job'")
        ]
    if any(unicodedata.category(ch).startswith("C") for ch in name):
        return [
            Problem("workspace_name", f"{label} {name!r} contains control characters", "use one plain line")
        ]
    if len(name) > MAX_NAME:
        return [
            Problem("workspace_name", f"{label} is {len(name)} characters long", f"use at most {MAX_NAME}")
        ]
    if not slug:
        return [
            Problem(
                "workspace_name",
                f"{label} {name!r} has no letters or digits to build a job name from",
                "add some letters or digits",
            )
        ]
    if not SLUG.match(slug) or len(slug) > MAX_NAME:
        return [
            Problem(
                "workspace_name",
                f"{label} {name!r} gives an unusable job name {slug!r}",
                f"use lowercase letters, digits and '-' (at most {MAX_NAME})",
            )
        ]
    return []


def _class_problem(key: str, value: str, label: str) -> Problem | None:
    if not value.isidentifier() or keyword.iskeyword(value):
        return Problem(
            key, f"{label} {value!r} is not a valid Python class name", "use e.g. MyRewardProcessor"
        )
    if value in RESERVED:
        return Problem(
            key, f"{label} {value!r} clashes with a name the SDK module imports", "pick another name"
        )
    return None


def problems(
    answers: Mapping[str, object],
    *,
    slugify: Callable[[str], str],
    labels: Mapping[str, str] | None = None,
) -> list[Problem]:
    """Every problem with `answers` (cookiecutter's keys), in the order a person would fix them."""
    label = {key: key for key in KEYS} | dict(labels or {})
    out: list[Problem] = []
    mode = answers.get("mode")
    if mode not in MODES:
        out.append(Problem("mode", f"unknown mode {mode!r}", f"choose one of {', '.join(MODES)}"))
    name = str(answers.get("workspace_name", ""))
    out += _name_problems(name, slugify(name) if name.strip() else "", label["workspace_name"])
    for key in ("student_model", "teacher_model"):
        value = str(answers.get(key, ""))
        if not MODEL_ID.match(value) or len(value) > MAX_MODEL_ID:
            out.append(
                Problem(
                    key,
                    f"{label[key]} {value!r} is not a model id",
                    "use an id such as qwen3.5-9b (no spaces or quotes)",
                )
            )
    for key in ("reward_class", "rollout_class"):
        found = _class_problem(key, str(answers.get(key, "")), label[key])
        if found:
            out.append(found)
    if answers.get("reward_class") == answers.get("rollout_class"):
        out.append(
            Problem(
                "reward_class",
                f"{label['reward_class']} {answers.get('reward_class')!r} is the {label['rollout_class']} name",
                "pick another name",
            )
        )
    return out
