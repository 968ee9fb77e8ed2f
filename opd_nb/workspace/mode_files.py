"""What a workspace of each mode leaves out of the template: one rule for `opd new` and the template's hook.

One template serves the three modes; deleting afterwards is the approach cookiecutter's maintainers
recommend over conditional file names. `opd new` bakes without the template's hooks (each is a Python
process of its own: 0.4 s of the 0.5 s a workspace took) and prunes here; a plain `cookiecutter
template/` runs the post-generation hook, which calls :func:`prune` too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

AGENTIC_DATA = Path("data") / "agentic"  # the tool-using rows, kept (as data/*.jsonl) in agentic mode only


def has_reward(mode: str, with_reward: object) -> bool:
    """Whether a workspace of `mode` has a reward function; `with_reward` as cookiecutter passes it."""
    return mode == "reward" or (mode == "agentic" and with_reward in (True, "true", "yes", "y", "1", 1))


def unused(mode: str, with_reward: object) -> list[str]:
    """The template's paths, relative to the workspace, that a workspace of `mode` does not use."""
    reward, rollout = has_reward(mode, with_reward), mode == "agentic"
    remove: list[str] = []
    if not reward:
        remove += ["functions/reward", "tests/test_reward.py", "test_reward.py"]
    if not rollout:
        remove += ["functions/rollout", "tests/test_rollout.py"]
    if not (reward or rollout):
        remove += ["functions"]
    return remove


def prune(root: Path, mode: str, with_reward: object) -> None:
    """Remove from the baked workspace at `root` what `mode` does not use; agentic gets the tool rows."""
    for rel in unused(mode, with_reward):
        path = root / rel
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    tool_rows = root / AGENTIC_DATA
    if tool_rows.is_dir():
        if mode == "agentic":
            for src in tool_rows.glob("*.jsonl"):
                src.replace(root / "data" / src.name)
        shutil.rmtree(tool_rows)
