"""A failed job's log ends with its cause (the docs say to read the end of a failed job's log), and a
function server's own lines keep their own level: its "200 OK" access lines stay INFO (issue 51)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import SDK_SUBMIT, run_sdk, tiny_workspace, wait_status

pytest.importorskip("torch")

# A reward whose metric is text: the SDK's `Reward` refuses it inside `process`, so every call fails.
TEXT_METRIC = """
from dashscope.finetune.reinforcement import Reward, RewardOutput

from functions.reward.reward import RewardProcessor


class TextMetric(RewardProcessor):
    async def process(self, input_data):
        return RewardOutput(reward=Reward(reward_score=1.0, reward_metrics={"verdict": "right"}))
"""

LEVEL = re.compile(r"^\[(DEBUG|INFO|WARNING|ERROR|CRITICAL)\] ")


@pytest.mark.slow
def test_a_failed_reward_jobs_log_ends_with_its_cause_and_function_lines_keep_their_level(
    local_server, tmp_path: Path
) -> None:
    from opd_nb.client import JobClient, resolve_target

    ws = tiny_workspace("reward", tmp_path / "ws", save_strategy="no")
    (ws / "functions" / "reward" / "text_metric.py").write_text(TEXT_METRIC)
    config = ws / "config.yaml"
    config.write_text(
        config.read_text().replace(
            "functions/reward/reward.py:RewardProcessor", "functions/reward/text_metric.py:TextMetric"
        )
    )
    proc = run_sdk(local_server, SDK_SUBMIT, ws)
    assert proc.returncode == 0, proc.stderr[-3000:]
    job_id = next(ln for ln in proc.stdout.splitlines() if ln.startswith("JOB ")).split()[1]
    client = JobClient(resolve_target("local", base_url=local_server.api_base))
    job = wait_status(client, job_id, {"SUCCEEDED", "FAILED", "CANCELED"}, timeout=300)
    lines = client.logs(job_id, lines=10000).lines
    assert job.status == "FAILED", "\n".join(lines[-30:])
    # The cause is the last lines, the job's message whole; what the function server wrote comes before it.
    cause = f"FAILED: {job.message}".splitlines()
    assert [LEVEL.sub("", ln)[20:] for ln in lines[-len(cause) :]] == cause, lines[-12:]
    assert all(ln.startswith("[ERROR] ") for ln in lines[-len(cause) :])
    assert "verdict" in job.message and "valid number" in job.message, job.message
    functions = [ln for ln in lines if "[reward function]" in ln]
    assert functions, lines[-30:]
    assert lines.index(functions[-1]) < len(lines) - len(cause)
    # Each function line carries the level it was written with: an access line "200 OK" is INFO, not ERROR.
    ok_lines = [ln for ln in functions if "200 OK" in ln or "INFO:" in ln]
    assert ok_lines and all(ln.startswith("[INFO] ") for ln in ok_lines), functions
    assert all(LEVEL.match(ln) for ln in functions), functions


@pytest.mark.parametrize(
    ("line", "previous", "level"),
    [
        ('INFO:     127.0.0.1:56916 - "POST /api/v1 HTTP/1.1" 200 OK', "ERROR", "INFO"),
        ("WARNING:  Invalid HTTP request received.", "INFO", "WARNING"),
        (
            "2026-12-05 17:32:36,689 - dashscope.finetune.reinforcement - INFO - [Server] /api/v1",
            "ERROR",
            "INFO",
        ),
        ("2026-12-05 17:32:36,689 - my_reward - ERROR - could not score", "INFO", "ERROR"),
        ("[WARNING] slow answer", "INFO", "WARNING"),
        ("Traceback (most recent call last):", "INFO", "ERROR"),
        ("pydantic_core._pydantic_core.ValidationError: 1 validation error for Reward", "INFO", "ERROR"),
        ("  Input should be a valid number", "ERROR", "ERROR"),  # a message's continuation keeps its level
        ("scored 3 answers", "INFO", "INFO"),  # the user's own print
    ],
)
def test_a_function_servers_line_keeps_the_level_it_was_written_at(
    line: str, previous: str, level: str
) -> None:
    from opd_nb.server.job.function_deaths import function_line_level

    assert function_line_level(line, previous) == level
