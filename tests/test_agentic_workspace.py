"""An agentic workspace from the template, submitted with its own ``submit_job.py --local --wait``.

The rehearsal really calls tools. The bundled student can use the example tool but seldom reaches for it
(about 15% of its samples, none of its greedy turns); the teacher calls it on every tool-using row. A short
job with the template's own settings (learning rate included) teaches the student to call: over its last
three steps ``trace/rollout_metrics/tool_calls`` averages at least 0.4 per rollout and ``turns`` at least
1.4, and ``validation/data/reward/mean@1`` rises by at least 0.2. (One step of 64 rollouts is noisy: an 8-step
job's last-three-step mean ranged 0.40-0.79 over 23 runs, and one in about ten ended below a check, so
the job has 16 steps.) The recorded rollouts hold the
multi-turn trajectory: the call (trained), the ``tool`` message (context only) and the answer.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import sdk_env, tiny_workspace

from opd_nb.constants import SUCCEEDED
from opd_nb.demo import parse_job_id

pytestmark = pytest.mark.slow

# 256 tool-using rows, one epoch of the template's 16 prompts x 4 rollouts (16 steps; notebook 03 runs the
# same job), validated on 32 rows every 5 steps and at the end. Everything else (learning rate, lengths) is the template's.
HP = {"n_epochs": 1, "batch_size": 16, "n_rollouts": 4, "ppo_mini_batch_size": 32, "eval_steps": 5}


def last_steps_mean(rows: list[dict], key: str, n: int = 3) -> float:
    values = [r[key] for r in rows if key in r and r["step"] > 0]
    tail = values[-n:]
    return sum(tail) / len(tail)


def test_template_workspace_learns_to_call_its_tool(local_server, tmp_path: Path) -> None:
    from opd_nb.client import JobClient, resolve_target

    ws = tiny_workspace("agentic", tmp_path / "ws", train_rows=256, val_rows=32, **HP)
    proc = subprocess.run(
        [sys.executable, "submit_job.py", "--local", local_server.api_base, "--wait"],
        cwd=ws,
        env=sdk_env(local_server),
        capture_output=True,
        text=True,
        timeout=600,
    )
    job_id = parse_job_id(proc.stdout)
    assert proc.returncode == 0 and job_id, proc.stdout[-3000:] + proc.stderr[-3000:]
    client = JobClient(resolve_target("local", base_url=local_server.api_base))
    assert client.get(job_id).status == SUCCEEDED
    rows = client.metrics(job_id) or []
    calls = [r["trace/rollout_metrics/tool_calls"] for r in rows if r["step"] > 0]
    assert calls[0] < 0.3, calls  # the student starts out seldom calling the tool
    assert last_steps_mean(rows, "trace/rollout_metrics/tool_calls") >= 0.4, calls
    assert last_steps_mean(rows, "trace/rollout_metrics/turns") >= 1.4
    val = [r["validation/data/reward/mean@1"] for r in rows if "validation/data/reward/mean@1" in r]
    assert val[-1] - val[0] >= 0.2, val
    assert all(r["trace/distillation/valid_token_rate"] == 1.0 for r in rows if r["step"] > 0)

    # the viewer's records hold the multi-turn trajectory: call (trained), tool result (context), answer
    page = client.rollouts(job_id, kind="train")
    with_tool = [r for r in page.rollouts if any(m.get("role") == "tool" for m in r["messages"])]
    assert with_tool, page.rollouts[:1]
    messages = with_tool[0]["messages"]
    assert next(m for m in messages if m.get("tool_calls")).get("trained") is True
    assert all(m.get("trained") is not True for m in messages if m.get("role") == "tool")
    assert messages[-1]["role"] == "assistant" and messages[-1].get("trained") is True
    log = "\n".join(client.logs(job_id, lines=10000).lines)
    assert "malformed trajectory:" not in log
