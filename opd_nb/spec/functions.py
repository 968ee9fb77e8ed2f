"""Which processor class a config's function runs, as the SDK reads ``fcmodel``.

``fcmodel.classpath`` wins (``functions/reward/reward.py:RewardProcessor`` or a dotted module path);
without it the SDK joins ``filepath`` and ``classname``. The notebook's reward playground runs the
class named here, so it scores exactly what the job would register.
"""

from __future__ import annotations

from typing import Any

from opd_nb.spec.job import JobConfig


def function_classpath(function: Any) -> str | None:
    """The function's processor class as ``classpath`` (None when fcmodel names none)."""
    fc = function.fcmodel
    if fc is None:
        return None
    if fc.classpath:
        return str(fc.classpath)
    if fc.filepath and fc.classname:
        return f"{fc.filepath}:{fc.classname}"
    return None


def reward_classpath_of(config: JobConfig) -> str | None:
    """The first reward function's processor class (None for a config without one)."""
    for function in config.functions_of("reward"):
        classpath = function_classpath(function)
        if classpath:
            return classpath
    return None
