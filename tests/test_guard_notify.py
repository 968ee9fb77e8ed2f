"""Guards while a job runs: `opd watch --guard` cancels, `--notify` posts, `--detach` outlives its parent.

One real job on the session's `opd serve` (its teacher window cut, so valid_token_rate < 1 from the
first step) serves the guard and both webhook formats. Webhook receivers and the detached watcher's
control plane are tiny loopback HTTP servers in this file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from conftest import stop_jobs
from loopback import Loopback

from opd_nb.constants import VALID_TOKEN_RATE
from opd_nb.health.rules import FULL_VALID_TOKEN_RATE, GuardThresholds, guard_alerts
from opd_nb.watching.notify import Notifier, detect_format, masked, payload

SECRET = "T0000-SECRET-b1c2d3"  # the part of a webhook URL that is a credential
# The cut-teacher job's length (100 epochs of 4 steps, the most allowed): the guard cancels in its first quarter.
STEPS = 400


@pytest.fixture()
def receiver() -> Iterator[Loopback]:
    box = Loopback()
    yield box
    box.server.shutdown()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASHSCOPE_", "OPD_NOTIFY"))}
    env.update(NO_PROXY="127.0.0.1,localhost", COLUMNS="100", **extra)
    return env


def _opd(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "opd_nb", *args],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=cwd,
        env=_env(**env),
    )


def _opd_here(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, *args: str, cwd: Path):
    """`opd ARGS` in this process (its exit code, stdout, stderr): the watcher polls from the moment
    `submit` returns, not after an interpreter start-up that a loaded machine stretched past a 15 s job."""
    from opd_nb.cli import main

    monkeypatch.chdir(cwd)
    for name in [k for k in os.environ if k.startswith(("DASHSCOPE_", "OPD_NOTIFY"))]:
        monkeypatch.delenv(name)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    out = capsys.readouterr()
    return exit_.value.code, out.out, out.err


def test_guard_rules_fire_on_their_thresholds():
    t = GuardThresholds(
        valid_token_steps=2, reward_failure_rate=0.5, loss_divergence=10, zero_variance_evals=1
    )
    rows = [{"step": 1, VALID_TOKEN_RATE: 1.0}, {"step": 2, VALID_TOKEN_RATE: 0.9}]
    assert guard_alerts(rows, thresholds=t) == []  # one low step of the two needed
    rows.append({"step": 3, VALID_TOKEN_RATE: 0.8})
    (alert,) = guard_alerts(rows, thresholds=t)
    assert alert.rule == "valid_token_rate" and alert.severity == "error" and "step 3" in alert.message
    loss = [{"step": 1, "actor/distillation/loss": 0.5}, {"step": 2, "actor/distillation/loss": "NaN"}]
    assert [a.rule for a in guard_alerts(loss, thresholds=t)] == ["loss_not_finite"]
    loss = [{"step": 1, "actor/distillation/loss": 0.5}, {"step": 2, "actor/distillation/loss": 11.0}]
    assert [a.rule for a in guard_alerts(loss, thresholds=t)] == ["loss_diverging"]
    rewards = [{"step": 1, "trace/reward/failure_rate": 0.25}, {"step": 2, "trace/reward/failure_rate": 0.5}]
    assert [a.rule for a in guard_alerts(rewards, thresholds=t)] == ["reward_failures"]
    flat = [{"step": s, "trace/reward/zero_variance_groups": 1.0} for s in (1, 2)]
    assert guard_alerts(flat, eval_steps=3, thresholds=t) == []  # 2 steps < one eval interval of 3
    assert [a.rule for a in guard_alerts(flat, eval_steps=2, thresholds=t)] == ["zero_variance_groups"]


def test_webhook_formats_and_the_url_never_shows(receiver):
    hosts = {
        "https://oapi.dingtalk.com/robot/send?access_token=x": "dingtalk",
        "https://open.feishu.cn/open-apis/bot/v2/hook/x": "feishu",
        "https://open.larksuite.com/open-apis/bot/v2/hook/x": "feishu",
        "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=x": "wecom",
        "https://hooks.slack.com/services/x": "slack",
        "https://example.org/hook": "json",
    }
    assert {url: detect_format(url) for url in hosts} == hosts
    assert payload("feishu", "hi", {}) == {"msg_type": "text", "content": {"text": "hi"}}
    assert payload("wecom", "hi", {}) == {"msgtype": "text", "text": {"content": "hi"}}
    url = f"{receiver.url}/hook/{SECRET}"
    notifier = Notifier.create(url, "json")
    assert SECRET not in repr(notifier) and SECRET not in masked(url)
    assert notifier.send({"event": "final", "job_id": "ft-1"}, "done") is None
    assert receiver.posts == [(f"/hook/{SECRET}", {"event": "final", "job_id": "ft-1", "text": "done"})]
    nobody = Notifier.create(f"http://127.0.0.1:9/{SECRET}", "slack")  # nothing listens on port 9
    nobody.sleep = lambda s: None  # its retries (a refused connection is tried again) wait for nothing
    failed = nobody.send({}, "x")
    assert (
        failed is not None
        and "failed after 4 tries: no answer (ConnectError)" in failed
        and SECRET not in failed
    )


@pytest.mark.slow
def test_guard_cancels_a_cut_teacher_job_and_notify_posts_slack_and_dingtalk(
    local_server, receiver, tmp_path, capsys, monkeypatch
):
    from conftest import tiny_workspace

    from opd_nb.client import JobClient, resolve_target, submit

    k = 2
    # Prompts take 22-27 tokens: a 28-token teacher window cuts nearly every answer, on every step.
    ws = tiny_workspace(
        "pure-distill", tmp_path / "cut", train_rows=32, n_epochs=STEPS // 4, opd_teacher_max_model_len=28
    )  # 4 steps an epoch (32 rows, batch 8) of a fraction of a second each
    client = JobClient(resolve_target("local", base_url=local_server.api_base))
    job_id = submit(ws, client.target, no_check=True).job_id  # the gate would refuse the planted 28
    slack = f"{receiver.url}/slack/{SECRET}"
    flags = ("--local", local_server.api_base, "--notify", slack, "--notify-format", "slack", "--json")
    code, stdout, stderr = _opd_here(
        capsys, monkeypatch, "watch", job_id, "--guard", "--guard-valid-token-steps", str(k), *flags, cwd=ws
    )
    out = stdout + stderr
    assert code == 1 and json.loads(stdout)["status"] == "CANCELED", out
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith(f"guard: cancelled {job_id}")]
    assert "rule valid_token_rate" in line and "consecutive step(s)" in line
    # Who and why, in the job itself: its message and its log (found as a user searches it).
    why = line.removeprefix(f"guard: cancelled {job_id} ")
    assert json.loads(stdout)["message"] == f"canceled: by the guard of `opd watch --guard` {why}"
    found = _opd("logs", job_id, "--local", local_server.api_base, "--search", "guard", cwd=ws)
    assert (
        found.returncode == 0
        and f"cancel requested: by the guard of `opd watch --guard` {why}" in found.stdout
    )
    rows = client.metrics(job_id)
    low = [r["step"] for r in rows if r.get(VALID_TOKEN_RATE, 1) < FULL_VALID_TOKEN_RATE]
    tripped_at = int(re.search(r"at step (\d+)", line).group(1))
    alert_step = low[k - 1]  # the rule fires once K consecutive steps are low
    # Never before the rule holds. How soon after depends on when the watcher polls (once a second) against
    # steps of a fraction of a second here: under a loaded CI machine its first poll came at step 5 of a
    # rule that held from step 2, so the bound checked is that most of the run was never paid for.
    assert low[:k] == list(range(low[0], low[0] + k)) and tripped_at >= alert_step
    # Most of the run was never paid for. Steps take a fraction of a second against a once-a-second poll, so
    # how many ran before the cancel landed is load's figure (20 of 40 in a full run on two workers and on three):
    # the run is long enough that a quarter of it is far beyond that, and a cancelled job costs no more.
    assert max(r["step"] for r in rows) < STEPS // 4
    texts = [body["text"] for path, body in receiver.posts if path.startswith("/slack/")]
    assert any("valid_token_rate is below 1" in t for t in texts)  # the alert
    assert any("guard: cancelled" in t for t in texts)  # the cancel, with its rule
    assert texts[-1].startswith(f"[opd] {job_id} ended CANCELED") and "rule valid_token_rate" in texts[-1]

    ding = f"{receiver.url}/ding/{SECRET}"
    again = _opd("watch", job_id, "--local", local_server.api_base, "--notify", ding, "--notify-format", "dingtalk",
                 "--json", cwd=ws)  # fmt: skip
    posts = [body for path, body in receiver.posts if path.startswith("/ding/")]
    assert all(body["msgtype"] == "text" for body in posts) and len(posts) >= 2, again.stderr
    contents = [body["text"]["content"] for body in posts]
    assert any("valid_token_rate" in c for c in contents) and "ended CANCELED" in contents[-1]
    assert SECRET not in out + again.stdout + again.stderr


@pytest.mark.slow  # four `opd` processes
def test_a_detached_watcher_outlives_its_parent_and_stops(tmp_path):

    job = {"job_id": "ft-202612020000-abcd", "job_name": "x", "status": "RUNNING", "hyper_parameters": {}}
    done = {**job, "job_id": "ft-202612020000-d0e1", "status": "SUCCEEDED"}
    plane = Loopback(
        {
            **{f"/api/v1/fine-tunes/{j['job_id']}": {"request_id": "r", "output": j} for j in (job, done)},
            f"/api/v1/fine-tunes/{job['job_id']}/metrics": {"request_id": "r", "output": {"metrics": []}},
        }
    )
    env = {"OPD_WATCH_DIR": str(tmp_path / "watchers")}
    signing = "SEC-signing-secret-0a1b2c3d"
    try:
        hook = f"{plane.url}/hook/{SECRET}"
        parent = _opd("watch", job["job_id"], "--local", plane.url, "--detach", "--notify", hook, "--notify-format",
                      "dingtalk", cwd=tmp_path, OPD_NOTIFY_SECRET=signing, **env)  # fmt: skip
        assert parent.returncode == 0, parent.stderr  # the parent is gone now
        (record,) = (tmp_path / "watchers").glob("*.json")
        pid = json.loads(record.read_text())["pid"]
        seen = len(plane.gets)
        time.sleep(3)
        assert len(plane.gets) > seen  # still polling after its parent exited
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        shown = cmdline + record.read_text() + parent.stdout + parent.stderr
        assert SECRET not in shown and signing not in shown and "notify dingtalk signed" in parent.stdout
        assert signing in Path(f"/proc/{pid}/environ").read_bytes().decode(
            errors="replace"
        )  # its only way in
        started = json.loads(record.read_text())["started"]
        listed = _opd("watch", "--list", "--json", cwd=tmp_path, **env)
        assert [w["pid"] for w in json.loads(listed.stdout)["watchers"] if w["alive"]] == [pid]
        assert f"watching since {started}" in _opd("watch", "--list", cwd=tmp_path, **env).stdout
        stopped = _opd("watch", job["job_id"], "--stop", cwd=tmp_path, **env)
        assert stopped.returncode == 0, stopped.stderr
        assert f"started {started}, ended 20" in stopped.stdout and "(stopped now)" in stopped.stdout
        assert "since" not in stopped.stdout, stopped.stdout  # issue 36: "ended since <its start>"
        assert (
            not Path(f"/proc/{pid}").exists()
            or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]
        )
        assert not record.exists()

        # A watcher whose job ends on its own: --list says it ended, and by when (its log's last write).
        assert (
            _opd("watch", done["job_id"], "--local", plane.url, "--detach", cwd=tmp_path, **env).returncode
            == 0
        )
        (record,) = (tmp_path / "watchers").glob("*.json")
        info = json.loads(record.read_text())
        for _ in range(100):
            if (
                not Path(f"/proc/{info['pid']}").exists()
                or "Z" in Path(f"/proc/{info['pid']}/stat").read_text()
            ):
                break
            time.sleep(0.2)
        listed = _opd("watch", "--list", cwd=tmp_path, **env).stdout
        assert f"started {info['started']}, ended by 20" in listed and "since" not in listed, listed
    finally:
        plane.server.shutdown()


def test_without_metrics_the_guard_reads_the_log_and_says_what_it_cannot_see():
    """Bailian (a stand-in): no metrics API, so the guard acts on error lines in the log."""
    from pydantic import SecretStr

    from opd_nb.client import JobClient, Target
    from opd_nb.health.guard import UNSEEN_WITHOUT_METRICS, Guard

    job = {"job_id": "ft-202612020000-beef", "status": "RUNNING", "hyper_parameters": {}}
    logs = "step 1 ok\n2026-12-02 06:00:01 ERROR reward function timed out for 64 samples\n"
    path = f"/api/v1/fine-tunes/{job['job_id']}"
    plane = Loopback({path: {"request_id": "r", "output": job}, f"{path}/logs": {"output": {"logs": logs}}})
    try:
        client = JobClient(Target(kind="cloud", base_url=f"{plane.url}/api/v1", api_key=SecretStr("sk-x")))
        guard = Guard(client, job["job_id"])
        seen = client.get(job["job_id"])
        lines = guard.poll(seen, client.metrics(job["job_id"]))  # metrics: None, never asked on the cloud
        assert all(rule in lines[0] for rule in UNSEEN_WITHOUT_METRICS)
        assert lines[1].startswith(f"guard: cancelled {job['job_id']}") and "rule log_error" in lines[1]
        assert "reward function timed out" in lines[1]
        assert plane.posts == [(f"{path}/cancel", {})]  # Bailian's cancel takes no body: no reason sent
        assert guard.poll(seen, None) == [] and len(plane.posts) == 1  # once
    finally:
        plane.server.shutdown()


def test_the_meter_counts_started_hours():
    from types import SimpleNamespace

    from opd_nb.watching.meter import Meter

    job = SimpleNamespace(job_id="ft-1", status="CANCELED", create_time="2026-12-02 06:00:00",
                          end_time="2026-12-02 07:00:01", raw={})  # fmt: skip
    line = Meter(paid=True, units=24, price=2.0).line(job)
    assert "1h 00m elapsed, 2 billed hour(s) x 24 units = 48 unit-hours, 96.00 at 2 per unit-hour" in line
    running = SimpleNamespace(job_id="ft-2", status="RUNNING", create_time="2026-12-02 06:00:00", end_time=None,
                              raw={"start_time": "2026-12-02 06:30:00"})  # fmt: skip
    now = datetime(2026, 12, 2, 6, 40).timestamp()
    assert "0h 10m elapsed, 1 billed hour(s)" in Meter(paid=True).line(running, now=now)


def test_the_monitor_meters_a_job_only_where_metrics_are_missing():
    from opd_nb.client.job_results import Job
    from opd_nb.notebook.job_state import JobState, meter_line

    st = JobState("ft-1")
    st.job = Job(job_id="ft-1", status="RUNNING", create_time="2026-12-02 06:00:00")
    st.metrics_available = True  # `opd serve`: free
    assert meter_line(st) is None
    st.metrics_available = False  # Bailian: no metrics API, billed by the hour
    assert "billed hour(s)" in meter_line(st)


def test_in_a_notebook_notify_asks_for_detach():
    """The monitor has the guard (its switch), not the webhook: --notify needs a detached watcher."""
    from opd_nb.cli import invoke
    from opd_nb.errors import OpdError

    with pytest.raises(OpdError, match="--notify runs in a background watcher.*--detach"):
        invoke(["watch", "ft-202612020000-abcd", "--local", "http://127.0.0.1:9", "--notify", "http://x/h"])
    with pytest.raises(OpdError) as bad:  # the URL is checked before anything starts, and never echoed
        invoke(
            ["watch", "ft-1", "--local", "http://127.0.0.1:9", "--notify", f"ftp://x/{SECRET}", "--detach"]
        )
    assert "not an http(s) URL" in str(bad.value) and SECRET not in str(bad.value)


def test_the_monitors_guard_switch_cancels_on_an_error_rule_once():
    """The monitor's toggle arms the same guard as `opd watch --guard`; off, it never cancels."""
    from opd_nb.client import JobClient, resolve_target
    from opd_nb.notebook.monitor import JobMonitor

    job_id = "ft-202612020000-cut1"
    job = {"job_id": job_id, "job_name": "cut", "status": "RUNNING", "hyper_parameters": {"eval_steps": 2}}
    rows = [{"step": s, VALID_TOKEN_RATE: 0.4, "actor/distillation/loss": 0.3} for s in (1, 2, 3)]
    plane = Loopback(
        {
            f"/api/v1/fine-tunes/{job_id}": {"request_id": "r", "output": job},
            f"/api/v1/fine-tunes/{job_id}/metrics": {"request_id": "r", "output": {"metrics": rows}},
        }
    )
    try:
        monitor = JobMonitor(job_id, JobClient(resolve_target("local", base_url=plane.url)))
        widgets = monitor._ensure_widgets()
        monitor.poll_once()
        assert not [p for p, _ in plane.posts if p.endswith("/cancel")]  # off: alerts show, nothing cancels
        widgets["guard"].value = True  # the user flips the switch
        assert monitor.guard.on
        monitor.poll_once()
        monitor.poll_once()
        ((path, body),) = [(p, b) for p, b in plane.posts if p.endswith("/cancel")]
        assert path == f"/api/v1/fine-tunes/{job_id}/cancel"
        assert body["reason"].startswith(
            "by the guard switch of the notebook's job monitor at step 3: rule valid"
        )
        (line,) = monitor.guard.lines
        assert line.startswith(f"guard: cancelled {job_id} at step 3") and "rule valid_token_rate" in line
        assert "rule valid_token_rate" in widgets["message"].value and line in monitor.notes
        assert monitor.guard.tripped(job_id).rule == "valid_token_rate"
    finally:
        plane.server.shutdown()


