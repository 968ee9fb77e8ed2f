"""One model per resource on the wire (issue 38): every route answers through its model in `opd_nb.wire`,
the models round-trip every field the server sends, and the committed OpenAPI document is the code's.

`tests/data/wire_samples.json` holds an answer of every route as the server sent them before the wire
models existed (captured by `tests/wire_routes.py` from commit 8109e1a, paths and ports blanked, lists cut
to three items, streams to their first and last six events). A model that lacked one of their fields
would drop it silently as a response model: here it fails instead.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter

from opd_nb.wire.checkpoints import CheckpointEntry, ExportAnswer
from opd_nb.wire.deployments import DeploymentListing, DeploymentOutput, DeploymentStatus
from opd_nb.wire.envelope import ErrorBody, OpenAIError, Output
from opd_nb.wire.files import FileEntry, FileListing, FileStatus, UploadAnswer
from opd_nb.wire.functions import (
    Instance,
    InstanceDeleted,
    InstanceLogs,
    Layer,
    Registered,
    StoredZip,
    UploadUrl,
)
from opd_nb.wire.health import Health
from opd_nb.wire.inference import ChatCompletion, ChatCompletionChunk, GenerationAnswer, OpenAIModelList
from opd_nb.wire.jobs import JobDeleted, JobListing, JobLogs, JobMetrics, JobOutput, JobStatus, JobStatusEvent
from opd_nb.wire.models import ModelListing, ResolvedModel
from opd_nb.wire.rollouts import RolloutsPage

SAMPLES = json.loads((Path(__file__).parent / "data" / "wire_samples.json").read_text(encoding="utf-8"))
# Each answer's model: a body's, or a stream's by event kind.
BODIES: dict[str, Any] = {
    "health": Health,
    "files.upload": UploadAnswer,
    "files.list": Output[FileListing],
    "files.get": Output[FileEntry],
    "files.delete": Output[FileStatus],
    "functions.upload_url": Output[UploadUrl],
    "functions.oss_put": Output[StoredZip],
    "functions.layer": Output[Layer],
    "functions.layer_status": Output[Layer],
    "functions.register": Output[Registered],
    "functions.load": Output[Instance],
    "functions.query": Output[Instance],
    "functions.logs": Output[InstanceLogs],
    "functions.delete": InstanceDeleted,
    "jobs.create": Output[JobOutput],
    "jobs.get": Output[JobOutput],
    "jobs.get_canceled": Output[JobOutput],
    "jobs.get_failed": Output[JobOutput],
    "jobs.list": Output[JobListing],
    "jobs.cancel": Output[JobStatus],
    "jobs.logs": Output[JobLogs],
    "jobs.metrics": Output[JobMetrics],
    "jobs.checkpoints": Output[list[CheckpointEntry]],
    "jobs.checkpoints_after_export": Output[list[CheckpointEntry]],
    "jobs.export": ExportAnswer,
    "jobs.rollouts": Output[RolloutsPage],
    "jobs.delete": JobDeleted,
    "jobs.cancel_finished": ErrorBody,
    "models.list": Output[ModelListing],
    "models.get": Output[ResolvedModel],
    "models.get_missing": ErrorBody,
    "inference.generation_text": GenerationAnswer,
    "inference.generation_message": GenerationAnswer,
    "inference.chat": ChatCompletion,
    "inference.chat_logprobs": ChatCompletion,
    "inference.models": OpenAIModelList,
    "inference.chat_error": OpenAIError,
    "inference.chat_missing_model": OpenAIError,
    "deployments.create": Output[DeploymentOutput],
    "deployments.get": Output[DeploymentOutput],
    "deployments.scale": Output[DeploymentOutput],
    "deployments.list": Output[DeploymentListing],
    "deployments.delete": Output[DeploymentStatus],
    "errors.validation": ErrorBody,
    "errors.not_found_route": ErrorBody,
    "errors.unknown_job": ErrorBody,
    "errors.no_key": ErrorBody,
}
STREAMS: dict[str, dict[str, Any]] = {
    "jobs.stream": {"status": JobStatusEvent},
    "deployments.stream": {"status": DeploymentOutput},
    "inference.generation_stream": {"result": GenerationAnswer},
    "inference.chat_stream": {"message": ChatCompletionChunk},
}


def _round_trip(model: Any, body: Any) -> Any:
    """``body`` read into `model` and written back as the routes write it."""
    value = TypeAdapter(model).validate_python(body)
    return (
        value.wire() if isinstance(value, BaseModel) else TypeAdapter(model).dump_python(value, mode="json")
    )


def _event_data(text: str) -> list[tuple[str, Any]]:
    """(event kind, JSON data) of each event of a stream that carries JSON."""
    out = []
    for block in text.split("\n\n"):
        kind, data = "message", []
        for line in block.split("\n"):
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            kind = value if field == "event" else kind
            data += [value] if field == "data" else []
        joined = "\n".join(data)
        if joined[:1] == "{":
            out.append((kind, json.loads(joined)))
    return out


def test_every_captured_answer_has_a_model():
    assert set(BODIES) | set(STREAMS) == set(SAMPLES)


@pytest.mark.parametrize("name", sorted(BODIES))
def test_a_model_round_trips_every_field_the_server_sent(name):
    body = SAMPLES[name]["body"]
    assert _round_trip(BODIES[name], body) == body


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_a_stream_event_model_round_trips_every_field(name):
    events = _event_data(SAMPLES[name]["sse"])
    assert events, name
    for kind, data in events:
        if kind == "error" or "error" in data:
            model: Any = ErrorBody if "code" in data else OpenAIError
        else:
            model = STREAMS[name][kind]
        assert _round_trip(model, data) == data, (name, kind)
        assert _undeclared(TypeAdapter(model).validate_python(data)) == [], (name, kind)


def test_a_models_keys_go_out_as_documented():
    """Absent stays absent, null stays null: a job's code and message come only with a failure."""
    job = {"job_id": "ft-1", "status": "RUNNING", "finetuned_output": None}
    sent = JobOutput.model_validate(job).wire()
    assert sent["finetuned_output"] is None and "code" not in sent and "message" not in sent
    failed = JobOutput.model_validate({**job, "status": "FAILED", "code": "JobFailed", "message": "x"}).wire()
    assert (failed["code"], failed["message"]) == ("JobFailed", "x")
    assert "instanceId" in Instance.model_validate(SAMPLES["functions.load"]["body"]["output"]).wire()


