"""A webhook URL checked whole before a watcher starts, and the only form of it that may be shown.

The URL carries its own credential, so nothing here ever repeats it: an error names the part that is
wrong (its length, a character's position, the port, the host) and how to fix it. The checks are the
ones a post would otherwise trip over much later, at the final notification, as a traceback: a line
break or a space pasted inside it, a length no server takes, an unclosed IPv6 bracket, a port that is
not a number, a host name that is not one (labels, IDNA), anything else httpx would refuse to send.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from urllib.parse import SplitResult, urlsplit

import idna  # httpx's own IDNA encoder (a dependency of httpx)

from opd_nb.errors import OpdError

WHERE = "OPD_NOTIFY_URL (or --notify-file, --notify)"
MAX_URL_CHARS = 2048  # what browsers and most servers take; real robot URLs are under 200
_ASCII_LABEL = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")
_CHAR_NAMES = {"\n": "a line break", "\r": "a carriage return", "\t": "a tab", " ": "a space"}


def masked(url: str) -> str:
    """A webhook URL as it may be shown: scheme and host, the rest hidden."""
    try:
        parsed = urlsplit(url)
        host = parsed.hostname
    except ValueError:
        return "(an unreadable URL)"
    return f"{parsed.scheme}://{host or '?'}/***"


def _bad(
    message: str, fix: str = "copy the webhook's full URL again from the service's settings"
) -> OpdError:
    return OpdError(f"the webhook URL {message}", where=WHERE, fix=fix)


def _char_problem(url: str) -> OpdError | None:
    for i, ch in enumerate(url, 1):
        if unicodedata.category(ch)[0] in "CZ":  # controls, format characters, every kind of space
            name = _CHAR_NAMES.get(ch, f"the character U+{ord(ch):04X}")
            return _bad(f"has {name} at character {i}", "remove it: a URL holds no spaces or line breaks")
    return None


def _host_problem(host: str) -> OpdError | None:
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    if len(name) > 253:
        return _bad(f"has a host name of {len(name)} characters; at most 253 are allowed")
    for label in name.split("."):
        if label.isascii() and not label.lower().startswith("xn--"):
            if not _ASCII_LABEL.match(label):
                return _bad(
                    "has a host name that is not one: each part between dots is 1 to 63 letters, digits, "
                    "'-' or '_', and does not begin or end with '-'"
                )
            continue
        try:  # an internationalized label, or its xn-- form: what httpx will encode to send it
            idna.encode(label, uts46=True)
        except UnicodeError:  # idna's errors are UnicodeErrors
            return _bad("has a host name that IDNA cannot encode (an internationalized name gone wrong)")
    return None


def _split(url: str) -> SplitResult:
    try:
        parts = urlsplit(url)
    except ValueError:  # "Invalid IPv6 URL": a '[' without its ']'
        raise _bad("has an IPv6 host without its closing ']'", "write it as http://[::1]:PORT/...") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise OpdError("the webhook is not an http(s) URL", where=WHERE, fix="pass the webhook's full URL")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0 or (port is None and parts.netloc.rsplit("@", 1)[-1].endswith(":")):
        raise _bad("has a port that is not a number from 1 to 65535")
    if not parts.hostname:
        raise _bad("has no host")
    return parts


def check_url(url: str) -> str:
    """The URL, stripped of surrounding whitespace, if a post could be sent to it; else an OpdError
    that says what is wrong without repeating any of it."""
    import httpx

    url = url.strip()
    if not url:
        raise _bad("is empty")
    if len(url) > MAX_URL_CHARS:
        raise _bad(f"is {len(url):,} characters long; at most {MAX_URL_CHARS:,} are accepted")
    problem = _char_problem(url) or _host_problem(_split(url).hostname or "")
    if problem is not None:
        raise problem
    try:
        httpx.Request("POST", url)
    except Exception as exc:  # httpx.InvalidURL, or a UnicodeError: whatever the checks above missed
        raise _bad(f"cannot be sent to ({type(exc).__name__})") from None
    return url
