"""Bailian's answer envelopes: ``{request_id, output}`` for a success, ``{request_id, code, message}`` for
an error (any non-200), and OpenAI's error object under ``/compatible-mode``."""

from __future__ import annotations

from typing import Generic, TypeVar

from opd_nb.wire.base import Forwarded, Wire, new_request_id

T = TypeVar("T")


class Output(Wire, Generic[T]):
    """A success: the answer under ``output`` (what dashscope parses as the response's ``output``)."""

    request_id: str
    output: T

    @classmethod
    def of(cls, output: T) -> Output[T]:
        return cls(request_id=new_request_id(), output=output)


class Error(Wire):
    """Every error this server answers (a 4xx for a bad request, Bailian's 500 shape for a bug)."""

    request_id: str
    code: str
    message: str


class OpenAIErrorDetail(Forwarded):
    """Sent with the keys it was built with (a stream's error event has no ``param``)."""

    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIError(Wire):
    """OpenAI's error object, with Bailian's ``request_id`` beside it (``/compatible-mode/v1``)."""

    error: OpenAIErrorDetail
    request_id: str | None = None


ErrorBody = Error  # the name the code uses; the OpenAPI document calls the schema `Error`, as before
