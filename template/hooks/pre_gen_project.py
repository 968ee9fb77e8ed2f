"""Reject invalid answers before anything is written (cookiecutter pre-generation hook).

The same rules are applied by ``opd_nb.workspace`` before it calls cookiecutter; they are repeated
here so that a plain ``cookiecutter template/`` run gives the same clear message.
"""

import json
import keyword
import re
import sys
import unicodedata

CONTEXT = json.loads(r'''{{ cookiecutter | tojson }}''')
MODES = ("pure-distill", "reward", "agentic")
SLUG = re.compile(r"^[a-z0-9][a-z0-9-]*$")
MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$")
RESERVED = {
    "AbstractRewardProcessor", "AbstractRolloutProcessor", "AgentOutput", "Reward", "RewardInput",
    "RewardOutput", "RolloutInput", "RolloutOutput", "TaskStatus", "observe_processor",
}


def _slugify(text: str) -> str:
    """cookiecutter's own slugify (python-slugify); cookiecutter.json falls back to a placeholder."""
    try:
        from slugify import slugify
    except ImportError:
        return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slugify(text)


def problems(ctx: dict) -> list[str]:
    out = []
    name = str(ctx.get("workspace_name", ""))
    if not name.strip():
        out.append("workspace_name is empty: give the workspace a name, e.g. 'my-opd-job'")
    elif any(unicodedata.category(ch).startswith("C") for ch in name):
        out.append("workspace_name contains control characters (newline, tab, ...): use one plain line")
    elif len(name) > 100:
        out.append(f"workspace_name is {len(name)} characters long: use at most 100")
    slug = str(ctx.get("workspace_slug", ""))
    if name.strip() and slug in ("", "invalid-workspace-name") and not _slugify(name):
        out.append(f"workspace_name {name!r} has no letters or digits to build a job name from: add some")
    elif slug and (not SLUG.match(slug) or len(slug) > 100):
        out.append(f"workspace_slug {slug!r} must be lowercase letters, digits and '-' (at most 100)")
    if ctx.get("mode") not in MODES:
        out.append(f"mode {ctx.get('mode')!r} is unknown: choose one of {', '.join(MODES)}")
    for key in ("student_model", "teacher_model"):
        value = str(ctx.get(key, ""))
        if not MODEL_ID.match(value) or len(value) > 200:
            out.append(f"{key} {value!r} is not a model id: use e.g. 'qwen3.5-9b' (no spaces or quotes)")
    for key in ("reward_class", "rollout_class"):
        value = str(ctx.get(key, ""))
        if not value.isidentifier() or keyword.iskeyword(value):
            out.append(f"{key} {value!r} is not a valid Python class name: use e.g. 'MyRewardProcessor'")
        elif value in RESERVED:
            out.append(f"{key} {value!r} clashes with a name the SDK module imports: pick another name")
    if ctx.get("reward_class") == ctx.get("rollout_class"):
        out.append("reward_class and rollout_class must differ")
    return out


if __name__ == "__main__":
    found = problems(CONTEXT)
    for message in found:
        print(f"error: {message}", file=sys.stderr)
    sys.exit(1 if found else 0)
