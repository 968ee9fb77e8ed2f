"""Consent for agents: a paid action is two calls joined by a short-lived, single-use token.

The first call runs the core function with ``yes=False``: where the core's own consent rule
(:func:`opd_nb.paid.consent.require_consent`, the one `--yes` answers) refuses, nothing was sent, and the
refusal's one line becomes the summary the agent must show; a token bound to the exact request is
issued. The second call must carry that token: it runs the core function with ``yes=True`` once, and
the token then remembers what it started, so a repeated confirmed call answers the same job instead
of starting another. A token is refused when it is unknown, expired, or was issued for another
request (a changed config, other data, other arguments, another target or action): nothing is sent.

Local targets bill nothing, so the first call simply runs. The book lives in the server process.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from opd_nb.errors import OpdError
from opd_nb.paid.consent import NEEDS_CONFIRMATION

TOKEN_TTL_S = 300.0  # a confirmation is meant for the next call, not for later
STALE_TOKEN = "stale-confirmation"  # OpdError.code: unknown or expired token
CHANGED_REQUEST = "changed-request"  # OpdError.code: the token was issued for another request
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules"})  # and every hidden dir (.git, .venv, .opd)

T = TypeVar("T")


def _files(root: Path) -> Iterator[Path]:
    """The workspace's files as a request reads them: hidden files (.env: the key) and caches left out."""
    for path in sorted(root.iterdir()):
        if path.name.startswith(".") or path.name in SKIPPED_DIRS:
            continue
        if path.is_dir():
            yield from _files(path)
        elif path.is_file():
            yield path


def workspace_digest(workspace: str | Path) -> str:
    """sha256 over every file of the workspace (config, data, functions) by relative path and content."""
    root = Path(workspace).expanduser().resolve()
    digest = hashlib.sha256()
    if root.is_dir():
        for path in _files(root):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            with path.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
            digest.update(b"\0")
    return digest.hexdigest()


def request_fingerprint(action: str, target: Any, arguments: Mapping[str, Any], workspace: str | None) -> str:
    """What a token is bound to: the action, the target, every argument and the workspace's content."""
    body = {
        "action": action,
        "target": [target.kind, target.base_url],
        "arguments": {k: v for k, v in sorted(arguments.items())},
        "workspace": workspace_digest(workspace) if workspace else None,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class _Grant:
    action: str
    fingerprint: str
    expires: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    started: Any = None  # what the confirmed call started (None: not yet)


@dataclass(frozen=True)
class Refusal:
    """The first call's answer: what would start (the CLI's line without --yes) and the token."""

    summary: str
    token: str
    expires_in_s: float


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """What a paid call did: `refusal` (nothing sent), or `result` (`repeated`: started earlier)."""

    refusal: Refusal | None = None
    result: T | None = None
    repeated: bool = False


class ConsentBook:
    """Issued tokens and what each confirmed call started; thread-safe (tools run on worker threads)."""

    def __init__(self, ttl_s: float = TOKEN_TTL_S, clock: Callable[[], float] = time.monotonic):
        self.ttl_s, self.clock = ttl_s, clock
        self._grants: dict[str, _Grant] = {}
        self._lock = threading.Lock()

    def _issue(self, action: str, fingerprint: str) -> str:
        token = "opd-confirm-" + secrets.token_urlsafe(18)
        with self._lock:
            now = self.clock()
            self._grants = {k: g for k, g in self._grants.items() if g.started is not None or g.expires > now}
            self._grants[token] = _Grant(action, fingerprint, now + self.ttl_s)
        return token

    def _grant(self, token: str, fingerprint: str) -> _Grant:
        with self._lock:
            grant = self._grants.get(token)
        if grant is None or (grant.started is None and grant.expires <= self.clock()):
            raise OpdError(
                "nothing sent: this confirmation token is unknown or expired",
                fix="call again without confirmation_token, show the user the new summary, then confirm",
                code=STALE_TOKEN,
                exit_code=1,
            )
        if grant.fingerprint != fingerprint:
            raise OpdError(
                f"nothing sent: this confirmation token was issued for another {grant.action} request "
                "(the config, data, arguments or target changed since)",
                fix="call again without confirmation_token for a token that covers this request",
                code=CHANGED_REQUEST,
                exit_code=1,
            )
        return grant

    def run(
        self,
        action: str,
        fingerprint: Callable[[], str],
        start: Callable[[bool], T],
        token: str | None,
    ) -> Outcome[T]:
        """`start(yes)` under the consent rule: without a token, `start(False)` (the core refuses a paid
        start, nothing sent, and a token is issued); with one, `start(True)` once per token."""
        if token is None:
            try:
                return Outcome(result=start(False))  # a local target: nothing to consent to
            except OpdError as exc:
                if exc.code != NEEDS_CONFIRMATION:
                    raise
                issued = self._issue(action, fingerprint())
                return Outcome(refusal=Refusal(exc.message, issued, self.ttl_s))
        grant = self._grant(token, fingerprint())
        with grant.lock:  # a second confirmed call waits for the first, then answers what it started
            if grant.started is not None:
                return Outcome(result=grant.started, repeated=True)
            self._grant(token, fingerprint())  # still valid now that we hold the lock
            grant.started = start(True)
            return Outcome(result=grant.started)
