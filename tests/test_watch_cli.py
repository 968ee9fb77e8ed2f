"""`opd watch` in a terminal prints the job monitor's health alerts, once each, as they appear.

Against a real `opd serve`: a job whose teacher window (opd_teacher_max_model_len) is shorter than
prompt + response leaves student tokens without a teacher score, so valid_token_rate drops below 1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

PY = sys.executable


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASHSCOPE_")}
    env["NO_PROXY"] = "127.0.0.1,localhost"
    env["COLUMNS"] = "100"
    return env


def _opd(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "-m", "opd_nb", *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=_env()
    )


@pytest.fixture(scope="module")
def cut_job(local_server, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A running job whose teacher sees only the first 44 tokens of prompt + response (max_length 64)."""
    from conftest import tiny_workspace

    from opd_nb.client import resolve_target, submit

    ws = tiny_workspace(
        "reward", tmp_path_factory.mktemp("cut") / "sorter", n_epochs=2, opd_teacher_max_model_len=44
    )
    target = resolve_target("local", base_url=local_server.api_base)
    return submit(ws, target, no_check=True).job_id, ws  # 44 is below the rules' minimum: planted


@pytest.mark.slow
def test_watch_prints_the_valid_token_rate_alert_once(local_server, cut_job) -> None:
    job_id, ws = cut_job
    proc = _opd("watch", job_id, "--local", local_server.api_base, cwd=ws)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the job SUCCEEDED: an alert is not a failure
    assert "Traceback" not in proc.stderr
    alerts = [line for line in proc.stdout.splitlines() if line.startswith(f"! {job_id}: ")]
    assert len(alerts) == 1, proc.stdout  # once, although every poll still breaks the rule
    assert "valid_token_rate is below 1" in alerts[0] and "check the teacher first" in alerts[0]
    assert "SUCCEEDED" in proc.stdout
    assert "best checkpoint: checkpoint-" in proc.stdout  # issue 26: watch ends by naming it
    assert "deploy or continue from" in proc.stdout

    # The notebook's monitor shows the same rule; on the finished job, word for word what watch prints.
    from opd_nb.client import JobClient, resolve_target
    from opd_nb.notebook.monitor import JobMonitor

    client = JobClient(resolve_target("local", base_url=local_server.api_base))
    view = JobMonitor(job_id, client).start().wait(timeout_s=60).state["jobs"][job_id]
    assert [a["rule"] for a in view["alerts"]] == ["valid_token_rate"]
    shown = [f"! {job_id}: {a['message']} (fix: {a['fix']})" for a in view["alerts"]]

    # --json keeps stdout pure JSON; the alert goes to stderr.
    proc = _opd("watch", job_id, "--local", local_server.api_base, "--json", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "SUCCEEDED"
    assert proc.stderr.strip().splitlines() == shown


@pytest.mark.slow
def test_watch_under_the_magic_is_a_typed_request_that_never_shows_the_key(local_server, monkeypatch) -> None:
    from opd_nb.cli import invoke
    from opd_nb.cli.intents import WatchRequest

    secret = "sk-watch-secret-000"
    monkeypatch.setenv("DASHSCOPE_API_KEY", secret)
    request = invoke(["watch", "ft-any", "--local", local_server.api_base])
    assert isinstance(request, WatchRequest)
    assert request.job_ids == ("ft-any",) and request.target.base_url == local_server.api_base
    assert json.loads(request.to_json())["target"] == "local"
    assert secret not in request.to_json() + str(request) + repr(request)


@pytest.mark.slow
def test_watch_of_an_unknown_job_is_one_line(local_server, tmp_path) -> None:
    proc = _opd("watch", "ft-does-not-exist", "--local", local_server.api_base, cwd=tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "ft-does-not-exist" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def _alerts_of(local_server, job_id: str, ws: Path) -> tuple[list[str], list[dict]]:
    """What `opd watch --json` reports on stderr, and the monitor's alerts, of the same finished job.

    A watch that starts while the job runs prints each alert as it first appears (step 1's figure);
    waiting first makes both read the last step, so their words can be compared whole.
    """
    from opd_nb.client import JobClient, resolve_target
    from opd_nb.notebook.monitor import JobMonitor

    client = JobClient(resolve_target("local", base_url=local_server.api_base))
    client.wait(job_id, poll_s=0.5, timeout_s=300)  # watch then sees the last step, as the monitor does
    proc = _opd("watch", job_id, "--local", local_server.api_base, "--json", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "SUCCEEDED"
    view = JobMonitor(job_id, client).start().wait(timeout_s=60).state["jobs"][job_id]
    return proc.stderr.strip().splitlines(), view["alerts"]


@pytest.mark.slow
def test_a_constant_reward_raises_the_zero_variance_alert(local_server, tmp_path) -> None:
    """A reward that scores every sample alike gives each prompt's group one score: no task signal."""
    from conftest import tiny_workspace

    from opd_nb.client import resolve_target, submit

    ws = tiny_workspace("reward", tmp_path / "sorter", n_epochs=3, eval_steps=1)  # 6 steps >= 1 x 3
    reward = ws / "functions" / "reward" / "reward.py"
    exact = '"reward_score": float(any(answer_n == t for t in truths_n)),'
    assert exact in reward.read_text()
    reward.write_text(reward.read_text().replace(exact, '"reward_score": 0.5,  # planted: a constant'))
    job_id = submit(ws, resolve_target("local", base_url=local_server.api_base)).job_id
    lines, alerts = _alerts_of(local_server, job_id, ws)
    assert "zero_variance_groups" in [a["rule"] for a in alerts]
    (line,) = [x for x in lines if "zero_variance_groups is 100%" in x]
    assert "same score" in line and f"opd rollouts {job_id}" in line and "playground" in line
    assert "reward_zero" not in [a["rule"] for a in alerts]  # 0.5 is a score, just never a different one


@pytest.mark.slow
def test_a_too_small_max_length_raises_the_truncation_alert(local_server, tmp_path) -> None:
    """Prompts take 22-27 tokens: with max_length 32 no answer finishes, and the teacher scores cut-off text."""
    from conftest import tiny_workspace

    from opd_nb.client import JobClient, resolve_target, submit

    ws = tiny_workspace("reward", tmp_path / "sorter", max_prompt_length=28, max_length=32)
    job_id = submit(ws, resolve_target("local", base_url=local_server.api_base)).job_id
    lines, alerts = _alerts_of(local_server, job_id, ws)
    (truncated,) = [a for a in alerts if a["rule"] == "truncated"]
    assert "100% of the samples of step 2 were cut off at max_length" in truncated["message"]
    assert f"! {job_id}: {truncated['message']} (fix: {truncated['fix']})" in lines  # the same words
    page = JobClient(resolve_target("local", base_url=local_server.api_base)).rollouts(job_id, kind="train")
    assert page.rollouts and all(r["truncated"] for r in page.rollouts)  # the samples agree


# ---- what the terminal shows (issue 36): piped, and in a real terminal of a given width ---------------
ENDED = {"job_id": "ft-202612020000-e0d1", "job_name": "x", "status": "SUCCEEDED", "hyper_parameters": {},
         "progress": {"step": 12, "total_steps": 12}}  # fmt: skip
FAILED_AT_1 = {**ENDED, "job_id": "ft-202612020000-fa11", "status": "FAILED", "message": "worker died",
               "progress": {"step": 1}}  # fmt: skip
FAILED_AT_0 = {**FAILED_AT_1, "job_id": "ft-202612020000-fa00", "progress": None}
ROWS = [{"step": 12, "actor/distillation/loss": 0.5, "trace/distillation/valid_token_rate": 1.0,
         "completions/truncated_fraction": 0.0}]  # fmt: skip


@pytest.fixture()
def plane():
    from loopback import Loopback

    box = Loopback(
        {
            **{f"/api/v1/fine-tunes/{j['job_id']}": {"request_id": "r", "output": j}
               for j in (ENDED, FAILED_AT_1, FAILED_AT_0)},
            **{f"/api/v1/fine-tunes/{j['job_id']}/metrics": {"request_id": "r", "output": {"metrics": ROWS}}
               for j in (ENDED, FAILED_AT_1)},
        }
    )  # fmt: skip
    yield box
    box.server.shutdown()


@pytest.mark.slow
def test_piped_watch_output_ends_its_table_and_folds_long_names(plane, tmp_path) -> None:
    env = {**_env(), "COLUMNS": "40"}
    proc = subprocess.run([PY, "-m", "opd_nb", "watch", ENDED["job_id"], "--local", plane.url],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    bottoms = [line for line in lines if line.startswith("└")]
    assert bottoms and all(line.rstrip().endswith("┘") for line in bottoms), proc.stdout  # nothing runs on
    assert max(len(line) for line in lines if line[:1] in "┏┃┡│└") <= 40 and "…" not in proc.stdout
    cells = "".join(line.split("│")[1].strip() for line in lines if line.startswith("│"))
    assert "trace/distillation/valid_token_rate" in cells  # folded across rows, never cut
    assert "12/12" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize(("job", "shown"), [(FAILED_AT_1, "step 1"), (FAILED_AT_0, "no step yet")])
def test_a_job_that_failed_before_a_total_shows_what_is_known(plane, tmp_path, job, shown) -> None:
    proc = subprocess.run([PY, "-m", "opd_nb", "watch", job["job_id"], "--local", plane.url],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=_env())  # fmt: skip
    assert proc.returncode == 1 and "FAILED" in proc.stdout, proc.stderr
    assert shown in proc.stdout and "None" not in proc.stdout, proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (a real terminal of a set width)")
@pytest.mark.parametrize("job", [ENDED, FAILED_AT_1])
def test_in_a_50_column_terminal_watch_shows_whole_lines(plane, tmp_path, job) -> None:
    session = f"opd-watch-{os.getpid()}-{job['job_id'][-4:]}"
    done = tmp_path / "done"
    command = (f"cd {tmp_path} && {PY} -m opd_nb watch {job['job_id']} --local {plane.url}; "
               f"touch {done}; sleep 60")  # fmt: skip
    env = {k: v for k, v in _env().items() if k != "COLUMNS"}
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "50", "-y", "60", command], env=env,
                   check=True)  # fmt: skip
    try:
        for _ in range(300):
            if done.exists():
                break
            time.sleep(0.2)
        screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", session, "-S", "-200"],
                                capture_output=True, text=True, check=True).stdout  # fmt: skip
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    lines = screen.splitlines()
    assert done.exists() and all(len(line) <= 50 for line in lines), screen
    bottoms = [line for line in lines if line.startswith("└")]
    assert bottoms and all(line.rstrip().endswith("┘") for line in bottoms), screen
    assert "None" not in screen and "…" not in screen, screen
    assert ("12/12" if job is ENDED else "step 1") in screen, screen
