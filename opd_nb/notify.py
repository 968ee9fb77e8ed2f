"""Tell someone when a job needs them: each alert and the final status, posted to a webhook.

The payload is the one each service expects (DingTalk, Feishu/Lark, WeCom, Slack), else plain JSON.
The service is read from the URL's host or set with `--notify-format`. A webhook URL carries its own
credential, so it is handled like the API key: kept in a ``SecretStr``, shown only as its host, never
logged, and a failed post reports the host and the error kind, not the URL.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import SecretStr

from opd_nb.errors import OpdError

log = logging.getLogger("opd_nb.notify")

Format = Literal["dingtalk", "feishu", "wecom", "slack", "json"]
FORMATS: tuple[str, ...] = ("dingtalk", "feishu", "wecom", "slack", "json")
URL_VAR = "OPD_NOTIFY_URL"  # how a detached watcher receives the URL (never on a command line)
_HOSTS = {
    "oapi.dingtalk.com": "dingtalk",
    "open.feishu.cn": "feishu",
    "open.larksuite.com": "feishu",
    "qyapi.weixin.qq.com": "wecom",
    "hooks.slack.com": "slack",
}


def masked(url: str) -> str:
    """A webhook URL as it may be shown: scheme and host, the rest hidden."""
    parsed = urlparse(url)
    return f"{parsed.scheme}://{parsed.hostname or '?'}/***"


def detect_format(url: str) -> str:
    """The service a webhook URL belongs to, from its host; plain JSON for any other."""
    return _HOSTS.get((urlparse(url).hostname or "").lower(), "json")


def payload(fmt: str, text: str, event: dict[str, Any]) -> dict[str, Any]:
    """The body each service's incoming webhook accepts, for one message."""
    if fmt in ("dingtalk", "wecom"):
        return {"msgtype": "text", "text": {"content": text}}
    if fmt == "feishu":
        return {"msg_type": "text", "content": {"text": text}}
    if fmt == "slack":
        return {"text": text}
    return {**event, "text": text}


@dataclass
class Notifier:
    """Posts alerts and the final status of the jobs a watcher follows (each alert once)."""

    url: SecretStr
    fmt: str
    timeout_s: float = 10.0

    @classmethod
    def create(cls, url: str, fmt: str | None = None) -> Notifier:
        parsed = urlparse(url.strip())
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise OpdError(
                "the webhook is not an http(s) URL", where="--notify", fix="pass the webhook's full URL"
            )
        if fmt is not None and fmt not in FORMATS:
            raise OpdError(
                f"unknown format {fmt!r}", where="--notify-format", fix=f"use one of {', '.join(FORMATS)}"
            )
        return cls(SecretStr(url.strip()), fmt or detect_format(url))

    def __repr__(self) -> str:
        return f"Notifier({masked(self.url.get_secret_value())}, {self.fmt})"

    def send(self, event: dict[str, Any], text: str) -> str | None:
        """Post one message; returns a line to show when the post failed (no URL in it), else None."""
        import httpx

        url = self.url.get_secret_value()
        body = json.dumps(payload(self.fmt, text, event), ensure_ascii=False).encode("utf-8")
        try:
            reply = httpx.post(
                url, content=body, headers={"Content-Type": "application/json"}, timeout=self.timeout_s
            )
        except httpx.HTTPError as exc:
            problem = type(exc).__name__
        else:
            if reply.status_code < 400:
                return None
            problem = f"HTTP {reply.status_code}"
        line = f"notify: the post to {masked(url)} failed ({problem})"
        log.info(line)
        return line

    def alert(self, job_id: str, alert: Any) -> str | None:
        event = {"event": "alert", "job_id": job_id, "rule": alert.rule, "severity": alert.severity}
        return self.send({**event, "message": alert.message}, f"[opd] {job_id} {alert.severity}: {alert}")

    def final(self, job: Any, extra: str = "") -> str | None:
        event = {"event": "final", "job_id": job.job_id, "status": job.status, "message": job.message}
        text = f"[opd] {job.job_id} ended {job.status}" + (f": {job.message}" if job.message else "")
        return self.send(event, text + (f" ({extra})" if extra else ""))
