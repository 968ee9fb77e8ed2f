"""The SDK's own function server, run by FunctionServer, scores a real reward processor."""

from __future__ import annotations

import textwrap

import httpx
import pytest

from opd_nb.errors import OpdError
from opd_nb.functions.server import FunctionServer, classpath_to_module

REWARD = """
from dashscope.finetune.reinforcement import AbstractRewardProcessor, Reward, RewardInput, RewardOutput


class ExactReward(AbstractRewardProcessor):
    async def process(self, input_data: RewardInput) -> RewardOutput:
        text = (input_data.agent_output.messages or [{}])[-1].get("content", "")
        hit = text.strip() == str(input_data.ground_truth)
        return RewardOutput(reward=Reward(reward_score=float(hit), reward_metrics={"len": float(len(text))}))
"""


def _write_reward(root, body=REWARD):
    pkg = root / "functions" / "reward"
    pkg.mkdir(parents=True)
    (root / "functions" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "reward.py").write_text(textwrap.dedent(body))


def test_classpath_to_module_matches_sdk_start_sh():
    assert classpath_to_module("functions/reward/reward.py:R") == "functions.reward.reward.R"
    assert classpath_to_module("./functions/reward/reward.py:R") == "functions.reward.reward.R"
    assert classpath_to_module("functions.reward.reward.R") == "functions.reward.reward.R"
    with pytest.raises(OpdError):
        classpath_to_module("R")
    with pytest.raises(OpdError):
        classpath_to_module("/abs/reward.py:R")


@pytest.mark.slow
def test_function_server_scores_and_stops(tmp_path):
    _write_reward(tmp_path)
    with FunctionServer.start(tmp_path, "reward", "functions/reward/reward.py:ExactReward") as server:
        assert server.url.startswith("http://127.0.0.1:")
        body = {
            "func_type": "reward",
            "ground_truth": "123",
            "agent_output": {"messages": [{"role": "assistant", "content": "123"}]},
        }
        out = httpx.post(f"{server.url}/api/v1", json=body, timeout=10).json()
        assert out["reward"]["reward_score"] == 1.0
        assert out["reward"]["reward_metrics"] == {"len": 3.0}
        body["ground_truth"] = "321"
        assert (
            httpx.post(f"{server.url}/api/v1", json=body, timeout=10).json()["reward"]["reward_score"] == 0.0
        )
    assert not server.alive()


@pytest.mark.slow
def test_broken_function_reports_its_import_error(tmp_path):
    _write_reward(tmp_path, "import not_a_module_anywhere\n")
    with pytest.raises(OpdError) as info:
        FunctionServer.start(tmp_path, "reward", "functions/reward/reward.py:ExactReward", startup_timeout=30)
    assert "not_a_module_anywhere" in str(info.value)


def test_a_loaded_machine_can_give_function_servers_more_time_to_start(monkeypatch) -> None:
    """A job waits 90 s for its function servers; on a heavily loaded two-core machine importing the SDK
    alone passed that and failed the job before its first step. $OPD_FUNCTION_STARTUP_S gives more
    time; a value that is not seconds above 0 is a one-line error that names the variable."""
    from opd_nb.errors import OpdError
    from opd_nb.functions.server import startup_seconds
    from opd_nb.settings import FUNCTION_STARTUP_S

    startup_env = FUNCTION_STARTUP_S.name
    monkeypatch.delenv(startup_env, raising=False)
    assert startup_seconds() == 90.0
    monkeypatch.setenv(startup_env, "600")
    assert startup_seconds() == 600.0
    for bad in ("ten", "0", "-5", "nan"):
        monkeypatch.setenv(startup_env, bad)
        with pytest.raises(OpdError) as err:
            startup_seconds()
        assert startup_env in str(err.value) and err.value.fix
