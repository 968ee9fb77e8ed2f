"""`JobClient` and `AsyncJobClient` answer every call alike: same typed results, same `OpdError`.

Every public method of the clients is a case (a new method is covered without touching this file,
or fails loudly if it needs an argument the tests cannot guess). The control planes are real: the
session's `opd serve` (see conftest) and a small Bailian stand-in served by uvicorn on 127.0.0.1
that answers Bailian's job shapes, has none of the local-only routes, and says ``NotFound`` both
for a route it lacks and for a job it does not know, as Bailian does.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import TINY_HP, wait_status
from pydantic import BaseModel, SecretStr

from opd_nb.client import AsyncJobClient, JobClient, Target
from opd_nb.constants import TERMINAL_STATUSES
from opd_nb.errors import OpdError

MISSING = "ft-202001010000-0000"
# What Bailian lacks: None there, from both clients.
LOCAL_ONLY = {"metrics", "models", "rollouts", "traces"}
OPTIONAL = {"checkpoints"}  # Bailian's public API, asked on both planes: None where the route is missing
CHANGES_THE_JOB = {"delete"}  # run on a fresh job per client, so the second sees what the first did
# Deployments and the chat API: about models, not jobs (their own test below, on real deployments).
MODEL_CALLS = {
    "deploy",
    "deployments",
    "deployment",
    "wait_deployed",
    "scale",
    "undeploy",
    "chat",
    "chat_stream",
}
NO_DEPLOYMENT = "no-such-deployment"
CHAT = {"model": "qwen3-8b", "messages": "93418", "temperature": 0, "max_tokens": 8}
KWARGS = {
    "wait": {"poll_s": 0.1, "timeout_s": 60},
    "deploy": {"model": "qwen3-8b"},
    "deployment": {"deployed_model": NO_DEPLOYMENT},
    "find_deployment": {"suffix": "r0000000000"},
    "wait_deployed": {"deployed_model": NO_DEPLOYMENT, "poll_s": 0.1, "timeout_s": 30},
    "scale": {"deployed_model": NO_DEPLOYMENT, "capacity": 1},
    "undeploy": {"deployed_model": NO_DEPLOYMENT},
    "chat": CHAT,
    "chat_stream": CHAT,
    "export_checkpoint": {"checkpoint": "checkpoint-2", "model_name": "early"},
}


def public_calls() -> list[str]:
    return sorted(name for name, _ in inspect.getmembers(JobClient, inspect.isfunction) if name[0] != "_")


def job_calls() -> list[str]:
    return [
        name for name in public_calls() if "job_id" in inspect.signature(getattr(JobClient, name)).parameters
    ]


def arguments(name: str, job_id: str, **overrides: Any) -> dict[str, Any]:
    """The call's arguments: the job id where it takes one, defaults elsewhere (plus `KWARGS`)."""
    args: dict[str, Any] = {**KWARGS.get(name, {}), **overrides}
    for param in list(inspect.signature(getattr(JobClient, name)).parameters.values())[1:]:
        if param.name == "job_id":
            args["job_id"] = job_id
        elif param.default is inspect.Parameter.empty and param.name not in args:
            raise AssertionError(f"JobClient.{name} needs {param.name!r}: add it to KWARGS in this test")
    return args


def plain(result: Any) -> Any:
    """A result as comparable data that keeps its type name (a Job never equals a dict)."""
    if isinstance(result, BaseModel):
        return {"type": type(result).__name__, **result.model_dump(mode="json")}
    if isinstance(result, list):
        return [plain(item) for item in result]
    return result


def is_failure(outcome: Any) -> bool:
    return isinstance(outcome, dict) and outcome.get("error") == "OpdError"


def failure(exc: OpdError) -> dict[str, Any]:
    return {
        "error": type(exc).__name__,
        "status": exc.status,
        "code": exc.code,
        "message": exc.message,
        "where": exc.where,
        "fix": exc.fix,
    }


def sync_outcome(target: Target, name: str, job_id: str, call_kw: Any = None, **client_kw: Any) -> Any:
    try:
        result = getattr(JobClient(target, **client_kw), name)(**arguments(name, job_id, **(call_kw or {})))
        if inspect.isgenerator(result):
            result = list(result)
    except OpdError as exc:
        return failure(exc)
    return plain(result)


def async_outcome(target: Target, name: str, job_id: str, call_kw: Any = None, **client_kw: Any) -> Any:
    async def call() -> Any:
        result = getattr(AsyncJobClient(target, **client_kw), name)(
            **arguments(name, job_id, **(call_kw or {}))
        )
        if inspect.isasyncgen(result):
            return [event async for event in result]
        return await result

    try:
        result = asyncio.run(call())
    except OpdError as exc:
        return failure(exc)
    return plain(result)


