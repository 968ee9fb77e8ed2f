"""Calling models on `opd serve`: the unmodified SDK's `Generation.call` (plain and streamed) and the
OpenAI-compatible `/compatible-mode/v1/chat/completions` through plain httpx, plus every bad input.

Base model ids answer directly, as on Bailian (the first call starts the base model's endpoint);
a fine-tuned output answers only once deployed. SDK code runs in a subprocess with only the SDK's
two variables set (dashscope reads them at import).
"""

from __future__ import annotations

import json
import time

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
        # parts the local models cannot read are named, never dropped (issue 37)
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}],
            "messages[0].content[0] is a part of type 'image_url'",
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "input_audio"}]}],
            "messages[0].content[1] is a part of type 'input_audio'",
        ),
        (
            [{"role": "user", "content": [{"image": "http://x/a.png"}]}],
            "content[0] is a part of type 'image'",
        ),
        ([{"role": "user", "content": [{"type": "video_url"}]}], "part of type 'video_url'"),
        ([{"role": "user", "content": ["hi"]}], "content[0] is not a text part (str)"),
        ([{"role": "user", "content": [{"type": "text", "text": 5}]}], "content[0].text must be a string"),
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


def test_text_parts_are_read_as_their_text(compat, api):
    """A list of text parts (OpenAI's, or DashScope's ``{"text": ...}``) is the text itself, joined by newlines."""
    as_text = {"model": "qwen3-8b", "messages": SORT, "temperature": 0, "max_tokens": 12}
    want = compat.post("/chat/completions", json=as_text).json()["choices"][0]["message"]["content"]
    parts = [
        SORT[0],
        {"role": "user", "content": [{"type": "text", "text": "934"}, {"text": "18"}]},
    ]
    joined = [SORT[0], {"role": "user", "content": "934\n18"}]
    got = compat.post("/chat/completions", json={**as_text, "messages": parts})
    same = compat.post("/chat/completions", json={**as_text, "messages": joined})
    assert got.status_code == 200, got.text
    assert got.json()["choices"][0]["message"] == same.json()["choices"][0]["message"]
    one = [SORT[0], {"role": "user", "content": [{"type": "text", "text": "93418"}]}]
    alone = compat.post("/chat/completions", json={**as_text, "messages": one}).json()
    assert alone["choices"][0]["message"]["content"] == want


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


# ---- the edges of every sampling parameter (issue 37) ----------------------------------------------
# Each documented range at 0, its smallest positive values, its maximum and just beyond each, on every
# path a call takes: compatible mode and DashScope generation (message and text), plain and streamed,
# to a base model and to a deployment. Inside a range: a 200 with an answer (a temperature or top-p
# below the greedy floor decodes the greedy answer); outside: a Bailian-shaped 400 that names it.
TINY = 2**-1074  # 5e-324, the smallest positive double (subnormal)
SMALLEST_NORMAL = 2.2250738585072014e-308
F32_SUBNORMAL = 1e-45  # a float32 subnormal: float32 math flushes it to 0 or 1.4e-45
BELOW_2 = 1.9999999999999998
ABOVE_2 = 2.0000000000000004
ABOVE_1 = 1.0000000000000002
GREEDY_EDGES = [{"temperature": 0}, {"temperature": TINY}, {"temperature": SMALLEST_NORMAL},
                {"temperature": F32_SUBNORMAL}, {"top_p": TINY}, {"top_p": F32_SUBNORMAL},
                {"top_p": 1.1754943508222875e-38}]  # fmt: skip
