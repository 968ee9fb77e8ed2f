"""Webhooks that real robots accept: each service's reply read, signed robots signed, failures retried.

The robots are loopback servers (:mod:`robots`) that answer with the bodies each service documents:
DingTalk, Feishu/Lark and WeCom refuse with HTTP 200 and an error code in the body, Slack with a 4xx
whose body is the code. A refusal is a failed delivery, shown in the service's words with what to
change; a rate limit, a 5xx or a timeout is tried again (backoff with jitter, ``Retry-After`` honoured).
The URL is checked whole before a watcher starts, and neither it nor a secret is ever shown.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from pydantic import SecretStr
from robots import (
    DINGTALK_IP,
    DINGTALK_RATE,
    DINGTALK_TOKEN,
    FEISHU_IP,
    FEISHU_RATE,
    WECOM_RATE,
    WECOM_URL,
    json_reply,
    robot,
)

from opd_nb.errors import OpdError
from opd_nb.watching.notify import Notifier

TOKEN = "T0000-SECRET-b1c2d3e4"  # the credential part of every webhook URL here
SIGNING = "SEC0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd"
EVENT = {"event": "final", "job_id": "ft-202612020000-abcd"}
TEXT = "[opd] ft-202612020000-abcd ended SUCCEEDED"
PATHS = {"dingtalk": "/robot/send", "feishu": f"/open-apis/bot/v2/hook/{TOKEN}",
         "wecom": "/cgi-bin/webhook/send", "slack": f"/services/T0/B0/{TOKEN}", "json": f"/hook/{TOKEN}"}  # fmt: skip
QUERIES = {"dingtalk": f"?access_token={TOKEN}", "wecom": f"?key={TOKEN}"}


def _notifier(box, fmt: str, secret: str | None = None) -> tuple[Notifier, list[float]]:
    """A notifier of `box`'s URL whose waits between tries are recorded instead of slept."""
    notifier = Notifier.create(box.url(PATHS[fmt] + QUERIES.get(fmt, "")), fmt, secret)
    waits: list[float] = []
    notifier.sleep = waits.append
    return notifier, waits


def _hidden(line: str | None) -> None:
    assert line is not None and TOKEN not in line and SIGNING not in line, line


@pytest.mark.parametrize("fmt", ["dingtalk", "feishu", "wecom", "slack", "json"])
def test_each_robot_takes_the_message_it_documents(fmt):
    with robot(fmt, keyword="opd") as box:
        notifier, waits = _notifier(box, fmt)
        assert notifier.send(EVENT, TEXT) is None
        (post,) = box.posts
        assert TEXT in str(post["body"]) and waits == []


@pytest.mark.parametrize(
    ("fmt", "reply"),
    [
        ("feishu", {"Extra": None, "StatusCode": 0, "StatusMessage": "success"}),  # bots before the v2 reply
        ("feishu", {"code": 0, "data": {}, "msg": "success"}),
        ("dingtalk", {"errcode": 0, "errmsg": "ok"}),
    ],
)
def test_every_documented_success_shape_is_a_delivery(fmt, reply):
    with robot(fmt, script=[json_reply(reply)]) as box:
        notifier, _ = _notifier(box, fmt)
        assert notifier.send(EVENT, TEXT) is None and len(box.posts) == 1


