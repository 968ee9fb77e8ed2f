"""Baking helpers for the template tests (a small pytest-cookies: isolated config, one call)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from opd_nb.workspace.new import template_dir

COMMON = {
    ".env.example",
    ".gitignore",
    "README.md",
    "config.yaml",
    "pyproject.toml",
    "requirements.txt",
    "submit_job.py",
    "data/train.jsonl",
    "data/validation.jsonl",
    "tests/test_data.py",
}
REWARD = {
    "functions/__init__.py",
    "functions/reward/__init__.py",
    "functions/reward/reward.py",
    "tests/test_reward.py",
    "test_reward.py",
}
ROLLOUT = {
    "functions/__init__.py",
    "functions/rollout/__init__.py",
    "functions/rollout/rollout.py",
    "tests/test_rollout.py",
}


def _choices() -> tuple[list[str], list[bool]]:
    """The template's own choices (cookiecutter.json): its modes, and both values of its `with_reward` flag."""
    spec = json.loads((template_dir() / "cookiecutter.json").read_text(encoding="utf-8"))
    assert isinstance(spec["with_reward"], bool), "with_reward is a yes/no question"
    return list(spec["mode"]), [True, False]


def _valid(mode: str, with_reward: bool) -> bool:
    """`opd new`'s rule (opd_nb.workspace.new.create; test_template checks it refuses the rest): a reward
    workspace always has a reward, a pure-distill one never; agentic either way."""
    return not ((mode == "pure-distill" and with_reward) or (mode == "reward" and not with_reward))


MODES, REWARD_CHOICES = _choices()
ALL_PAIRS = list(itertools.product(MODES, REWARD_CHOICES))
# (mode, with_reward) for every valid combination of the template's choices; names are cycled over them (ccds).
COMBINATIONS = [pair for pair in ALL_PAIRS if _valid(*pair)]
AWKWARD_NAMES = ["3d printing lab", "Ünïcødé 数据 workspace", "  spaced   out  ", 'it\'s "quoted" & <b>']
CASES = list(zip(COMBINATIONS, itertools.cycle(AWKWARD_NAMES), strict=False))
CASE_IDS = [f"{mode}-{'reward' if r else 'noreward'}" for (mode, r), _ in CASES]


def expected_files(mode: str, with_reward: bool) -> set[str]:
    files = set(COMMON)
    if mode == "reward" or (mode == "agentic" and with_reward):
        files |= REWARD
    if mode == "agentic":
        files |= ROLLOUT
    return files


def files_of(path: Path) -> set[str]:
    return {
        p.relative_to(path).as_posix()
        for p in path.rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and ".pytest_cache" not in p.parts
        and ".ruff_cache" not in p.parts
    }


def bake(output_dir: Path, **context: Any) -> Path:
    """Run cookiecutter on the real template with an isolated user config; returns the project dir."""
    from cookiecutter.main import cookiecutter

    config = output_dir.parent / f"{output_dir.name}-cookiecutterrc.yaml"
    config.write_text(
        f"cookiecutters_dir: '{output_dir.parent / 'cc'}'\nreplay_dir: '{output_dir.parent / 'replay'}'\n"
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    return Path(
        cookiecutter(
            str(template_dir()),
            no_input=True,
            extra_context=context,
            output_dir=str(output_dir),
            config_file=str(config),
        )
    )