# (parameters, accepted on compatible mode, accepted on DashScope generation)
EDGES = [
    *[(p, True, True) for p in GREEDY_EDGES],
    ({"temperature": 1e-5}, True, True),  # the greedy floor itself samples
    ({"temperature": BELOW_2}, True, True),
    ({"temperature": 2}, True, False),  # compatible mode documents [0, 2], DashScope [0, 2)
    ({"temperature": ABOVE_2}, False, False),
    ({"temperature": -TINY}, False, False),
    ({"temperature": True}, False, False),
    ({"temperature": "0.5"}, False, False),
    ({"top_p": 1}, True, True),
    ({"top_p": ABOVE_1}, False, False),
    ({"top_p": 0}, False, False),
    ({"top_p": -TINY}, False, False),
    ({"max_tokens": 1}, True, True),
    ({"max_tokens": 2**63 - 1}, True, True),
    ({"max_tokens": 0}, False, False),
    ({"max_tokens": 2.0}, False, False),
    ({"max_tokens": "2"}, False, False),
    ({"seed": 0}, True, True),
    ({"seed": 2**31 - 1}, True, True),
    ({"seed": 2**31}, False, False),
    ({"seed": -1}, False, False),
    ({"seed": True}, False, False),
]
NON_STREAM_EDGES = [
    ({"n": 1}, True, True),
    ({"n": 4}, True, True),
    ({"n": 5}, False, False),
    ({"n": 0}, False, False),
    ({"n": "2"}, False, False),
    ({"n": 2.0}, False, False),
    ({"n": True}, False, False),
    ({"logprobs": True, "top_logprobs": 0}, True, True),
    ({"logprobs": True, "top_logprobs": 20}, True, True),
    ({"logprobs": True, "top_logprobs": 21}, False, False),
    ({"logprobs": True, "top_logprobs": -1}, False, False),
    ({"logprobs": True, "top_logprobs": "3"}, False, False),
    ({"logprobs": "yes"}, False, False),
    ({"logprobs": 1}, False, False),
    ({"stop": ["a", "b", "c", "d"]}, True, True),
    ({"stop": ["a", "b", "c", "d", "e"]}, False, False),
    ({"presence_penalty": 0}, True, True),
    ({"presence_penalty": 2}, False, False),
    ({"presence_penalty": -2}, False, False),
    ({"presence_penalty": False}, False, False),
    ({"enable_thinking": 0}, False, False),
]
SHORT = {"max_tokens": 4}


def _named(params: dict) -> str:
    return ",".join(f"{k}={v!r}" for k, v in params.items())


