"""The unmodified SDK registers, loads, tests, reads logs of and deletes a function on `opd serve`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import run_sdk, sdk_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reward_ws(tmp_path_factory):
    from opd_nb.workspace.new import create

    return create("reward", tmp_path_factory.mktemp("ws") / "rw").path


REGISTER_AND_TEST = r"""
import asyncio, json
from dashscope.finetune.agentic_rl import AgenticRL
from dashscope.finetune.reinforcement import FunctionType

async def main():
    rl = AgenticRL().init(config_path="config.yaml")
    ids = await rl.register_functions(lazy_load=False)
    instance = ids[4][0]
    good = {"ground_truth": "123", "rollout_extra": {"solution": "123"},
            "agent_output": {"messages": [{"role": "user", "content": "321"},
                                          {"role": "assistant", "content": "<think>sort</think>123"}],
                             "rollout_extra": {"solution": "123"}}}
    out = await AgenticRL.test_functions(instance, FunctionType.REWARD, good)
    logs = await AgenticRL.query_all_function_instance_logs(instance)
    deleted = await AgenticRL.delete_function_instance(instance)
    print(json.dumps({"ids": ids, "score": out["reward"]["reward_score"], "status": str(out["status"]),
                      "n_logs": len(logs), "log_text": "\n".join(logs)[-2000:], "deleted": deleted}, default=str))

asyncio.run(main())
"""


def test_register_load_test_logs_delete(local_server, reward_ws, api):
    proc = run_sdk(local_server, REGISTER_AND_TEST, reward_ws, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    entity, instance = out["ids"][1][0], out["ids"][4][0]
    assert entity.startswith("rw-") and instance.startswith("rw-ins-")
    assert out["score"] > 0, out  # the template reward scores a correct answer positively
    assert out["n_logs"] > 0 and "POST /api/v1" in out["log_text"], out["log_text"]  # the call we just made
    # deleted: the instance is gone for the SDK and the server
    err = api.post(f"/fine-tunes/query/faas/{instance}", json={})
    assert err.status_code == 404


def test_cli_register_and_test_functions(local_server, reward_ws):
    """`dashscope rl register_functions --no-lazy-load` then `dashscope rl test_functions`."""
    env = sdk_env(local_server)
    cli = [sys.executable, "-m", "dashscope.cli"]
    probe = subprocess.run([*cli, "--help"], env=env, capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        cli = [str(__import__("pathlib").Path(sys.executable).parent / "dashscope")]
    reg = subprocess.run(
        [
            *cli,
            "rl",
            "register_functions",
            "--reward-classpaths",
            "functions/reward/reward.py:RewardProcessor",
            "--workspace-dir",
            "./",
            "--no-lazy-load",
            "-o",
            "json",
        ],
        cwd=reward_ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert reg.returncode == 0, reg.stderr[-2000:] + reg.stdout[-2000:]
    instance = next(tok.strip('",') for tok in reg.stdout.split() if tok.strip('",').startswith("rw-ins-"))
    payload = json.dumps(
        {
            "ground_truth": "12",
            "agent_output": {
                "messages": [{"role": "assistant", "content": "<think>x</think>12"}],
                "rollout_extra": {"solution": "12"},
            },
            "rollout_extra": {"solution": "12"},
        }
    )
    test = subprocess.run(
        [*cli, "rl", "test_functions", instance, "-t", "REWARD", "-i", payload, "-o", "json"],
        cwd=reward_ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert test.returncode == 0, test.stderr[-2000:] + test.stdout[-2000:]
    assert "reward_score" in test.stdout