@pytest.mark.parametrize(
    ("fmt", "robot_kwargs", "said", "fix"),
    [
        ("dingtalk", {"keyword": "alarm"}, "errcode 310000: keywords not in content", 'custom keyword "opd"'),
        ("dingtalk", {"secret": SIGNING}, "errcode 310000: sign not match", "--notify-secret"),
        ("dingtalk", {"script": [json_reply(DINGTALK_IP)]}, "not in whitelist", "IP allowlist"),
        (
            "dingtalk",
            {"script": [json_reply(DINGTALK_TOKEN)]},
            "errcode 300001: token is not exist",
            "copy its",
        ),
        ("feishu", {"keyword": "alarm"}, "code 19024: Key Words Not Found", 'custom keyword "opd"'),
        ("feishu", {"secret": SIGNING}, "code 19021: sign match fail", "OPD_NOTIFY_SECRET"),
        ("feishu", {"script": [json_reply(FEISHU_IP)]}, "code 19022: Ip Not Allowed", "IP allowlist"),
        ("wecom", {"script": [json_reply(WECOM_URL)]}, "errcode 93000: invalid webhook url", "copy its"),
        ("slack", {"script": [(400, {}, "invalid_payload")]}, "HTTP 400: invalid_payload", "malformed"),
        (
            "slack",
            {"script": [(404, {}, "channel_not_found")]},
            "HTTP 404: channel_not_found",
            "another channel",
        ),
        (
            "slack",
            {"script": [(410, {}, "channel_is_archived")]},
            "HTTP 410: channel_is_archived",
            "unarchive",
        ),
        ("slack", {"script": [(403, {}, "action_prohibited")]}, "HTTP 403: action_prohibited", "admin"),
        ("json", {"script": [(404, {}, "no such hook")]}, "HTTP 404: no such hook", None),
        (
            "json",
            {"script": [(301, {"Location": "https://x.example/"}, "")]},
            "HTTP 301, a redirect",
            "redirects",
        ),
    ],
)
def test_a_refused_message_is_a_failed_delivery_in_the_services_words(fmt, robot_kwargs, said, fix):
    with robot(fmt, **robot_kwargs) as box:
        notifier, waits = _notifier(box, fmt)
        line = notifier.send(EVENT, TEXT)
        _hidden(line)
        assert line.startswith("notify: the post to http://127.0.0.1/*** failed: ") and said in line, line
        assert (fix in line) if fix else "(fix:" not in line
        assert len(box.posts) == 1 and waits == []  # a refusal is not tried again


@pytest.mark.parametrize("fmt", ["dingtalk", "feishu"])
def test_signed_robots_get_the_documented_signature_and_the_secret_stays_home(fmt):
    with robot(fmt, secret=SIGNING, keyword="opd") as box:
        notifier, _ = _notifier(box, fmt, SIGNING)
        assert notifier.send(EVENT, TEXT) is None  # the robot recomputed the signature and took it
        assert notifier.send(EVENT, TEXT + " again") is None
        assert SIGNING not in repr(notifier) and "signed" in repr(notifier)
        stamps = [
            p["query"]["timestamp"][0] if fmt == "dingtalk" else p["body"]["timestamp"] for p in box.posts
        ]
        assert all(s.isdigit() and len(s) == (13 if fmt == "dingtalk" else 10) for s in stamps)  # ms vs s
        assert all(SIGNING not in str(p) for p in box.posts)
        wrong, _ = _notifier(box, fmt, SIGNING[:-1] + "X")
        _hidden(wrong.send(EVENT, TEXT))  # refused: a wrong secret is a sign failure, shown without it


def test_a_secret_for_a_robot_without_signatures_is_refused_at_start():
    for url in (
        "https://hooks.slack.com/services/x",
        "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=x",
    ):
        with pytest.raises(OpdError, match="no signature setting") as bad:
            Notifier.create(url, None, SIGNING)
        assert SIGNING not in str(bad.value)


@pytest.mark.parametrize(
    ("fmt", "script", "retry_after"),
    [
        ("slack", [(429, {"Retry-After": "7"}, "rate_limited")], [7.0]),  # honoured exactly
        ("json", [(503, {"Retry-After": "3"}, "")], [3.0]),
        ("dingtalk", [json_reply(DINGTALK_RATE)], None),  # a limit in the body, no header: backoff
        ("feishu", [json_reply(FEISHU_RATE)], None),
        ("wecom", [json_reply(WECOM_RATE)], None),
        ("json", [(500, {}, "oops"), (502, {}, "")], None),
    ],
)
def test_a_limit_or_an_outage_is_tried_again_then_delivered(fmt, script, retry_after):
    with robot(fmt, script=script) as box:
        notifier, waits = _notifier(box, fmt)
        assert notifier.send(EVENT, TEXT) is None
        assert len(box.posts) == len(script) + 1
        if retry_after is not None:
            assert waits == retry_after
        else:  # exponential backoff with jitter: 1-2 s, then 2-3 s
            low = [1, 2][: len(waits)]
            assert len(waits) == len(script) and all(
                lo <= w <= lo + 1 for lo, w in zip(low, waits, strict=True)
            )


