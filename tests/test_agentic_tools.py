"""Agentic trajectories with tool calls, on the bundled pair's real tokenizer and chat template.

The template renders offered tools; each assistant turn of a trajectory is one training sample whose
context holds the tool messages (never trained on); malformed trajectories are named with the message
index and the fix.
"""

from __future__ import annotations

import copy
import json

import pytest

from opd_nb.engine import task
from opd_nb.engine.data import template_ids
from opd_nb.engine.models import default_pair, load_tokenizer
from opd_nb.engine.trajectory import FIXES, MALFORMED, check_trajectory, turn_samples

TOOLS = [task.TOOL_SCHEMA]
CALL = '<tool_call>{"name": "count_digits", "arguments":{"digits": "93418"}}</tool_call><|end|>'


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(default_pair()[0])


def trained_text(tok, sample) -> str:
    return tok.decode([i for i, m in zip(sample.ids, sample.mask, strict=True) if m])


def test_chat_template_renders_offered_tools_and_nothing_without(tok) -> None:
    msgs = task.make_row("93418")["messages"]
    plain = tok.decode(template_ids(tok, msgs, add_generation_prompt=True))
    assert plain == "<|system|>Sort the digits.<|user|>93418<|assistant|>"
    offered = tok.decode(template_ids(tok, msgs, tools=TOOLS, add_generation_prompt=True))
    assert offered == "<|system|>tools:count_digits(digits)" + plain
    two = [TOOLS[0], {"name": "lookup", "parameters": {"properties": {"a": {}, "b": {}}}}]
    assert tok.decode(template_ids(tok, msgs, tools=two)).startswith(
        "<|system|>tools:count_digits(digits)lookup(a,b)<|system|>"
    )


def test_every_assistant_turn_is_trained_and_tool_tokens_are_context_only(tok) -> None:
    msgs = task.tool_trajectory("93418")
    first, second = turn_samples(tok, msgs, TOOLS, [], max_total=256)
    assert (first.index, second.index) == (2, 4)
    assert trained_text(tok, first) == CALL
    assert trained_text(tok, second) == "<think>n=5</think>13489<|end|>"
    # the second turn's context is the whole conversation so far, tool result included, all masked out
    n_ctx = second.mask.index(True)
    assert not any(second.mask[:n_ctx]) and all(second.mask[n_ctx:])
    context = tok.decode(second.ids[:n_ctx])
    assert context.endswith(CALL + '<|tool|>{"1": 1, "3": 1, "4": 1, "8": 1, "9": 1}<|assistant|>')
    assert context.startswith("<|system|>tools:count_digits(digits)")
    # trained tokens (valid_token_rate's denominator) are the two assistant turns and nothing else
    tool_tokens = len(tok(msgs[3]["content"], add_special_tokens=False)["input_ids"])
    full = template_ids(tok, msgs, tools=TOOLS)
    n_prompt = len(template_ids(tok, msgs[:2], tools=TOOLS, add_generation_prompt=True))
    assert (
        sum(first.mask) + sum(second.mask) == len(full) - n_prompt - tool_tokens - 2
    )  # <|tool|>, <|assistant|>
    assert not first.generated and not second.generated


def test_the_ids_the_student_generated_are_used_when_recorded(tok) -> None:
    msgs = task.tool_trajectory("93418")
    ctx = template_ids(tok, msgs[:4], tools=TOOLS, add_generation_prompt=True)
    sampled = tok("<think>n=5</think>13489", add_special_tokens=False)["input_ids"]
    (_, second) = turn_samples(tok, msgs, TOOLS, [(ctx, sampled, False)], max_total=256)
    assert second.generated and second.no_eos
    assert second.ids == ctx + sampled
    cut = turn_samples(tok, msgs, TOOLS, [(ctx, sampled, False)], max_total=len(ctx) + 3)[1]
    assert sum(cut.mask) == 3 and cut.dropped == sampled[3:]


def test_a_well_formed_tool_trajectory_has_no_problem() -> None:
    assert check_trajectory(task.tool_trajectory("93418")) == []
    assert (
        check_trajectory(task.make_row("93418")["messages"] + [{"role": "assistant", "content": "x"}]) == []
    )


def planted(change) -> list[dict]:
    msgs = copy.deepcopy(task.tool_trajectory("93418"))
    change(msgs)
    return msgs


@pytest.mark.parametrize(
    ("change", "kind", "index"),
    [
        (lambda m: m[3].update(role="user"), "tool result with another role", 3),
        (lambda m: m.pop(3), "unanswered tool call", 2),
        (lambda m: m[3].update(tool_call_id="call-9"), "tool message without a call", 3),
        (lambda m: m.pop(), "no final answer", 3),
        (lambda m: m[1].update(role="human"), "unknown role", 1),
    ],
    ids=["tool-as-user", "no-tool-message", "wrong-id", "no-answer", "unknown-role"],
)
def test_malformed_trajectories_are_named_with_index_and_fix(change, kind: str, index: int) -> None:
    problems = check_trajectory(planted(change))
    found = {p.kind: p for p in problems}
    assert kind in found, problems
    assert found[kind].index == index
    line = found[kind].line(3, 8, "step 1")
    assert line.startswith(f"{MALFORMED} {kind} at messages[{index}]: ")
    assert "(3 of 8 rollouts in step 1)" in line and line.endswith(FIXES[kind])


def test_tool_result_as_user_names_the_call_and_the_tool_role() -> None:
    (problem,) = check_trajectory(planted(lambda m: m[3].update(role="user")))
    line = problem.line(1, 1, "step 1")
    assert "messages[2]" in line and "'user'" in line
    assert '"role": "tool", "tool_call_id"' in line


@pytest.mark.slow
def test_agentic_workspaces_get_the_tool_rows_and_the_same_tool(tmp_path) -> None:
    import importlib.util
    import sys
    from pathlib import Path

    from opd_nb.workspace.new import create

    ws = Path(create("agentic", tmp_path / "agentic").path)
    rows = [json.loads(line) for line in (ws / "data" / "train.jsonl").read_text().splitlines()]
    assert rows == task.make_rows(512, seed=0, tools=True)
    assert not (ws / "data" / "agentic").exists()
    plain = Path(create("pure-distill", tmp_path / "plain").path)
    assert "tools" not in json.loads((plain / "data" / "train.jsonl").read_text().splitlines()[0])
    assert not (plain / "data" / "agentic").exists()
    # the template's tool is the one the teacher was trained on (same schema, same result text)
    spec = importlib.util.spec_from_file_location("ws_rollout", ws / "functions" / "rollout" / "rollout.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["ws_rollout"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["ws_rollout"]
    assert module.TOOLS[task.TOOL_NAME][1] == task.TOOL_SCHEMA
    assert module.run_tool(task.TOOL_NAME, json.dumps({"digits": "93418"})) == task.tool_result("93418")
    assert task.answer_from_counts(task.count_digits("93418")) == task.target_completion("93418")


def test_the_rollout_viewer_shows_the_tool_turn() -> None:
    from opd_nb.notebook.rollout_html import messages_html

    msgs = task.tool_trajectory("93418")
    msgs[2]["trained"] = msgs[4]["trained"] = True
    page = messages_html(msgs)
    assert "assistant (trained):</b> " in page
    assert "→ count_digits({&quot;digits&quot;: &quot;93418&quot;})" in page
    assert "<b>tool:</b>" in page and "{&quot;1&quot;: 1, &quot;3&quot;: 1" in page
