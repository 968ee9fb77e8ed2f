"""A watcher that outlives its control plane: it keeps trying, and says once when contact is lost and once when it is back.

A detached watcher exists to outlive things: a server killed and restarted on its data dir, a network
that drops. When a poll gets no answer (none after the client's own retries, or a gateway's 502/503/504),
:class:`Contact` says so once (the watcher's output and log, and the webhook), polls again with
exponential backoff and jitter (about 2 s doubling to 30 s) for up to ``--reconnect-minutes``
(:data:`RECONNECT_MINUTES` by default), says once when contact is back, and the watch goes on to the
final status. After that long without an answer it says it gave up and ends (an :class:`OpdError`).

Not lost contact, so the watch ends at once as before: an answer that refuses (a 4xx: an unknown job,
a wrong key), and a watch that never reached its control plane (a wrong URL, no server started).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from opd_nb.errors import UNREACHABLE, OpdError

T = TypeVar("T")
RECONNECT_MINUTES = 120.0
GATEWAY_STATUSES = frozenset({502, 503, 504})  # a proxy or gateway whose control plane is gone
FIRST_PAUSE_S = 2.0
MAX_PAUSE_S = 30.0


def is_lost(exc: OpdError) -> bool:
    """Whether an error means "no control plane to talk to" rather than an answer that refuses."""
    return exc.code == UNREACHABLE or exc.status in GATEWAY_STATUSES


def span(seconds: float) -> str:
    """A duration as a person reads it: 45 s, 12 min, 2.5 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.3g} h"


@dataclass
class Contact:
    """One watcher's contact with its control plane; :meth:`poll` runs each read through it."""

    job_id: str
    where: str  # "the local control plane at http://..."
    patience_s: float
    report: Callable[[str], None]
    notifier: Any = (
        None  # an opd_nb.watching.notify.Notifier: told once on loss, once on return, and on giving up
    )
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    reached: bool = False
    lost_since: float | None = None
    failures: int = 0
    last_status: str | None = None

    def poll(self, read: Callable[[], T], status_of: Callable[[T], str] | None = None) -> T | None:
        """``read()``'s value; None while contact is lost (said once). Raises what is not lost contact,
        a loss before contact was ever made, and a loss longer than the patience."""
        try:
            value = read()
        except OpdError as exc:
            if not self.reached or not is_lost(exc) or self.patience_s <= 0:
                raise
            self._lost(exc)
            return None
        self.reached = True
        if status_of is not None:
            self.last_status = status_of(value)
        if self.lost_since is not None:
            self._back()
        return value

    def pause_s(self, poll_s: float) -> float:
        """How long to wait before the next poll: the poll interval, or the backoff while lost."""
        if self.lost_since is None:
            return poll_s
        return min(MAX_PAUSE_S, FIRST_PAUSE_S * 2 ** (self.failures - 1)) * random.uniform(0.75, 1.0)

    def _tell(self, line: str, post: Callable[[Any], str | None]) -> None:
        self.report(line)
        if self.notifier is not None and (failed := post(self.notifier)):
            self.report(failed)

    def _lost(self, exc: OpdError) -> None:
        now = self.clock()
        self.failures += 1
        problem = exc.message.rsplit(": ", 1)[-1] if exc.code == UNREACHABLE else f"HTTP {exc.status}"
        if self.lost_since is None:
            self.lost_since = now
            patience = span(self.patience_s)
            self._tell(
                f"watch: lost contact with {self.where} ({problem}); trying again for up to {patience}",
                lambda n: n.contact_lost(self.job_id, self.where, problem, patience),
            )
        if now - self.lost_since >= self.patience_s:
            patience = span(self.patience_s)
            self._tell(
                f"watch: gave up on {self.job_id}: no contact with {self.where} for {patience}",
                lambda n: n.gave_up(self.job_id, self.where, patience, self.last_status),
            )
            if (flush := getattr(self.notifier, "flush", None)) is not None:  # an Outbox: posts beside us
                for line in flush():  # the watch ends here: what is queued goes first
                    self.report(line)
            raise OpdError(
                f"no contact with {self.where} for {patience}; {self.job_id} was last seen "
                f"{self.last_status or 'before any answer'}",
                fix=f"once it is back: opd watch {self.job_id}; --reconnect-minutes sets how long a watch waits",
            )

    def _back(self) -> None:
        down = span(self.clock() - (self.lost_since or self.clock()))
        status = self.last_status or "unknown"
        self.lost_since, self.failures = None, 0
        self._tell(
            f"watch: contact with {self.where} is back after {down}; {self.job_id} is {status}",
            lambda n: n.contact_back(self.job_id, self.where, down, status),
        )
