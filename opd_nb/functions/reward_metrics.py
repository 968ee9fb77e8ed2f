"""Which reward metrics the console can show: numbers. One rule for the engine, `opd test` and the playground.

Why: a reward that puts a string, a bool or a list in ``reward_metrics`` still succeeds (the SDK's
function server passes a returned dict through as it is), and the metric silently vanishes from
the curves. Each surface names the key and its type instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

_warned: set[tuple[str, str]] = set()  # (job, key) already warned about in this process


def non_float(metrics: Any) -> dict[str, str]:
    """``{key: type name}`` of the metric values that are not numbers (a bool is not one)."""
    if not isinstance(metrics, Mapping):
        return {}
    return {
        str(key): type(value).__name__
        for key, value in metrics.items()
        if isinstance(value, bool) or not isinstance(value, int | float)
    }


def message(key: str, type_name: str) -> str:
    return (
        f"reward metric {key!r} is a {type_name}, not a float: the console would not show it "
        "(return numbers in reward_metrics, e.g. float(x))"
    )


def warn_once(scope: str, metrics: Any, log: Callable[[str, str], Any]) -> None:
    """Log one warning per non-float key per ``scope`` (a job), however many steps report it."""
    for key, type_name in non_float(metrics).items():
        if (scope, key) not in _warned:
            _warned.add((scope, key))
            log(message(key, type_name), "WARNING")
