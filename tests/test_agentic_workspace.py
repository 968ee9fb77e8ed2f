"""An agentic workspace from the template, submitted with its own ``submit_job.py --local --wait``.

The rehearsal really calls tools: with the bundled teacher as the student (``--model
local/tiny-teacher``, a model that has learnt the tool-using task), the template's rollout function
runs its tool loop on real model output every step (``trace/rollout_metrics/tool_calls`` near 1 per
rollout, ``turns`` near 2), and the recorded rollouts show the multi-turn trajectory: the call
(trained), the ``tool`` message (context only) and the answer.
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

# A short rehearsal: 16 tool-using rows, one epoch of 8 prompts x 2 rollouts (2 steps), at the smallest
# local learning rate (1e-4): the teacher is already trained, and the reward's policy-gradient term at the
# template's rate (local 1e-3) visibly unsettles its tool habit within a step.
HP = {
    "n_epochs": 1,
    "batch_size": 8,
    "n_rollouts": 2,
    "ppo_mini_batch_size": 16,
    "eval_steps": 1,
    "learning_rate": 1e-8,
}


def last_fifth_mean(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if key in r and r["step"] > 0]
    tail = values[-max(1, len(values) // 5) :]
    return sum(tail) / len(tail)


def test_template_workspace_runs_its_tool_loop_on_model_output(local_server, tmp_path: Path) -> None:
    from opd_nb.client import JobClient, resolve_target

    ws = tiny_workspace("agentic", tmp_path / "ws", train_rows=16, val_rows=8, **HP)
    proc = subprocess.run(
        [
            sys.executable,
            "submit_job.py",
            "--local",
            local_server.api_base,
            "--wait",
            "--model",
            "local/tiny-teacher",
        ],
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
    assert last_fifth_mean(rows, "trace/rollout_metrics/tool_calls") >= 0.5
    assert last_fifth_mean(rows, "trace/rollout_metrics/turns") >= 1.5
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