def both(target: Target, name: str, job_id: str = MISSING, call_kw: Any = None, **client_kw: Any) -> Any:
    """Run the call through both clients, assert they agree, return the common outcome."""
    sync = sync_outcome(target, name, job_id, call_kw, **client_kw)
    async_ = async_outcome(target, name, job_id, call_kw, **client_kw)
    assert sync == async_, f"{name}: sync and async clients differ"
    return sync


def test_the_clients_offer_the_same_calls():
    for name in public_calls():
        sync, async_ = getattr(JobClient, name), getattr(AsyncJobClient, name, None)
        assert async_ is not None, f"AsyncJobClient lacks {name}"
        assert inspect.iscoroutinefunction(async_) or inspect.isasyncgenfunction(async_), name
        assert list(inspect.signature(sync).parameters.values()) == list(
            inspect.signature(async_).parameters.values()
        ), name
    assert {name for name, _ in inspect.getmembers(AsyncJobClient) if name[0] != "_"} == set(public_calls())
    assert LOCAL_ONLY | OPTIONAL | CHANGES_THE_JOB | MODEL_CALLS | set(KWARGS) <= set(public_calls())


# ---- (a) an unknown job on `opd serve` --------------------------------------------------------
@pytest.fixture(scope="module")
def local(local_server) -> Target:
    return Target(kind="local", base_url=local_server.api_base, api_key=SecretStr("test"))


@pytest.mark.parametrize("name", job_calls())
def test_unknown_job_is_the_same_404_from_both(local, name):
    outcome = both(local, name)
    assert is_failure(outcome), outcome
    assert (outcome["status"], outcome["code"]) == (404, "JobNotFound"), outcome
    assert MISSING in outcome["message"]


@pytest.mark.parametrize("name", public_calls())
def test_no_answer_is_the_same_error_without_status(name):
    nowhere = Target(kind="local", base_url="http://127.0.0.1:9/api/v1", api_key=SecretStr("test"))
    outcome = both(nowhere, name, retries=0, timeout=2)
    assert is_failure(outcome), outcome
    assert outcome["status"] is None and "cannot reach the local control plane" in outcome["message"]
    assert "opd serve" in outcome["fix"]


@pytest.mark.parametrize("name", public_calls())
def test_missing_key_is_the_same_401(local, name):
    no_key = Target(kind="local", base_url=local.base_url, api_key=None)
    outcome = both(no_key, name, retries=0)
    assert is_failure(outcome), outcome
    assert (outcome["status"], outcome["code"]) == (401, "InvalidApiKey"), outcome
    assert "DASHSCOPE_API_KEY" in outcome["fix"]


# ---- (b) a control plane without the local-only endpoints (Bailian) ---------------------------
BAILIAN_JOB = {
    "job_id": "ft-202410291653-1c7f",
    "job_name": "ft-202410291653-1c7f",
    "status": "SUCCEEDED",
    "finetuned_output": "qwen3-14b-suffix-ft-202410291653-1c7f",
    "model": "qwen3-14b",
    "base_model": "qwen3-14b",
    "training_file_ids": ["976bd01a-f30b-4414-86fd-50c54486e3ef"],
    "validation_file_ids": [],
    "hyper_parameters": {"n_epochs": 3, "batch_size": 32},
    "training_type": "sft",
    "create_time": "2024-10-29 16:53:39",
    "end_time": "2024-10-29 17:41:05",
}

RUNNING_JOB = {**BAILIAN_JOB, "job_id": "ft-202410291700-2a2a", "status": "RUNNING", "end_time": None}
BAILIAN_CHECKPOINTS = [  # Bailian's documented "list checkpoints" answer: newest step first, with expire_time
    {
        "checkpoint_id": "ft-202410291653-1c7f:checkpoint-20",
        "checkpoint": "checkpoint-20",
        "full_name": "ft-202410291653-1c7f-checkpoint-20",
        "job_id": "ft-202410291653-1c7f",
        "step": 20,
        "status": "SUCCEEDED",
        "create_time": "2024-10-29 17:20:00",
        "expire_time": "2024-11-13 17:20:00",
        "model_name": "qwen3-14b-ft-202410291653-1c7f-ckpt-20",
    },
    {
        "checkpoint_id": "ft-202410291653-1c7f:checkpoint-2",
        "checkpoint": "checkpoint-2",
        "full_name": "ft-202410291653-1c7f-checkpoint-2",
        "job_id": "ft-202410291653-1c7f",
        "step": 2,
        "status": "SUCCEEDED",
        "create_time": "2024-10-29 17:00:00",
        "expire_time": "2024-11-13 17:00:00",
    },
]
EXPORTED_NAME = "qwen3-14b-ft-202410291653-1c7f-ckpt-2"  # what the list shows once checkpoint-2 is exported
BAILIAN_DEPLOYMENT = {
    "deployed_model": "qwen3-14b-ft-202410291653-1c7f-abcd",
    "status": "RUNNING",
    "model_name": "qwen3-14b-ft-202410291653-1c7f",
    "base_model": "qwen3-14b",
    "capacity": 1,
    "ready_capacity": 1,
    "gmt_create": "2024-10-30 10:00:00",
}
BAILIAN_COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "<think>n=5</think>13489"},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28},
}
BAILIAN_JOBS = {job["job_id"]: job for job in (BAILIAN_JOB, RUNNING_JOB)}


