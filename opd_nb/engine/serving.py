"""One model served at an OpenAI-compatible ``/v1/chat/completions``: a deployment's own process.

``python -m opd_nb.engine.serving --model PATH --name NAME --ready-file FILE`` loads the model,
binds a loopback port, writes the port to FILE once it can answer, and serves until SIGTERM, or
until its parent (the control plane) is gone, so no deployment outlives the server. The bearer
token it accepts comes from ``$OPD_SERVING_TOKEN`` (never the command line, which ``ps`` shows).

The request rules, the answer and the tool-call parsing are the agentic endpoint's
(:func:`opd_nb.engine.openai_wire.chat_inputs`, :func:`~opd_nb.engine.openai_wire.completion_body`).
Unlike that one, this endpoint streams (``stream: true``: OpenAI's ``chat.completion.chunk``
events, one per decoded piece of text) and takes ``seed``, ``n`` (one decode per choice, seeds
``seed+i``), ``logprobs``/``top_logprobs`` (of the model's own distribution, per token) and ``stop``
(the answer ends before the first stop string; the last three not with ``stream``). Requests that arrive together are
generated in one batched decode on a single generation thread (torch stays on one thread).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import socket
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import JsonValue

from opd_nb import settings
from opd_nb.engine.openai_wire import (
    MAX_TOP_LOGPROBS,
    MAX_WHOLE,
    ChatRequestError,
    chat_inputs,
    completion_body,
    whole,
)
from opd_nb.engine.sampling import is_greedy
from opd_nb.loopback import bearer_token, guard, same_key

TOKEN_ENV = settings.SERVING_TOKEN.name
DEFAULT_TEMPERATURE = 0.7  # Bailian's defaults for Qwen chat models
DEFAULT_TOP_P = 0.8
BATCH_WAIT_S = 0.003  # let requests that arrive together join one batch
HOST = "127.0.0.1"  # a deployment serves this machine only (the control plane proxies it)


# What the generation thread tells a request's handler, in order: text as it comes, then its end.
Delta = tuple[Literal["delta"], str, int]  # (kind, new text, completion tokens so far)
End = tuple[Literal["end"], str, int, str]  # (kind, finish reason, completion tokens, whole text)
Failed = tuple[Literal["error"], str]  # (kind, what failed)
Event = Delta | End | Failed


@dataclass
class _Request:
    """One chat request on its way through the generation thread."""

    ids: list[int]
    temperature: float
    top_p: float
    max_tokens: int
    seed: int | None
    stream: bool
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue[Event])
    out: list[int] = field(default_factory=list[int])
    sent: str = ""
    finish: str | None = None
    stop: tuple[str, ...] = ()  # stop strings: the answer ends before the first one (not included)
    top_logprobs: int | None = None  # None: no log-probs; 0..20: per token, with that many alternatives
    logprobs: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    cut: str | None = None  # the text up to a stop string, once one appeared

    def put(self, item: Event) -> None:
        self.loop.call_soon_threadsafe(self.events.put_nowait, item)


class Generator:
    """The model, its tokenizer and a batched decode loop with a per-token callback.

    Decoding, padding and the next-token distribution are the trainer's
    (:class:`opd_nb.engine.sampling.TorchSampler`, whose raw loop streams); a request draws with ``torch.multinomial`` from a
    generator seeded with its ``seed``, and its prompt's prefix is not shared with the batch's.
    """

    def __init__(self, path: str, device: str | None = None):
        import torch

        from opd_nb.engine import lean, models
        from opd_nb.engine.sampling import TorchSampler

        self.torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tok = models.load_tokenizer(path, "student")
        self.model = models.load_model(path, "student", self.device)
        self.model.eval()
        self.model.requires_grad_(False)
        max_pos = getattr(self.model.config, "max_position_embeddings", None) or 4096
        self.max_total = int(max_pos)
        eos = models.eos_ids(self.model, self.tok)
        self.eos = set(eos)
        self.sampler = TorchSampler(
            self.model, lean.wrap(self.model), self.tok, eos, self.max_total, self.device
        )

    def decode(
        self,
        prompts: list[list[int]],
        *,
        temperature: float,
        top_p: float,
        seed: int | None,
        max_new: int,
        on_step: Callable[[list[int], Any], bool],
    ) -> None:
        """Decode up to `max_new` tokens after each prompt; `on_step(next ids, logits)` returns True to stop."""
        from opd_nb.engine.sampling import multinomial_pick

        torch = self.torch
        pad = self.tok.pad_token_id
        ids, att = self.sampler.pad(prompts)
        gen = torch.Generator(device=self.device).manual_seed(seed) if seed is not None else None
        choose = multinomial_pick(torch, temperature, top_p, gen)
        stop = torch.tensor(sorted(self.eos) or [pad], device=self.device)
        halted = False

        def pick(logits: Any) -> Any:
            nonlocal halted
            nxt = choose(logits)
            if not halted and on_step(nxt.tolist(), logits):
                halted = True
            return torch.full_like(nxt, int(stop[0])) if halted else nxt  # an EOS everywhere ends the loop

        max_new = max(1, min(max_new, self.max_total - ids.shape[1]))
        self.sampler.decode(ids, att, max_new, pick, stop, share_prefix=False)


class Engine:
    """The generation thread: batches queued requests and feeds each one its tokens."""

    def __init__(self, gen: Generator, max_batch: int = 16):
        self.gen = gen
        self.max_batch = max(1, max_batch)
        self.q: queue.Queue[_Request] = queue.Queue()
        self.thread = threading.Thread(target=self._loop, name="opd-serving-generate", daemon=True)

    def _loop(self) -> None:
        while True:
            batch = [self.q.get()]
            time.sleep(BATCH_WAIT_S)
            while len(batch) < self.max_batch:
                try:
                    batch.append(self.q.get_nowait())
                except queue.Empty:
                    break
            groups: dict[tuple[float, float, int | None], list[_Request]] = {}
            for r in batch:  # greedy requests decode alike whatever their temperature and top-p
                key = (
                    (0.0, 1.0, r.seed)
                    if is_greedy(r.temperature, r.top_p)
                    else (r.temperature, r.top_p, r.seed)
                )
                groups.setdefault(key, []).append(r)
            for (temperature, top_p, seed), reqs in groups.items():
                self._run(reqs, temperature, top_p, seed)

    def _run(self, reqs: list[_Request], temperature: float, top_p: float, seed: int | None) -> None:
        want = [j for j, r in enumerate(reqs) if r.top_logprobs is not None]

        def on_step(nxt: list[int], logits: Any) -> bool:
            logp = self.gen.torch.log_softmax(logits[want], -1) if want else None
            for j, (r, tok) in enumerate(zip(reqs, nxt, strict=True)):
                if r.finish is None:
                    if logp is not None and j in want:
                        r.logprobs.append(self._logprob(logp[want.index(j)], tok, r.top_logprobs or 0))
                    self._advance(r, tok)
            return all(r.finish is not None for r in reqs)

        try:
            self.gen.decode(
                [r.ids for r in reqs],
                temperature=temperature,
                top_p=top_p,
                seed=seed,
                max_new=max(r.max_tokens for r in reqs),
                on_step=on_step,
            )
        except Exception as exc:  # noqa: BLE001 - answer the callers instead of hanging them
            for r in reqs:
                r.put(("error", f"generation failed: {type(exc).__name__}: {exc}"))
            return
        for r in reqs:
            r.finish = r.finish or "length"
            r.put(("end", r.finish, len(r.out), self._text(r)))

    def _text(self, r: _Request) -> str:
        return r.cut if r.cut is not None else self.gen.tok.decode(r.out, skip_special_tokens=True)

    def _token(self, tok: int) -> dict[str, Any]:
        text = self.gen.tok.decode([tok], skip_special_tokens=False)
        return {"token": text, "bytes": list(text.encode("utf-8"))}

    def _logprob(self, logp: Any, tok: int, top: int) -> dict[str, Any]:
        """OpenAI's per-token entry: the chosen token's log-prob and the `top` likeliest alternatives."""
        entry: dict[str, Any] = {**self._token(tok), "logprob": float(logp[tok]), "top_logprobs": []}
        if top:
            vals, ids = logp.topk(top)
            entry["top_logprobs"] = [
                {**self._token(i), "logprob": float(v)}
                for v, i in zip(vals.tolist(), ids.tolist(), strict=True)
            ]
        return entry

    def _advance(self, r: _Request, tok: int) -> None:
        if tok in self.gen.eos:
            r.finish = "stop"
            if r.logprobs:
                r.logprobs.pop()  # the end-of-text token is not part of the answer
            return
        r.out.append(tok)
        if r.stop:
            text = self._text(r)
            hits = [i for i in (text.find(s) for s in r.stop) if i >= 0]
            if hits:
                r.cut, r.finish = text[: min(hits)], "stop"
                return
        if r.stream:
            text = self._text(r)
            if text.startswith(r.sent) and not text.endswith("\ufffd") and len(text) > len(r.sent):
                r.put(("delta", text[len(r.sent) :], len(r.out)))
                r.sent = text
        if len(r.out) >= r.max_tokens:
            r.finish = "length"


def _chunk(
    cid: str,
    model: str,
    delta: dict[str, Any],
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
) -> str:
    body: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


async def _stream(r: _Request, model: str, tools: bool) -> AsyncIterator[str]:
    """OpenAI chunks: the role, the text as it decodes (all at the end with tools), the finish.

    Every chunk carries the usage so far (the control plane's DashScope events report it)."""
    cid = f"chatcmpl-{uuid.uuid4().hex[:16]}"
    n_prompt = len(r.ids)

    def usage(n: int) -> dict[str, Any]:
        return {"prompt_tokens": n_prompt, "completion_tokens": n, "total_tokens": n_prompt + n}

    yield _chunk(cid, model, {"role": "assistant", "content": ""}, usage=usage(0))
    while True:
        event = await r.events.get()
        if event[0] == "delta":
            if not tools:
                yield _chunk(cid, model, {"content": event[1]}, usage=usage(event[2]))
            continue
        if event[0] == "error":
            yield f"data: {json.dumps({'error': {'message': event[1], 'type': 'server_error'}})}\n\n"
            return
        _, finish, n_completion, text = event
        message = completion_body(model, len(r.ids), n_completion, text, finish)
        choice = message["choices"][0]
        delta: dict[str, Any] = {}
        if tools:
            delta = {"content": choice["message"]["content"]}
            calls = choice["message"].get("tool_calls")
            if calls:
                delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls)]
        yield _chunk(cid, model, delta, choice["finish_reason"], message["usage"])
        yield "data: [DONE]\n\n"
        return


