"""Deaths named for what they are (issue 48): a function server that dies under a job is the
platform's failure, restarted once as the cloud would, and named (the signal or exit code) if it dies
again; an error the user's code raises keeps the user-code message; a function server's own log lines
keep their own level in the job's log.

Before: `kill -9` of a function server mid-job FAILED the job in 4 s with "...Connection refused. Fix
the reward code... and resubmit", with the function server's healthy INFO lines copied at ERROR.
"""

from __future__ import annotations

import json
import os
import signal
import textwrap
import time
from pathlib import Path

import httpx
import pytest
from server_http import H, job_logs, job_view, register_reward, wait_until

from opd_nb.engine.keepalive import KeptConnections
from opd_nb.engine.task import make_rows
from opd_nb.functions import reward_call
from opd_nb.functions.server import FunctionServer
from opd_nb.server import start
from opd_nb.server.job.function_deaths import DIED_CODE, FunctionWatch, function_log_lines

REWARD = textwrap.dedent("""
    from dashscope.finetune.reinforcement import AbstractRewardProcessor, Reward, RewardInput, RewardOutput


    class One(AbstractRewardProcessor):
        async def process(self, input_data: RewardInput) -> RewardOutput:
            if input_data.ground_truth == "exit":
                import os

                os._exit(3)  # the process ends mid-call, as a crashing extension would end it
            return RewardOutput(reward=Reward(reward_score=1.0))
""")
BODY = (
    reward_call.reward_request(
        [{"role": "assistant", "content": "1"}], {}, "1", job_id="j", sample_id="s", rollout_id="0"
    )
    .model_dump_json()
    .encode()
)


# ---- the log's levels (no process) -------------------------------------------------------------
def test_a_function_servers_lines_keep_their_own_level() -> None:
    lines = [
        "INFO:     Started server process [4242]",
        "INFO:     Uvicorn running on http://127.0.0.1:40000 (Press CTRL+C to quit)",
        'INFO:     127.0.0.1:5000 - "POST /api/v1 HTTP/1.1" 200 OK',
        "WARNING:  Invalid HTTP request received.",
        "a print of the user's code",
        "ERROR:    Exception in ASGI application",
        "Traceback (most recent call last):",
        '  File "reward.py", line 3, in process',
        "ValueError: boom",
        "INFO:     Shutting down",
        "[ERROR] a logger of the user's code",
        "after it, a print again",
    ]
    got = [level for level, _ in function_log_lines(lines, "reward function")]
    assert got == ["INFO", "INFO", "INFO", "WARNING", "INFO", "ERROR", "ERROR", "ERROR", "ERROR", "INFO",
                   "ERROR", "INFO"]  # fmt: skip
    assert all(
        line.startswith("[reward function] ") for _, line in function_log_lines(lines, "reward function")
    )


# ---- the watch, on real function servers (no job) ------------------------------------------------
@pytest.fixture()
def served(tmp_path: Path):
    (tmp_path / "rw.py").write_text(REWARD)
    server = FunctionServer.start(tmp_path, "reward", "rw.One", log_path=tmp_path / "fn.log")
    said: list[tuple[str, str]] = []
    watch = FunctionWatch([], [], lambda message, level: said.append((level, message)), startup_s=60)
    watch.add(server, "reward function 'reward-1'")
    watch.start()
    try:
        yield server, watch, said
    finally:
        watch.stop()
        server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV])
def test_a_killed_function_server_is_restarted_once_on_its_port_and_calls_wait_for_it(served, sig) -> None:
    server, watch, said = served
    url, first = server.url, server.pid
    calls = KeptConnections(url, reconnect_s=60)
    assert calls.post(BODY, 10)[0] == 200
    os.kill(first, sig)
    status, _ = calls.post(BODY, 10)  # refused or reset meanwhile: it waits for the restarted server
    assert status == 200 and server.url == url and server.pid != first
    wait_until(lambda: any("serving again" in m for _, m in said), 30, "the restart to be said")
    died = next(m for level, m in said if level == "ERROR")
    assert f"(pid {first}) killed by {sig.name}" in died and "not an error in your code" in died, said
    assert "restarting it" in died and watch.restarts == [1] and watch.given_up is None

    second = server.pid
    os.kill(second, sig)  # a second death: not restarted, and the job's failure names it
    wait_until(lambda: watch.given_up is not None, 30, "the second death to be seen")
    assert not server.alive()
    message = watch.failure(RuntimeError("the step failed"))
    assert message is not None and f"(pid {second}) killed by {sig.name}" in message
    assert "not an error in your code" in message and "Fix the reward code" not in message
    began = time.monotonic()
    with pytest.raises(ConnectionError):  # given up on: the call does not wait out its 60 s
        calls.post(BODY, 5)
    assert time.monotonic() - began < 30
    calls.close()


@pytest.mark.slow
def test_a_function_server_that_exits_is_named_by_its_exit_code(served) -> None:
    server, watch, said = served
    pid = server.pid
    ending = reward_call.reward_request([{"role": "assistant", "content": "1"}], {}, "exit", job_id="j",
                                        sample_id="s", rollout_id="0")  # fmt: skip
    with pytest.raises(ConnectionError):  # no reply: the process ended under the call
        KeptConnections(server.url).post(ending.model_dump_json().encode(), 10)
    wait_until(lambda: any("serving again" in m for _, m in said), 60, "the restart")
    assert any(f"(pid {pid}) exit code 3" in m for _, m in said), said
    assert KeptConnections(server.url).post(BODY, 10)[0] == 200