def test_every_route_answers_through_a_model_or_is_a_documented_stream():
    from opd_nb.server.app import ROUTERS
    from opd_nb.server.openapi import STREAMS as DOCUMENTED_STREAMS
    from opd_nb.server.tracing.env import OTLP_PATH

    routes = [r for router in ROUTERS for r in router.routes if isinstance(r, APIRoute)]
    # OTLP's intake answers the exporter in its own encoding (protobuf or JSON), documented as such
    not_json = {*DOCUMENTED_STREAMS, OTLP_PATH}
    untyped = [r.path for r in routes if r.response_model is None and r.path not in not_json]
    assert len(routes) == 38 and untyped == []
    models = [r.response_model for r in routes if r.response_model is not None]
    assert all(_from_the_wire(m) for m in models), models


def _from_the_wire(model: Any) -> bool:
    """A route's model, and the model inside its envelope or list, is one of :mod:`opd_nb.wire` (or the
    traces page)."""
    generic = getattr(model, "__pydantic_generic_metadata__", None) or {}
    origin = generic.get("origin") or getattr(model, "__origin__", None) or model
    args = generic.get("args") or getattr(model, "__args__", ())
    module = str(getattr(origin, "__module__", ""))
    # the traces page is its own package's model (opd_nb.traces, core), read back by the client as it is
    wire = origin is list or module.startswith("opd_nb.wire") or module == "opd_nb.traces.page"
    return wire and all(_from_the_wire(a) for a in args)


def test_the_committed_openapi_document_is_the_codes():
    from opd_nb.server.openapi_doc import COMMITTED, current

    assert COMMITTED.read_text(encoding="utf-8") == current(), (
        "the routes or their models changed: run `python -m opd_nb.server.openapi_doc --write` and commit "
        f"{COMMITTED.name}"
    )


