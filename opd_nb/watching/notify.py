"""Tell someone when a job needs them: each alert, lost and regained contact, and the final status, posted to a webhook.

The payload is the one each service expects (:mod:`opd_nb.watching.webhook_services`: DingTalk, Feishu/Lark,
WeCom, Slack), else plain JSON; the service is read from the URL's host or set with
`--notify-format`. A post counts as delivered only when the service says so: a robot that answers
HTTP 200 with an error code in the body refused the message, and the watcher shows that refusal in
the service's own words. A rate limit, a 5xx or a timeout is tried again (:data:`ATTEMPTS` tries,
exponential backoff with jitter, a ``Retry-After`` honoured up to :data:`MAX_WAIT_S`). Each post has
one deadline for the whole exchange (``timeout_s``: connecting, sending, and every byte of the reply,
however slowly it trickles) and reads at most :data:`MAX_REPLY_BYTES` of the reply: a robot's answer
is a small JSON object, and a webhook that never stops answering holds no watcher.

The URL carries its own credential and a signing secret is one, so both are handled like the API
key: kept in a ``SecretStr``, never printed or logged; the URL is shown only as its host, and a
service's reply is shown with any part of either blanked out.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from pydantic import SecretStr

from opd_nb import settings
from opd_nb.errors import OpdError
from opd_nb.watching.webhook_services import (
    FORMATS,
    KEYWORD,
    SIGNED_FORMATS,
    Delivery,
    detect_format,
    payload,
    read_reply,
    shown_reply,
    sign,
)
from opd_nb.watching.webhook_url import check_url, masked
from opd_nb.wire import http_client

log = logging.getLogger("opd_nb.watching.notify")

URL_VAR = settings.NOTIFY_URL.name  # how a detached watcher receives the URL (never on a command line)
SECRET_VAR = settings.NOTIFY_SECRET.name  # and the robot's signing secret
ATTEMPTS = 4  # one post and up to three retries
MAX_WAIT_S = 60.0  # a Retry-After longer than this is not waited for: the message is reported failed
UNSIGNED = {"wecom": "WeCom robots", "slack": "Slack incoming webhooks", "json": "plain JSON webhooks"}
MAX_REPLY_BYTES = 64 * 1024  # of a reply, read at most (a robot answers ~100 bytes)
_TOKEN_CHARS = 12  # a path segment this long is a token (robot tokens are 20-64 characters; "webhook" is not)


def _decoded(raw: bytes, encoding: str) -> str:
    """A reply's first bytes as text; a compressed one (asked for plain) inflated to at most
    :data:`MAX_REPLY_BYTES`, so a small bomb stays small."""
    if encoding.strip().lower() in ("gzip", "deflate", "x-gzip"):
        try:
            raw = zlib.decompressobj(47).decompress(raw, MAX_REPLY_BYTES)  # 47: gzip or zlib header
        except zlib.error:
            return "(a compressed reply that could not be read)"
    return raw.decode("utf-8", "replace")


__all__ = ["FORMATS", "SECRET_VAR", "URL_VAR", "Notifier", "detect_format", "masked", "payload"]


def _retrying(sleep: Callable[[float], None]) -> Any:
    """tenacity's loop for one message: retry what `Delivery.retryable` says, waiting what the service
    asked (``Retry-After``) or else 1-2 s, 2-3 s, 4-5 s (exponential backoff with jitter)."""
    from tenacity import Retrying, retry_if_result, stop_after_attempt, wait_exponential, wait_random

    backoff = wait_exponential(multiplier=1, max=30) + wait_random(0, 1)

    def asked(state: Any) -> float | None:
        return state.outcome.result().retry_after if state.outcome else None

    def give_up(state: Any) -> bool:  # after the last try, or when asked to wait longer than a watcher can
        wait = asked(state)
        return stop_after_attempt(ATTEMPTS)(state) or (wait is not None and wait > MAX_WAIT_S)

    return Retrying(
        sleep=sleep,
        stop=give_up,
        wait=lambda state: w if (w := asked(state)) is not None else backoff(state),
        retry=retry_if_result(lambda delivery: delivery.retryable),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
    )


@dataclass
class Notifier:
    """Posts a watcher's messages to one webhook; `send` returns a line to show when a post failed."""

    url: SecretStr
    fmt: str
    secret: SecretStr | None = None
    timeout_s: float = 10.0  # one post's whole exchange, not each read
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)  # between tries

    @classmethod
    def create(cls, url: str, fmt: str | None = None, secret: str | None = None) -> Notifier:
        """Check everything before a watcher starts: the URL (whole), the format, the secret's use."""
        url = check_url(url)
        if fmt is not None and fmt not in FORMATS:
            raise OpdError(
                f"unknown format {fmt!r}", where="--notify-format", fix=f"use one of {', '.join(FORMATS)}"
            )
        fmt = fmt or detect_format(url)
        secret = (secret or "").strip() or None
        if secret is not None and fmt not in SIGNED_FORMATS:
            raise OpdError(
                f"a signing secret was given, but {UNSIGNED[fmt]} have no signature setting",
                where="OPD_NOTIFY_SECRET (or --notify-secret-file, --notify-secret)",
                fix="unset OPD_NOTIFY_SECRET or drop the option: only DingTalk and Feishu/Lark robots sign messages",
            )
        return cls(SecretStr(url), fmt, SecretStr(secret) if secret else None)

    def __repr__(self) -> str:
        signed = ", signed" if self.secret is not None else ""
        return f"Notifier({masked(self.url.get_secret_value())}, {self.fmt}{signed})"

    # ---- posting ----------------------------------------------------------------------------------
    def send(self, event: dict[str, Any], text: str) -> str | None:
        """Post one message (tried again on limits and outages); None when the service took it, else
        a line to show: the service's own words, with no part of the URL or the secret."""
        body = payload(self.fmt, text, event)
        tries = _retrying(self.sleep)
        delivery: Delivery = tries(self._post, body)
        if delivery.ok:
            return None
        n = tries.statistics.get("attempt_number", 1)
        line = f"notify: the post to {masked(self._url())} failed" + (f" after {n} tries" if n > 1 else "")
        line += f": {shown_reply(delivery.problem, self._blanked)}" + (
            f" (fix: {delivery.fix})" if delivery.fix else ""
        )
        log.warning(line)
        return line

    def _url(self) -> str:
        return self.url.get_secret_value()

    def _post(self, body: dict[str, Any]) -> Delivery:
        """One post, over within ``timeout_s`` whatever the other end does: the exchange runs in a
        thread of its own, which also stops reading at the deadline (it is not waited for past it)."""
        params: dict[str, str] = {}
        if self.secret is not None:
            params, body = sign(self.fmt, self.secret.get_secret_value(), body)
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        deadline = time.monotonic() + self.timeout_s
        outcome: list[Delivery] = []
        exchange = threading.Thread(
            target=lambda: outcome.append(self._exchange(params, data, deadline)),
            name="opd-notify-post",
            daemon=True,
        )
        exchange.start()
        exchange.join(self.timeout_s)
        return outcome[0] if outcome else self._late()

    def _late(self) -> Delivery:
        return Delivery(False, f"no whole answer within {self.timeout_s:g}s", retryable=True)

    def _exchange(self, params: dict[str, str], data: bytes, deadline: float) -> Delivery:
        import httpx

        try:
            with http_client.stream(
                "POST",
                httpx.URL(self._url()).copy_merge_params(params),
                content=data,
                headers={"Content-Type": "application/json; charset=utf-8", "Accept-Encoding": "identity"},
                timeout=self.timeout_s,
            ) as reply:
                raw = bytearray()
                for chunk in reply.iter_raw():
                    raw += chunk
                    if len(raw) >= MAX_REPLY_BYTES:
                        break  # enough to read a robot's answer; the rest is never read
                    if time.monotonic() > deadline:
                        return self._late()
                text = _decoded(bytes(raw[:MAX_REPLY_BYTES]), reply.headers.get("Content-Encoding", ""))
                return read_reply(self.fmt, reply.status_code, reply.headers, text, self._blanked)
        except httpx.TransportError as exc:  # refused, reset, timed out: worth another try
            return Delivery(False, f"no answer ({type(exc).__name__})", retryable=True)
        except (httpx.HTTPError, httpx.InvalidURL, UnicodeError, ValueError) as exc:
            return Delivery(False, f"cannot post ({type(exc).__name__})")

    def _blanked(self, text: str) -> str:
        """`text` with the secret and the URL's credentials (query values, token-long path segments, a
        password) blanked out."""
        parts = urlsplit(self._url())
        pieces = [seg for seg in parts.path.split("/") if len(seg) >= _TOKEN_CHARS]
        pieces += [value for _, value in parse_qsl(parts.query)] + [parts.password or ""]
        pieces += [self.secret.get_secret_value()] if self.secret is not None else []
        for piece in sorted(pieces, key=len, reverse=True):
            if len(piece) >= 4:
                text = text.replace(piece, "***")
        return text

    # ---- the messages -----------------------------------------------------------------------------
    def _say(self, job_id: str, kind: str, text: str, **event: Any) -> str | None:
        return self.send({"event": kind, "job_id": job_id, **event}, f"[{KEYWORD}] {job_id} {text}")

    def alert(self, job_id: str, alert: Any) -> str | None:
        return self._say(job_id, "alert", f"{alert.severity}: {alert}", rule=alert.rule,
                         severity=alert.severity, message=alert.message)  # fmt: skip

    def final(self, job: Any, extra: str = "") -> str | None:
        text = f"ended {job.status}" + (f": {job.message}" if job.message else "")
        text += f" ({extra})" if extra else ""
        return self._say(job.job_id, "final", text, status=job.status, message=job.message)

    def contact_lost(self, job_id: str, where: str, problem: str, patience: str) -> str | None:
        text = f"lost contact with {where} ({problem}); the watcher keeps trying for up to {patience}"
        return self._say(job_id, "contact_lost", text, problem=problem)

    def contact_back(self, job_id: str, where: str, down: str, status: str) -> str | None:
        text = f"contact with {where} is back after {down}; the job is {status}"
        return self._say(job_id, "contact_back", text, status=status)

    def gave_up(self, job_id: str, where: str, patience: str, status: str | None) -> str | None:
        text = f"the watcher gave up: no contact with {where} for {patience}; last seen {status or 'unknown'}"
        return self._say(job_id, "gave_up", text, status=status)