async def _end(r: _Request) -> End | Failed:
    """Wait for a request's last event: ("end", finish, n_completion, text) or ("error", message)."""
    while True:
        event = await r.events.get()
        if event[0] != "delta":
            return event


def _answer(model: str, reqs: list[_Request], ends: list[End]) -> dict[str, Any]:
    """One chat.completion with a choice per request (the usage adds their completions up)."""
    n_prompt = len(reqs[0].ids)
    bodies = [completion_body(model, n_prompt, e[2], e[3], e[1]) for e in ends]
    choices: list[dict[str, Any]] = []
    for i, (r, b) in enumerate(zip(reqs, bodies, strict=True)):
        choice = {**b["choices"][0], "index": i}
        choice["logprobs"] = {"content": r.logprobs} if r.top_logprobs is not None else None
        choices.append(choice)
    out: dict[str, Any] = {**bodies[0], "choices": choices}
    n_completion = sum(e[2] for e in ends)
    out["usage"] = {
        "prompt_tokens": n_prompt,
        "completion_tokens": n_completion,
        "total_tokens": n_prompt + n_completion,
    }
    return out


def _options(body: dict[str, Any]) -> tuple[int | None, int, tuple[str, ...], int | None]:
    """(seed, n, stop strings, top_logprobs or None) of a request, each of the right type, never coerced
    (the control plane checked their documented ranges; these are what this process can take)."""
    seed = whole(body, "seed", 0, MAX_WHOLE - 64)  # a choice i draws with seed + i
    n = whole(body, "n", 1, 64) or 1
    if not isinstance(body.get("logprobs", False), bool):
        raise ChatRequestError(f"logprobs must be true or false, got {body['logprobs']!r}")
    top = (whole(body, "top_logprobs", 0, MAX_TOP_LOGPROBS) or 0) if body.get("logprobs") else None
    stop = _stop_strings(body.get("stop"))
    if body.get("stream") and (n > 1 or top is not None or stop):
        raise ChatRequestError("n > 1, logprobs and stop are not supported with stream on this server")
    return seed, n, stop, top


