"""Calling models on `opd serve`: the unmodified SDK's `Generation.call` (plain and streamed) and the
OpenAI-compatible `/compatible-mode/v1/chat/completions` through plain httpx, plus every bad input.

Base model ids answer directly, as on Bailian (the first call starts the base model's endpoint);
a fine-tuned output answers only once deployed. SDK code runs in a subprocess with only the SDK's
two variables set (dashscope reads them at import).
"""

from __future__ import annotations

import json

import httpx
import pytest
from conftest import run_sdk

pytestmark = pytest.mark.slow

SORT = [{"role": "system", "content": "Sort the digits."}, {"role": "user", "content": "93418"}]

GENERATION = r"""
import json
from dashscope import Generation
msgs = [{"role": "system", "content": "Sort the digits."}, {"role": "user", "content": "93418"}]
kw = dict(model="qwen3-8b", messages=msgs, temperature=0, max_tokens=24, seed=1)

def last(r):
    c = r.output.choices[0]
    return [r.status_code, c.message.content, c.finish_reason]

out = {}
r = Generation.call(result_format="message", **kw)
out["message"] = last(r) + [r.output.choices[0].message.role, r.usage.input_tokens, r.usage.output_tokens]
r = Generation.call(result_format="text", **kw)
out["text"] = [r.status_code, r.output.text, r.output.finish_reason]
out["incremental"] = [last(x) for x in Generation.call(result_format="message", stream=True, incremental_output=True, **kw)]
out["cumulative"] = [last(x) for x in Generation.call(result_format="message", stream=True, **kw)]
out["merged"] = [last(x) for x in Generation.call(result_format="message", stream=True, incremental_output=False, **kw)]
out["text_stream"] = [[x.output.text, x.output.finish_reason] for x in Generation.call(result_format="text", stream=True, incremental_output=True, **kw)]
out["prompt"] = Generation.call(model="qwen3-8b", prompt="5521", temperature=0, max_tokens=8).status_code
bad = Generation.call(model="qwen3-8b", messages=[{"role": "robot", "content": "x"}], result_format="message")
out["bad_role"] = [bad.status_code, bad.code, bad.message]
none = Generation.call(model="no/such-model", messages=msgs, result_format="message")
out["unknown"] = [none.status_code, none.code, none.message]
print(json.dumps(out))
"""