def test_a_retry_after_date_is_honoured_and_a_long_one_is_reported_not_waited():
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=20), usegmt=True)
    with robot("slack", script=[(429, {"Retry-After": later}, "rate_limited")]) as box:
        notifier, waits = _notifier(box, "slack")
        assert notifier.send(EVENT, TEXT) is None and len(waits) == 1 and 15 <= waits[0] <= 20
    with robot("slack", script=[(429, {"Retry-After": "3600"}, "rate_limited")]) as box:
        notifier, waits = _notifier(box, "slack")
        line = notifier.send(EVENT, TEXT)
        assert "HTTP 429: rate_limited" in line and waits == [] and len(box.posts) == 1


def test_a_post_that_keeps_failing_is_reported_after_four_tries():
    with robot("json", script=[(500, {}, "")] * 4) as box:
        notifier, waits = _notifier(box, "json")
        line = notifier.send(EVENT, TEXT)
        _hidden(line)
        assert "failed after 4 tries: HTTP 500" in line and len(box.posts) == 4
        low = [1, 2, 4]  # exponential backoff, each with up to a second of jitter
        assert len(waits) == 3 and all(lo <= w <= lo + 1 for lo, w in zip(low, waits, strict=True)), waits


@pytest.mark.parametrize("fmt", ["dingtalk", "feishu", "wecom"])
def test_a_200_without_the_robots_json_is_not_a_delivery(fmt):
    page = "<html><body>Please log in to the proxy</body></html>"
    with robot(fmt, script=[(200, {"Content-Type": "text/html"}, page)]) as box:
        notifier, waits = _notifier(box, fmt)
        line = notifier.send(EVENT, TEXT)
        assert "HTTP 200 but not" in line and "Please log in" in line and waits == []


def test_a_timeout_is_tried_again():
    with robot("json", slow_s=2.0, slow_count=1) as box:
        notifier, waits = _notifier(box, "json")
        notifier.timeout_s = 0.5
        assert notifier.send(EVENT, TEXT) is None
        assert len(box.posts) == 2 and len(waits) == 1


@pytest.mark.slow
def test_the_real_wait_honours_retry_after():
    """No recorder: the notifier sleeps for real between the two posts the robot sees."""
    with robot("slack", script=[(429, {"Retry-After": "1"}, "rate_limited")]) as box:
        notifier = Notifier.create(box.url(PATHS["slack"]), "slack")
        assert notifier.send(EVENT, TEXT) is None
        first, second = (p["at"] for p in box.posts)
        assert second - first >= 1.0


def test_a_service_reply_that_repeats_the_url_is_shown_blanked():
    echo = f"no hook at /hook/{TOKEN} (key={TOKEN})"
    with robot("json", script=[(404, {}, echo)]) as box:
        notifier, _ = _notifier(box, "json")
        line = notifier.send(EVENT, TEXT)
        _hidden(line)
        assert "no hook at /hook/***" in line


def test_a_malformed_url_never_crashes_a_post():
    """The final notification of a watcher built around a URL that slipped past every check."""
    for url in ("http://xn--zz.com/x", "http://a.b/x\ny", "http://h/" + "a" * 70_000):
        line = Notifier(SecretStr(url), "json", sleep=lambda s: None).send(EVENT, TEXT)
        assert line is not None and "cannot post" in line


# ---- the URL, checked whole at start -------------------------------------------------------------
BAD_URLS = {
    "line break": ("http://127.0.0.1:9/hook/T0000\nSECRET", "line break at character 30"),
    "invalid IDNA host": ("http://xn--zz.example/T0000-SECRET", "IDNA"),
    "70,000 characters": ("http://127.0.0.1:9/T0000-SECRET" + "x" * 70_000, "70,031 characters"),
    "unclosed IPv6": ("http://[::1/T0000-SECRET", "closing ']'"),
    "non-numeric port": ("http://127.0.0.1:port/T0000-SECRET", "port that is not a number"),
    "port out of range": ("http://127.0.0.1:99999/T0000-SECRET", "port that is not a number"),
    "empty port": ("http://127.0.0.1:/T0000-SECRET", "port that is not a number"),
    "bad label": ("http://-robot.example/T0000-SECRET", "host name that is not one"),
    "space": ("http://127.0.0.1:9/T0000 SECRET", "space at character"),
    "control character": ("http://127.0.0.1:9/T0000\x1bSECRET", "U+001B"),
    "bidi override": ("http://127.0.0.1:9/T0000\u202eSECRET", "U+202E"),
    "no host": ("http:///T0000-SECRET", "has no host"),
    "not http": ("ftp://127.0.0.1/T0000-SECRET", "not an http(s) URL"),
}


