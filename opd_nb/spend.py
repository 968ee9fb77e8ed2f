"""What stands between a user and a bill: the preflight gate and the consent rule for paid starts.

One source of both rules for every path that starts a job (`opd submit`, `%opd submit`, sweeps,
continued training, `opd eval --cloud`): the gate refuses a workspace whose preflight has errors
before any request is sent; a start on Bailian (the paid target) needs an explicit ``yes``, and
without it the error says in one line what would have started. Local targets need no consent.
"""

from __future__ import annotations

from opd_nb.checks import CheckReport, check
from opd_nb.errors import OpdError

PAID_KIND = "cloud"  # the target kind that bills (Bailian); `opd serve` is free
NEEDS_CONFIRMATION = "needs-confirmation"  # OpdError.code of a paid start refused for want of --yes
PREFLIGHT_FAILED = "preflight-failed"  # OpdError.code of a start the gate refused


def is_paid(target_kind: str) -> bool:
    return target_kind == PAID_KIND


def require_consent(target_kind: str, yes: bool, what: str, *, fix: str = "") -> None:
    """Refuse a paid start without `yes` (exit 1, nothing sent); `what` says in one line what would start."""
    if is_paid(target_kind) and not yes:
        raise OpdError(
            f"nothing sent: Bailian bills this, so it needs --yes: {what}",
            fix=fix
            or "add --yes to start it (in a notebook too: %opd submit ... --yes), or --dry-run to see it",
            code=NEEDS_CONFIRMATION,
            exit_code=1,
        )


def gate(
    workspace: str, target_kind: str, *, base_url: str | None = None, config: str = "config.yaml"
) -> CheckReport:
    """Run the preflight rules for the target; errors stop the start, with every finding in the message."""
    report = check(
        workspace, target_kind, base_url=base_url if target_kind == "local" else None, config=config
    )
    if not report.ok:
        shown = "\n".join(f"  {f}" for f in report.errors)
        raise OpdError(
            f"preflight found {len(report.errors)} error(s); nothing was sent:\n{shown}",
            fix=f"correct them (`opd check {workspace}` shows them again), or pass --no-check to skip the gate",
            code=PREFLIGHT_FAILED,
            exit_code=2,
        )
    return report
