"""The consent rule for paid starts: a start on Bailian needs an explicit ``yes``; local targets need none.

A leaf (it imports only :mod:`opd_nb.errors` and :mod:`opd_nb.constants`), so every paid call can hold
the rule where it sends: `client.submit`, deployments, sweeps and evaluations, whichever front end
(CLI, magic, agent, Python) calls them. Without ``yes`` the error (code ``needs-confirmation``) says in one line what
would have started, and nothing is sent. The line names no flag: each surface says how to consent
(:data:`HOW_TO_CONFIRM`), so the same refusal reads right in a terminal and in an agent's tool result.
The preflight gate that runs before it is :mod:`opd_nb.paid.gate`.

A paid start is sent once. Each carries a client-chosen request id (:func:`request_id`) in a name the
plane records (a job's name, a deployment's suffix); when the answer is lost after the send (a 5xx, a
dropped connection: :func:`answer_lost`), the start asks the plane for what that id created instead of
sending again (:func:`found_after_loss`).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from typing import TypeVar

from opd_nb.constants import REQUEST_ID_HEX, REQUEST_ID_PREFIX
from opd_nb.errors import UNREACHABLE, OpdError

T = TypeVar("T")
PAID_KIND = "cloud"  # the target kind that bills (Bailian); `opd serve` is free
NEEDS_CONFIRMATION = "needs-confirmation"  # OpdError.code of a paid start refused for want of --yes
# How each surface consents to what the refusal's line describes (the line itself names no flag).
HOW_TO_CONFIRM = {
    "cli": "add --yes to start it (in a notebook too: %opd ... --yes; from Python: yes=True), "
    "or --dry-run to see it first",
    "mcp": "nothing was sent: show the user the summary, warnings and estimate; only on their yes, call this "
    "tool again with the same arguments and confirmation_token",
}


def is_paid(target_kind: str) -> bool:
    return target_kind == PAID_KIND


def require_consent(
    target_kind: str, yes: bool, what: str, *, fix: str = "", warnings: Sequence[str] = ()
) -> None:
    """Refuse a paid start without `yes` (exit 1, nothing sent); `what` says in one line what would start,
    and `warnings` (the gate's, :func:`opd_nb.paid.gate.warning_lines`) follow it: the user consents knowing
    them. `fix` is the CLI's way to consent (an agent's tool replaces it with :data:`HOW_TO_CONFIRM`'s)."""
    if is_paid(target_kind) and not yes:
        raise OpdError(
            f"nothing sent: Bailian bills this, so it needs your confirmation: {what}"
            + "".join(f"\n{w}" for w in warnings),
            fix=fix or HOW_TO_CONFIRM["cli"],
            code=NEEDS_CONFIRMATION,
            exit_code=1,
        )


def request_id(seed: str | None = None) -> str:
    """A paid start's client-chosen id (``r`` + 10 hex): from `seed` (an agent's token: the same on every
    call that carries it), else new. It travels in a name the plane records, to find the start again."""
    hexed = hashlib.sha256(seed.encode()).hexdigest() if seed else secrets.token_hex(8)
    return REQUEST_ID_PREFIX + hexed[:REQUEST_ID_HEX]


def answer_lost(exc: OpdError) -> bool:
    """Whether a failed send may have been carried out: no answer (a dropped connection, a timeout) or a
    5xx. A 4xx refused it (a 409 too: the name was taken before this start)."""
    return exc.code == UNREACHABLE or exc.status is None or exc.status >= 500


def found_after_loss(exc: OpdError, found: T | None, what: str) -> tuple[T, str]:
    """After `exc` lost a start's answer: (what the plane shows it created, the note saying so); nothing
    found is `exc` again, saying that nothing was sent twice."""
    if found is None:
        raise OpdError(
            f"{exc.message}\nits answer was lost and the plane shows nothing this start created; it was "
            f"not sent again: {what}",
            where=exc.where,
            fix="list what runs (`opd jobs`, `opd deployments`) before starting it again",
            status=exc.status,
            code=exc.code,
            exit_code=exc.exit_code,
        ) from None
    return found, lost_note(exc)


def lost_note(exc: OpdError) -> str:
    """What a start found again after its lost answer says."""
    lines = [line.strip() for line in exc.message.splitlines() if line.strip()]
    said = lines[-1].removeprefix("error: ") if lines else "no answer"  # the service's words come last
    return (
        f"the answer to this start was lost ({said}); the plane shows what it started: nothing was sent twice"
    )
