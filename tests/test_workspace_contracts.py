"""Generated workspaces against the seed documents' own forms (issue 26): what `opd test` must accept or catch.

Each test bakes a real workspace with `opd_nb.workspace.new.create`, changes it the way the seeds write
things, and runs the workspace's own pytest through `opd_nb.functions.testing.run_workspace_tests` (a fresh
subprocess, as `opd test` does).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from opd_nb.checks import check
from opd_nb.functions.testing import run_workspace_tests
from opd_nb.workspace.new import create


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
    preflight = check(ws)  # and opd check no longer says ready: the text metric is visible in the source
    assert not preflight.ok and preflight.by_rule("functions.metric-not-float")[0].where.startswith(
        "functions/reward/strings.py:"
    )


def _submit_dry_run(ws: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASHSCOPE_", "FC_"))}
    env["DASHSCOPE_API_KEY"] = "sk-" + "fake0123456789abcdefSECRET"
    return subprocess.run(
        [sys.executable, "submit_job.py", "--dry-run", *args],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_submit_job_known_keys_are_the_hyperparameter_table():
    """submit_job.py needs only the SDK, so it keeps its own copy of the key names; this keeps it equal."""
    from opd_nb.spec.hyperparams import params_in
    from opd_nb.workspace.new import template_dir

    script = next(template_dir().glob("*/submit_job.py"))
    consts = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in ast.parse(script.read_text()).body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in ("HYPER_PARAMETERS", "RESOURCES")
    }
    assert consts["HYPER_PARAMETERS"] == tuple(p.name for p in params_in("hyper_parameters"))
    assert consts["RESOURCES"] == tuple(p.name for p in params_in("resources"))


@pytest.mark.slow
def test_submit_job_set_mistakes_are_one_line_naming_the_field(tmp_path):
    """Defect 10 and the unknown-key contract: `--set` refuses what the SDK or the service would mishandle."""
    ws = Path(create("reward", tmp_path / "ws").path)
    cases = {
        "model=5": "`model` is a mapping in the config, not a value (set one key in it, e.g. --set model.name=",
        "training.hyper_parameters=5": "`training.hyper_parameters` is a mapping",
        "training.hyper_parameters.n_epoch=1": "unknown key `n_epoch`: the service would ignore it without a word "
        "(did you mean --set n_epochs=... (training.hyper_parameters.n_epochs)?)",
        "training.resources.n_epochs=1": "`n_epochs` belongs under training.hyper_parameters",
        "model.name=7": "config.yaml with --set: model.name: Input should be a valid string (got 7); "
        "--set VALUE is JSON, so quote text: --set 'model.name=\"7\"'",
    }
    for item, expected in cases.items():
        proc = _submit_dry_run(ws, "--set", item)
        assert proc.returncode == 2, (item, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], (
            item,
            proc.stderr,
        )
        assert "Traceback" not in proc.stderr and lines[0].count("Input should") <= 1
    ok = _submit_dry_run(ws, "--set", "training.hyper_parameters.n_epochs=2")
    assert ok.returncode == 0 and json.loads(ok.stdout)["hyper_parameters"]["n_epochs"] == 2


@pytest.mark.slow
def test_opd_submit_takes_set_and_dry_run(tmp_path, monkeypatch):
    """Defect 15: `opd submit` has `--set` (as client.submit(sets=...) does) and `--dry-run` (nothing sent)."""
    from opd_nb.cli import invoke
    from opd_nb.errors import OpdError

    ws = Path(create("reward", tmp_path / "ws").path)
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-" + "fake0123456789abcdefSECRET")
    plan = invoke(
        [
            "submit",
            str(ws),
            "--cloud",
            "--dry-run",
            "--set",
            "training.hyper_parameters.n_epochs=3",
            "--set",
            "name=exp-3",
            "--no-reward",
        ]
    )
    assert plan.job["hyper_parameters"]["n_epochs"] == 3 and plan.job["job_name"] == "exp-3-<8 hex>"
    assert plan.job["functions"] is None and plan.job["set"]["name"] == "exp-3"
    assert "nothing sent" in str(plan) and "fake0123456789" not in str(plan) + json.dumps(plan.to_payload())
    with pytest.raises(
        OpdError,
        match=r"unknown key `n_epoch`.*did you mean --set n_epochs=\.\.\. \(training.hyper_parameters.n_epochs\)",
    ):
        invoke(["submit", str(ws), "--cloud", "--dry-run", "--set", "training.hyper_parameters.n_epoch=3"])
    assert "nothing sent" in plan._repr_html_()
    monkeypatch.delenv("DASHSCOPE_API_KEY")  # a dry run sends nothing, so it needs no key
    monkeypatch.chdir(tmp_path)
    keyless = invoke(["submit", str(ws), "--cloud", "--dry-run"])
    assert keyless.job["api_key"] == "not set" and keyless.job["functions"][0]["type"] == "reward"
    with pytest.raises(OpdError, match="expected KEY=VALUE, got 'n_epochs'"):
        invoke(["submit", str(ws), "--cloud", "--dry-run", "--set", "n_epochs"])


@pytest.mark.parametrize("mode", ["pure-distill", "reward"])
def test_workspace_readme_lists_every_submit_job_flag(tmp_path, mode):
    """Defect 15: each option submit_job.py parses is documented in the generated README."""
    ws = Path(create(mode, tmp_path / "ws").path)
    flags = [
        arg.value
        for node in ast.walk(ast.parse((ws / "submit_job.py").read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"
        for arg in node.args
        if isinstance(arg, ast.Constant) and str(arg.value).startswith("-")
    ]
    assert {"--set", "--fresh", "--poll", "-v", "--dry-run"} <= set(flags)
    readme = (ws / "README.md").read_text()
    missing = [f for f in flags if f"`{f}" not in readme and f"/{f}`" not in readme]
    assert missing == [], missing
    assert ("FC_PYPI_LIB=./<wheel file>" in readme) == (mode == "reward")
