"""Hostile or odd input is a Bailian-shaped 4xx on every route, never a 5xx (issue 28, part A).

A hand-made corpus, at least three members per family the audit found: odd model ids, bodies sent with
a non-JSON content type, JSON in another UTF encoding, non-finite numbers in nested fields, and
integers far beyond any range. Each member is sent as raw bytes with httpx to a real `opd serve`.
"""

from __future__ import annotations

import json

import httpx
import pytest

pytestmark = pytest.mark.slow
JSON = {"Content-Type": "application/json"}
GEN = "/api/v1/services/aigc/text-generation/generation"
CHAT = "/compatible-mode/v1/chat/completions"
JOBS = "/api/v1/fine-tunes"
DEPLOY = "/api/v1/deployments"
HI = [{"role": "user", "content": "hi"}]


def _shaped_4xx(resp: httpx.Response) -> str:
    """The message of a 4xx in Bailian's shape (DashScope's, or OpenAI's error object on compatible-mode)."""
    assert 400 <= resp.status_code < 500, (resp.status_code, resp.text[:300])
    body = resp.json()
    assert "request_id" in body, body
    if "error" in body:
        return body["error"]["message"]
    assert {"code", "message"} <= set(body), body
    assert "Traceback" not in body["message"]
    return body["message"]


def _bodies_naming(model: str) -> list[tuple[str, dict]]:
    return [
        (GEN, {"model": model, "input": {"prompt": "hi"}}),
        (CHAT, {"model": model, "messages": HI}),
        (DEPLOY, {"model_name": model, "capacity": 1}),
        (JOBS, {"model": model, "training_type": "pg_opd", "teacher_model": "t", "training_datasets": [{}]}),
        (JOBS, {"model": "m", "training_type": "pg_opd", "teacher_model": model, "training_datasets": [{}]}),
    ]


ODD_MODEL_IDS = {
    "nul in a path": "/models/a\x00b",
    "another user's home": "~nosuchuser/model",
    "a path part over 255 bytes": "/" + "a" * 300,
    "a path over any limit": "/" + "a/" * 3000,
    "a right-to-left override": "qwen\u202e3-8b",
    "a newline": "qwen3\n-8b",
}


@pytest.mark.parametrize("model", list(ODD_MODEL_IDS.values()), ids=list(ODD_MODEL_IDS))
def test_odd_model_ids_are_a_4xx_everywhere(local_server, model):
    with httpx.Client(base_url=local_server.base_url, headers={"Authorization": "Bearer t"}) as http:
        for path, body in _bodies_naming(model):
            message = _shaped_4xx(http.post(path, content=json.dumps(body), headers=JSON))
            assert "model" in message, (path, message)


DEEP = "[" * 200 + "]" * 200
SURROGATE_CHAT = '{"model": "qwen3-8b", "messages": [{"role": "user", "content": "\\ud800"}]}'
SURROGATE_GEN = '{"model": "qwen3-8b", "input": {"prompt": "\\udfff"}}'
NON_JSON_TYPES = ["text/plain", "application/x-www-form-urlencoded", "application/octet-stream", None]


@pytest.mark.parametrize("ctype", NON_JSON_TYPES, ids=lambda c: c or "no-content-type")
@pytest.mark.parametrize(
    "path,body,needle",
    [
        (CHAT, DEEP, "nested more than"),
        (CHAT, SURROGATE_CHAT, "surrogate"),
        (GEN, SURROGATE_GEN, "surrogate"),
        (JOBS, DEEP, "nested more than"),
    ],
)
def test_the_body_checks_hold_whatever_the_content_type(local_server, ctype, path, body, needle):
    headers = {"Authorization": "Bearer t", **({"Content-Type": ctype} if ctype else {})}
    with httpx.Client(base_url=local_server.base_url, headers=headers) as http:
        assert needle in _shaped_4xx(http.post(path, content=body.encode()))


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le"])
@pytest.mark.parametrize(
    "path,body",
    [
        (CHAT, {"model": "qwen3-8b", "messages": [{"role": "user", "content": "\ud800"}]}),
        (GEN, {"model": "qwen3-8b", "input": {"prompt": "\ud800"}}),
        ("/api/v1/fine-tunes/create/faas/layer", {"layer_name": "\ud800"}),
        (JOBS, {"model": "qwen3-8b", "training_type": "pg_opd", "teacher_model": "t"}),
    ],
)
def test_json_in_another_utf_encoding_is_a_400_that_asks_for_utf8(local_server, encoding, path, body):
    raw = json.dumps(body, ensure_ascii=False).encode(encoding, "surrogatepass")
    with httpx.Client(base_url=local_server.base_url, headers={"Authorization": "Bearer t"}) as http:
        message = _shaped_4xx(http.post(path, content=raw, headers=JSON))
    assert "UTF-8" in message and encoding[:6].upper() in message, message


