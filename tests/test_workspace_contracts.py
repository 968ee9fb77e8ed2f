"""Generated workspaces against the seed documents' own forms (issue 26): what `opd test` must accept or catch.

Each test bakes a real workspace with `opd_nb.workspace.create`, changes it the way the seeds write
things, and runs the workspace's own pytest through `opd_nb.testing.run_workspace_tests` (a fresh
subprocess, as `opd test` does).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opd_nb.checks import check
from opd_nb.testing import run_workspace_tests
from opd_nb.workspace import create


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-test-key-for-checks")
    monkeypatch.delenv("DASHSCOPE_HTTP_BASE_URL", raising=False)


@pytest.mark.slow
def test_the_seeds_dotted_classpath_passes_the_generated_tests(tmp_path):
    """Defect 1: `functions.reward.reward.Class` (the seeds' form, which opd check suggests) passes opd test."""
    ws = Path(create("reward", tmp_path / "ws").path)
    config = ws / "config.yaml"
    text = config.read_text()
    assert "functions/reward/reward.py:RewardProcessor" in text
    config.write_text(
        text.replace("functions/reward/reward.py:RewardProcessor", "functions.reward.reward.RewardProcessor")
    )
    assert check(ws).ok
    report = run_workspace_tests(ws, extra_args=["tests/test_data.py"])
    assert report.ok and report.failed == 0 and report.passed >= 3, str(report)
    config.write_text(
        text.replace("functions/reward/reward.py:RewardProcessor", "functions.reward.rewards.RewardProcessor")
    )
    broken = run_workspace_tests(ws, extra_args=["tests/test_data.py"])
    failed = [c for c in broken.failures if c.name == "test_config_loads_with_the_sdk"]
    assert failed and "functions/reward/rewards.py does not exist" in failed[0].message, str(broken)


@pytest.mark.slow
def test_pure_distillation_rows_need_no_rollout_extra(tmp_path):
    """Defect 2: the seeds say pure distillation does not consume rollout_extra; its tests must not need it."""
    ws = Path(create("pure-distill", tmp_path / "ws").path)
    for name in ("train.jsonl", "validation.jsonl"):
        path = ws / "data" / name
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps({"messages": r["messages"]}) + "\n" for r in rows))
    assert check(ws).ok
    report = run_workspace_tests(ws)
    assert report.ok and report.failed == 0, str(report)


STRING_METRIC_REWARD = """
from dashscope.finetune.reinforcement import AbstractRewardProcessor, Reward, RewardInput, RewardOutput, TaskStatus


class StringMetric(AbstractRewardProcessor):
    async def process(self, input_data: RewardInput) -> RewardOutput:
        return RewardOutput(
            reward=Reward(reward_score=1.0, reward_metrics={"quality": "high"}), status=TaskStatus.SUCCESS
        )
"""


@pytest.mark.slow
def test_opd_test_reports_a_reward_that_raises_on_every_row(tmp_path):
    """Defect 3: a string metric makes the SDK's Reward raise on every call; opd test must say so, not pass."""
    ws = Path(create("reward", tmp_path / "ws").path)
    (ws / "functions" / "reward" / "strings.py").write_text(STRING_METRIC_REWARD)
    config = ws / "config.yaml"
    config.write_text(
        config.read_text().replace(
            "functions/reward/reward.py:RewardProcessor", "functions/reward/strings.py:StringMetric"
        )
    )
    report = run_workspace_tests(ws, extra_args=["tests/test_data.py"])
    assert report.failed == 0  # the workspace's own tests pass: only the probe tells
    assert not report.ok and len(report.errors) == 1, str(report)
    error = report.errors[0]
    assert "functions/reward/strings.py:StringMetric raised on 6 of 6 probe row(s)" in error
    assert "ValidationError" in error and "quality" in error
    assert "error: " in str(report) and "the reward raised on its own rows" in report.summary()
    assert report.to_payload()["ok"] is False
