"""The engine with user functions served the cloud's way (the SDK's function server in a subprocess).

Reward: loss falls and validation/data/reward/mean@1 rises; a reward that raises on every call
fails the job with its error in the job log. Agentic: a rollout function drives the student
through the engine's local OpenAI-compatible endpoint over two turns.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from opd_nb.engine import task  # noqa: E402
from opd_nb.engine.api import EngineError, EngineJob, RewardEndpoint, RolloutEndpoint  # noqa: E402
from opd_nb.engine.models import default_pair  # noqa: E402
from opd_nb.engine.trainer import ListEvents, run  # noqa: E402
from opd_nb.functions.server import FunctionServer  # noqa: E402

torch.set_num_threads(2)

REWARDS = textwrap.dedent('''
    import re

    from dashscope.finetune.reinforcement import AbstractRewardProcessor, Reward, RewardInput, RewardOutput


    class CleanExact(AbstractRewardProcessor):
        """1.0 when the answer after the thinking block equals the solution."""

        async def process(self, input_data: RewardInput) -> RewardOutput:
            msgs = input_data.agent_output.messages or []
            text = (msgs[-1].get("content") or "") if msgs else ""
            text = re.sub(r"<think>.*?</think>", "", text, flags=re.S).strip()
            ok = float(text == str(input_data.ground_truth))
            return RewardOutput(reward=Reward(reward_score=ok, reward_metrics={"exact": ok, "chars": float(len(text))}))


    class Slow(AbstractRewardProcessor):
        """CleanExact a second later (to see the engine go on meanwhile)."""

        async def process(self, input_data: RewardInput) -> RewardOutput:
            import asyncio

            await asyncio.sleep(1.0)
            return await CleanExact().process(input_data)


    class Boom(AbstractRewardProcessor):
        async def process(self, input_data: RewardInput) -> RewardOutput:
            raise RuntimeError("boom: this reward is broken on purpose")
''')

ROLLOUT = textwrap.dedent('''
    import httpx

    from dashscope.finetune.reinforcement import AbstractRolloutProcessor, AgentOutput, RolloutInput, RolloutOutput


    class TwoTurns(AbstractRolloutProcessor):
        """Asks the student twice (the user repeats the digits), as a multi-turn agent would."""

        async def process(self, input_data: RolloutInput) -> RolloutOutput:
            mr = input_data.model_resource
            msgs = [dict(m) for m in input_data.messages]
            headers = {"Authorization": f"Bearer {mr.api_key.get_secret_value()}"}
            async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
                for turn in range(2):
                    r = await client.post(f"{mr.base_url}/chat/completions", headers=headers, json={
                        "model": mr.model_name, "messages": msgs, "temperature": 1.0, "max_tokens": 24})
                    r.raise_for_status()
                    msgs.append(r.json()["choices"][0]["message"])
                    if turn == 0:
                        msgs.append({"role": "user", "content": input_data.messages[-1]["content"]})
            return RolloutOutput(agent_output=AgentOutput(messages=msgs, rollout_extra=input_data.rollout_extra,
                                                          rollout_metrics={"turns": 2.0}))
''')


@pytest.fixture()
def code_dir(tmp_path: Path) -> Path:
    d = tmp_path / "fn"
    d.mkdir()
    (d / "my_rewards.py").write_text(REWARDS)
    (d / "my_rollout.py").write_text(ROLLOUT)
    return d


def files(tmp: Path, n_train: int, n_val: int) -> tuple[str, str]:
    val = task.make_rows(n_val, seed=20_000)
    train = task.make_rows(n_train, seed=3, exclude={r["messages"][-1]["content"] for r in val})
    for name, rows in (("train", train), ("validation", val)):
        (tmp / f"{name}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(tmp / "train.jsonl"), str(tmp / "validation.jsonl")


def job(tmp: Path, train: str, val: str | None, **kw) -> EngineJob:
    student, teacher = default_pair()
    hp = {"learning_rate": 1e-6, "lr_scheduler_type": "constant", "max_length": 48, "save_strategy": "no"}
    hp.update(kw.pop("hp", {}))
    return EngineJob(
        job_id="job-fn",
        student_path=str(student),
        teacher_path=str(teacher),
        train_file=train,
        validation_file=val,
        hyper_parameters=hp,
        output_dir=str(tmp / "out"),
        **kw,
    )


@pytest.mark.slow
def test_reward_through_function_server_rises(tmp_path, code_dir):
    train, val = files(tmp_path, 640, 96)
    with FunctionServer.start(code_dir, "reward", "my_rewards.CleanExact") as fs:
        ep = RewardEndpoint(name="exact", url=fs.url, weight=1.0, timeout=30, concurrency=8)
        ev = ListEvents()

        def risen() -> bool:  # stop early once the reward has clearly risen (at least 20 steps in)
            m = ev.series("validation/data/reward/mean@1")
            return len(m) >= 3 and m[-1][1] >= m[0][1] + 0.25

        res = run(
            job(
                tmp_path,
                train,
                val,
                algorithm="gkd",
                rewards=[ep],
                hp={
                    "batch_size": 16,
                    "n_rollouts": 4,
                    "ppo_mini_batch_size": 64,
                    "eval_steps": 10,
                    "n_epochs": 2,
                },
            ),
            ev,
            risen,
        )
    assert 20 <= res.steps <= 80
    mean1 = ev.series("validation/data/reward/mean@1")
    assert mean1[0][0] == 0 and mean1[-1][0] == res.steps
    assert mean1[-1][1] >= mean1[0][1] + 0.2, mean1
    loss = [v for _, v in ev.series("actor/distillation/loss")]
    assert sum(loss[-5:]) < 0.7 * sum(loss[:5]), loss
    steps = [r for r in ev.rows if r["step"] > 0]
    assert all(r["trace/reward/failure_rate"] == 0.0 for r in steps)
    assert all(
        0.0 <= r["trace/reward_metrics/exact"] <= 1.0 and r["trace/reward_metrics/chars"] > 0 for r in steps
    )
    # the reward's exact match agrees with the engine's own accuracy on the same greedy samples
    acc = dict(ev.series("validation/accuracy"))
    assert all(abs(acc[s] - v) <= 0.03 for s, v in mean1)


@pytest.mark.slow
def test_reward_that_always_raises_fails_the_job(tmp_path, code_dir):
    train, _ = files(tmp_path, 32, 4)
    with FunctionServer.start(code_dir, "reward", "my_rewards.Boom") as fs:
        ev = ListEvents()
        with pytest.raises(EngineError, match="boom: this reward is broken on purpose") as err:
            run(
                job(
                    tmp_path,
                    train,
                    None,
                    rewards=[RewardEndpoint(name="boom", url=fs.url)],
                    hp={"batch_size": 4, "n_rollouts": 2, "ppo_mini_batch_size": 8},
                ),
                ev,
                lambda: False,
            )
    assert "'boom'" in str(err.value) and "step 1" in str(err.value)
    assert any(level == "ERROR" and "boom: this reward is broken on purpose" in m for level, m in ev.logs)


@pytest.mark.slow
def test_agentic_rollout_drives_the_student_endpoint(tmp_path, code_dir):
    train, val = files(tmp_path, 24, 8)
    with (
        FunctionServer.start(code_dir, "rollout", "my_rollout.TwoTurns") as rs,
        FunctionServer.start(code_dir, "reward", "my_rewards.CleanExact") as fs,
    ):
        ev = ListEvents()
        res = run(
            job(
                tmp_path,
                train,
                val,
                rollout=RolloutEndpoint(name="two-turns", url=rs.url, concurrency=8),
                rewards=[RewardEndpoint(name="exact", url=fs.url)],
                hp={
                    "batch_size": 4,
                    "n_rollouts": 2,
                    "ppo_mini_batch_size": 8,
                    "eval_steps": 3,
                    "max_length": 96,
                },
            ),  # two turns need room for the first answer in context
            ev,
            lambda: False,
        )
    assert res.steps == 6
    steps = [r for r in ev.rows if r["step"] > 0]
    assert all(r["trace/rollout_metrics/turns"] == 2.0 for r in steps)
    assert all(r["trace/rollout/failure_rate"] == 0.0 for r in steps)
    assert all(
        r["response_length/mean"] > 0 and r["trace/distillation/valid_token_rate"] == 1.0 for r in steps
    )
    assert all("trace/reward_metrics/exact" in r for r in steps)
    # validation runs through the rollout function too (greedy, one rollout per row) and is scored by the reward
    evals = [r for r in ev.rows if "validation/data/reward/mean@1" in r]
    assert [r["step"] for r in evals] == [0, 3, 6]
    assert all(
        0.0 <= r["validation/data/reward/mean@1"] <= 1.0 and 0.0 <= r["validation/accuracy"] <= 1.0
        for r in evals
    )
    # every assistant turn was generated through the endpoint, so training used the recorded ids
    assert not any("not generated through the student endpoint" in m for _, m in ev.logs)
    assert any("agentic mode: student served at http://127.0.0.1:" in m for _, m in ev.logs)
    assert Path(res.final_checkpoint, "config.json").is_file()


def _samples(n: int) -> list:
    from opd_nb.engine.rewards import Sample

    rows = task.make_rows(n, seed=5)
    return [
        Sample(
            messages=r["messages"]
            + [{"role": "assistant", "content": f"<think>x</think>{r['rollout_extra']['solution']}"}],
            rollout_extra=r["rollout_extra"],
            group=i,
            sample_id=f"s-{i}",
            rollout_id="0",
        )
        for i, r in enumerate(rows)
    ]


def _client_ports(log: Path) -> list[str]:
    """Client ports of the POSTs in a function server's access log, in order."""
    return [
        line.split("127.0.0.1:")[1].split(" ")[0]
        for line in log.read_text().splitlines()
        if '"POST /api/v1' in line
    ]


