"""What stands between a user and a bill: the preflight gate, and the consent rule (:mod:`opd_nb.paid.consent`).

One source of both rules for every path that starts a job (`opd submit`, `%opd submit`, sweeps,
continued training, `opd eval --cloud`): the gate refuses a workspace whose preflight has errors
before any request is sent; a start on Bailian (the paid target) needs an explicit ``yes``, and
without it the error says in one line what would have started. Local targets need no consent.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from opd_nb.checks import CheckReport, check
from opd_nb.errors import OpdError
from opd_nb.paid.consent import NEEDS_CONFIRMATION, PAID_KIND, is_paid, require_consent

__all__ = [
    "NEEDS_CONFIRMATION",
    "PAID_KIND",
    "PREFLIGHT_FAILED",
    "gate",
    "is_paid",
    "require_consent",
    "warning_lines",
]

PREFLIGHT_FAILED = "preflight-failed"  # OpdError.code of a start the gate refused
DRY_RUN_NEEDS_NOT = ("env.no-api-key",)  # findings about what only sending needs


def warning_lines(report: CheckReport) -> list[str]:
    """The gate's warnings as the lines a start shows before it sends anything (errors never get here)."""
    return [f"preflight {f}".replace("\n", "\n  ") for f in report.warnings]


def gate(
    workspace: str | Path,
    target_kind: str,
    *,
    base_url: str | None = None,
    config: str = "config.yaml",
    sets: Mapping[str, Any] | None = None,
    run_args: Mapping[str, str | None] | None = None,
    dry_run: bool = False,
) -> CheckReport:
    """Run the preflight rules for the target on the config as it would be sent (`sets`: its `--set`
    changes, `run_args`: its --model / --teacher-model / --job-name); errors stop the start, with every
    error and warning in the message. The report comes back for its warnings, which a start shows before
    sending (:func:`warning_lines`). A `dry_run` sends nothing, so it needs no API key: that finding is
    left out."""
    report = check(
        workspace,
        target_kind,
        base_url=base_url if target_kind == "local" else None,
        config=config,
        sets=sets,
        run_args=run_args,
    )
    if dry_run:
        report.findings = [f for f in report.findings if f.rule not in DRY_RUN_NEEDS_NOT]
    if not report.ok:
        shown = "\n".join(f"  {f}" for f in [*report.errors, *report.warnings])
        raise OpdError(
            f"preflight found {len(report.errors)} error(s) and {len(report.warnings)} warning(s); "
            f"nothing was sent:\n{shown}",
            fix=f"correct them (`opd check {workspace}` shows them again), or pass --no-check to skip the gate",
            code=PREFLIGHT_FAILED,
            exit_code=2,
        )
    return report