def test_opd_watch_guard_in_a_notebook_opens_the_monitor_with_its_switch_on():
    from opd_nb.cli import invoke
    from opd_nb.cli.intents import WatchRequest

    request = invoke(["watch", "ft-202612020000-abcd", "--local", "http://127.0.0.1:9", "--guard",
                      "--guard-valid-token-steps", "5"])  # fmt: skip
    assert isinstance(request, WatchRequest) and request.guard == GuardThresholds(valid_token_steps=5)
    assert request.to_payload()["guard"] is True


@pytest.mark.slow
def test_a_cancel_with_a_reason_is_in_the_jobs_message_and_log_and_a_bad_one_is_a_400(local_server, tmp_path):
    """`opd serve` records who cancelled and why; the SDK's bodiless cancel still reads "canceled by user"."""
    import httpx
    from conftest import tiny_workspace, wait_status

    from opd_nb.client import JobClient, resolve_target, submit

    ws = tiny_workspace("pure-distill", tmp_path / "ws", n_epochs=20)
    client = JobClient(resolve_target("local", base_url=local_server.api_base))
    why = "by the guard of `opd watch --guard` at step 2: rule loss_not_finite: loss is NaN at step 2"
    ids = [submit(ws, client.target, no_check=True).job_id for _ in range(2)]
    client.cancel(ids[0], reason=why + "\n\x1b[2Jforged line")  # folded to one escaped line before sending
    client.cancel(ids[1])
    first, second = (wait_status(client, job_id, {"CANCELED"}, timeout=120) for job_id in ids)
    shown = why + " \\x1b[2Jforged line"
    assert first.message == f"canceled: {shown}" and second.message == "canceled by user"
    found = _opd("logs", ids[0], "--local", local_server.api_base, "--search", "GUARD", cwd=tmp_path)
    assert found.returncode == 0 and f"cancel requested: {shown}" in found.stdout, found.stdout

    url = f"{local_server.api_base}/fine-tunes/{ids[1]}/cancel"
    for bad in ({"reason": "two\nlines"}, {"reason": "\x1b[31mred"}, {"reason": "x" * 1001}, {"reason": 3}):
        reply = httpx.post(url, json=bad, headers={"Authorization": "Bearer local"})
        assert reply.status_code == 400 and reply.json()["code"] == "InvalidParameter", reply.text
    reply = httpx.post(url, json={"reason": "too late"}, headers={"Authorization": "Bearer local"})
    assert reply.status_code == 200 and reply.json()["output"]["status"] == "CANCELED"  # a valid body passes
    assert client.get(ids[1]).message == "canceled by user"  # and an ended job's record is not rewritten