# ---- a job on a real control plane ---------------------------------------------------------------
TINY = {"batch_size": 4, "n_rollouts": 2, "ppo_mini_batch_size": 8, "max_prompt_length": 40,
        "max_length": 48, "eval_steps": 1000}  # fmt: skip


def _submit(api: str, reward_id: str, rows: int, epochs: int) -> str:
    body = "".join(json.dumps(r) + "\n" for r in make_rows(rows, seed=3)).encode()
    up = httpx.post(api + "/files", headers=H, files={"files": ("t.jsonl", body)}, timeout=60).json()
    job = {
        "model": "qwen3-8b",
        "teacher_model": "qwen3-max",
        "training_type": "pg_opd",
        "training_datasets": [{"type": "training", "file_id": up["data"]["uploaded_files"][0]["file_id"]}],
        "hyper_parameters": {**TINY, "n_epochs": epochs},
        "rewards": [{"reward_id": reward_id, "name": "reward-1", "weight": 1.0}],
    }
    resp = httpx.post(api + "/fine-tunes", headers=H, json=job)
    assert resp.status_code == 200, resp.text
    return resp.json()["output"]["job_id"]


def _listener(url: str) -> int:
    """The function server's pid: of the processes listening on `url`'s port (a server and the workers
    it forks share the socket), the one whose parent is not among them. Killing a worker would only make
    the server fork another, which is no death of the function server."""
    import psutil

    port = int(url.rsplit(":", 1)[1])
    pids = {
        c.pid
        for c in psutil.net_connections("tcp")
        if c.laddr.port == port and c.status == "LISTEN" and c.pid
    }
    owners = [pid for pid in pids if psutil.Process(pid).ppid() not in pids]
    return min(owners or pids)


def _served_at(api: str, job_id: str, words: str) -> str:
    """The URL after `words` in the job's log ("serving at", "serving again at")."""
    line = wait_until(
        lambda: next((ln for ln in job_logs(api, job_id) if words in ln), None), 120, f"'{words}' in the log"
    )
    return line.split(words + " ")[1].split()[0]


def _step(api: str, job_id: str) -> int:
    return (job_view(api, job_id).get("progress") or {}).get("step") or 0


@pytest.mark.slow
def test_sigkill_of_a_function_server_mid_job_restarts_it_and_a_second_fails_naming_the_signal(
    tmp_path,
) -> None:
    with start(port=0, data_dir=tmp_path / "data") as server:
        api = server.api_base
        reward_id = register_reward(api, tmp_path)
        job_id = _submit(api, reward_id, rows=32, epochs=20)
        wait_until(lambda: _step(api, job_id) >= 2, 240, "the job's second step")
        url = _served_at(api, job_id, "serving at")
        first = _listener(url)
        os.kill(first, signal.SIGKILL)
        assert _served_at(api, job_id, "serving again at") == url  # the same port: the engine's URL holds
        at_restart = _step(api, job_id)
        wait_until(lambda: _step(api, job_id) >= at_restart + 2, 240, "steps after the restart")
        assert job_view(api, job_id)["status"] == "RUNNING"
        died = next(ln for ln in job_logs(api, job_id) if f"(pid {first}) killed by SIGKILL" in ln)
        assert died.startswith("[ERROR]") and "not an error in your code" in died

        again = _listener(url)
        os.kill(again, signal.SIGKILL)
        done = wait_until(
            lambda: (j := job_view(api, job_id))["status"] in ("FAILED", "SUCCEEDED") and j, 240, "the end"
        )
        assert done["status"] == "FAILED" and done["code"] == DIED_CODE, done
        assert f"(pid {again}) killed by SIGKILL" in done["message"], done["message"]
        assert "Fix the reward code" not in done["message"] and "not an error in your code" in done["message"]


BROKEN = textwrap.dedent("""
    from dashscope.finetune.reinforcement import AbstractRewardProcessor, RewardInput, RewardOutput


    class Broken(AbstractRewardProcessor):
        async def process(self, input_data: RewardInput) -> RewardOutput:
            raise ValueError("this reward is broken on purpose")
""")


@pytest.mark.slow
def test_a_reward_that_raises_keeps_the_user_code_message_and_its_logs_own_levels(
    local_server, tmp_path
) -> None:
    api = local_server.api_base
    reward_id = register_reward(api, tmp_path, extra=BROKEN, func="Broken", key="rw-broken48")
    job_id = _submit(api, reward_id, rows=8, epochs=1)
    done = wait_until(
        lambda: (j := job_view(api, job_id))["status"] in ("FAILED", "SUCCEEDED") and j, 240, "the end"
    )
    assert done["status"] == "FAILED" and done["code"] != DIED_CODE, done
    assert "Fix the reward code" in done["message"] and "this reward is broken" in done["message"], done
    copied = [ln for ln in job_logs(api, job_id) if "[reward function] " in ln]
    assert copied, "the function server's lines are in the job's log"
    assert all(not ln.startswith("[ERROR]") for ln in copied if "[reward function] INFO:" in ln), copied
    assert any(ln.startswith("[INFO]") for ln in copied), copied