def _watch(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DASHSCOPE_", "OPD_NOTIFY"))}
    return subprocess.run([sys.executable, "-m", "opd_nb", "watch", "ft-202612020000-abcd", "--local",
                           "http://127.0.0.1:9", "--detach", *args], capture_output=True, text=True,
                          timeout=120, env={**clean, **env})  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_URLS))
def test_a_malformed_webhook_url_is_one_line_at_start_without_the_url(case, capsys, monkeypatch, tmp_path):
    from opd_nb.cli import main

    monkeypatch.setenv("OPD_WATCH_DIR", str(tmp_path))  # a URL let through starts no lasting watcher
    url, said = BAD_URLS[case]
    monkeypatch.delenv("OPD_NOTIFY_URL", raising=False)
    monkeypatch.delenv("OPD_NOTIFY_SECRET", raising=False)
    with pytest.raises(SystemExit) as exit_:
        main(["watch", "ft-202612020000-abcd", "--local", "http://127.0.0.1:9", "--detach", "--notify", url])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()  # the warning that --notify was typed (issue 46), then the error
    assert exit_.value.code == 2 and len(lines) == 2 and lines[0].startswith("warning: --notify "), err
    assert said in err and "SECRET" not in err and "Traceback" not in err, err


@pytest.mark.slow  # two `opd` processes
def test_in_a_fresh_shell_a_bad_url_or_secret_from_the_environment_is_refused_the_same(tmp_path):
    proc = _watch(OPD_NOTIFY_URL="http://127.0.0.1:9/hook/T0000\nSECRET")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "SECRET" not in proc.stderr, proc.stderr
    assert "line break" in proc.stderr
    proc = _watch("--notify", "https://hooks.slack.com/services/T0/B0/T0000-x", OPD_NOTIFY_SECRET=SIGNING)
    assert proc.returncode == 2 and "no signature setting" in proc.stderr and SIGNING not in proc.stderr


@pytest.mark.slow  # three `opd` processes
def test_a_refusal_reaches_the_watchers_output_and_a_detached_watchers_log(tmp_path):
    """The user who relies on the robot learns it refused, in the terminal and in the watcher's log."""
    from loopback import Loopback
    from server_http import wait_until

    job = {"job_id": "ft-202612020000-d0e5", "status": "SUCCEEDED", "hyper_parameters": {}}
    plane = Loopback({f"/api/v1/fine-tunes/{job['job_id']}": {"request_id": "r", "output": job}})
    watch_dir = tmp_path / "watchers"
    try:
        with robot("dingtalk", keyword="alarm") as box:
            hook = box.url(PATHS["dingtalk"] + QUERIES["dingtalk"])
            args = (
                "watch",
                job["job_id"],
                "--local",
                plane.url,
                "--notify",
                hook,
                "--notify-format",
                "dingtalk",
            )
            clean = {k: v for k, v in os.environ.items() if not k.startswith(("DASHSCOPE_", "OPD_NOTIFY"))}
            env = {**clean, "OPD_WATCH_DIR": str(watch_dir)}
            run = lambda *more: subprocess.run([sys.executable, "-m", "opd_nb", *args, *more],  # noqa: E731
                                               capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
            shown = run("--json")
            assert shown.returncode == 0, shown.stderr  # the job SUCCEEDED; the refusal is said, not fatal
            refusal = "failed: DingTalk refused it: errcode 310000: keywords not in content"
            assert refusal in shown.stderr and 'custom keyword "opd"' in shown.stderr
            assert run("--detach").returncode == 0
            log = watch_dir / f"{job['job_id']}.log"
            wait_until(
                lambda: log.exists() and refusal in log.read_text(), 60, "the refusal in the watcher's log"
            )
            assert TOKEN not in shown.stderr + log.read_text() and len(box.posts) == 2
    finally:
        plane.server.shutdown()