@pytest.mark.slow
def test_reward_calls_keep_their_connections_and_run_beside_the_engine(tmp_path, code_dir):
    """One caller per job: the second step's calls reuse the first step's connections, submit returns
    while the calls are under way, and a broken reward still fails on the trainer's thread."""
    from opd_nb.engine.rewards import RewardCaller

    samples = _samples(8)
    caller = RewardCaller()
    try:
        with FunctionServer.start(
            code_dir, "reward", "my_rewards.CleanExact", log_path=tmp_path / "fn.log"
        ) as fs:
            ep = RewardEndpoint(name="exact", url=fs.url, concurrency=4)
            first = caller.submit([ep], samples, "job-fn", where="step 1").result()
            second = caller.submit([ep], samples, "job-fn", where="step 2").result()
            ports = _client_ports(tmp_path / "fn.log")
            port = int(fs.url.rsplit(":", 1)[1])
        assert first.totals == second.totals == [1.0] * 8
        # At most `concurrency` connections over both steps, and step 2 reuses step 1's. (Step 2 may
        # open one step 1 did not need: how many calls overlap depends on the machine's load.)
        assert len(ports) == 16 and len(set(ports)) <= 4, ports
        assert set(ports[8:]) & set(ports[:8]), ports

        # A server that went away closed the kept connections: the next calls open new ones, no failure.
        with FunctionServer.start(code_dir, "reward", "my_rewards.CleanExact", port=port) as fs:
            again = caller.submit([ep], samples, "job-fn", where="step 2b").result()
        assert again.totals == [1.0] * 8 and again.metrics["trace/reward/failure_rate"] == 0.0

        with FunctionServer.start(code_dir, "reward", "my_rewards.Slow") as fs:
            pending = caller.submit(
                [RewardEndpoint(name="slow", url=fs.url)], samples[:2], "job-fn", where="step 3"
            )
            assert not pending.done()  # the trainer's teacher pass runs meanwhile
            assert pending.result().totals == [1.0, 1.0] and pending.seconds >= 1.0

        with FunctionServer.start(code_dir, "reward", "my_rewards.Boom") as fs:
            pending = caller.submit(
                [RewardEndpoint(name="boom", url=fs.url)], samples[:2], "job-fn", where="step 4"
            )
            with pytest.raises(EngineError, match="failed every call.*step 4.*boom: this reward is broken"):
                pending.result()
    finally:
        caller.close()
