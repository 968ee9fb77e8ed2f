"""The consent rule for paid starts: a start on Bailian needs an explicit ``yes``; local targets need none.

A leaf (it imports only :mod:`opd_nb.errors`), so every paid call can hold the rule where it sends:
`client.submit`, deployments, sweeps and evaluations, whichever front end (CLI, magic, agent,
Python) calls them. Without ``yes`` the error (code ``needs-confirmation``) says in one line what
would have started, and nothing is sent. The preflight gate that runs before it is :mod:`opd_nb.paid.gate`.
"""

from __future__ import annotations

from collections.abc import Sequence

from opd_nb.errors import OpdError

PAID_KIND = "cloud"  # the target kind that bills (Bailian); `opd serve` is free
NEEDS_CONFIRMATION = "needs-confirmation"  # OpdError.code of a paid start refused for want of --yes


def is_paid(target_kind: str) -> bool:
    return target_kind == PAID_KIND


def require_consent(
    target_kind: str, yes: bool, what: str, *, fix: str = "", warnings: Sequence[str] = ()
) -> None:
    """Refuse a paid start without `yes` (exit 1, nothing sent); `what` says in one line what would start,
    and `warnings` (the gate's, :func:`opd_nb.paid.gate.warning_lines`) follow it: the user consents knowing them."""
    if is_paid(target_kind) and not yes:
        raise OpdError(
            f"nothing sent: Bailian bills this, so it needs --yes: {what}"
            + "".join(f"\n{w}" for w in warnings),
            fix=fix
            or "add --yes to start it (in a notebook too: %opd submit ... --yes), or --dry-run to see it",
            code=NEEDS_CONFIRMATION,
            exit_code=1,
        )