def test_the_document_describes_answers_errors_and_streams():
    doc = json.loads((Path(__file__).parents[1] / "opd_nb" / "wire" / "openapi.json").read_text())
    job = doc["paths"]["/api/v1/fine-tunes/{job_id}"]["get"]["responses"]
    assert job["200"]["content"]["application/json"]["schema"]["$ref"].endswith("Output_JobOutput_")
    assert job["404"]["content"]["application/json"]["schema"]["$ref"].endswith("/Error")
    chat = doc["paths"]["/compatible-mode/v1/chat/completions"]["post"]["responses"]
    assert chat["400"]["content"]["application/json"]["schema"]["$ref"].endswith("/OpenAIError")
    stream = doc["paths"]["/api/v1/fine-tunes/{job_id}/stream"]["get"]["responses"]["200"]["content"]
    assert stream["text/event-stream"]["x-event-data"]["$ref"].endswith("/JobStatusEvent")
    assert not re.search(r"/tmp/|/work/|/home/", json.dumps(doc)), "a machine's path in the document"


# ---- the live server: every route, the same structure as before the models ---------------------
def _cut(capture: dict[str, Any]) -> dict[str, Any]:
    """A live answer cut as the samples are (lists to three items, streams to their ends)."""

    def cut(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: cut(v) for k, v in value.items()}
        return [cut(v) for v in value[:3]] if isinstance(value, list) else value

    if "sse" in capture:
        blocks = [b for b in capture["sse"].split("\n\n") if b.strip()]
        blocks = blocks[:6] + blocks[-6:] if len(blocks) > 12 else blocks
        return {"status": capture["status"], "sse": "\n\n".join(blocks) + "\n\n"}
    return {"status": capture["status"], "body": cut(capture["body"])}


ADDED = {"plan"}  # under a job's `local`: its hyper-parameters as read at submission (issue 38)


