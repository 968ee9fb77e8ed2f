"""One rule for "this machine only": which hosts are loopback, which ``Host`` a loopback server answers,
and the one comparison of a Bearer key.

Every server opd-nb runs (`opd serve`, `opd mcp --http`, function servers, a deployment's and the agentic
engine's OpenAI endpoints) and every client-side rule (the cloud key's destination, the bind checks, the
notebook's target) imports these, so the bind rule, the Host check and the key rule cannot disagree. The
template's `submit_job.py`, which must run without opd-nb, keeps a copy that `tests/test_cloud_key.py`
checks against this one on the same corpus.

A keyless loopback server is safe only from other machines: a web page in the user's browser reaches it
through DNS rebinding (``attacker.example`` resolved to 127.0.0.1), so the browser sends the attacker's
name as ``Host``. :class:`HostGuard` answers such a request 421 and a foreign ``Origin`` 403.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from typing import Any
from urllib.parse import urlsplit

LOCALHOST = "localhost"
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})


def _bare(host: str) -> str:
    """A host as written in a URL, a Host header or a bind option: brackets, case and a final dot dropped."""
    name = host.strip().lower()
    if name.startswith("[") and "]" in name:
        name = name[1 : name.index("]")]
    return name.removesuffix(".").split("%", 1)[0]  # an IPv6 zone id names an interface, not a host


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and every loopback address: all of 127.0.0.0/8, ``::1`` and their IPv4-mapped
    form. No name is looked up: a name is loopback only if it is ``localhost`` (``0.0.0.0`` is every
    interface, not loopback)."""
    name = _bare(host)
    if name == LOCALHOST:
        return True
    try:
        addr = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped.is_loopback
    return addr.is_loopback


def is_loopback_url(url: str | None) -> bool:
    """True when an http(s) URL's host is loopback (:func:`is_loopback_host`); False for anything else."""
    if not url:
        return False
    try:
        parts = urlsplit(url.strip())
        return parts.scheme in ("http", "https") and is_loopback_host(parts.hostname or "")
    except ValueError:
        return False


def binds_loopback_only(host: str) -> bool:
    """Whether a server bound to ``host`` is reachable only from this machine: a loopback literal or
    ``localhost``, or a name every address of which is loopback (a bind resolves names, so this one may)."""
    if is_loopback_host(host):
        return True
    name = _bare(host)
    if name in _WILDCARDS:
        return False
    import socket

    try:
        addrs = {str(a[4][0]) for a in socket.getaddrinfo(name, None)}
    except (OSError, UnicodeError):
        return False
    return bool(addrs) and all(is_loopback_host(a) for a in addrs)


def bearer_token(header: str | bytes | None) -> str:
    """The token of ``Authorization: Bearer <token>``: the scheme in any case, one or more spaces, then
    the token as sent (HTTP trims the field's outer spaces and tabs; nothing else is trimmed). A token
    of only whitespace is no token."""
    text = header.decode("latin-1") if isinstance(header, bytes) else (header or "")
    scheme, _, token = text.strip(" \t").partition(" ")
    if scheme.lower() != "bearer":
        return ""
    token = token.lstrip(" ")
    return token if token.strip() else ""


def same_key(given: str, expected: str) -> bool:
    """The one key comparison (constant time, bytes as sent): a tab or a no-break space beside a key
    makes another key."""
    return bool(given) and hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


def allowed_host_names(bound: str) -> frozenset[str]:
    """The host names a server bound to loopback `bound` answers to: the bound address, and ``localhost``
    with the loopback addresses it names when the bind is 127.0.0.1, ::1 or ``localhost``."""
    name = _bare(bound)
    if name in (LOCALHOST, "127.0.0.1", "::1"):
        return frozenset({LOCALHOST, "127.0.0.1", "::1"})
    return frozenset({name})


def host_allowed(header: str, bound: str, port: int | None) -> bool:
    """Whether a request's ``Host`` names this server: one of :func:`allowed_host_names` and, when the
    port is known, that port (no port only on port 80)."""
    try:
        parts = urlsplit(f"//{header.strip()}")
        name, given_port = parts.hostname or "", parts.port
    except ValueError:
        return False
    if _bare(name) not in allowed_host_names(bound):
        return False
    if port is None:
        return True
    return (given_port or 80) == port


def origin_allowed(origin: str, bound: str, port: int | None) -> bool:
    """Whether a browser's ``Origin`` is this server's own page (``null`` and a foreign origin are not)."""
    try:
        parts = urlsplit(origin.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False
        netloc = parts.netloc if parts.port else f"{parts.netloc}:{80 if parts.scheme == 'http' else 443}"
    except ValueError:
        return False
    return host_allowed(netloc, bound, port)


class HostGuard:
    """Pure ASGI middleware for a server bound to loopback: a request whose ``Host`` is not the bound
    name and port is refused 421, one with a foreign ``Origin`` 403, before any route runs.

    `port` may be None until the socket is bound (uvicorn with port 0): then set :attr:`port`, or only
    the name is checked. A server bound beyond loopback has a strong key instead, and no guard."""

    def __init__(self, app: Any, host: str, port: int | None = None):
        self.app, self.host, self.port = app, host, port

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            problem = self.problem(scope)
            if problem is not None:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                else:
                    await _refuse(send, *problem)
                return
        await self.app(scope, receive, send)

    def problem(self, scope: dict[str, Any]) -> tuple[int, str] | None:
        """(status, message) for a request this server must refuse, else None."""
        headers = [(k.lower(), v.decode("latin-1")) for k, v in scope.get("headers", [])]
        hosts = [v for k, v in headers if k == b"host"]
        if len(hosts) != 1 or not host_allowed(hosts[0], self.host, self.port):  # two: which one is meant?
            return (
                421,
                "this server answers only requests addressed to its own loopback address (Host header)",
            )
        origins = [v for k, v in headers if k == b"origin"]
        if any(not origin_allowed(origin, self.host, self.port) for origin in origins):
            return 403, "cross-origin requests are refused: this server answers only its own origin"
        return None


async def _refuse(send: Any, status: int, text: str) -> None:
    code = "MisdirectedRequest" if status == 421 else "Forbidden"
    body = json.dumps({"code": code, "message": text}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def guard(app: Any, host: str, port: int | None = None) -> Any:
    """`app` behind a :class:`HostGuard` when bound to loopback; as it is otherwise (a key guards it)."""
    return HostGuard(app, host, port) if binds_loopback_only(host) else app