def _stop_strings(value: JsonValue) -> tuple[str, ...]:
    """A request's stop strings: a string or a list of strings (empty ones stop nothing)."""
    items = [value] if isinstance(value, str) else (value or [])
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        raise ChatRequestError("stop must be a string or a list of strings")
    return tuple(x for x in items if isinstance(x, str) and x)


def _bad(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)


def create_app(engine: Engine, name: str, token: str) -> FastAPI:
    """The FastAPI app: ``/health``, ``/v1/models`` and ``/v1/chat/completions``."""
    app = FastAPI()
    gen = engine.gen

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "healthy", "model": name, "max_total": gen.max_total}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "opd-nb"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        if not same_key(bearer_token(request.headers.get("authorization")), token):
            return _bad(401, "invalid api key for this deployment", "authentication_error")
        try:
            body = await request.json()
        except ValueError:
            return _bad(400, "body is not JSON")
        try:
            ids, temperature, top_p, max_tokens = chat_inputs(
                gen.tok, body, gen.max_total, temperature=DEFAULT_TEMPERATURE, top_p=DEFAULT_TOP_P
            )
            seed, n, stop, top = _options(body)
        except ChatRequestError as exc:
            return _bad(400, str(exc))
        model = str(body.get("model") or name)
        stream = bool(body.get("stream"))
        loop = asyncio.get_running_loop()
        reqs = [
            _Request(ids, temperature, top_p, max_tokens, None if seed is None else seed + i, stream, loop)
            for i in range(n)
        ]
        for r in reqs:
            r.stop, r.top_logprobs = stop, top
            engine.q.put(r)
        if stream:
            return StreamingResponse(
                _stream(reqs[0], model, bool(body.get("tools"))),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        ends = [await _end(r) for r in reqs]
        for e in ends:
            if e[0] == "error":
                return _bad(500, e[1], "server_error")
        return _answer(model, reqs, [e for e in ends if e[0] == "end"])

    return app


def _watch_parent(parent: int) -> None:
    """Exit as soon as the control plane that started us is gone (even after a SIGKILL)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(0)


def serve(model: str, name: str, ready_file: str | None, *, max_batch: int, device: str | None) -> int:
    import uvicorn

    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    engine = Engine(Generator(model, device), max_batch=max_batch)
    engine.thread.start()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((HOST, 0))
    sock.listen(256)
    app = guard(create_app(engine, name, settings.SERVING_TOKEN.pop() or ""), HOST, sock.getsockname()[1])
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=2)
    )
    if ready_file:

        def announce() -> None:
            while not server.started:
                time.sleep(0.02)
            tmp = f"{ready_file}.tmp"
            Path(tmp).write_text(str(sock.getsockname()[1]))
            os.replace(tmp, ready_file)

        threading.Thread(target=announce, daemon=True).start()
    print(f"serving {model} as {name!r} on 127.0.0.1:{sock.getsockname()[1]}", flush=True)
    server.run(sockets=[sock])
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opd_nb.engine.serving")
    parser.add_argument("--model", required=True, help="a local Hugging Face model directory")
    parser.add_argument("--name", required=True, help="the model name answers carry")
    parser.add_argument("--ready-file", default=None, help="write the bound port here once serving")
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--device", default=None)
    args = parser.parse_args(argv)
    try:
        return serve(args.model, args.name, args.ready_file, max_batch=args.max_batch, device=args.device)
    except Exception as exc:  # noqa: BLE001 - one line for the deployment's log, the manager shows it
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
