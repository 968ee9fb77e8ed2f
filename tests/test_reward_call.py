"""Every reply the SDK's function server can give a reward call, read into one CallOutcome per answer.

Real function servers (the SDK's own app, as the cloud runs it) serve processors that answer in
each shape; training, `opd eval` and the playground read them through `opd_nb.functions.reward_call` and so
word a broken reward the same way.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from opd_nb.functions import reward_call
from opd_nb.functions.server import FunctionServer

pytestmark = pytest.mark.slow

SHAPES = textwrap.dedent('''
    import asyncio

    from dashscope.finetune.reinforcement import (
        AbstractGroupRewardProcessor, AbstractRewardProcessor, GroupReward, GroupRewardInput,
        GroupRewardOutput, Reward, RewardInput, RewardOutput, TaskStatus,
    )


    class Shapes(AbstractRewardProcessor):
        """Answers in the shape the ground truth names."""

        async def process(self, input_data: RewardInput):
            shape = input_data.ground_truth
            if shape == "ok":
                return RewardOutput(reward=Reward(reward_score=0.75, reward_metrics={"exact": 1.0, "len": 3.0}))
            if shape == "failed":
                return RewardOutput(reward=Reward(reward_score=0.0), status=TaskStatus.FAILED,
                                    error="no ground truth in this row", error_code="missing_ground_truth")
            if shape == "raise":
                raise RuntimeError("boom: broken on purpose")
            if shape == "raise_silently":
                raise ValueError()
            if shape == "dict":
                return {"reward": {"reward_score": 1, "reward_metrics": {"k": 2.0}}}
            if shape == "no_reward":
                return {"score": 1.0}
            if shape == "text":
                return "1.0"
            if shape == "bad_score":
                return {"reward": {"reward_score": "high"}}
            if shape == "text_metric":
                return {"reward": {"reward_score": 1.0, "reward_metrics": {"label": "good", "n": 2.0}}}
            if shape == "slow":
                await asyncio.sleep(3.0)
            return RewardOutput(reward=Reward(reward_score=0.0))


    class Group(AbstractGroupRewardProcessor):
        """One reward per answer, or (ground truth "short") one too few."""

        async def process(self, input_data: GroupRewardInput):
            n = len(input_data.agent_outputs) - (input_data.ground_truth == "short")
            rewards = [Reward(reward_score=float(i), reward_metrics={"i": float(i)}) for i in range(n)]
            return GroupRewardOutput(reward=GroupReward(rewards=rewards), status=TaskStatus.SUCCESS)
''')


@pytest.fixture(scope="module")
def code_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("shapes")
    (d / "shapes.py").write_text(SHAPES)
    return d


@pytest.fixture(scope="module")
def server(code_dir: Path):
    with FunctionServer.start(code_dir, "reward", "shapes.Shapes") as fs:
        yield fs


def _request(shape: str, i: int = 0) -> reward_call.RewardRequest:
    return reward_call.reward_request(
        [{"role": "user", "content": "1+1"}, {"role": "assistant", "content": "2"}],
        {"solution": shape},
        shape,
        job_id="job-rc",
        sample_id=str(i),
        rollout_id="0",
    )


def _call(server: FunctionServer, shape: str, timeout: float = 10.0) -> reward_call.CallOutcome:
    outcomes = reward_call.call(reward_call.post_once(server.url), _request(shape), timeout, url=server.url)
    assert len(outcomes) == 1
    return outcomes[0]


def test_a_score_with_metrics(server: FunctionServer) -> None:
    out = _call(server, "ok")
    assert out.ok and out.score == 0.75 and out.status == "success" and out.error is None
    assert out.metrics == {"exact": 1.0, "len": 3.0} == out.numeric_metrics
    assert 0.0 < out.seconds < 10.0 and out.finished > 0.0


def test_a_plain_dict_is_passed_through_and_read(server: FunctionServer) -> None:
    out = _call(server, "dict")
    assert out.ok and out.score == 1.0 and out.metrics == {"k": 2.0}


def test_status_failed_is_an_error_with_the_functions_own_words(server: FunctionServer) -> None:
    out = _call(server, "failed")
    assert not out.ok and out.score is None and out.status == "failed"
    assert out.error == "status failed: no ground truth in this row"
    assert out.error_code == "missing_ground_truth"


def test_a_raise_is_the_exceptions_text(server: FunctionServer) -> None:
    out = _call(server, "raise")
    assert out.score is None and out.status == reward_call.CALL_FAILED
    assert out.error is not None and out.error.startswith("the function raised: boom: broken on purpose")
    assert "HTTP 500" in out.error and "log" in out.error
    silent = _call(server, "raise_silently")
    assert silent.error is not None and "an exception with no message" in silent.error


@pytest.mark.parametrize(
    ("shape", "shown"),
    [("no_reward", "'score': 1.0"), ("text", "'result': '1.0'"), ("bad_score", "'reward_score': 'high'")],
)
def test_a_wrong_shape_names_the_missing_field(server: FunctionServer, shape: str, shown: str) -> None:
    out = _call(server, shape)
    assert out.score is None and out.status == reward_call.CALL_FAILED
    assert out.error is not None and out.error.startswith(
        "the function returned no numeric reward.reward_score"
    )
    assert shown in out.error


def test_a_non_number_metric_is_kept_as_returned_and_left_out_of_the_numbers(server: FunctionServer) -> None:
    out = _call(server, "text_metric")
    assert out.ok and out.metrics == {"label": "good", "n": 2.0} and out.numeric_metrics == {"n": 2.0}


def test_a_slow_call_times_out(server: FunctionServer) -> None:
    out = _call(server, "slow", timeout=0.5)
    assert out.score is None and out.error == "timed out after 0.5s (the function's timeout)"
    assert 0.4 < out.seconds < 3.0


def test_a_request_the_server_cannot_parse_is_its_422(server: FunctionServer) -> None:
    group = reward_call.group_request([_request("ok", 0), _request("ok", 1)])  # a reward server, a group call
    outs = reward_call.call(reward_call.post_once(server.url), group, 10.0, url=server.url)
    assert len(outs) == 2 and outs[0] == outs[1]
    assert outs[0].error is not None and outs[0].error.startswith("HTTP 422: ") and "parsing" in outs[0].error


def test_a_server_that_is_gone_cannot_be_reached(code_dir: Path) -> None:
    with FunctionServer.start(code_dir, "reward", "shapes.Shapes") as fs:
        url = fs.url
    out = reward_call.call(reward_call.post_once(url), _request("ok"), 5.0, url=url)[0]
    assert out.error is not None and out.error.startswith(f"could not reach the function server at {url}: ")


def test_a_group_call_gives_each_answer_its_own_outcome(code_dir: Path) -> None:
    with FunctionServer.start(code_dir, "group_reward", "shapes.Group") as fs:
        send = reward_call.post_once(fs.url)
        answers = [_request("ok", i) for i in range(3)]
        outs = reward_call.call(send, reward_call.group_request(answers), 10.0, url=fs.url)
        assert [o.score for o in outs] == [0.0, 1.0, 2.0] and [o.metrics for o in outs] == [
            {"i": 0.0},
            {"i": 1.0},
            {"i": 2.0},
        ]
        assert len({o.seconds for o in outs}) == 1  # one call
        short = reward_call.call(
            send, reward_call.group_request([_request("short", i) for i in range(3)]), 10.0, url=fs.url
        )
    assert [o.error for o in short] == ["the group reward returned 2 rewards for 3 answers"] * 3


RAISES_ON_BAD = """