NON_FINITE = [
    (CHAT, '{"model": "qwen3-8b", "messages": [{"role": "user", "content": "hi"}], "tools": [{"x": NaN}]}', "tools[0].x"),
    (GEN, '{"model": "qwen3-8b", "input": {"prompt": "hi"}, "parameters": {"tools": [{"a": Infinity}]}}', "parameters.tools[0].a"),
    (CHAT, '{"model": "qwen3-8b", "messages": [{"role": "user", "content": "hi", "w": -Infinity}]}', "messages[0].w"),
    (CHAT, '{"model": "qwen3-8b", "messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', "temperature"),
    (CHAT, '{"model": "qwen3-8b", "messages": [{"role": "user", "content": "hi"}], "stream_options": {"a": NaN}}', "stream_options.a"),
    (JOBS, '{"model": "m", "training_type": "pg_opd", "teacher_model": "t", "hyper_parameters": {"learning_rate": NaN}}', "hyper_parameters.learning_rate"),
    (JOBS, '{"model": "m", "training_type": "reinforcement", "rewards": [{"reward_id": "r", "weight": Infinity}]}', "rewards[0].weight"),
]  # fmt: skip


@pytest.mark.parametrize("path,body,where", NON_FINITE, ids=[w for _, _, w in NON_FINITE])
def test_non_finite_numbers_anywhere_are_a_400_naming_the_field(local_server, path, body, where):
    with httpx.Client(base_url=local_server.base_url, headers={"Authorization": "Bearer t"}) as http:
        message = _shaped_4xx(http.post(path, content=body, headers=JSON))
    assert where in message and "finite" in message, message


HUGE = 10**30
HUGE_INTS = [
    (CHAT, {"model": "qwen3-8b", "messages": HI, "seed": HUGE}, "seed"),
    (GEN, {"model": "qwen3-8b", "input": {"prompt": "hi"}, "parameters": {"seed": HUGE}}, "seed"),
    (GEN, {"model": "qwen3-8b", "input": {"prompt": "hi"}, "parameters": {"max_tokens": HUGE}}, "max_tokens"),
    (CHAT, {"model": "qwen3-8b", "messages": HI, "seed": 2**31}, "seed"),
    (CHAT, {"model": "qwen3-8b", "messages": HI, "seed": -1}, "seed"),
    (DEPLOY, {"model_name": "qwen3-8b", "capacity": HUGE}, "capacity"),
    (JOBS, {"model": "m", "training_type": "pg_opd", "teacher_model": "t", "hyper_parameters": {"batch_size": HUGE}}, "batch_size"),
    (JOBS, {"model": "m", "training_type": "reinforcement", "rewards": [{"reward_id": "r", "concurrency": 10**6}]}, "concurrency"),
]  # fmt: skip


@pytest.mark.parametrize(
    "path,body,where", HUGE_INTS, ids=[f"{p.rsplit('/', 1)[-1]}-{w}" for p, _, w in HUGE_INTS]
)
def test_integers_beyond_any_range_are_a_400_not_a_503(local_server, path, body, where):
    with httpx.Client(base_url=local_server.base_url, headers={"Authorization": "Bearer t"}) as http:
        message = _shaped_4xx(http.post(path, content=json.dumps(body), headers=JSON))
    assert where in message, message
    assert "serving process" not in message  # the model is not to blame


def test_a_valid_generation_with_a_seed_in_range_still_answers(local_server):
    body = {"model": "qwen3-8b", "messages": HI, "seed": 2**31 - 1, "max_tokens": 4}
    with httpx.Client(
        base_url=local_server.base_url, headers={"Authorization": "Bearer t"}, timeout=120
    ) as http:
        resp = http.post(CHAT, json=body)
    assert resp.status_code == 200, resp.text[:300]
