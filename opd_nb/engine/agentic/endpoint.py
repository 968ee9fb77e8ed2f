"""The student served to a rollout function: the local OpenAI endpoint and the generation behind it.

The endpoint (FastAPI + uvicorn in a thread of the engine process) only queues requests; the
engine's own thread answers them in batched ``generate`` calls (torch stays on one thread), waiting
up to ``BATCH_WAIT_S`` for the other rollouts in flight to ask. Each request samples from a random
stream keyed by its call and turn, so which requests happened to share a batch (timing, machine
load) does not change what is sampled. Every completion's ids are recorded under the rollout's
token, so training uses exactly the ids the student sampled.
"""

from __future__ import annotations

import asyncio
import hashlib
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import JsonValue

from opd_nb.constants import LOCAL_HOST
from opd_nb.engine.api import EngineError
from opd_nb.engine.openai_wire import ChatRequestError, chat_inputs, completion_body
from opd_nb.loopback import bearer_token, guard, same_key

if TYPE_CHECKING:
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    from opd_nb.engine.samplers import Sampler

BATCH_WAIT_S = 0.05  # longest a generation request waits for the other rollouts in flight to ask
MODEL_NAME = "opd-local-student"  # the model name the rollout function is given

# What the endpoint generated for one rollout, per request: (prompt ids, completion ids, ended with EOS).
Completions = list[tuple[list[int], list[int], bool]]


Generated = tuple[list[int], str, str]  # a completion: its ids, its text, its finish reason


@dataclass
class GenRequest:
    """One chat request waiting for the engine thread to generate its completion."""

    token: str
    prompt_ids: list[int]
    temperature: float
    top_p: float
    max_tokens: int
    tools: list[dict[str, Any]] | None = None  # the tools the rollout offered with this request
    future: Future[Generated] = field(default_factory=Future[Generated])


