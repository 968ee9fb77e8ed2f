"""One finding of a rule (a preflight check, a submit's gate): what, where and how to fix.

A leaf of its own, so that a submit's result can carry findings without importing the checks
(:mod:`opd_nb.checks.report` builds reports of them).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

Severity = Literal["error", "warning", "info"]


class Finding(BaseModel):
    """One problem (or note): stable rule id, severity, where (file:line or key path), what and how to fix."""

    rule: str
    severity: Severity
    where: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        text = f"{self.severity:<7} {self.rule:<34} {self.where}: {self.message}"
        return text + (f"\n        fix: {self.fix}" if self.fix else "")
