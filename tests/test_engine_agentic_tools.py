"""The engine runs the agentic template's own rollout function (its tool loop) on real model output.

The bundled teacher, served as the student, calls the example tool on every tool-using row, so
these jobs exercise the tool loop from the first step: a well-formed trajectory trains every
assistant turn, and the template's tool loop with a planted bug (tool results sent as ``user``)
fails the job with ``malformed trajectory:`` lines that name the problem.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from opd_nb.engine.api import EngineError, EngineJob, RewardEndpoint, RolloutEndpoint  # noqa: E402
from opd_nb.engine.models import default_pair  # noqa: E402
from opd_nb.engine.trainer import ListEvents, run  # noqa: E402
from opd_nb.engine.trajectory import MALFORMED  # noqa: E402
from opd_nb.functions.server import FunctionServer  # noqa: E402
from opd_nb.workspace.new import create  # noqa: E402

pytestmark = pytest.mark.slow
torch.set_num_threads(2)

ROLLOUT = "functions/rollout/rollout.py:RolloutProcessor"
REWARD = "functions/reward/reward.py:RewardProcessor"


def agentic_workspace(tmp: Path, *, bug: bool = False) -> Path:
    """An agentic workspace from the template; with `bug`, its tool loop sends results as ``user``."""
    ws = Path(create("agentic", tmp / "ws").path)
    if bug:
        rollout = ws / "functions" / "rollout" / "rollout.py"
        text = rollout.read_text()
        assert text.count('"role": "tool",') == 1
        rollout.write_text(text.replace('"role": "tool",', '"role": "user",'))
    for name, n in (("train.jsonl", 8), ("validation.jsonl", 4)):
        path = ws / "data" / name
        path.write_text("".join(path.read_text().splitlines(keepends=True)[:n]))
    return ws


def teacher_as_student_job(tmp: Path, ws: Path, rollout_url: str, reward_url: str) -> EngineJob:
    """A two-step job whose student is the teacher (which already calls the tool), at a local learning rate
    small enough that the reward's policy-gradient term leaves its habits intact."""
    _, teacher = default_pair()
    return EngineJob(
        job_id="job-tools",
        student_path=str(teacher),
        teacher_path=str(teacher),
        train_file=str(ws / "data" / "train.jsonl"),
        validation_file=str(ws / "data" / "validation.jsonl"),
        hyper_parameters={
            "learning_rate": 1e-6,
            "batch_size": 4,
            "n_rollouts": 2,
            "ppo_mini_batch_size": 8,
            "eval_steps": 2,
            "save_strategy": "no",
            "max_prompt_length": 64,
            "max_length": 208,
        },
        rollout=RolloutEndpoint(name="rollout-1", url=rollout_url, concurrency=8),
        rewards=[RewardEndpoint(name="reward-1", url=reward_url)],
        output_dir=str(tmp / "out"),
        local_learning_rate=1e-5,
    )


def test_the_template_tool_loop_trains_every_assistant_turn(tmp_path: Path) -> None:
    ws = agentic_workspace(tmp_path)
    with FunctionServer.start(ws, "rollout", ROLLOUT) as rs, FunctionServer.start(ws, "reward", REWARD) as fs:
        ev = ListEvents()
        res = run(teacher_as_student_job(tmp_path, ws, rs.url, fs.url), ev, lambda: False)
    assert res.steps == 2
    steps = [r for r in ev.rows if r["step"] > 0]
    # sampled at temperature 1, the teacher still calls the tool in most rollouts (~0.8 per rollout)
    assert all(r["trace/rollout_metrics/tool_calls"] >= 0.5 for r in steps), steps
    assert all(r["trace/rollout_metrics/turns"] >= 1.5 for r in steps)
    assert all(r["trace/rollout/failure_rate"] == 0.0 for r in steps)
    # the tool messages are context only: every trained token is a teacher-scored assistant token
    assert all(r["trace/distillation/valid_token_rate"] == 1.0 for r in steps)
    evals = [r for r in ev.rows if "validation/data/reward/mean@1" in r]
    assert all(r["validation/data/reward/mean@1"] >= 0.75 for r in evals), evals
    assert not any(MALFORMED in m for _, m in ev.logs)
    assert not any("not generated through the student endpoint" in m for _, m in ev.logs)


def test_tool_results_sent_as_user_fail_the_job_naming_the_problem(tmp_path: Path) -> None:
    ws = agentic_workspace(tmp_path, bug=True)
    with FunctionServer.start(ws, "rollout", ROLLOUT) as rs, FunctionServer.start(ws, "reward", REWARD) as fs:
        ev = ListEvents()
        with pytest.raises(EngineError, match="malformed trajectory: tool result with another role") as err:
            run(teacher_as_student_job(tmp_path, ws, rs.url, fs.url), ev, lambda: False)
    assert "messages[3]" in str(err.value) and '"role": "tool"' in str(err.value)
    lines = [m for _, m in ev.logs if m.startswith(MALFORMED)]
    assert lines and all("fix the rollout function:" in m for m in lines)
    assert "'user' message" in lines[0]


def test_failed_rollout_calls_are_dropped_and_the_job_goes_on(tmp_path: Path) -> None:
    """A rollout that reports a failure for one prompt (status FAILED, as the template does when its model
    endpoint fails) costs that prompt's samples only: the step trains on the rest and says what failed."""
    ws = agentic_workspace(tmp_path)
    first = json.loads((ws / "data" / "train.jsonl").read_text().splitlines()[0])
    digits = first["messages"][-1]["content"]
    rollout = ws / "functions" / "rollout" / "rollout.py"
    text = rollout.read_text()
    anchor = "        messages: list[dict[str, Any]] = [dict(m) for m in input_data.messages]\n"
    assert text.count(anchor) == 1
    planted = f"        if input_data.messages[-1]['content'] == {digits!r}:\n"
    planted += "            return self._output(input_data, list(input_data.messages), 0, 0, False, error='planted')\n"
    rollout.write_text(text.replace(anchor, anchor + planted))
    with FunctionServer.start(ws, "rollout", ROLLOUT) as rs, FunctionServer.start(ws, "reward", REWARD) as fs:
        ev = ListEvents()
        res = run(teacher_as_student_job(tmp_path, ws, rs.url, fs.url), ev, lambda: False)
    assert res.steps == 2
    rates = [r["trace/rollout/failure_rate"] for r in ev.rows if r["step"] > 0]
    assert sorted(rates) == [0.0, 0.25], rates  # the planted prompt's 2 of 8 calls, in one of the 2 steps
    failed = [m for _, m in ev.logs if "rollouts failed in" in m]
    assert len(failed) == 1 and "2/8" in failed[0] and "planted" in failed[0], failed