def _events(receiver: Loopback) -> list[str]:
    return [body.get("event", "") for path, body in receiver.posts if path.startswith("/hook/")]


def _connected(pid: int, port: int) -> bool:
    """Whether process `pid` holds a connection to `port` (its client's pool, once it has polled)."""
    import psutil

    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(c.raddr and c.raddr.port == port for c in conns)


@pytest.mark.slow  # a server of its own, killed with SIGKILL and started again
def test_a_detached_watcher_outlives_a_killed_server_and_delivers_the_end(tmp_path, receiver):
    """`kill -9` of the server: the webhook hears "contact lost" once, "contact back" once after the
    restart (same data dir, same port), then the job's final status.

    The watched job waits (PENDING) behind a long one on the server's single slot, so the kill lands
    before it could end however fast or loaded the machine is; the long one is cancelled after the
    restart, and the watched one then runs its two steps."""
    from conftest import tiny_workspace
    from server_http import wait_until

    from opd_nb.client import JobClient, resolve_target, submit
    from opd_nb.server import start

    data_dir, watch_dir = tmp_path / "data", tmp_path / "watchers"
    server = start(port=0, data_dir=data_dir)
    port, api = server.port, server.api_base
    again = None
    try:
        target = resolve_target("local", base_url=api)
        blocker = submit(
            tiny_workspace("pure-distill", tmp_path / "long", n_epochs=100), target, no_check=True
        )
        job_id = submit(tiny_workspace("pure-distill", tmp_path / "ws"), target, no_check=True).job_id
        hook = f"{receiver.url}/hook/{SECRET}"
        parent = _opd("watch", job_id, "--local", api, "--detach", "--notify", hook, "--notify-format", "json",
                      cwd=tmp_path, OPD_WATCH_DIR=str(watch_dir))  # fmt: skip
        assert parent.returncode == 0, parent.stderr
        pid = json.loads(next(watch_dir.glob("*.json")).read_text())["pid"]
        wait_until(lambda: _connected(pid, port), 60, "the watcher's first poll")
        assert JobClient(target).get(job_id).status == "PENDING"

        server.kill()  # SIGKILL: no shutdown of any kind
        wait_until(
            lambda: "contact_lost" in _events(receiver), 60, "the webhook to hear that contact is lost"
        )
        again = start(port=port, data_dir=data_dir)
        stop_jobs(JobClient(target), [blocker.job_id])
        wait_until(lambda: "final" in _events(receiver), 300, "the job's final status")
    finally:
        server.kill()
        if again is not None:
            again.stop()
    assert [e for e in _events(receiver) if e != "alert"] == ["contact_lost", "contact_back", "final"], (
        receiver.posts
    )
    bodies = {body["event"]: body for _, body in receiver.posts}
    assert (
        bodies["final"]["status"] == "SUCCEEDED"
        and "lost contact with the local control plane" in (bodies["contact_lost"]["text"])
    )
    assert "is back after" in bodies["contact_back"]["text"]
    wait_until(lambda: not _alive_pid(pid), 30, "the watcher to end with its job")
    log = (watch_dir / f"{job_id}.log").read_text()
    assert "watch: lost contact" in log and "watch: contact with" in log and "Traceback" not in log, log
    assert SECRET not in log + parent.stdout + parent.stderr