def _compat_call(http: httpx.Client, model: str, params: dict, stream: bool) -> tuple[int, list[str], str]:
    """(status, answers, error message) of a compatible-mode call; a stream's error event counts as one."""
    body = {"model": model, "messages": SORT, **SHORT, **params, **({"stream": True} if stream else {})}
    if not stream:
        r = http.post("/compatible-mode/v1/chat/completions", json=body)
        if r.status_code != 200:
            return r.status_code, [], r.json()["error"]["message"]
        return 200, [c["message"]["content"] for c in r.json()["choices"]], ""
    with http.stream("POST", "/compatible-mode/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            r.read()
            return r.status_code, [], r.json()["error"]["message"]
        data = [line[5:].strip() for line in r.iter_lines() if line.startswith("data:")]
    chunks = [json.loads(d) for d in data if d != "[DONE]"]
    errors = [c["error"]["message"] for c in chunks if "error" in c]
    text = "".join((c["choices"][0]["delta"].get("content") or "") for c in chunks if c.get("choices"))
    assert errors or data[-1] == "[DONE]", data[-3:]
    return (500 if errors else 200), [text], "; ".join(errors)


def _dashscope_call(
    http: httpx.Client, model: str, params: dict, result_format: str, stream: bool
) -> tuple[int, list[str], str]:
    """(status, answers, error message) of a DashScope generation call, plain or as server-sent events."""
    body = {"model": model, "input": {"messages": SORT}, "parameters": {"result_format": result_format}}
    body["parameters"].update({**SHORT, **params, **({"incremental_output": True} if stream else {})})
    path = "/api/v1/services/aigc/text-generation/generation"
    if not stream:
        r = http.post(path, json=body)
        if r.status_code != 200:
            return r.status_code, [], r.json()["message"]
        out = r.json()["output"]
        return (
            200,
            [out["text"]] if result_format == "text" else [c["message"]["content"] for c in out["choices"]],
            "",
        )
    with http.stream("POST", path, json=body, headers={"X-DashScope-SSE": "enable"}) as r:
        if r.status_code != 200:
            r.read()
            return r.status_code, [], r.json()["message"]
        events = r.read().decode().strip().split("\n\n")
    kinds = [next(ln[6:] for ln in e.splitlines() if ln.startswith("event:")) for e in events]
    bodies = [json.loads(next(ln[5:] for ln in e.splitlines() if ln.startswith("data:"))) for e in events]
    if "error" in kinds:
        return 500, [], "; ".join(b["message"] for k, b in zip(kinds, bodies, strict=True) if k == "error")
    outs = [b["output"] for b in bodies]
    pieces = [o["text"] if result_format == "text" else o["choices"][0]["message"]["content"] for o in outs]
    last = outs[-1] if result_format == "text" else outs[-1]["choices"][0]
    assert last["finish_reason"] in ("stop", "length"), outs[-1]
    return 200, ["".join(pieces)], ""


PATHS = {
    "compatible": lambda http, m, p: _compat_call(http, m, p, stream=False),
    "compatible-stream": lambda http, m, p: _compat_call(http, m, p, stream=True),
    "dashscope-message": lambda http, m, p: _dashscope_call(http, m, p, "message", stream=False),
    "dashscope-text": lambda http, m, p: _dashscope_call(http, m, p, "text", stream=False),
    "dashscope-message-stream": lambda http, m, p: _dashscope_call(http, m, p, "message", stream=True),
    "dashscope-text-stream": lambda http, m, p: _dashscope_call(http, m, p, "text", stream=True),
}


def _edges_of(path: str) -> list[tuple[dict, bool]]:
    """The edges a path takes: n, logprobs and stop are not taken with stream, n > 1 not as text."""
    edges = EDGES if path.endswith("stream") else EDGES + NON_STREAM_EDGES
    column = 1 if path.startswith("compatible") else 2
    out = [(edge[0], edge[column]) for edge in edges]
    if path == "dashscope-text":
        out = [(p, ok and p.get("n", 1) == 1) for p, ok in out]  # n > 1 needs result_format="message"
    return out


@pytest.fixture(scope="module")
def http(local_server):
    with httpx.Client(
        base_url=local_server.base_url, headers={"Authorization": "Bearer test"}, timeout=300
    ) as c:
        yield c


def _greedy_answer(http: httpx.Client, model: str) -> str:
    status, answers, message = _compat_call(http, model, {"temperature": 0, "seed": 1}, stream=False)
    assert status == 200, message
    return answers[0]


def _check_edges(http: httpx.Client, model: str, path: str) -> None:
    greedy = _greedy_answer(http, model)
    failures = []
    for params, accepted in _edges_of(path):
        status, answers, message = PATHS[path](http, model, params)
        if accepted and status != 200:
            failures.append(f"{_named(params)}: {status} {message[:200]}")
        elif accepted and params in GREEDY_EDGES and answers != [greedy]:
            failures.append(f"{_named(params)}: {answers} is not the greedy answer {greedy!r}")
        elif not accepted and (status != 400 or next(iter(params)) not in message):
            failures.append(f"{_named(params)}: expected a 400 naming it, got {status} {message[:200]}")
    assert not failures, "\n".join([f"{path}:", *failures])


@pytest.mark.parametrize("path", list(PATHS))
def test_every_sampling_parameter_at_the_edges_of_its_range(http, path):
    _check_edges(http, "qwen3-8b", path)


@pytest.fixture(scope="module")
def deployed(http):
    """A deployment of the base stand-in (its own serving process), deleted afterwards."""
    r = http.post("/api/v1/deployments", json={"model_name": "qwen3-8b", "capacity": 1, "suffix": "edges"})
    assert r.status_code == 200, r.text
    name = r.json()["output"]["deployed_model"]
    try:
        for _ in range(600):
            status = http.get(f"/api/v1/deployments/{name}").json()["output"]["status"]
            if status != "PENDING":
                break
            time.sleep(0.2)
        assert status == "RUNNING", status
        yield name
    finally:
        http.delete(f"/api/v1/deployments/{name}")


@pytest.mark.parametrize("path", ["compatible", "dashscope-message-stream", "dashscope-text"])
def test_a_deployment_takes_the_same_edges(http, deployed, path):
    _check_edges(http, deployed, path)


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
