"""What each chat robot's incoming webhook takes and answers: DingTalk, Feishu/Lark, WeCom, Slack, else JSON.

The robots answer HTTP 200 when they refuse a message: DingTalk and WeCom with ``{"errcode": N,
"errmsg": ...}``, Feishu/Lark with ``{"code": N, "msg": ...}`` (older bots: ``StatusCode``/
``StatusMessage``). Slack answers ``ok``, or a 4xx whose body is a code such as ``invalid_payload``.
:func:`read_reply` turns each answer into a :class:`Delivery`: delivered, or the service's own
refusal with what to change, and whether trying again can help (a rate limit, a 5xx, a timeout).

Signed robots (the "signature" security setting) get the documented signature: DingTalk, the
millisecond timestamp and base64(HMAC-SHA256 keyed by the secret over ``timestamp + "\\n" +
secret``) as ``timestamp``/``sign`` query parameters; Feishu/Lark, the timestamp in seconds and
base64(HMAC-SHA256 keyed by ``timestamp + "\\n" + secret`` over an empty message) as ``timestamp``/
``sign`` in the JSON body. Every message carries :data:`KEYWORD`, the word to register where a robot
filters on keywords.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

from opd_nb.views.terminal_text import printable

FORMATS: tuple[str, ...] = ("dingtalk", "feishu", "wecom", "slack", "json")
SIGNED_FORMATS: tuple[str, ...] = ("dingtalk", "feishu")
KEYWORD = "opd"  # every message begins "[opd]": register "opd" as the robot's custom keyword
NAMES = {
    "dingtalk": "DingTalk",
    "feishu": "Feishu/Lark",
    "wecom": "WeCom",
    "slack": "Slack",
    "json": "the webhook",
}
_HOSTS = {
    "oapi.dingtalk.com": "dingtalk",
    "open.feishu.cn": "feishu",
    "open.larksuite.com": "feishu",
    "qyapi.weixin.qq.com": "wecom",
    "hooks.slack.com": "slack",
}
MAX_PROBLEM_CHARS = 240

KEYWORD_FIX = (
    f'add the custom keyword "{KEYWORD}" in the robot\'s security settings: every message carries it'
)
SIGN_FIX = (
    "the robot has the signature setting: pass its secret with OPD_NOTIFY_SECRET or --notify-secret-file; "
    "a wrong secret, or a clock more than an hour off, fails the same way"
)
IP_FIX = "add this machine's public IP to the robot's IP allowlist, or use the keyword or signature setting"
URL_FIX = "the robot or its token is gone: copy its webhook URL again"
RATE_FIX = "the service limits the rate, about 20 messages a minute per robot: fewer watchers per robot"
BODY_FIX = "a message opd-nb sent was refused as malformed: report it"
# The documented codes (DingTalk and WeCom errcode, Feishu/Lark code): what to change, and which are limits.
_CODE_FIXES: dict[str, dict[int, str]] = {
    "dingtalk": {
        300001: URL_FIX,
        400101: URL_FIX,
        400102: "the robot is disabled: enable it in the group",
        400106: URL_FIX,
        130101: RATE_FIX,
        410100: RATE_FIX,
    },  # fmt: skip
    "feishu": {
        19021: SIGN_FIX,
        19022: IP_FIX,
        19024: KEYWORD_FIX,
        19001: URL_FIX,
        9499: BODY_FIX,
        11232: RATE_FIX,
    },  # fmt: skip
    "wecom": {93000: URL_FIX, 45009: RATE_FIX, 40008: BODY_FIX, 44004: BODY_FIX},
}
_RATE_CODES = {"dingtalk": {130101, 410100, -1}, "feishu": {11232}, "wecom": {45009, -1}}
_SLACK_FIXES = {
    "invalid_payload": BODY_FIX,
    "no_text": BODY_FIX,
    "missing_text_or_fallback_or_attachments": BODY_FIX,
    "no_service": "the incoming webhook was removed: create a new one and pass its URL",
    "invalid_token": "the incoming webhook was removed: create a new one and pass its URL",
    "channel_not_found": "its channel is gone: create a webhook for another channel",
    "channel_is_archived": "its channel is archived: unarchive it, or create a webhook for another channel",
    "action_prohibited": "a workspace admin restricts this webhook: ask them, or use another channel",
    "posting_to_general_channel_denied": "only admins may post to #general: use another channel",
}


@dataclass(frozen=True)
class Delivery:
    """What one post came to: delivered, or the service's refusal in its own words."""

    ok: bool
    problem: str = ""
    fix: str | None = None
    retryable: bool = False  # a rate limit, a 5xx, a timeout: worth another try
    retry_after: float | None = None  # seconds the service asked to wait (Retry-After)


def detect_format(url: str) -> str:
    """The service a webhook URL belongs to, from its host; plain JSON for any other."""
    return _HOSTS.get((urlsplit(url).hostname or "").lower(), "json")


