"""The request core both job clients share: every API call described once, as data, with one policy.

The sync and the async client used to carry a copy each of every call, and the copies drifted
(a local-only 404 was None in one and an error in the other). Here a call is a :class:`Call`
(method, path, params, local-only or not, how to read the answer) and an operation is a *plan*: a
generator that yields :class:`Send` and :class:`Sleep` steps and returns the typed result. The
clients only perform steps, blocking or with ``await``; paths, retries and backoff, the error
mapping and the parsing cannot differ between them.

A 404 from a local-only endpoint is ambiguous (Bailian answers ``NotFound`` both for a route it
lacks and for a job it does not know), so the plan asks about the job itself: unknown job → the
call's own ``OpdError`` (status 404, the service's code); known job → None (no such endpoint).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast
from urllib.parse import quote

import httpx

from opd_nb.client.deploy_results import ChatReply, Deployment, DeploymentList
from opd_nb.client.job_results import Checkpoint, Job, JobList, LogPage
from opd_nb.client.rollout_results import RolloutPage
from opd_nb.client.target import Target
from opd_nb.constants import API_PATH, CANCEL_REASON_MAX_CHARS, COMPATIBLE_PATH, PENDING, UPDATING
from opd_nb.errors import UNREACHABLE, OpdError
from opd_nb.paid.consent import answer_lost, found_after_loss
from opd_nb.traces.page import TracesPage
from opd_nb.views.terminal_text import printable
from opd_nb.wire.base import json_object, json_objects
from opd_nb.wire.jobs import JobMetrics
from opd_nb.wire.models import ModelListing
from opd_nb.wire.requests import CancelRequest, ChatRequest, DeploymentCreate, DeploymentScale

T = TypeVar("T")
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})  # RFC 9110 section 9.2.2
NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout)  # no connection: the request never left


@dataclass(frozen=True)
class Send:
    """Step: send one request; the client answers with the response or the transport error."""

    method: str
    path: str  # below the target's base URL (``/fine-tunes/...``), or below `api`'s root
    params: dict[str, Any] | None = None
    json: Any = None  # the JSON body (POST/PUT)
    api: str = "api"  # "api": the target's .../api/v1; "compatible": .../compatible-mode/v1 beside it


@dataclass(frozen=True)
class Sleep:
    """Step: wait before the next request (backoff between retries, polling)."""

    seconds: float


Step = Send | Sleep
Reply = httpx.Response | httpx.TransportError | None
Plan = Generator[Step, Reply, T]


@dataclass(frozen=True)
class Call(Generic[T]):
    """One API call: what to send, how to name it in an error, and how to read its ``output``."""

    method: str
    path: str
    what: str  # "get job ft-..." in "get job ft-... failed: [404 JobNotFound] ..."
    parse: Callable[[Any], T]
    params: dict[str, Any] | None = None
    local_only: bool = False  # only `opd serve` has it: None from a control plane without it
    job_id: str | None = None  # the job a local-only call is about (asked about after a 404)
    json: Any = None
    api: str = "api"
    optional: bool = False  # asked everywhere, but None (not an error) where the route is missing
    idempotent: bool | None = None  # None: as its method says (:func:`resendable`); True: documented so

    @property
    def resendable(self) -> bool:
        """The one resend rule: a request that may have been received and carried out (and billed) is
        sent again after a lost answer only when its method is idempotent (RFC 9110: GET, HEAD, PUT,
        DELETE, OPTIONS) or the call says the service documents it so; every other POST (a deploy, a chat
        call) is sent once. One that never left (no connection) is sent again whatever it is."""
        return self.idempotent if self.idempotent is not None else self.method in IDEMPOTENT_METHODS


# ---- the calls ---------------------------------------------------------------------------------
def _job_path(job_id: str, tail: str = "") -> str:
    if not isinstance(job_id, str) or not job_id.strip():  # pyright: ignore[reportUnnecessaryIsInstance] - a notebook passes anything
        raise OpdError(
            f"job id {job_id!r} is empty",
            fix="pass a job id such as ft-202410291653-1c7f (`opd jobs` lists them)",
        )
    return f"/fine-tunes/{quote(job_id, safe='')}{tail}"


def _nothing(out: Any) -> None:
    return None


def get_job(job_id: str) -> Call[Job]:
    return Call("GET", _job_path(job_id), f"get job {job_id}", Job.from_output)


def list_jobs(page: int, size: int) -> Call[JobList]:
    return Call(
        "GET",
        "/fine-tunes",
        "list jobs",
        lambda out: JobList.from_output(out, page=page, size=size),
        params={"page_no": page, "page_size": size},
    )


def job_logs(job_id: str, offset: int, lines: int) -> Call[LogPage]:
    return Call(
        "GET",
        _job_path(job_id, "/logs"),
        f"logs of {job_id}",
        lambda out: LogPage.from_output(job_id, out, offset=offset),
        params={"offset": max(offset, 1), "line": lines},
    )


def cancel_job(job_id: str, reason: str | None = None) -> Call[None]:
    """``reason`` (who cancelled and why) goes in the body; Bailian's cancel takes none, so pass it
    only to `opd serve` (see :func:`cancel`)."""
    line = " ".join(printable(reason).split())[:CANCEL_REASON_MAX_CHARS] if reason else None
    body = CancelRequest.of(reason=line) if line else None
    return Call(  # cancelling a cancelled job changes nothing and bills nothing: safe to send again
        "POST", _job_path(job_id, "/cancel"), f"cancel {job_id}", _nothing, json=body, idempotent=True
    )


def delete_job(job_id: str) -> Call[None]:
    return Call("DELETE", _job_path(job_id), f"delete {job_id}", _nothing)


def job_stream(job_id: str) -> Call[None]:
    """The SSE stream; the clients read it line by line (see :mod:`opd_nb.client.sse`)."""
    return Call("GET", _job_path(job_id, "/stream"), f"events of {job_id}", _nothing)


def _metric_rows(out: Any) -> list[dict[str, Any]]:
    return [dict(row) for row in JobMetrics.model_validate(out).metrics]


def job_metrics(job_id: str) -> Call[list[dict[str, Any]]]:
    return Call(
        "GET",
        _job_path(job_id, "/metrics"),
        f"metrics of {job_id}",
        _metric_rows,
        local_only=True,
        job_id=job_id,
    )


def job_checkpoints(job_id: str) -> Call[list[Checkpoint]]:
    """Bailian's "list checkpoints", asked on both planes (None where the route is missing)."""
    return Call(
        "GET",
        _job_path(job_id, "/checkpoints"),
        f"checkpoints of {job_id}",
        Checkpoint.listing,
        optional=True,
        job_id=job_id,
    )