def bailian_app() -> Any:
    """Bailian's job routes only; anything else, and any unknown job, is Bailian's `NotFound`."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    def answer(output: Any = None, status: int = 200, code: str | None = None, message: str = "") -> Any:
        body = {"request_id": "7d7e1469-df77-4163-83ce-54425df744ed"}
        body.update({"output": output} if status == 200 else {"code": code, "message": message})
        return JSONResponse(body, status_code=status)

    def not_found(request: Any, exc: Exception) -> Any:
        return answer(status=404, code="NotFound", message="Not Found!")

    def job(request: Any) -> dict:
        if not request.headers.get("authorization", "").startswith("Bearer "):
            raise HTTPException(401)
        if request.path_params["job_id"] not in BAILIAN_JOBS:
            raise HTTPException(404)
        return BAILIAN_JOBS[request.path_params["job_id"]]

    async def list_jobs(request: Any) -> Any:
        return answer({"page_no": 1, "page_size": 10, "total": 2, "jobs": list(BAILIAN_JOBS.values())})

    async def one(request: Any) -> Any:
        found = job(request)
        return answer({"status": "success"} if request.method == "DELETE" else found)

    async def logs(request: Any) -> Any:
        job(request)
        return answer({"job_id": BAILIAN_JOB["job_id"], "logs": "loading data\ntraining\ndone", "total": 3})

    async def cancel(request: Any) -> Any:
        job(request)
        return answer({"status": "success"})

    exported: set[str] = set()

    async def checkpoints(request: Any) -> Any:
        job(request)
        return answer(
            [
                {**c, "model_name": EXPORTED_NAME} if c["checkpoint"] in exported else c
                for c in BAILIAN_CHECKPOINTS
            ]
        )

    async def export(request: Any) -> Any:
        """Bailian's export answer: `output: true`; the name shows up in the checkpoint list after."""
        job(request)
        if request.path_params["checkpoint"] not in {c["checkpoint"] for c in BAILIAN_CHECKPOINTS}:
            raise HTTPException(404)
        exported.add(request.path_params["checkpoint"])
        return answer(True)

    async def deployments(request: Any) -> Any:
        return answer({"page_no": 1, "page_size": 10, "total": 1, "deployments": [BAILIAN_DEPLOYMENT]})

    async def chat(request: Any) -> Any:
        """The compatible-mode API beside /api/v1: an OpenAI completion (or its stream)."""
        from starlette.responses import StreamingResponse

        body = await request.json()
        if body.get("stream"):
            chunks = [
                {"choices": [{"index": 0, "delta": {"content": p}}]} for p in ("<think>n=5</think>", "13489")
            ]
            lines = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
            return StreamingResponse(iter(lines), media_type="text/event-stream")
        return JSONResponse({**BAILIAN_COMPLETION, "model": body["model"]})

    def unauthorized(request: Any, exc: Exception) -> Any:
        return answer(status=401, code="InvalidApiKey", message="Invalid API-key provided.")

    routes = [
        Route("/api/v1/fine-tunes", list_jobs),
        Route("/api/v1/fine-tunes/{job_id}", one, methods=["GET", "DELETE"]),
        Route("/api/v1/fine-tunes/{job_id}/logs", logs),
        Route("/api/v1/fine-tunes/{job_id}/cancel", cancel, methods=["POST"]),
        Route("/api/v1/fine-tunes/{job_id}/checkpoints", checkpoints),
        Route("/api/v1/fine-tunes/{job_id}/export/{checkpoint}", export),
        Route("/api/v1/deployments", deployments),
        Route("/compatible-mode/v1/chat/completions", chat, methods=["POST"]),
    ]
    return Starlette(routes=routes, exception_handlers={404: not_found, 401: unauthorized})