def test_sdk_generation_plain_and_streamed(local_server, tmp_path):
    proc = run_sdk(local_server, GENERATION, tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    status, answer, finish, role, n_in, n_out = out["message"]
    assert status == 200 and role == "assistant" and answer and finish in ("stop", "length")
    assert n_in > 0 and 0 < n_out <= 24
    assert out["text"] == [200, answer, finish]  # the same greedy answer as plain text
    pieces = out["incremental"]
    assert len(pieces) > 2 and all(p[0] == 200 for p in pieces)
    assert "".join(p[1] for p in pieces) == answer  # only the new text in each event
    assert [p[2] for p in pieces[:-1]] == ["null"] * (len(pieces) - 1) and pieces[-1][2] == finish
    cumulative = [p[1] for p in out["cumulative"]]
    assert cumulative[-1] == answer and all(answer.startswith(c) for c in cumulative)  # the text so far
    assert out["merged"][-1][1] == answer  # the SDK's own merging of incremental events
    assert "".join(t for t, _ in out["text_stream"]) == answer
    assert out["prompt"] == 200
    status, code, message = out["bad_role"]
    assert (status, code) == (400, "InvalidParameter") and "role 'robot'" in message and "user" in message
    status, code, message = out["unknown"]
    assert (status, code) == (404, "ModelNotFound") and "--model-map" in message


@pytest.fixture(scope="module")
def compat(local_server):
    with httpx.Client(
        base_url=f"{local_server.base_url}/compatible-mode/v1",
        headers={"Authorization": "Bearer test"},
        timeout=300,
    ) as c:
        yield c


def test_compatible_mode_chat_plain_streamed_and_with_tools(compat):
    body = {"model": "qwen3-8b", "messages": SORT, "temperature": 0, "max_tokens": 24}
    plain = compat.post("/chat/completions", json=body)
    assert plain.status_code == 200, plain.text
    out = plain.json()
    assert out["object"] == "chat.completion" and out["model"] == "qwen3-8b"
    answer = out["choices"][0]["message"]["content"]
    assert answer and out["usage"]["completion_tokens"] > 0
    chunks = []
    with compat.stream(
        "POST", "/chat/completions", json={**body, "stream": True, "stream_options": {"include_usage": True}}
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line.startswith("data:")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[5:]) for line in lines[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "qwen3-8b" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert (
        text == answer
        and sum(bool(c["choices"] and c["choices"][0]["delta"].get("content")) for c in chunks) > 2
    )
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0  # include_usage
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    with_tools = compat.post("/chat/completions", json={**body, "tools": tools})
    assert with_tools.status_code == 200, with_tools.text  # passed to the chat template
    listed = compat.get("/models").json()["data"]
    assert "local/tiny-student" in {m["id"] for m in listed}


@pytest.mark.parametrize(
    "messages, expect",
    [
        ("hello", "must be a non-empty list"),
        ([], "must be a non-empty list"),
        (["hi"], "messages[0] must be an object"),
        ([{"content": "hi"}], "messages[0].role None"),
        ([{"role": "user"}], "has no content"),
        ([{"role": "user", "content": 5}], "must be a string"),
    ],
)
def test_malformed_messages_are_a_400_with_a_fix(compat, api, messages, expect):
    r = compat.post("/chat/completions", json={"model": "qwen3-8b", "messages": messages})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "InvalidParameter" and expect in err["message"] and r.json()["request_id"]
    if expect == "must be a non-empty list":
        assert 'e.g. [{"role": "user", "content": "Hello"}]' in err["message"]  # the fix
    ds = api.post(
        "/services/aigc/text-generation/generation",
        json={"model": "qwen3-8b", "input": {"messages": messages}, "parameters": {}},
    )
    assert ds.status_code == 400 and ds.json()["code"] == "InvalidParameter", ds.text
    assert expect in ds.json()["message"]


def test_unknown_and_undeployed_models(compat, local_server):
    from opd_nb.server.models import default_pair

    r = compat.post("/chat/completions", json={"model": "no/such-model", "messages": SORT})
    assert r.status_code == 404 and r.json()["error"]["code"] == "ModelNotFound"
    _, teacher = default_pair()  # a model directory by path: a fine-tuned output, served only once deployed
    r = compat.post("/chat/completions", json={"model": str(teacher), "messages": SORT})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "ModelNotDeployed" and f"opd deploy {teacher}" in err["message"]
    assert "Deployments.call" in err["message"]
    bad = compat.post("/chat/completions", content=b"{not json", headers={"Content-Type": "application/json"})
    body = bad.json()
    assert bad.status_code == 400 and (body.get("error") or body)["code"] == "InvalidParameter", body
    no_key = httpx.post(f"{local_server.base_url}/compatible-mode/v1/chat/completions", json={})
    assert no_key.status_code == 401


@pytest.mark.parametrize("call", ["completions", "embeddings", "audio"])
def test_what_compatible_mode_does_not_serve_is_a_404_naming_what_it_does(local_server, call):
    """The official OpenAI client's legacy completions and embeddings (not served, as the README says):
    a 404 in the compatible mode's error shape that names the endpoints it serves, not a bare 404."""
    import openai

    client = openai.OpenAI(
        base_url=f"{local_server.base_url}/compatible-mode/v1", api_key="local", max_retries=0
    )
    calls = {
        "completions": lambda: client.completions.create(model="qwen3-8b", prompt="93418", max_tokens=4),
        "embeddings": lambda: client.embeddings.create(model="text-embedding-v4", input="93418"),
        "audio": lambda: client.audio.speech.create(model="qwen-tts", voice="alloy", input="hi"),
    }
    with pytest.raises(openai.NotFoundError) as refused:
        calls[call]()
    body = refused.value.body if isinstance(refused.value.body, dict) else {}
    assert body.get("code") == "NotFound", refused.value
    served = "POST /compatible-mode/v1/chat/completions, GET /compatible-mode/v1/models"
    assert served in str(refused.value) and "is not served" in str(refused.value)
    wrong_method = httpx.get(
        f"{local_server.base_url}/compatible-mode/v1/chat/completions", headers={"Authorization": "Bearer x"}
    )
    assert wrong_method.status_code == 405 and served in wrong_method.json()["error"]["message"]