def export_call(job_id: str, checkpoint: str, model_name: str | None) -> Call[None]:
    """Bailian's export (``output: true``); the deployable name is read from the checkpoint list after."""
    if not isinstance(checkpoint, str) or not checkpoint.strip():  # pyright: ignore[reportUnnecessaryIsInstance] - a notebook passes anything
        raise OpdError(
            f"checkpoint {checkpoint!r} is empty",
            fix=f"pass a checkpoint such as checkpoint-20 (`opd checkpoints {job_id}` lists them)",
        )
    return Call(
        "GET",
        _job_path(job_id, f"/export/{quote(checkpoint.strip(), safe='')}"),
        f"export {checkpoint} of {job_id}",
        _nothing,
        params={"model_name": model_name} if model_name else None,
    )


def export(
    job_id: str, checkpoint: str, model_name: str | None, target: Target, retries: int
) -> Plan[Checkpoint]:
    """Export, then read the checkpoint back: its ``model_name`` there is the name to deploy."""
    yield from perform(export_call(job_id, checkpoint, model_name), target, retries)
    listed = (yield from perform(job_checkpoints(job_id), target, retries)) or []
    want = checkpoint.strip()
    named = [cp for cp in listed if want in (cp.name, cp.checkpoint_id)]
    by_step = sorted((cp for cp in listed if str(cp.step) == want), key=lambda cp: cp.published)
    for cp in named + by_step:  # a step number means the kept checkpoint, not the published final copy
        return cp
    raise OpdError(
        f"{job_id} exported {want}, but its checkpoint list does not show it",
        fix=f"`opd checkpoints {job_id}` shows the exported model_name once the platform lists it",
    )