@pytest.fixture(scope="module")
def bailian() -> Iterator[str]:
    """The stand-in's API base, served by a real uvicorn on a free loopback port."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(bailian_app(), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the Bailian stand-in did not start"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/api/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.mark.parametrize("kind", ["local", "cloud"])  # cloud: never asked; local: asked, answers 404
@pytest.mark.parametrize("name", public_calls())
def test_bailian_known_job(bailian, kind, name):
    outcome = both(
        Target(kind=kind, base_url=bailian, api_key=SecretStr("sk-test")), name, BAILIAN_JOB["job_id"]
    )
    if name in LOCAL_ONLY:
        assert outcome is None  # no such endpoint there, and that is not an error
    elif name == "checkpoints":  # Bailian's listing, read into the same Checkpoint as locally
        assert [(c["name"], c["step"], c["expire_time"]) for c in outcome] == [
            ("checkpoint-20", 20, "2024-11-13 17:20:00"),
            ("checkpoint-2", 2, "2024-11-13 17:00:00"),
        ]
        assert outcome[0]["model_name"] == "qwen3-14b-ft-202410291653-1c7f-ckpt-20"
    elif name == "export_checkpoint":  # the export reply is `true`; the name is read back from the list
        assert outcome["type"] == "Checkpoint" and outcome["name"] == "checkpoint-2"
        assert outcome["model_name"] == EXPORTED_NAME and outcome["expire_time"] == "2024-11-13 17:00:00"
    elif name == "deployments":
        assert [d["deployed_model"] for d in outcome["deployments"]] == [BAILIAN_DEPLOYMENT["deployed_model"]]
    elif name == "chat":
        assert outcome["content"] == "<think>n=5</think>13489" and outcome["model"] == "qwen3-8b"
    elif name == "chat_stream":
        assert outcome == ["<think>n=5</think>", "13489"]
    elif name in ("get", "wait", "cancel"):
        assert outcome["type"] == "Job" and outcome["raw"] == BAILIAN_JOB
    elif name == "logs":
        assert outcome["lines"] == ["loading data", "training", "done"] and outcome["next_offset"] == 4
    elif name == "list":
        assert [job["job_id"] for job in outcome["jobs"]] == list(BAILIAN_JOBS)


@pytest.mark.parametrize("kind", ["local", "cloud"])
def test_wait_timeout_is_the_same_error(bailian, kind):
    target = Target(kind=kind, base_url=bailian, api_key=SecretStr("sk-test"))
    seen: list[str] = []
    outcome = both(
        target,
        "wait",
        RUNNING_JOB["job_id"],
        {"poll_s": 0.05, "timeout_s": 0.2, "on_update": lambda job: seen.append(job.status)},
    )
    assert is_failure(outcome) and outcome["status"] is None, outcome
    assert "still RUNNING" in outcome["message"] and f"opd watch {RUNNING_JOB['job_id']}" in outcome["fix"]
    assert seen and set(seen) == {"RUNNING"}  # on_update saw every poll, from both clients


@pytest.mark.parametrize("kind", ["local", "cloud"])
@pytest.mark.parametrize("name", job_calls())
def test_bailian_unknown_job(bailian, kind, name):
    """Same `NotFound` code for route and job: a local-only call still tells them apart."""
    outcome = both(Target(kind=kind, base_url=bailian, api_key=SecretStr("sk-test")), name)
    if name in LOCAL_ONLY and kind == "cloud":
        assert outcome is None  # the cloud is not asked for endpoints it does not have
    else:
        assert is_failure(outcome), outcome
        assert (outcome["status"], outcome["code"]) == (404, "NotFound"), outcome
        assert MISSING in outcome["message"]


# ---- (c) a real job on `opd serve` ------------------------------------------------------------
def _submit_tiny_job(api: httpx.Client) -> str:
    from opd_nb.engine.task import make_rows

    rows = "".join(json.dumps(r) + "\n" for r in make_rows(9, seed=1)).encode()  # > batch_size 8
    upload = api.post(
        "/files",
        files={"files": ("train.jsonl", rows, "application/octet-stream")},
        data={"purpose": "fine-tune"},
    )
    assert upload.status_code == 200, upload.text
    file_id = upload.json()["data"]["uploaded_files"][0]["file_id"]
    body = {
        "model": "qwen3-8b",
        "teacher_model": "qwen3-max",
        "training_type": "pg_opd",
        "training_datasets": [{"type": "training", "data_source_type": "file_id", "file_id": file_id}],
        "hyper_parameters": TINY_HP,
    }
    created = api.post("/fine-tunes", json=body)
    assert created.status_code == 200, created.text
    return created.json()["output"]["job_id"]


@pytest.fixture(scope="module")
def finished_jobs(local, finished_job) -> dict[str, str]:
    """The session's finished reward job (read only), plus one per client for the calls that change a job."""
    with httpx.Client(base_url=local.base_url, headers={"Authorization": "Bearer test"}, timeout=60) as api:
        ids = {"sync": _submit_tiny_job(api), "async": _submit_tiny_job(api)}
    client = JobClient(local)
    for job_id in ids.values():
        assert wait_status(client, job_id, set(TERMINAL_STATUSES), timeout=300).status == "SUCCEEDED"
    return {"shared": finished_job("reward").job_id, **ids}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(public_calls()) - CHANGES_THE_JOB - MODEL_CALLS))