class Picky(RewardProcessor):
    async def process(self, input_data):
        if input_data.ground_truth == "bad":
            raise RuntimeError("picky: cannot score this row")
        return await super().process(input_data)
"""


def test_training_eval_and_the_playground_word_a_broken_reward_alike(tmp_path: Path) -> None:
    """The same raise, scored by the engine's caller, `opd eval`'s scorer and the playground."""
    from opd_nb.engine.api import RewardEndpoint
    from opd_nb.engine.rewards import RewardCaller, Sample
    from opd_nb.experiments.evaluation import AnswerScorer
    from opd_nb.notebook.playground import score_one
    from opd_nb.workspace.new import create

    ws = create("reward", tmp_path / "picky").path
    reward_py = ws / "functions" / "reward" / "reward.py"
    reward_py.write_text(reward_py.read_text() + RAISES_ON_BAD)
    config = ws / "config.yaml"
    config.write_text(config.read_text().replace("reward.py:RewardProcessor", "reward.py:Picky"))
    messages = [{"role": "user", "content": "21"}]

    played = score_one(ws, "12", messages=messages, ground_truth="bad")

    scorer = AnswerScorer(ws)
    scorer.start()
    try:
        score, metrics, evaluated = scorer._reward(
            {"messages": messages, "rollout_extra": {"solution": "bad"}}, "12", "m", 0
        )
    finally:
        scorer.stop()
    assert score is None and metrics == {}

    caller = RewardCaller()
    try:
        with FunctionServer.start(ws, "reward", "functions/reward/reward.py:Picky") as fs:
            samples = [
                Sample(
                    messages=[*messages, {"role": "assistant", "content": "12"}],
                    rollout_extra={"solution": s},
                    group=0,
                    sample_id="0",
                    rollout_id=str(i),
                )
                for i, s in enumerate(("bad", "12"))
            ]
            res = caller.submit(
                [RewardEndpoint(name="picky", url=fs.url)], samples, "job-rc", where="step 1"
            ).result()
    finally:
        caller.close()
    assert res.totals[1] == 1.0 and res.per_sample[1]["reward_status"] == "success"
    trained = res.per_sample[0]["reward_error"]

    expected = "the function raised: picky: cannot score this row (HTTP 500; its traceback is in the function server's log)"
    assert played.error == evaluated == expected and trained == f"picky: {expected}"
    assert played.reward_score is None and played.status == reward_call.CALL_FAILED
