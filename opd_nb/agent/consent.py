"""Consent for agents: a paid action is two calls joined by a short-lived, single-use token.

The first call runs the core function with ``yes=False``: where the core's own consent rule
(:func:`opd_nb.paid.consent.require_consent`, the one `--yes` answers) refuses, nothing was sent, and the
refusal's one line becomes the summary the agent must show; a token bound to the exact request is
issued. The second call must carry that token: it runs the core function with ``yes=True`` once, and
the token then remembers what it started, so a repeated confirmed call answers the same job instead
of starting another. The token is spent when the request is *sent*, not when it returns: the start
carries the token's request id (:func:`opd_nb.paid.consent.request_id`) in a name the plane records,
and a call that repeats a send whose answer was lost finds what that id created and answers
``already_started`` with it; where the plane shows nothing, it is refused (nothing sent twice).
A token is refused when it is unknown, expired, or was issued for another request (a changed config,
other data wherever it lies, other arguments, another target or action): nothing is sent. The
fingerprint covers every file the request reads, inside the workspace or not (the config, each
dataset's ``file_name``, each function's code folder), and leaves out what the SDK writes there itself
(``start.sh``), so a repeat after a submit is still the same request.

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

from opd_nb.constants import SDK_GENERATED_FILES
from opd_nb.errors import OpdError
from opd_nb.paid.consent import NEEDS_CONFIRMATION, request_id

TOKEN_TTL_S = 300.0  # a confirmation is meant for the next call, not for later
STALE_TOKEN = "stale-confirmation"  # OpdError.code: unknown or expired token
CHANGED_REQUEST = "changed-request"  # OpdError.code: the token was issued for another request
SPENT_TOKEN = "spent-confirmation"  # OpdError.code: the token's send lost its answer and made nothing seen
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules"})  # and every hidden dir (.git, .venv, .opd)

T = TypeVar("T")


def _files(root: Path) -> Iterator[Path]:
    """A folder's files as a request reads them: hidden files (.env: the key), caches and what the SDK
    writes into a function's folder on submit (start.sh) left out."""
    for path in sorted(root.iterdir()):
        if path.name.startswith(".") or path.name in SKIPPED_DIRS:
            continue
        if path.is_dir():
            yield from _files(path)
        elif path.is_file() and path.name not in SDK_GENERATED_FILES:
            yield path


def request_files(workspace: str | Path, config: str = "config.yaml") -> list[Path]:
    """Every file or folder a start from `workspace` reads, wherever it lies: the workspace, the config
    (a path outside it too), each dataset's ``file_name`` and each function's code folder and requirements,
    resolved as submit_job.py resolves them (against the config's folder)."""
    from opd_nb.spec.job import load_config

    root = Path(workspace).expanduser().resolve()
    cfg = (root / config).resolve()
    paths = [root, cfg]
    try:
        job = load_config(cfg)
    except OpdError:
        return paths  # the start refuses it before sending; the config's bytes are bound all the same
    base = cfg.parent
    paths += [(base / d.file_name).resolve() for d in job.datasets if d.file_name]
    for function in job.functions:
        if function.fcmodel is not None:
            zipdir = (base / function.fcmodel.zipdir).resolve()
            paths += [
                zipdir,
                *(
                    [zipdir / function.fcmodel.requirements_path]
                    if function.fcmodel.requirements_path
                    else []
                ),
            ]
    return list(dict.fromkeys(paths))


def _digest_path(digest: Any, path: Path) -> None:
    digest.update(path.as_posix().encode() + b"\0")
    files = list(_files(path)) if path.is_dir() else [path] if path.is_file() else []
    if not files:
        digest.update(b"missing\0")
    for file in files:
        digest.update(file.relative_to(path).as_posix().encode() + b"\0" if file != path else b"\0")
        with file.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        digest.update(b"\0")


def workspace_digest(workspace: str | Path, config: str = "config.yaml") -> str:
    """sha256 over every file the request reads (:func:`request_files`) by path and content."""
    digest = hashlib.sha256()
    for path in request_files(workspace, config):
        _digest_path(digest, path)
    return digest.hexdigest()


def request_fingerprint(
    action: str, target: Any, arguments: Mapping[str, Any], workspace: str | None, config: str = "config.yaml"
) -> str:
    """What a token is bound to: the action, the target, every argument and every file it reads."""
    body = {
        "action": action,
        "target": [target.kind, target.base_url],
        "arguments": {k: v for k, v in sorted(arguments.items())},
        "workspace": workspace_digest(workspace, config) if workspace else None,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class _Grant:
    action: str
    fingerprint: str
    expires: float
    request_id: str = ""  # what the start carries in a name the plane records
    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: bool = False  # the confirmed call sent it: the token is spent, whatever came back
    started: Any = None  # what the confirmed call started (None: not yet, or its answer was lost)


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
            self._grants = {k: g for k, g in self._grants.items() if g.sent or g.expires > now}
            self._grants[token] = _Grant(action, fingerprint, now + self.ttl_s, request_id(token))
        return token

    def _grant(self, token: str, fingerprint: str) -> _Grant:
        with self._lock:
            grant = self._grants.get(token)
        if grant is None or (not grant.sent and grant.expires <= self.clock()):
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
        start: Callable[[bool, str | None], T],
        token: str | None,
        find: Callable[[str], T | None] | None = None,
    ) -> Outcome[T]:
        """`start(yes, request_id)` under the consent rule: without a token, `start(False, None)` (the core
        refuses a paid start, nothing sent, and a token is issued); with one, `start(True, its id)` once
        per token. A token whose send lost its answer is not sent again: `find(its id)` answers."""
        if token is None:
            try:
                return Outcome(result=start(False, None))  # a local target: nothing to consent to
            except OpdError as exc:
                if exc.code != NEEDS_CONFIRMATION:
                    raise
                issued = self._issue(action, fingerprint())
                return Outcome(refusal=Refusal(exc.message, issued, self.ttl_s))
        grant = self._grant(token, fingerprint())
        with grant.lock:  # a second confirmed call waits for the first, then answers what it started
            if grant.started is None and grant.sent:
                grant.started = find(grant.request_id) if find is not None else None
                if grant.started is None:
                    looked = (
                        "the plane shows nothing it started"
                        if find is not None
                        else ("what it sent leaves nothing on the plane to look up")
                    )
                    raise OpdError(
                        f"nothing sent: this confirmation token was spent on this {action} request, whose answer "
                        f"was lost, and {looked}",
                        fix="list what runs (list_jobs, or `opd deployments`); to start it again, call without "
                        "confirmation_token and ask the user anew",
                        code=SPENT_TOKEN,
                        exit_code=1,
                    )
            if grant.started is not None:
                return Outcome(result=grant.started, repeated=True)
            self._grant(token, fingerprint())  # still valid now that we hold the lock
            grant.sent = True  # spent now: whatever comes back, this token never sends again
            grant.started = start(True, grant.request_id)
            return Outcome(result=grant.started)
