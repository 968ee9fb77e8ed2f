"""Notebook layer: the `%opd` magic and the widgets (config form, reward playground, job monitor).

Kept import-light: nothing here imports ipywidgets, matplotlib, dashscope or torch at import time.
"""

from __future__ import annotations

from typing import Any

__all__ = ["JobMonitor", "ConfigForm", "RewardPlayground", "config_form", "reward_playground"]


def __getattr__(name: str) -> Any:
    if name == "JobMonitor":
        from opd_nb.notebook.monitor import JobMonitor

        return JobMonitor
    if name in ("ConfigForm", "config_form"):
        from opd_nb.notebook import form

        return getattr(form, name)
    if name in ("RewardPlayground", "reward_playground"):
        from opd_nb.notebook import playground

        return getattr(playground, name)
    raise AttributeError(f"module 'opd_nb.notebook' has no attribute {name!r}")