def payload(fmt: str, text: str, event: dict[str, Any]) -> dict[str, Any]:
    """The body each service's incoming webhook accepts, for one message."""
    if fmt in ("dingtalk", "wecom"):
        return {"msgtype": "text", "text": {"content": text}}
    if fmt == "feishu":
        return {"msg_type": "text", "content": {"text": text}}
    if fmt == "slack":
        return {"text": text}
    return {**event, "text": text}


def _b64_hmac(key: str, message: str) -> str:
    return base64.b64encode(hmac.new(key.encode(), message.encode(), hashlib.sha256).digest()).decode()


def sign(fmt: str, secret: str, body: dict[str, Any], now: float | None = None) -> tuple[dict, dict]:
    """(query parameters, body) of a signed post: DingTalk signs in the query, Feishu/Lark in the body."""
    now = time.time() if now is None else now
    if fmt == "dingtalk":
        stamp = str(int(now * 1000))
        return {"timestamp": stamp, "sign": _b64_hmac(secret, f"{stamp}\n{secret}")}, body
    stamp = str(int(now))
    return {}, {"timestamp": stamp, "sign": _b64_hmac(f"{stamp}\n{secret}", ""), **body}


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (a number of seconds, or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value.strip()))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value.strip()).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


Redact = Callable[[str], str]  # a text with the webhook's credentials blanked (the notifier's)


def _kept(text: str) -> str:
    return text


def shown_reply(text: str, redact: Redact) -> str:
    """A service's words as one safe line, the one helper for every text shown from a remote reply:
    credentials blanked first (`redact`), then control characters escaped, whitespace folded, and
    only then cut short, so a cut can never leave part of a token that redaction would have matched."""
    line = " ".join(printable(redact(text)).split())
    return line if len(line) <= MAX_PROBLEM_CHARS else line[: MAX_PROBLEM_CHARS - 1] + "…"


def _coded(fmt: str, body: Any, redact: Redact) -> Delivery | None:
    """DingTalk/WeCom ``errcode`` or Feishu/Lark ``code``/``StatusCode``: None when the body has none."""
    if not isinstance(body, dict):
        return None
    keys = ("errcode", "errmsg") if fmt != "feishu" else ("code", "msg")
    code, message = body.get(keys[0]), body.get(keys[1])
    if fmt == "feishu" and code is None:
        code, message = body.get("StatusCode"), body.get("StatusMessage")
    if not isinstance(code, int) or isinstance(code, bool):
        return None
    if code == 0:
        return Delivery(ok=True)
    fix = _CODE_FIXES.get(fmt, {}).get(code)
    if fmt == "dingtalk" and code == 310000:  # one code for the three security settings: its text says which
        lowered = str(message).lower()
        fix = KEYWORD_FIX if "keyword" in lowered else SIGN_FIX if "sign" in lowered else IP_FIX
    retry = code in _RATE_CODES.get(fmt, set())
    return Delivery(
        False,
        shown_reply(f"{NAMES[fmt]} refused it: {keys[0]} {code}: {message}", redact),
        fix,
        retryable=retry,
    )


def read_reply(fmt: str, status: int, headers: Any, text: str, redact: Redact = _kept) -> Delivery:
    """How the service answered one post (status, headers, body text); any of the reply shown passes
    through :func:`shown_reply` with `redact`."""
    wait = retry_after(headers.get("Retry-After"))
    limited = status == 429 or status >= 500
    coded = _coded(fmt, _json(text), redact) if fmt in _CODE_FIXES else None
    if coded is not None and (coded.ok and status < 300 or not coded.ok):
        return coded if coded.ok else replace(coded, retryable=coded.retryable or limited, retry_after=wait)
    if limited:
        shown = f"HTTP {status}: {text}" if text.strip() else f"HTTP {status}"
        return Delivery(False, shown_reply(shown, redact), RATE_FIX if status == 429 else None, True, wait)
    if 300 <= status < 400:
        return Delivery(
            False, f"HTTP {status}, a redirect", "pass the URL it redirects to (it is not followed)"
        )
    if status >= 400:
        code = text.strip()
        fix = _SLACK_FIXES.get(code) if fmt == "slack" else None
        return Delivery(
            False, shown_reply(f"HTTP {status}: {code}" if code else f"HTTP {status}", redact), fix
        )
    if fmt in _CODE_FIXES:  # a 2xx without the robot's JSON: a proxy's or a login page, not the robot
        shown = f": {text}" if text.strip() else " with an empty body"
        fix = "check that the URL is the robot's webhook itself"
        return Delivery(
            False, shown_reply(f"HTTP {status} but not {NAMES[fmt]}'s JSON reply{shown}", redact), fix
        )
    return Delivery(ok=True)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
