"""A serving process's error event mid-stream ends the answer with its words, whatever its shape.

OpenAI-compatible servers send ``{"error": {"message": ...}}``; some send ``{"error": "text"}``. The
second used to raise an AttributeError inside the stream (``str.get``) instead of the upstream error.
The serving process is the only thing stood in for here: an httpx transport that answers its SSE lines.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from opd_nb.server.routers.inference import _chunks, _Upstream


async def _read_all(event: object) -> list[dict[str, object]]:
    lines = [f"data: {json.dumps({'choices': [{'delta': {'content': 'hi'}}]})}", f"data: {json.dumps(event)}"]
    body = ("\n\n".join(lines) + "\n\n").encode()
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
    http = httpx.AsyncClient(transport=transport)
    resp = await http.send(http.build_request("POST", "http://serving/v1/chat/completions"), stream=True)
    return [chunk async for chunk in _chunks(http, resp)]


@pytest.mark.parametrize(
    ("event", "words"),
    [
        ({"error": {"message": "CUDA out of memory", "code": 500}}, "CUDA out of memory"),
        ({"error": "the model is not loaded"}, "the model is not loaded"),
        ({"error": {"code": 500}}, "{'code': 500}"),
    ],
)
def test_an_error_event_ends_the_stream_with_its_words(event: dict[str, object], words: str) -> None:
    with pytest.raises(_Upstream) as caught:
        asyncio.run(_read_all(event))
    assert str(caught.value) == words