def stream_seed(call_key: str, turn: int) -> int:
    """The seed of a call's `turn`-th generation request: a stable 63-bit hash (not Python's salted one)."""
    digest = hashlib.blake2b(f"{call_key}|{turn}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


class StudentEndpoint:
    """The OpenAI-compatible endpoint; hands generation to the engine thread through a queue."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, model_name: str, max_total: int):
        import uvicorn

        from opd_nb.functions.server import free_port

        self.q: queue.Queue[GenRequest] = queue.Queue()
        self.tokens: set[str] = set()  # the api keys of the rollouts under way
        self.model_name = model_name
        self.port = free_port()
        app = guard(self._app(tokenizer, max_total), LOCAL_HOST, self.port)  # the Host/Origin check
        self.server = uvicorn.Server(
            uvicorn.Config(app, host=LOCAL_HOST, port=self.port, log_level="warning", lifespan="off")
        )
        self.thread = threading.Thread(target=self.server.run, name="opd-student-openai", daemon=True)
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise EngineError("the local student endpoint did not start")
            time.sleep(0.01)
        self.base_url = f"http://{LOCAL_HOST}:{self.port}/v1"

    def _app(self, tokenizer: PreTrainedTokenizerBase, max_total: int) -> FastAPI:
        app = FastAPI()
        model_name = self.model_name

        def err(status: int, msg: str, kind: str = "invalid_request_error") -> JSONResponse:
            return JSONResponse({"error": {"message": msg, "type": kind}}, status_code=status)

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "opd-nb"}]}

        @app.post("/v1/chat/completions")
        async def chat(request: Request):  # noqa: ANN202
            token = bearer_token(request.headers.get("authorization"))
            if not any(same_key(token, known) for known in self.tokens.copy()):  # copy: atomic
                return err(
                    401, "invalid or expired api_key (use model_resource.api_key)", "authentication_error"
                )
            try:
                body: JsonValue = await request.json()
            except ValueError:
                return err(400, "body is not JSON")
            if isinstance(body, dict) and body.get("stream"):
                return err(400, "stream=true is not supported by the local student endpoint")
            try:
                ids, temperature, top_p, max_tokens = chat_inputs(tokenizer, body, max_total)
            except ChatRequestError as exc:
                return err(400, str(exc))
            tools = body.get("tools") if isinstance(body, dict) else None  # rendered by the template above
            offered = cast("list[dict[str, Any]] | None", tools if isinstance(tools, list) else None)
            req = GenRequest(token, ids, temperature, top_p, max_tokens, offered)  # `[]` stays "none offered"
            self.q.put(req)
            comp_ids, text, finish = await asyncio.wrap_future(req.future)
            return completion_body(self.model_name, len(ids), len(comp_ids), text, finish)

        return app

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)


class Generation:
    """Answers the endpoint's queued requests on the engine thread and records what each rollout got."""

    def __init__(self, sampler: Sampler, tok: PreTrainedTokenizerBase, endpoint: StudentEndpoint):
        self.sampler, self.tok = sampler, tok
        self.endpoint = endpoint
        self.records: dict[str, Completions] = {}  # rollout token -> its completions, in order
        self.offered: dict[str, list[dict[str, Any]]] = {}  # rollout token -> the tools its requests offered
        self._call_seeds: dict[str, str] = {}  # rollout token -> the key of its calls' random streams
        self._lock = threading.Lock()
        self._in_flight = 0  # rollout calls under way (counted by the pool's threads, read by the pump)

    def start_round(self, call_seeds: dict[str, str]) -> None:
        """Forget the last round's completions; `call_seeds`: each new rollout token's stream key."""
        self.records, self.offered = {}, {}
        self._call_seeds = call_seeds

    def call_started(self) -> None:
        """A rollout call began (on a pool thread): the pump waits for it to ask."""
        with self._lock:
            self._in_flight += 1

    def call_ended(self) -> None:
        """A rollout call returned: the pump no longer waits for it."""
        with self._lock:
            self._in_flight -= 1

    def serve(self, batch: list[GenRequest]) -> None:
        """Generate the batch's completions, one ``generate`` per (temperature, top_p), and answer them."""
        by: dict[tuple[float, float], list[GenRequest]] = {}
        for r in batch:
            by.setdefault((r.temperature, r.top_p), []).append(r)
        for (temp, top_p), reqs in by.items():
            turns: dict[str, int] = {}
            seeds: list[int] = []
            for r in reqs:  # a rollout's n-th request draws from the n-th stream of its call
                turns[r.token] = turns.get(r.token, len(self.records.get(r.token, []))) + 1
                seeds.append(stream_seed(self._call_seeds.get(r.token, r.token), turns[r.token]))
            try:
                outs = self.sampler.generate_ids(
                    [r.prompt_ids for r in reqs],
                    temperature=temp,
                    top_p=top_p,
                    max_new=[r.max_tokens for r in reqs],  # each request's own budget, whatever its batch
                    seeds=seeds,
                )
            except Exception as exc:  # noqa: BLE001 - report to the caller instead of hanging it
                for r in reqs:
                    r.future.set_exception(exc)
                continue
            for r, (ids, ended) in zip(reqs, outs, strict=True):
                finish = "stop" if ended else "length"
                self.records.setdefault(r.token, []).append((r.prompt_ids, ids, ended))
                if r.tools is not None:  # an offered `[]` is "no tools", not "the row's tools"
                    self.offered[r.token] = r.tools
                text_ids = ids[:-1] if ended else ids
                # one sequence decodes to one string (transformers types decode for batches too, kwargs untyped)
                text = str(self.tok.decode(text_ids, skip_special_tokens=True))  # pyright: ignore[reportUnknownMemberType]
                r.future.set_result((ids, text, finish))

    def pump(self, done: threading.Event) -> None:
        """Serve queued requests in batches until `done` is set and the queue is empty."""
        q = self.endpoint.q
        while not done.is_set() or not q.empty():
            try:
                first = q.get(timeout=0.005)
            except queue.Empty:
                continue
            batch = [first]
            # Wait (briefly) for every rollout in flight to ask: one batch of n costs about what a batch
            # of 1 does, since decoding is per-token overhead at these sizes.
            deadline = time.monotonic() + BATCH_WAIT_S
            while len(batch) < self._in_flight and (left := deadline - time.monotonic()) > 0:
                try:
                    batch.append(q.get(timeout=left))
                except queue.Empty:
                    break
            while True:
                try:
                    batch.append(q.get_nowait())
                except queue.Empty:
                    break
            self.serve(batch)
