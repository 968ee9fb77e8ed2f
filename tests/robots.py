"""Loopback chat robots that answer as the real services document, for the webhook tests.

Each :class:`Robot` checks what the real one checks (its security settings: a custom keyword, the
signature with its timestamp window) and answers with the documented bodies: DingTalk and WeCom
``{"errcode": 0, "errmsg": "ok"}`` or a refusal with HTTP 200, Feishu/Lark ``{"code": 0, ...}`` (with
the older ``StatusCode`` keys beside it) or a refusal with HTTP 200, Slack ``ok`` or a 4xx whose body is
the error code. ``script`` queues replies given before the robot's own (rate limits, outages, a proxy's
page), and ``slow_s`` delays the first answers (timeouts). The signatures are recomputed here from the
services' documentation, independently of the code under test.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qs, urlsplit

from loopback import QuietHandler, serve

DINGTALK_MORE = "more: [https://ding-doc.dingtalk.com/doc#/serverapi2/qf2nxq]"
DINGTALK_KEYWORD = {"errcode": 310000, "errmsg": f"keywords not in content, {DINGTALK_MORE}"}
DINGTALK_SIGN = {"errcode": 310000, "errmsg": f"sign not match, {DINGTALK_MORE}"}
DINGTALK_IP = {"errcode": 310000, "errmsg": f"ip 10.0.0.7 not in whitelist, {DINGTALK_MORE}"}
DINGTALK_TOKEN = {"errcode": 300001, "errmsg": "token is not exist"}
DINGTALK_RATE = {"errcode": 130101, "errmsg": "send too fast, exceed 20 times per minute"}
FEISHU_OK = {"StatusCode": 0, "StatusMessage": "success", "code": 0, "data": {}, "msg": "success"}
FEISHU_SIGN = {
    "code": 19021,
    "data": {},
    "msg": "sign match fail or timestamp is not within one hour from current time",
}
FEISHU_IP = {"code": 19022, "data": {}, "msg": "Ip Not Allowed"}
FEISHU_KEYWORD = {"code": 19024, "data": {}, "msg": "Key Words Not Found"}
FEISHU_BAD = {"code": 9499, "data": {}, "msg": "Bad Request"}
FEISHU_RATE = {
    "code": 11232,
    "data": {},
    "msg": "frequency limited psm[lark.oapi.app_platform_runtime]appID[1]",
}
WECOM_HINT = "hint: [1755605200056773468916791], from ip: 10.0.0.7, more info at https://open.work.weixin.qq.com/devtool/query?e="
WECOM_URL = {"errcode": 93000, "errmsg": f"invalid webhook url, {WECOM_HINT}93000"}
WECOM_TYPE = {"errcode": 40008, "errmsg": f"invalid message type, {WECOM_HINT}40008"}
WECOM_RATE = {"errcode": 45009, "errmsg": f"api freq out of limit, {WECOM_HINT}45009"}
SIGN_WINDOW_S = 3600  # both services refuse a timestamp more than an hour from their clock

Reply = tuple[int, dict[str, str], str]  # status, headers, body


def _b64_hmac(key: str, message: str) -> str:
    return base64.b64encode(hmac.new(key.encode(), message.encode(), hashlib.sha256).digest()).decode()


class Robot:
    """One loopback robot of `service` (dingtalk|feishu|wecom|slack|json); records every post."""

    def __init__(self, service: str, *, secret: str | None = None, keyword: str | None = None,
                 script: list[Reply] | None = None, slow_s: float = 0.0, slow_count: int = 0):  # fmt: skip
        self.service, self.secret, self.keyword = service, secret, keyword
        self.script = list(script or [])
        self.slow_s, self.slow_count = slow_s, slow_count
        self.posts: list[dict] = []  # {"path", "query", "body", "at"} in arrival order
        robot = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                parts = urlsplit(self.path)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                robot.posts.append({"path": parts.path, "query": parse_qs(parts.query), "body": body,
                                    "at": time.monotonic()})  # fmt: skip
                if robot.slow_count > 0:
                    robot.slow_count -= 1
                    time.sleep(robot.slow_s)
                status, headers, text = robot.answer(parse_qs(parts.query), body)
                self.answer(status, headers, text.encode())

        self.server = serve(Handler)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    # ---- the services' answers ------------------------------------------------------------------
    def answer(self, query: dict, body: object) -> Reply:
        if self.script:
            return self.script.pop(0)
        return getattr(self, f"_{self.service}")(query, body)

    def _text_of(self, body: object) -> str:
        if not isinstance(body, dict):
            return ""
        inner = body.get("text") if self.service != "feishu" else body.get("content")
        if isinstance(inner, dict):
            return str(inner.get("content" if self.service != "feishu" else "text", ""))
        return str(inner or "")

    def _dingtalk(self, query: dict, body: object) -> Reply:
        if self.secret is not None:
            stamp, sign = (query.get("timestamp") or [""])[0], (query.get("sign") or [""])[0]
            fresh = stamp.isdigit() and abs(time.time() * 1000 - int(stamp)) <= SIGN_WINDOW_S * 1000
            if not fresh or sign != _b64_hmac(self.secret, f"{stamp}\n{self.secret}"):
                return json_reply(DINGTALK_SIGN)
        if self.keyword is not None and self.keyword not in self._text_of(body):
            return json_reply(DINGTALK_KEYWORD)
        return json_reply({"errcode": 0, "errmsg": "ok"})

    def _feishu(self, query: dict, body: object) -> Reply:
        if not isinstance(body, dict) or body.get("msg_type") != "text":
            return json_reply(FEISHU_BAD)
        if self.secret is not None:
            stamp, sign = str(body.get("timestamp", "")), str(body.get("sign", ""))
            fresh = stamp.isdigit() and abs(time.time() - int(stamp)) <= SIGN_WINDOW_S
            if not fresh or sign != _b64_hmac(f"{stamp}\n{self.secret}", ""):
                return json_reply(FEISHU_SIGN)
        if self.keyword is not None and self.keyword not in self._text_of(body):
            return json_reply(FEISHU_KEYWORD)
        return json_reply(FEISHU_OK)

    def _wecom(self, query: dict, body: object) -> Reply:
        if not isinstance(body, dict) or body.get("msgtype") != "text":
            return json_reply(WECOM_TYPE)
        return json_reply({"errcode": 0, "errmsg": "ok"})

    def _slack(self, query: dict, body: object) -> Reply:
        if not isinstance(body, dict):
            return 400, {}, "invalid_payload"
        if not body.get("text"):
            return 400, {}, "no_text"
        return 200, {"Content-Type": "text/html"}, "ok"

    def _json(self, query: dict, body: object) -> Reply:
        return 200, {}, ""


def json_reply(data: dict, status: int = 200, **headers: str) -> Reply:
    return status, {"Content-Type": "application/json", **headers}, json.dumps(data)


@contextmanager
def robot(service: str, **kwargs: object) -> Iterator[Robot]:
    box = Robot(service, **kwargs)  # type: ignore[arg-type]
    try:
        yield box
    finally:
        box.server.shutdown()
