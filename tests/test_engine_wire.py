"""The OpenAI wire rules both engine endpoints share (agentic training and a deployment's process).

Requests are read with the student's real tokenizer and chat template; answers carry tool calls in
OpenAI's shape; a rollout's request streams are fixed by its call and turn, not by timing.
"""

from __future__ import annotations

import json

import pytest

from opd_nb.engine import openai_wire, serving
from opd_nb.engine.agentic import endpoint as agentic_endpoint
from opd_nb.engine.data import template_ids
from opd_nb.engine.models import default_pair, load_tokenizer
from opd_nb.engine.openai_wire import ChatRequestError, chat_inputs, completion_body, parse_tool_calls

MESSAGES = [{"role": "user", "content": "How many digits has 93418?"}]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(default_pair()[0], "student")


def test_both_endpoints_speak_through_the_one_wire_module() -> None:
    assert serving.chat_inputs is openai_wire.chat_inputs
    assert serving.completion_body is openai_wire.completion_body
    assert agentic_endpoint.chat_inputs is openai_wire.chat_inputs


def test_a_chat_request_becomes_the_templated_prompt_and_its_budget(tok) -> None:
    ids, temperature, top_p, max_tokens = chat_inputs(
        tok, {"messages": MESSAGES, "temperature": 0.3, "max_tokens": 5}, 256
    )
    assert ids == template_ids(tok, MESSAGES, add_generation_prompt=True)
    assert (temperature, top_p, max_tokens) == (0.3, 1.0, 5)
    # no max_tokens: whatever the context leaves; a request's own budget never passes it
    assert chat_inputs(tok, {"messages": MESSAGES}, 256)[3] == 256 - len(ids)
    assert chat_inputs(tok, {"messages": MESSAGES, "max_tokens": 10**6}, 256)[3] == 256 - len(ids)
    # the endpoint's own defaults apply to a request without temperature/top_p
    assert chat_inputs(tok, {"messages": MESSAGES}, 256, temperature=0.7, top_p=0.8)[1:3] == (0.7, 0.8)


@pytest.mark.parametrize(
    "body,needle",
    [
        ({"messages": []}, "'messages' must be a non-empty list"),
        ([1, 2], "'messages' must be a non-empty list"),
        ({"messages": MESSAGES, "temperature": "hot"}, "temperature must be a finite number >= 0, got 'hot'"),
        # the documented ranges, strictly typed (a rollout function's request reaches the sampler too)
        ({"messages": MESSAGES, "temperature": True}, "temperature must be a finite number >= 0"),
        ({"messages": MESSAGES, "temperature": float("nan")}, "temperature must be a finite number >= 0"),
        ({"messages": MESSAGES, "temperature": float("inf")}, "temperature must be a finite number >= 0"),
        ({"messages": MESSAGES, "temperature": -(2**-1074)}, "temperature must be a finite number >= 0"),
        ({"messages": MESSAGES, "top_p": 0}, "top_p must be a finite number in (0, 1]"),
        ({"messages": MESSAGES, "top_p": 1.0000000000000002}, "top_p must be a finite number in (0, 1]"),
        ({"messages": MESSAGES, "top_p": float("inf")}, "top_p must be a finite number in (0, 1]"),
        ({"messages": MESSAGES, "max_tokens": "5"}, "max_tokens must be a whole number"),
        ({"messages": MESSAGES, "max_tokens": 0}, "max_tokens must be a whole number"),
        (
            {"messages": MESSAGES, "max_completion_tokens": 2.5},
            "max_completion_tokens must be a whole number",
        ),
        ({"messages": [{"role": "user", "content": "x" * 400}]}, "the context limit (max_length) is 32"),
    ],
)
def test_requests_the_endpoint_cannot_serve_say_why(tok, body, needle) -> None:
    with pytest.raises(ChatRequestError) as info:
        chat_inputs(tok, body, 32)
    assert needle in str(info.value)


def test_tool_calls_are_parsed_into_the_openai_shape() -> None:
    text = 'Let me count. <tool_call>{"name": "count_digits", "arguments": {"digits": "93418"}}</tool_call>'
    content, calls = parse_tool_calls(text)
    assert content == "Let me count."
    assert len(calls) == 1 and calls[0]["type"] == "function" and calls[0]["id"].startswith("call_")
    assert calls[0]["function"] == {"name": "count_digits", "arguments": json.dumps({"digits": "93418"})}
    # a broken block is left in the text, untouched
    assert parse_tool_calls("<tool_call>{not json}</tool_call>") == ("<tool_call>{not json}</tool_call>", [])


def test_a_completion_with_a_tool_call_finishes_with_tool_calls() -> None:
    body = completion_body("m", 7, 3, '<tool_call>{"name": "f", "arguments": "{}"}</tool_call>', "stop")
    choice = body["choices"][0]
    assert (
        choice["finish_reason"] == "tool_calls"
        and choice["message"]["tool_calls"][0]["function"]["name"] == "f"
    )
    assert body["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    cut = completion_body("m", 7, 3, "plain", "length")
    assert cut["choices"][0] == {
        "index": 0,
        "message": {"role": "assistant", "content": "plain"},
        "finish_reason": "length",
    }


def test_a_calls_request_streams_depend_on_its_key_and_turn_only() -> None:
    seed = agentic_endpoint.stream_seed
    assert seed("7|step 1|3", 1) == seed("7|step 1|3", 1)  # stable across processes (not Python's hash)
    assert len({seed("7|step 1|3", 1), seed("7|step 1|3", 2), seed("7|step 1|4", 1)}) == 3
    assert all(0 <= seed(f"k{i}", 1) < 2**63 for i in range(50))