def _alive_pid(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.slow
def test_contact_is_lost_only_when_nothing_answers_and_is_said_once_each_way(receiver):
    """A gateway's 502/503/504 or no answer at all is lost contact (said once, then once when back); an
    answer that refuses (404, 401, 500) ends the watch at once, as does a loss before any contact."""
    from opd_nb.client import JobClient, resolve_target
    from opd_nb.errors import OpdError
    from opd_nb.watching.contact import Contact

    job = {"job_id": "ft-202612020000-c0de", "status": "RUNNING", "hyper_parameters": {}}
    plane = Loopback({f"/api/v1/fine-tunes/{job['job_id']}": {"request_id": "r", "output": job}})
    said: list[str] = []
    notifier = Notifier.create(f"{receiver.url}/hook/{SECRET}", "json")
    try:
        client = JobClient(resolve_target("local", base_url=plane.url), retries=0)
        contact = Contact(job["job_id"], "the plane", 3600, said.append, notifier)
        read = lambda: client.get(job["job_id"])  # noqa: E731
        status = lambda j: j.status  # noqa: E731
        assert contact.poll(read, status).status == "RUNNING"
        for gateway in (502, 503, 504):
            plane.status = gateway
            assert contact.poll(read, status) is None and contact.pause_s(1.0) >= 1.5  # backing off
        plane.status = None
        assert contact.poll(read, status).status == "RUNNING" and contact.pause_s(1.0) == 1.0
        assert [line.split(" (")[0].split(" is back")[0] for line in said] == [
            "watch: lost contact with the plane",
            "watch: contact with the plane",
        ]
        assert [b["event"] for _, b in receiver.posts] == ["contact_lost", "contact_back"]
        assert "HTTP 502" in receiver.posts[0][1]["text"] and "RUNNING" in receiver.posts[1][1]["text"]
        for refusal in (404, 401, 500):
            plane.status = refusal
            with pytest.raises(OpdError) as err:
                contact.poll(read, status)
            assert err.value.status == refusal
        plane.status = None

        short = Contact(job["job_id"], "the plane", 0.3, said.append, notifier)
        assert short.poll(read, status) is not None
        plane.server.shutdown()
        plane.server.server_close()  # nothing listens: no answer at all
        assert short.poll(read, status) is None and "ConnectError" in said[-1]
        time.sleep(0.4)
        with pytest.raises(OpdError, match="no contact with the plane for 0 s; .* last seen RUNNING"):
            short.poll(read, status)
        assert receiver.posts[-1][1]["event"] == "gave_up" and SECRET not in "".join(said)

        never = Contact(job["job_id"], "the plane", 3600, said.append, notifier)
        with pytest.raises(OpdError, match="cannot reach"):  # no contact was ever made: a wrong URL
            never.poll(read, status)
    finally:
        plane.server.shutdown()
