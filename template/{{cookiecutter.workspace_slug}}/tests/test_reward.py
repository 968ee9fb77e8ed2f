"""Tests for the reward function: run them with `pytest` before submitting (a broken reward wastes a job)."""

from __future__ import annotations

import asyncio

from dashscope.finetune.reinforcement import RewardInput, RewardOutput, TaskStatus

from functions.reward.reward import {{ cookiecutter.reward_class }}, score_answer, strip_reasoning


def reward(content: str | None, ground_truth: object = None, solution: object = None) -> RewardOutput:
    """Score one answer through the SDK's own input/output models, as the function server does."""
    agent_output: dict = {"messages": [{"role": "user", "content": "93418"}, {"role": "assistant", "content": content}]}
    if solution is not None:
        agent_output["rollout_extra"] = {"solution": solution}
    payload = {"ground_truth": ground_truth, "agent_output": agent_output}
    output = asyncio.run({{ cookiecutter.reward_class }}().process(RewardInput.model_validate(payload)))
    # What goes over the wire must validate as a RewardOutput again.
    return RewardOutput.model_validate(output.model_dump(mode="json"))


def test_hit_scores_one() -> None:
    out = reward("13489", ground_truth="13489")
    assert out.status == TaskStatus.SUCCESS
    assert out.reward.reward_score == 1.0


def test_miss_scores_zero() -> None:
    out = reward("13498", ground_truth="13489")
    assert out.status == TaskStatus.SUCCESS
    assert out.reward.reward_score == 0.0
    assert out.reward.reward_metrics["length_match"] == 1.0


def test_complete_thinking_block_is_removed() -> None:
    assert strip_reasoning("<think>n=5, so 1 3 4 8 9</think>13489") == "13489"
    assert reward("<think>n=5</think>\n13489", ground_truth="13489").reward.reward_score == 1.0


def test_dangling_closing_tag_drops_what_comes_before() -> None:
    # The chat template opened <think> in the prompt, so only the closing tag is in the answer.
    assert strip_reasoning("n=5, sorting...</think>13489") == "13489"
    assert reward("still thinking 99999</think> 13489", ground_truth="13489").reward.reward_score == 1.0


def test_unfinished_thinking_leaves_no_answer() -> None:
    assert strip_reasoning("<think>13489 is what I will answer") == ""


def test_tool_call_text_is_removed() -> None:
    content = '<tool_call>{"name": "count_digits", "arguments": {"digits": "93418"}}</tool_call>13489'
    assert strip_reasoning(content) == "13489"
    assert reward(content, ground_truth="13489").reward.reward_score == 1.0
    assert strip_reasoning('13489<tool_call>{"name": "count_di') == "13489"


def test_custom_tags() -> None:
    assert strip_reasoning("[[r]]hmm[[/r]]42", think_tags=("[[r]]", "[[/r]]")) == "42"


def test_ground_truth_falls_back_to_rollout_extra_solution() -> None:
    out = reward("<think>n=3</think>123", solution="123")
    assert out.status == TaskStatus.SUCCESS
    assert out.reward.reward_score == 1.0


def test_ground_truth_wins_over_solution() -> None:
    assert reward("123", ground_truth="321", solution="123").reward.reward_score == 0.0


def test_missing_ground_truth_scores_zero() -> None:
    """As the docs say: with both `ground_truth` and `rollout_extra.solution` empty the score is 0 (not a
    failed call, which the job would count against the function)."""
    for out in (reward("13489"), reward("13489", ground_truth="", solution=""), reward("x", solution="  ")):
        assert out.status == TaskStatus.SUCCESS
        assert out.reward.reward_score == 0.0
        assert set(out.reward.reward_metrics.values()) == {0.0}


def test_containment_is_reported_and_exact_match_is_the_score() -> None:
    """The docs' minimal example scores containment (`coverage`); here it is `contains_answer` (see score_answer)."""
    hit = score_answer("query_status done", "query_status")
    assert hit["contains_answer"] == 1.0 and hit["reward_score"] == 0.0
    assert score_answer("query_status", "query_status")["reward_score"] == 1.0
    assert score_answer("delete_item failed", "query_status") == {
        "reward_score": 0.0,
        "contains_answer": 0.0,
        "length_match": 0.0,
    }


def test_reward_score_is_not_duplicated_into_metrics_and_metrics_are_floats() -> None:
    for out in (reward("13489", ground_truth="13489"), reward("x", ground_truth="1"), reward("x")):
        metrics = out.reward.reward_metrics
        assert metrics, "metrics are reported on every path"
        assert "reward_score" not in metrics
        assert all(type(value) is float for value in metrics.values())
    assert "reward_score" in score_answer("1", "1")


def test_empty_or_missing_content() -> None:
    assert reward(None, ground_truth="1").reward.reward_score == 0.0
    assert reward("", ground_truth="1").reward.reward_score == 0.0


def test_end_to_end_wire_format() -> None:
    """The JSON the function server returns for one request."""
    wire = reward("<think>n=5</think>13489", ground_truth="13489").model_dump(mode="json", exclude_none=True)
    assert wire["status"] == "success"
    assert wire["reward"]["reward_score"] == 1.0
    assert set(wire["reward"]["reward_metrics"]) == {"contains_answer", "length_match"}