def test_finished_job(local, finished_jobs, name):
    job_id = finished_jobs["shared"]
    outcome = both(local, name, job_id)
    if name == "cancel":
        assert is_failure(outcome), outcome
        assert (outcome["status"], outcome["code"]) == (400, "JobFinished"), outcome
        return
    if name == "find_deployment":  # no deployment carries that request id: both clients say none
        assert outcome is None, outcome
        return
    assert outcome and not is_failure(outcome), outcome
    if name in ("get", "wait"):
        assert outcome["type"] == "Job" and outcome["status"] == "SUCCEEDED"
    elif name == "metrics":
        assert all("step" in row for row in outcome)
    elif name == "checkpoints":  # newest step first: the published final checkpoint leads
        assert outcome[0]["type"] == "Checkpoint" and outcome[0]["published"] and outcome[0]["expire_time"]
        assert outcome[0]["model_name"] == f"opd-local/{job_id}" and outcome[0]["job_id"] == job_id
    elif name == "export_checkpoint":  # a kept checkpoint: exported once, the same name for both clients
        assert outcome["name"] == "checkpoint-2" and outcome["model_name"].endswith(f"-{job_id}-ckpt-2")
    elif name == "rollouts":  # the latest step's samples, each token with both log-probs
        assert outcome["type"] == "RolloutPage" and outcome["step"] == outcome["steps"][-1]
        assert outcome["rollouts"] and all("teacher_logprob" in t for t in outcome["rollouts"][0]["tokens"])
    elif name == "traces":  # a job without functions traces nothing: an empty page, the same from both
        assert outcome["type"] == "TracesPage" and outcome["job_id"] == job_id
    elif name == "events":
        assert outcome[-1]["kind"] == "status" and json.loads(outcome[-1]["data"])["status"] == "SUCCEEDED"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CHANGES_THE_JOB))
def test_calls_that_change_a_job(local, finished_jobs, name):
    sync = sync_outcome(local, name, finished_jobs["sync"])
    async_ = async_outcome(local, name, finished_jobs["async"])
    assert sync == async_, f"{name}: sync and async clients differ"
    assert not is_failure(sync), sync
    if name == "delete":  # both really deleted their job
        after = [both(local, "get", finished_jobs[side]) for side in ("sync", "async")]
        assert [a["status"] for a in after] == [404, 404], after


# ---- (d) deployments and the chat API on `opd serve` -----------------------------------------
@pytest.mark.slow
def test_model_calls_agree_on_real_deployments(local):
    assert both(local, "chat")["content"]  # a base model answers directly; greedy, so both alike
    assert len(both(local, "chat_stream")) > 1
    missing = both(local, "deployment")
    assert (missing["status"], missing["code"]) == (404, "DeploymentNotFound")
    refused = both(local, "deploy", call_kw={"capacity": 0})
    assert (refused["status"], refused["code"]) == (400, "InvalidParameter")
    name = JobClient(local).deploy("qwen3-8b", suffix="parity").deployed_model  # one real deployment
    try:
        running = both(local, "wait_deployed", call_kw={"deployed_model": name})
        assert running["status"] == "RUNNING" and running["deployed_model"] == name
        assert both(local, "deployment", call_kw={"deployed_model": name}) == running
        assert name in [d["deployed_model"] for d in both(local, "deployments")["deployments"]]
        assert both(local, "chat", call_kw={**CHAT, "model": name})["content"]
        assert both(local, "scale", call_kw={"deployed_model": name, "capacity": 2})["capacity"] == 2
    finally:
        gone = JobClient(local).undeploy(name)
    assert gone.status == "DELETED"
    after = both(local, "chat", call_kw={**CHAT, "model": name})
    assert (after["status"], after["code"]) == (400, "ModelNotDeployed")
