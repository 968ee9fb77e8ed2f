"""Calling models: DashScope text generation (``output`` and ``usage``; its server-sent events carry the
same object) and OpenAI's chat completions, its chunks and model list, as the compatible mode answers."""

from __future__ import annotations

from opd_nb.wire.base import Forwarded, Wire, absent_when_none


class TopLogprob(Forwarded):
    token: str
    bytes: list[int] | None = None
    logprob: float


class TokenLogprob(Forwarded):
    token: str
    bytes: list[int] | None = None
    logprob: float
    top_logprobs: list[TopLogprob] = []


class ChoiceLogprobs(Forwarded):
    content: list[TokenLogprob] | None = None


class ToolFunction(Forwarded):
    name: str
    arguments: str


class ToolCall(Forwarded):
    id: str | None = None
    type: str | None = None
    function: ToolFunction
    index: int | None = None  # in a streamed delta


class ChatMessage(Forwarded):
    role: str | None = None
    content: str | None = None
    tool_calls: list[ToolCall] | None = None


class ChatChoice(Forwarded):
    index: int = 0
    message: ChatMessage
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None


class CompletionUsage(Forwarded):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ChatCompletion(Forwarded):
    """OpenAI's ``chat.completion``."""

    id: str | None = None
    object: str | None = None
    created: int | None = None
    model: str
    choices: list[ChatChoice] = []
    usage: CompletionUsage | None = None


class ChunkChoice(Forwarded):
    index: int = 0
    delta: ChatMessage
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletionChunk(Forwarded):
    """One ``data:`` event of a streamed chat answer (``choices`` empty in the last, usage-only chunk)."""

    id: str | None = None
    object: str | None = None
    created: int | None = None
    model: str | None = None
    choices: list[ChunkChoice] = []
    usage: CompletionUsage | None = None


class OpenAIModel(Wire):
    id: str
    object: str = "model"
    owned_by: str | None = None


class OpenAIModelList(Wire):
    object: str = "list"
    data: list[OpenAIModel] = []


class GenerationUsage(Wire):
    input_tokens: int
    output_tokens: int
    total_tokens: int


class GenerationChoice(Wire):
    finish_reason: str | None = None
    message: ChatMessage
    logprobs: ChoiceLogprobs | None = absent_when_none()


class GenerationOutput(Wire):
    """``result_format`` "text": ``text`` and ``finish_reason`` (``"null"`` until a stream's end); "message":
    one choice per ``n``."""

    text: str | None = absent_when_none()
    finish_reason: str | None = absent_when_none()
    choices: list[GenerationChoice] | None = absent_when_none()
    logprobs: ChoiceLogprobs | None = absent_when_none()


class GenerationAnswer(Wire):
    """``Generation.call``'s answer, and the data of each of its server-sent ``result`` events."""

    request_id: str
    output: GenerationOutput
    usage: GenerationUsage