def _without_added(value: Any) -> Any:
    if isinstance(value, dict):
        local = value.get("local")
        if isinstance(local, dict) and "job_name" in value:  # a job object (a checkpoint has a local too)
            assert ADDED <= set(local), value  # every job of the local plane carries its plan
            value = {**value, "local": {k: v for k, v in local.items() if k not in ADDED}}
        return {k: _without_added(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_added(v) for v in value]
    return value


@pytest.mark.slow
def test_the_live_server_answers_every_route_in_the_shapes_it_sent_before(tmp_path):
    """A server of its own: the samples' listings (files, jobs, models) hold only what this walk made."""
    from wire_routes import exercise, shape

    from opd_nb.server import start

    server = start(port=0, data_dir=tmp_path / "data")
    try:
        live = exercise(server, tmp_path)
    finally:
        server.stop()
    assert set(live) == set(SAMPLES)
    for name, capture in live.items():
        now = _cut(capture)
        if "body" in now:
            now = {**now, "body": _without_added(now["body"])}
        assert shape(now) == shape(SAMPLES[name]), name
    job = live["jobs.get"]["body"]["output"]
    assert job["local"]["plan"]["max_length"] == job["hyper_parameters"]["max_length"]


def _undeclared(value: Any, where: str = "") -> list[str]:
    """Keys a model kept without declaring them (``extra="allow"``), anywhere inside ``value``."""
    out: list[str] = []
    if isinstance(value, BaseModel):
        out += [f"{where}.{k}" for k in value.model_extra or {}]
        for name in type(value).model_fields:
            out += _undeclared(getattr(value, name), f"{where}.{name}")
    elif isinstance(value, list | tuple):
        for item in value:
            out += _undeclared(item, f"{where}[]")
    elif isinstance(value, dict):
        for key, item in value.items():
            out += _undeclared(item, f"{where}.{key}")
    return out


@pytest.mark.parametrize("name", sorted(BODIES))
def test_every_field_the_server_sent_is_declared_by_its_model(name):
    """Kept as an extra is not described: the OpenAPI document would not show it."""
    value = TypeAdapter(BODIES[name]).validate_python(SAMPLES[name]["body"])
    assert _undeclared(value) == []


@pytest.mark.parametrize("out", [None, "busy", ["x", 3]])
def test_a_reply_out_of_shape_reads_as_one_without_the_keys(out):
    """The client's parsers (strict-typed through `json_object`) read an ``output`` that is not an object
    as one without the keys (an object with a key out of shape is the wire model's ValidationError, which
    the call reports as an unexpected reply)."""
    from opd_nb.client.deploy_results import DeploymentList
    from opd_nb.client.job_results import Checkpoint, JobList
    from opd_nb.client.rollout_results import RolloutPage

    assert JobList.from_output(out, page=1, size=20).jobs == []
    assert Checkpoint.listing(out) == []
    assert DeploymentList.from_output(out, page=1, size=20).deployments == []
    page = RolloutPage.from_output("job-1", out)
    assert (page.job_id, page.rollouts, page.steps) == ("job-1", [], [])


def test_a_checkpoint_listing_is_read_from_a_list_or_an_older_servers_object():
    from opd_nb.client.job_results import Checkpoint

    entry = {"checkpoint": "checkpoint-20", "step": 20, "job_id": "job-1"}
    assert [c.name for c in Checkpoint.listing([entry, "junk"])] == ["checkpoint-20"]
    assert [c.step for c in Checkpoint.listing({"checkpoints": [entry]})] == [20]


def test_a_client_result_is_its_wire_model_and_reads_an_older_servers_flat_entry():
    """`Checkpoint` *is* the wire's entry (as `Job` is the job object): its names are views of the wire's
    fields, so a field the server adds is the client's too; an older server's flat keys read the same."""
    from opd_nb.client.job_results import Checkpoint

    assert issubclass(Checkpoint, CheckpointEntry)
    wire = {"checkpoint": "checkpoint-4", "step": 4, "create_time": "2026-01-01 00:00:00",
            "model_display_name": "mine", "local": {"path": "/d/c4", "metrics": {"r": 0.5}, "published": True}}  # fmt: skip
    flat = {"name": "checkpoint-4", "step": 4, "created_at": "2026-01-01 00:00:00", "display_name": "mine",
            "path": "/d/c4", "metrics": {"r": 0.5}, "published": True}  # fmt: skip
    for entry in (wire, flat):
        c = Checkpoint.from_entry(entry)
        assert (c.name, c.step, c.path, c.created_at, c.display_name) == (
            "checkpoint-4", 4, "/d/c4", "2026-01-01 00:00:00", "mine")  # fmt: skip
        assert (c.metrics, c.published, c.local and c.local.path) == ({"r": 0.5}, True, "/d/c4")
        assert c.to_payload()["name"] == "checkpoint-4"
    assert Checkpoint.from_entry({**wire, "new_field": 1}).model_extra == {"new_field": 1}


def test_every_body_the_client_sends_is_a_wire_request_the_server_validates():
    """One model per request body (`wire/requests.py`): the client builds it, and the route's body is a
    subclass that only adds the local plane's limits, so what is sent and what is read cannot drift."""
    from opd_nb.client import _calls
    from opd_nb.server import bodies
    from opd_nb.wire import requests

    served = {bodies.CancelBody: requests.CancelRequest, bodies.DeploymentBody: requests.DeploymentCreate,
              bodies.ScaleBody: requests.DeploymentScale, bodies.ChatBody: requests.ChatRequest}  # fmt: skip
    for body, request in served.items():
        assert issubclass(body, request)
    sent = [
        _calls.cancel_job("job-1", "guard: loss rose").json,
        _calls.deploy("opd-local/job-1", 2, "s1", plan="lora").json,
        _calls.scale_deployment("dep-1", 3).json,
        _calls.chat_body("m", "hi", False, temperature=0.5, seed=None),
    ]
    assert sent[1] == {"model_name": "opd-local/job-1", "capacity": 2, "suffix": "s1", "plan": "lora"}
    assert sent[3] == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False,
                       "temperature": 0.5}  # fmt: skip
    for body, json_body in zip(served, sent, strict=True):
        body.model_validate(json_body)  # what the client sends, the server reads


@pytest.mark.parametrize("capacity", [True, 2.0, "2", None])
def test_a_request_of_the_wrong_kind_is_refused_before_anything_is_sent(capacity):
    from opd_nb.client import _calls
    from opd_nb.errors import OpdError

    with pytest.raises(OpdError) as err:
        _calls.deploy("opd-local/job-1", capacity, None)
    assert err.value.code == "invalid-request" and "capacity" in str(err.value)