def job_rollouts(
    job_id: str, step: int | None = None, kind: str | None = None, limit: int | None = None
) -> Call[RolloutPage]:
    """One step's recorded rollouts (the latest by default); the service checks the parameters."""
    params = {k: v for k, v in (("step", step), ("kind", kind), ("limit", limit)) if v is not None}
    return Call(
        "GET",
        _job_path(job_id, "/rollouts"),
        f"rollouts of {job_id}",
        lambda out: RolloutPage.from_output(job_id, out),
        params=params or None,
        local_only=True,
        job_id=job_id,
    )


def job_traces(
    job_id: str,
    step: int | None = None,
    kind: str | None = None,
    group: int | None = None,
    sample: int | None = None,
    limit: int | None = None,
) -> Call[TracesPage]:
    """One step's traced calls as span trees (the latest step by default; `group`/`sample`: one record's)."""
    pairs = (("step", step), ("kind", kind), ("group", group), ("sample", sample), ("limit", limit))
    params = {k: v for k, v in pairs if v is not None}
    return Call(
        "GET",
        _job_path(job_id, "/traces"),
        f"traces of {job_id}",
        TracesPage.model_validate,
        params=params or None,
        local_only=True,
        job_id=job_id,
    )


def _local_models(out: Any) -> list[dict[str, Any]]:
    return [m.wire() for m in ModelListing.model_validate(out).models]


def list_models() -> Call[list[dict[str, Any]]]:
    return Call("GET", "/models", "list models", _local_models, local_only=True)


# ---- deployments and chat ----------------------------------------------------------------------
def _name_path(name: str, tail: str = "") -> str:
    if not isinstance(name, str) or not name.strip():  # pyright: ignore[reportUnnecessaryIsInstance] - a notebook passes anything
        raise OpdError(f"deployment name {name!r} is empty", fix="`opd deployments` lists the deployed names")
    return f"/deployments/{quote(name.strip(), safe='')}{tail}"


def deploy(model: str, capacity: int, suffix: str | None, **plan: Any) -> Call[Deployment]:
    """The create body as the v2 SDK builds it (``plan``, ``deploy_spec``, ``billing_method`` when set)."""
    body = DeploymentCreate.of(model_name=model, capacity=capacity, suffix=suffix, **plan)
    return Call("POST", "/deployments", f"deploy {model}", Deployment.from_output, json=body)


def find_deployment(suffix: str, target: Target, retries: int) -> Plan[Deployment | None]:
    """The deployment whose name ends in ``-suffix`` (a paid create's request id), newest first; None."""
    listing = yield from required(list_deployments(1, 100), target, retries)
    return next((d for d in listing.deployments if d.deployed_model.endswith(f"-{suffix}")), None)


def deploy_once(call: Call[Deployment], suffix: str, target: Target, retries: int) -> Plan[Deployment]:
    """Send a create once; a lost answer is looked up by its suffix, never sent again
    (:func:`opd_nb.paid.consent.answer_lost`'s rule, as a plan both clients run)."""
    try:
        return (yield from required(call, target, retries))
    except OpdError as exc:
        if not answer_lost(exc):
            raise
        try:
            found = yield from find_deployment(suffix, target, retries)
        except OpdError:
            found = None
        dep, note = found_after_loss(exc, found, f"{call.what} (suffix {suffix})")
        dep.notes.append(note)
        return dep


def get_deployment(name: str) -> Call[Deployment]:
    return Call("GET", _name_path(name), f"get deployment {name}", Deployment.from_output)


def list_deployments(page: int, size: int) -> Call[DeploymentList]:
    return Call(
        "GET",
        "/deployments",
        "list deployments",
        lambda out: DeploymentList.from_output(out, page=page, size=size),
        params={"page_no": page, "page_size": size},
    )


def scale_deployment(name: str, capacity: int) -> Call[Deployment]:
    body = DeploymentScale.of(deployed_model=name, capacity=capacity)
    return Call("PUT", _name_path(name, "/scale"), f"scale {name}", Deployment.from_output, json=body)


def delete_deployment(name: str) -> Call[Deployment]:
    return Call("DELETE", _name_path(name), f"undeploy {name}", Deployment.from_output)


