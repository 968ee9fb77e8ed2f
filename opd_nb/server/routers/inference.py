"""Calling models, as Bailian offers it: DashScope text generation and the OpenAI-compatible chat API.

``POST /api/v1/services/aigc/text-generation/generation`` is what ``dashscope.Generation.call``
sends: ``input.messages`` (or ``input.prompt``) and ``parameters`` (``result_format`` "text" or
"message", ``max_tokens``, ``temperature``, ``top_p``, ``seed``, ``tools``, ``n``, ``logprobs``,
``top_logprobs``, ``stop``; what the local models cannot honour is a 400, see ``bodies.UNSUPPORTED``). With the SDK's
``stream=True`` (header ``X-DashScope-SSE: enable``) the answer is DashScope's server-sent events,
each with the text so far, or only the new text with ``incremental_output``.

``POST /compatible-mode/v1/chat/completions`` is OpenAI's chat API, beside ``/api/v1`` as on
Bailian (``https://dashscope.aliyuncs.com/compatible-mode/v1``): ``messages``, ``max_tokens``,
``temperature``, ``top_p``, ``seed``, ``stream``, ``tools`` (passed to the chat template), ``n``,
``logprobs``/``top_logprobs`` and ``stop``.
Its errors are OpenAI's error object (with ``request_id``), as Bailian answers there.

Both resolve the model through the deployment manager (a deployed name, or a base model, which is
callable directly) and forward the request to that model's serving process. A fine-tuned output
that is not deployed, and a deleted deployment, answer a 4xx that says how to deploy it (or, for an
exported name that is deployed, which ``deployed_model`` to call); an id that exists nowhere is a 404.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from pydantic import JsonValue, ValidationError

from opd_nb.constants import COMPATIBLE_PATH
from opd_nb.server.bodies import ChatBody, GenerationBody
from opd_nb.server.deploy.endpoints import Endpoint
from opd_nb.server.deps import DeploymentsDep
from opd_nb.server.errors import ApiError
from opd_nb.server.responses import INVALID, describe_validation, openai_error, request_id
from opd_nb.spec.models import BAILIAN_MODEL_IDS
from opd_nb.wire import http_client
from opd_nb.wire.envelope import ErrorBody, OpenAIError, OpenAIErrorDetail
from opd_nb.wire.inference import (
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatMessage,
    CompletionUsage,
    GenerationAnswer,
    GenerationChoice,
    GenerationOutput,
    GenerationUsage,
    OpenAIModel,
    OpenAIModelList,
    ToolCall,
)

router = APIRouter(tags=["inference"])
GENERATION_PATH = "/api/v1/services/aigc/text-generation/generation"
TIMEOUT = httpx.Timeout(600.0, connect=10.0)


class _Upstream(Exception):
    """The serving process failed in the middle of a streamed answer."""


# ---- talking to a serving process ----------------------------------------------------------------
def _payload(model: str, messages: list[dict[str, Any]], stream: bool, **params: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": stream}
    body.update({k: v for k, v in params.items() if v is not None})
    return body


def _upstream_error(resp: httpx.Response) -> ApiError:
    try:
        message = resp.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = resp.text[:300] or resp.reason_phrase
    if resp.status_code < 500:
        return ApiError(400, INVALID, str(message))
    return ApiError(503, "ModelUnavailable", f"the model's serving process failed: {message}")


def _unreachable(endpoint: Endpoint, exc: Exception) -> ApiError:
    return ApiError(
        503,
        "ModelUnavailable",
        f"the serving process of {endpoint.name!r} did not answer ({type(exc).__name__}); "
        "`opd deployments` shows its status",
    )


async def _post(endpoint: Endpoint, payload: dict[str, Any]) -> ChatCompletion:
    """The serving process's answer, read as OpenAI's chat completion (the process boundary's one check)."""
    headers = {"Authorization": f"Bearer {endpoint.token}"}
    try:
        async with http_client.async_client(timeout=TIMEOUT, trust_env=False) as http:
            resp = await http.post(f"{endpoint.url}/chat/completions", json=payload, headers=headers)
    except httpx.HTTPError as exc:
        raise _unreachable(endpoint, exc) from None
    if resp.status_code != 200:
        raise _upstream_error(resp)
    try:
        return ChatCompletion.model_validate(resp.json())
    except ValueError as exc:  # not JSON, or not a chat completion (pydantic's error is a ValueError)
        raise ApiError(
            503, "ModelUnavailable", f"the model's serving process answered out of shape: {exc}"
        ) from None


async def _open(endpoint: Endpoint, payload: dict[str, Any]) -> tuple[httpx.AsyncClient, httpx.Response]:
    """Start a streamed answer; a refusal (a prompt too long, ...) is an ApiError before any event."""
    http = http_client.async_client(timeout=TIMEOUT, trust_env=False)
    request = http.build_request(
        "POST",
        f"{endpoint.url}/chat/completions",
        json=payload,
        headers={"Authorization": f"Bearer {endpoint.token}"},
    )
    try:
        resp = await http.send(request, stream=True)
    except httpx.HTTPError as exc:
        await http.aclose()
        raise _unreachable(endpoint, exc) from None
    if resp.status_code != 200:
        await resp.aread()
        await resp.aclose()
        await http.aclose()
        raise _upstream_error(resp)
    return http, resp


async def _chunks(http: httpx.AsyncClient, resp: httpx.Response) -> AsyncIterator[ChatCompletionChunk]:
    """The OpenAI chunks of an opened stream (closes it at the end)."""
    try:
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[len("data:") :].strip()
            if data == "[DONE]":
                return
            chunk: dict[str, Any] = json.loads(data)  # an OpenAI chunk from our own serving process
            if "error" in chunk:
                raise _Upstream(_error_text(chunk["error"]))
            try:
                yield ChatCompletionChunk.model_validate(chunk)
            except ValueError as exc:
                raise _Upstream(f"the serving process sent a chunk out of shape: {exc}") from None
    except httpx.HTTPError as exc:
        raise _Upstream(f"the serving process stopped answering ({type(exc).__name__})") from None
    finally:
        await resp.aclose()
        await http.aclose()


def _error_text(error: JsonValue) -> str:
    """An error event's words: its ``message`` when it is an object that has one, else the event itself."""
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    return str(error)


# ---- DashScope text generation ------------------------------------------------------------------
def _usage(usage: CompletionUsage | None) -> GenerationUsage:
    n_in, n_out = (usage.prompt_tokens, usage.completion_tokens) if usage else (0, 0)
    return GenerationUsage(input_tokens=n_in, output_tokens=n_out, total_tokens=n_in + n_out)


def _output(result_format: str, message: ChatMessage, finish: str) -> GenerationOutput:
    if result_format == "text":
        return GenerationOutput(text=message.content or "", finish_reason=finish)
    return GenerationOutput(choices=[GenerationChoice(finish_reason=finish, message=message)])


def _full_output(result_format: str, choices: list[ChatChoice]) -> GenerationOutput:
    """DashScope's ``output`` for an OpenAI answer: the text, or one choice per ``n`` (log-probs kept)."""
    if result_format == "text":
        first = choices[0]
        return GenerationOutput(
            text=first.message.content or "",
            finish_reason=first.finish_reason,
            logprobs=first.logprobs or None,
        )
    return GenerationOutput(
        choices=[
            GenerationChoice(finish_reason=c.finish_reason, message=c.message, logprobs=c.logprobs or None)
            for c in choices
        ]
    )


def _event(seq: int, kind: str, status: int, body: GenerationAnswer | ErrorBody) -> str:
    data = json.dumps(body.wire(), ensure_ascii=False)
    return f"id:{seq}\nevent:{kind}\n:HTTP_STATUS/{status}\ndata:{data}\n\n"


async def _dashscope_events(
    http: httpx.AsyncClient, resp: httpx.Response, result_format: str, incremental: bool, rid: str
) -> AsyncIterator[str]:
    """DashScope's events: the text so far (or only the new text, `incremental`), "null" until the end."""
    text, seq = "", 0
    try:
        async for chunk in _chunks(http, resp):
            choice = chunk.choices[0] if chunk.choices else None
            delta = choice.delta if choice else ChatMessage()
            piece, finish = delta.content or "", choice.finish_reason if choice else None
            if not piece and finish is None and not delta.tool_calls:
                continue  # the opening role chunk
            text += piece
            message = ChatMessage(role="assistant", content=piece if incremental else text)
            if delta.tool_calls:  # DashScope's calls carry no stream `index`
                message.tool_calls = [
                    ToolCall.model_validate({k: v for k, v in call.wire().items() if k != "index"})
                    for call in delta.tool_calls
                ]
            seq += 1
            body = GenerationAnswer(
                output=_output(result_format, message, finish or "null"),
                usage=_usage(chunk.usage),
                request_id=rid,
            )
            yield _event(seq, "result", 200, body)
    except _Upstream as exc:
        yield _event(seq + 1, "error", 500, ErrorBody(code="InternalError", message=str(exc), request_id=rid))


@router.post(GENERATION_PATH, response_model=GenerationAnswer)
async def generation(body: GenerationBody, request: Request, manager: DeploymentsDep) -> Any:
    """DashScope text generation (``Generation.call``), plain or streamed (``data:`` of each event: the same
    object, the text so far)."""
    rid = request_id()
    params = body.parameters
    stream = bool(params.stream) or request.headers.get("x-dashscope-sse", "").lower() == "enable"
    endpoint = await run_in_threadpool(manager.endpoint, body.model)
    payload = _payload(
        body.model,
        body.input.chat(),
        stream,
        max_tokens=params.max_tokens,
        temperature=params.temperature,
        top_p=params.top_p,
        seed=params.seed,
        tools=params.tools,
        **params.sampling(),
    )
    if stream:
        http, resp = await _open(endpoint, payload)
        return StreamingResponse(
            _dashscope_events(http, resp, params.result_format, params.incremental_output, rid),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-DashScope-Request-Id": rid},
        )
    out = await _post(endpoint, payload)
    return GenerationAnswer(
        request_id=rid,
        output=_full_output(params.result_format, out.choices),
        usage=_usage(out.usage),
    )


# ---- OpenAI-compatible chat ---------------------------------------------------------------------
async def _compatible_chunks(
    http: httpx.AsyncClient, resp: httpx.Response, model: str, include_usage: bool, rid: str
) -> AsyncIterator[str]:
    """The serving process's chunks under the model name that was called; the usage, when asked for, in a
    last chunk of its own (OpenAI's ``stream_options.include_usage``)."""
    usage: CompletionUsage | None = None
    try:
        async for chunk in _chunks(http, resp):
            usage = chunk.usage or usage
            data = {**chunk.wire(), "model": model}
            data.pop("usage", None)  # the usage goes in the last chunk of its own, when asked for
            sent = ChatCompletionChunk.model_validate(data)
            yield f"data: {json.dumps(sent.wire(), ensure_ascii=False)}\n\n"
            if include_usage and sent.choices and sent.choices[0].finish_reason:
                tail = sent.model_copy(update={"choices": [], "usage": usage})
                yield f"data: {json.dumps(tail.wire(), ensure_ascii=False)}\n\n"
    except _Upstream as exc:
        detail = OpenAIErrorDetail(message=str(exc), type="server_error", code="InternalError")
        yield f"data: {json.dumps(OpenAIError(error=detail, request_id=rid).wire())}\n\n"
        return
    yield "data: [DONE]\n\n"


@router.post(f"{COMPATIBLE_PATH}/chat/completions", response_model=ChatCompletion)
async def chat_completions(request: Request, manager: DeploymentsDep) -> Any:
    """OpenAI's chat completions, beside /api/v1 as on Bailian (streamed: ``data:`` of each event a
    ``chat.completion.chunk``)."""
    rid = request_id()
    try:
        body = ChatBody.model_validate(await request.json())
    except ValueError as exc:  # not JSON, or pydantic's ValidationError (a ValueError)
        errors = (
            exc.errors() if isinstance(exc, ValidationError) else [{"type": "json_invalid", "msg": str(exc)}]
        )
        return openai_error(400, INVALID, describe_validation(list(errors)), rid)
    payload = _payload(
        body.model,
        body.messages,
        body.stream,
        max_tokens=body.max_tokens or body.max_completion_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        seed=body.seed,
        tools=body.tools,
        **body.sampling(),
    )
    try:
        endpoint = await run_in_threadpool(manager.endpoint, body.model)
        if body.stream:
            include_usage = bool((body.stream_options or {}).get("include_usage"))
            http, resp = await _open(endpoint, payload)
            return StreamingResponse(
                _compatible_chunks(http, resp, body.model, include_usage, rid),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        out = await _post(endpoint, payload)
    except ApiError as exc:
        return openai_error(exc.status, exc.code, exc.message, rid)
    return out.model_copy(update={"model": body.model})


@router.get(f"{COMPATIBLE_PATH}/models")
def compatible_models(manager: DeploymentsDep) -> OpenAIModelList:
    """OpenAI's model list: every id that answers here (the bundled and mapped models, the Bailian ids
    that run on the stand-in, the deployments); an exported name answers only through its deployment."""
    rows, _ = manager.list(0, 100)
    ids = [m.model_id for m in manager.registry.listing() if m.kind in ("stand-in", "mapped")]
    ids += sorted(BAILIAN_MODEL_IDS - set(ids))
    ids += [r["deployed_model"] for r in rows]
    return OpenAIModelList(
        object="list", data=[OpenAIModel(id=i, object="model", owned_by="opd-nb") for i in ids]
    )