def chat_body(
    model: str, messages: str | list[dict[str, Any]], stream: bool, **params: Any
) -> dict[str, Any]:
    """OpenAI's chat body; a plain string is one user message."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    return ChatRequest.of(model=model, messages=messages, stream=stream, **params)


def chat(model: str, body: dict[str, Any]) -> Call[ChatReply]:
    """The compatible-mode chat API (``.../compatible-mode/v1`` beside the target's ``/api/v1``)."""
    return Call(
        "POST",
        "/chat/completions",
        f"chat with {model}",
        lambda out: ChatReply.from_output(out, model=model),
        json=body,
        api="compatible",
    )


def compatible_base(api_base: str) -> str:
    """``https://host/api/v1`` -> ``https://host/compatible-mode/v1`` (where Bailian serves it)."""
    return api_base.removesuffix("/").removesuffix(API_PATH) + COMPATIBLE_PATH


def stream_delta(line: str) -> str | None:
    """The text of one line of a streamed chat answer (None: no text in it; raises on an error event)."""
    if not line.startswith("data:"):
        return None
    data = line[len("data:") :].strip()
    if not data or data == "[DONE]":
        return None
    try:
        chunk = json.loads(data)
    except ValueError:
        return None
    event = json_object(chunk)
    if error := event.get("error"):
        err = json_object(error) or {"message": error}  # an object, or the error's words alone
        raise OpdError(f"the answer stopped: {err.get('message')}", code=err.get("code"))
    choices = json_objects(event.get("choices"))
    content = json_object(choices[0].get("delta")).get("content") if choices else None
    return str(content) if content else None


def wait_deployed(
    name: str, target: Target, retries: int, *, poll_s: float, timeout_s: float | None
) -> Plan[Deployment]:
    """Poll a deployment until it is RUNNING (a FAILED one, or `timeout_s`, is an OpdError)."""
    deadline = time.monotonic() + timeout_s if timeout_s else None
    while True:
        dep = cast(Deployment, (yield from perform(get_deployment(name), target, retries)))
        if dep.running:
            return dep
        if dep.status not in (PENDING, UPDATING):
            raise OpdError(
                f"deployment {name} is {dep.status}" + (f": {dep.message}" if dep.message else ""),
                fix=f"undeploy it (`opd undeploy {name}`) and deploy the model again",
            )
        if deadline and time.monotonic() > deadline:
            raise OpdError(
                f"deployment {name} is still {dep.status} after {timeout_s:.0f}s",
                fix="check again with `opd deployments`",
            )
        yield Sleep(poll_s)


# ---- errors ------------------------------------------------------------------------------------
def error_for(resp: httpx.Response, what: str) -> OpdError:
    """A 4xx/5xx answer as an OpdError carrying the HTTP status and the service's ``code``."""
    try:
        body = resp.json()
    except ValueError:
        body = {}
    body = cast(dict[str, Any], body) if isinstance(body, dict) else {}  # a JSON object
    if isinstance(body.get("error"), dict):  # the compatible-mode API answers OpenAI's error object
        body = {**body["error"], **{k: v for k, v in body.items() if k in ("code", "message")}}
    code = str(body["code"]) if body.get("code") else None
    message = body.get("message") or resp.text[:300] or resp.reason_phrase
    fix = None
    if resp.status_code == 401:
        fix = "set DASHSCOPE_API_KEY in the environment or the workspace's .env"
    elif resp.status_code == 404 and code and code.endswith("NotFound"):  # a job, file or deployment id
        fix = "check the id: `opd jobs` and `opd deployments` list this control plane's"
    return OpdError(
        f"{what} failed: [{resp.status_code} {code or 'Error'}] {message}",
        fix=fix,
        status=resp.status_code,
        code=code,
    )


def unreachable(target: Target, exc: BaseException | None) -> OpdError:
    """No answer at all (status None): say which control plane and how to bring it up."""
    fix = (
        "start it with `opd serve` (or `%opd serve start`)"
        if target.kind == "local"
        else "check the network and DASHSCOPE_HTTP_BASE_URL"
    )
    reason = type(exc).__name__ if exc is not None else "no response"
    return OpdError(
        f"cannot reach the {target.kind} control plane at {target.base_url}: {reason}",
        fix=fix,
        code=UNREACHABLE,
    )


def _unexpected(call: Call[Any], target: Target, resp: httpx.Response, exc: Exception) -> OpdError:
    return OpdError(
        f"{call.what} failed: the {target.kind} control plane's answer has an unexpected shape "
        f"({type(exc).__name__})",
        where=target.base_url,
        fix="check that DASHSCOPE_HTTP_BASE_URL is a control plane's .../api/v1",
        status=resp.status_code,
    )


# ---- plans -------------------------------------------------------------------------------------
def retryable(status: int) -> bool:
    return status == 429 or status >= 500


def backoff(attempt: int) -> float:
    return min(0.5 * 2**attempt, 8.0)


def _send(call: Call[Any], target: Target, retries: int) -> Plan[httpx.Response]:
    """Send with retries on 429/5xx/transport errors, as :attr:`Call.resendable` allows (a call that is
    not is sent again only when it never left); the last answer is returned as it is."""
    last: httpx.TransportError | None = None
    for attempt in range(retries + 1):
        reply = yield Send(call.method, call.path, call.params, call.json, call.api)
        if isinstance(reply, httpx.Response):
            if not retryable(reply.status_code) or attempt == retries or not call.resendable:
                return reply
        else:
            last = reply
            if not call.resendable and not isinstance(reply, NEVER_SENT):
                break  # it may have been received: its answer is lost, not retried
        if attempt < retries:
            yield Sleep(backoff(attempt))
    raise unreachable(target, last)


def perform(call: Call[T], target: Target, retries: int) -> Plan[T | None]:
    """Run one call: its typed result, None for a local-only call the control plane lacks."""
    if call.local_only and target.kind == "cloud":
        return None  # Bailian has none of these; do not ask it
    resp = yield from _send(call, target, retries)
    if resp.status_code >= 400:
        error = error_for(resp, call.what)
        if (call.local_only or call.optional) and resp.status_code == 404:
            yield from _job_must_exist(call, target, retries, error)
            return None
        raise error
    try:
        body = resp.json()
        reply = json_object(body)
        out: object = reply.get("output", reply.get("data", reply)) if isinstance(body, dict) else body
        return call.parse(out)
    except (ValueError, TypeError, AttributeError) as exc:  # pydantic's ValidationError is a ValueError
        raise _unexpected(call, target, resp, exc) from None


def _job_must_exist(call: Call[Any], target: Target, retries: int, error: OpdError) -> Plan[None]:
    """After a local-only 404: raise `error` if the job is unknown; return if the route is missing."""
    if call.job_id is None:
        return  # nothing else the call names could be missing
    try:
        yield from perform(get_job(call.job_id), target, retries)
    except OpdError as probe:
        if probe.status == 404:
            raise error from None
        raise


def required(call: Call[T], target: Target, retries: int) -> Plan[T]:
    """Run a call that is neither local-only nor optional: its result, which is never None."""
    assert not (call.local_only or call.optional), f"{call.what} may answer None: use perform"
    out = yield from perform(call, target, retries)
    return cast(T, out)  # perform returns None only for local-only or optional calls


def read_job(job_id: str, target: Target, retries: int) -> Plan[Job]:
    return (yield from required(get_job(job_id), target, retries))


def cancel(job_id: str, target: Target, retries: int, reason: str | None = None) -> Plan[Job]:
    """Bailian answers a cancel with a bare status, so the job is read back after it. Its cancel takes
    no body (the SDK sends none), so a ``reason`` is recorded only by `opd serve`, in the job's
    message and log; on Bailian the caller's own output is the record."""
    yield from perform(cancel_job(job_id, reason if target.kind == "local" else None), target, retries)
    return (yield from read_job(job_id, target, retries))


def wait(
    job_id: str,
    target: Target,
    retries: int,
    *,
    poll_s: float,
    timeout_s: float | None,
    on_update: Callable[[Job], None] | None,
) -> Plan[Job]:
    """Poll until the job ends (or `timeout_s` passes: an OpdError that says how to keep watching)."""
    deadline = time.monotonic() + timeout_s if timeout_s else None
    while True:
        job = yield from read_job(job_id, target, retries)
        if on_update:
            on_update(job)
        if job.terminal:
            return job
        if deadline and time.monotonic() > deadline:
            raise OpdError(
                f"job {job_id} is still {job.status} after {timeout_s:.0f}s",
                fix=f"keep watching with `opd watch {job_id}`",
            )
        yield Sleep(poll_s)
