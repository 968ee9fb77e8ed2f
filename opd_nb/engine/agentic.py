"""Agentic mode: the user's rollout function drives the student through an OpenAI-compatible API.

For each step the engine serves the student at ``http://127.0.0.1:PORT/v1/chat/completions``
(FastAPI + uvicorn in a thread of the engine process) and calls the rollout function server with
``model_resource = {model_name, base_url, api_key}``, where ``api_key`` is a fresh per-rollout
token. Requests are generated in batched ``generate`` calls on the engine's own thread (torch stays
on one thread); a request waits up to ``BATCH_WAIT_S`` for the other rollouts in flight to ask.
Each request samples from a random stream keyed by the job's seed, the round, the call and the turn,
so which requests happened to share a batch (timing, machine load) does not change what is sampled.
Every completion's token ids are recorded under the rollout's token, so training uses exactly the ids
the student sampled; the trained tokens are the assistant turns of the trajectory the rollout
function returns. Rollout records
(:mod:`opd_nb.engine.rollouts`) keep each trajectory with its assistant turns' tokens, marking
which were trained on.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import queue
import re
import secrets
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from opd_nb.constants import ROLLOUT_METRIC_PREFIX, ZERO_VARIANCE_GROUPS
from opd_nb.engine.api import EngineError
from opd_nb.engine.keepalive import KeptConnections
from opd_nb.engine.trajectory import MALFORMED, check_trajectory, turn_samples

BATCH_WAIT_S = 0.05  # longest a generation request waits for the other rollouts in flight to ask
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass
class _GenRequest:
    token: str
    prompt_ids: list[int]
    temperature: float
    top_p: float
    max_tokens: int
    tools: list | None = None  # the tools the rollout offered with this request
    future: Future = field(default_factory=Future)


@dataclass
class StepRollouts:
    """What one round of rollout calls produced, kept for the rollout records (:meth:`Agentic.to_record`)."""

    rows: list  # the rows the calls were made for
    groups: list[int]  # row index per call
    ok: list[int]  # calls that returned a trajectory
    trajs: list[dict]  # their agent_output, parallel to ok
    errors: dict[int, str]  # call index -> error, for failed calls
    # per trajectory, per assistant turn: (batch row holding its trained tokens or None, message index,
    # generated ids cut to fit max_length, generated without EOS)
    turns: list[list[tuple[int | None, int, list[int], bool]]]
    rewards: list[dict] | None  # per trajectory: reward_score / reward_metrics / reward_status / reward_error


def parse_tool_calls(text: str) -> tuple[str, list[dict]]:
    """Split `<tool_call>{json}</tool_call>` blocks out of generated text (OpenAI tool_calls shape)."""
    calls = []
    for m in _TOOL_CALL.finditer(text):
        try:
            obj = json.loads(m.group(1))
            name = obj["name"]
        except (ValueError, KeyError, TypeError):
            continue
        args = obj.get("arguments", {})
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {
                    "name": str(name),
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
        )
    content = _TOOL_CALL.sub("", text).strip() if calls else text
    return content, calls


def _stream_seed(call_key: str, turn: int) -> int:
    """The seed of a call's `turn`-th generation request: a stable 63-bit hash (not Python's salted one)."""
    digest = hashlib.blake2b(f"{call_key}|{turn}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def _agent_output(status: int, data: bytes) -> tuple[dict | None, str | None]:
    """The trajectory in a rollout function's reply, or what is wrong with the reply."""
    try:
        body = json.loads(data)
    except ValueError:
        body = None
    if status != 200 or not isinstance(body, dict):
        msg = (
            body.get("message") or body.get("detail")
            if isinstance(body, dict)
            else data[:300].decode("utf-8", "replace")
        )
        return None, f"HTTP {status}: {msg}"
    if str(body.get("status", "success")) != "success":
        return None, f"status {body.get('status')}: {body.get('error') or body.get('error_code')}"
    ao = body.get("agent_output") or {}
    if not isinstance(ao.get("messages"), list) or not ao["messages"]:
        return None, "agent_output.messages is empty; return the full trajectory"
    return ao, None


class ChatRequestError(ValueError):
    """A chat request the endpoint cannot serve; the message is the 400 answer's text."""


def chat_inputs(
    tokenizer: Any, body: Any, max_total: int, *, temperature: float = 1.0, top_p: float = 1.0
) -> tuple[list[int], float, float, int]:
    """(prompt ids, temperature, top_p, max_tokens) of an OpenAI chat request; `temperature`/`top_p`
    are the defaults for a request without them. Raises :class:`ChatRequestError`."""
    from opd_nb.engine.data import template_ids

    msgs = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(msgs, list) or not msgs:
        raise ChatRequestError("'messages' must be a non-empty list")
    try:
        ids = template_ids(tokenizer, msgs, tools=body.get("tools"), add_generation_prompt=True)
    except Exception as exc:  # noqa: BLE001 - the caller sent messages the template cannot render
        raise ChatRequestError(f"the chat template failed on these messages: {exc}") from None
    if len(ids) >= max_total:
        raise ChatRequestError(f"prompt is {len(ids)} tokens; the context limit (max_length) is {max_total}")
    try:
        temperature = float(body["temperature"] if body.get("temperature") is not None else temperature)
        top_p = float(body["top_p"] if body.get("top_p") is not None else top_p)
        mt = body.get("max_tokens") or body.get("max_completion_tokens") or max_total
        max_tokens = max(1, min(int(mt), max_total - len(ids)))
    except (TypeError, ValueError):
        raise ChatRequestError("temperature, top_p and max_tokens must be numbers") from None
    return ids, temperature, top_p, max_tokens


def completion_body(model_name: str, n_prompt: int, n_completion: int, text: str, finish: str) -> dict:
    """An OpenAI ``chat.completion`` for generated `text` (tool calls parsed out of it)."""
    content, calls = parse_tool_calls(text)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
        finish = "tool_calls" if finish == "stop" else finish
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_name,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": n_prompt,
            "completion_tokens": n_completion,
            "total_tokens": n_prompt + n_completion,
        },
    }


class _Server:
    """The OpenAI-compatible endpoint; hands generation to the engine thread through a queue."""

    def __init__(self, tokenizer: Any, model_name: str, max_total: int):
        import uvicorn

        from opd_nb.function_server import free_port

        self.q: queue.Queue[_GenRequest] = queue.Queue()
        self.tokens: set[str] = set()
        self.model_name = model_name
        app = FastAPI()

        def err(status: int, msg: str, kind: str = "invalid_request_error") -> JSONResponse:
            return JSONResponse({"error": {"message": msg, "type": kind}}, status_code=status)

        @app.get("/v1/models")
        async def models() -> dict:
            return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "opd-nb"}]}

        @app.post("/v1/chat/completions")
        async def chat(request: Request):  # noqa: ANN202
            auth = request.headers.get("authorization", "")
            token = auth.split(" ", 1)[1].strip() if auth.lower().startswith("bearer ") else ""
            if token not in self.tokens:
                return err(
                    401, "invalid or expired api_key (use model_resource.api_key)", "authentication_error"
                )
            try:
                body = await request.json()
            except ValueError:
                return err(400, "body is not JSON")
            if isinstance(body, dict) and body.get("stream"):
                return err(400, "stream=true is not supported by the local student endpoint")
            try:
                ids, temperature, top_p, max_tokens = chat_inputs(tokenizer, body, max_total)
            except ChatRequestError as exc:
                return err(400, str(exc))
            req = _GenRequest(token, ids, temperature, top_p, max_tokens, body.get("tools") or None)
            self.q.put(req)
            comp_ids, text, finish = await asyncio.wrap_future(req.future)
            return completion_body(self.model_name, len(ids), len(comp_ids), text, finish)

        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        )
        self.thread = threading.Thread(target=self.server.run, name="opd-student-openai", daemon=True)
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise EngineError("the local student endpoint did not start")
            time.sleep(0.01)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)


class Agentic:
    """Per-job agentic rollouts (owns the endpoint; the trainer calls :meth:`collect` each step)."""

    def __init__(self, run: Any):
        self.run = run
        self.server = _Server(run.tok, "opd-local-student", run.max_total)
        self.records: dict[str, list[tuple[list[int], list[int], bool]]] = {}
        self.offered: dict[str, list] = {}  # rollout token -> the tools its requests offered
        ep = run.job.rollout
        self._pool = ThreadPoolExecutor(max_workers=max(1, ep.concurrency), thread_name_prefix="opd-rollout")
        self._conns = KeptConnections(ep.url)
        self._lock = threading.Lock()
        self._in_flight = 0  # rollout calls under way (counted by the pool's threads, read by the pump)
        self._call_seeds: dict[str, str] = {}  # rollout token -> the key of its calls' random streams
        run.log(
            f"agentic mode: student served at {self.server.base_url} for the rollout function "
            f"{run.job.rollout.name!r} ({run.job.rollout.url})"
        )

    def close(self) -> None:
        self._pool.shutdown()
        self._conns.close()
        self.server.close()

    # ---- serving generation on the engine thread ------------------------------------------------
    def _serve(self, batch: list[_GenRequest]) -> None:
        by: dict[tuple[float, float], list[_GenRequest]] = {}
        for r in batch:
            by.setdefault((r.temperature, r.top_p), []).append(r)
        for (temp, top_p), reqs in by.items():
            turns: dict[str, int] = {}
            seeds = []
            for r in reqs:  # a rollout's n-th request draws from the n-th stream of its call
                turns[r.token] = turns.get(r.token, len(self.records.get(r.token, []))) + 1
                seeds.append(_stream_seed(self._call_seeds.get(r.token, r.token), turns[r.token]))
            try:
                outs = self.run.generate_ids(
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
                if r.tools:
                    self.offered[r.token] = r.tools
                text_ids = ids[:-1] if ended else ids
                r.future.set_result((ids, self.run.tok.decode(text_ids, skip_special_tokens=True), finish))

    def _pump(self, done: threading.Event) -> None:
        q = self.server.q
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
            self._serve(batch)

    # ---- one step of rollouts -------------------------------------------------------------------
    def _call(self, payload: dict) -> tuple[dict | None, str | None]:
        """One rollout call (on a thread of the pool): (agent_output, None) or (None, error)."""
        with self._lock:
            self._in_flight += 1
        try:
            reply = self._conns.post_json(payload, self.run.job.rollout.timeout)
        finally:
            with self._lock:
                self._in_flight -= 1
        return (None, reply) if isinstance(reply, str) else _agent_output(*reply)

    def _rollouts(self, rows: list, n: int, where: str, temperature: float):
        """Call the rollout function n times per row -> (tokens, groups, ok indices, trajectories, metrics,
        errors of the failed calls by index).

        A failing call is logged and counted; every call failing fails the job with the first error.
        """
        run = self.run
        job = run.job
        tokens, payloads, groups = [], [], []
        for g, r in enumerate(rows):
            for k in range(n):
                tok = "opd-" + secrets.token_hex(12)
                tokens.append(tok)
                groups.append(g)
                payloads.append(
                    {
                        "func_type": "rollout",
                        "messages": r.messages,
                        "tools": r.tools,
                        "ground_truth": r.rollout_extra.get("solution"),
                        "rollout_extra": r.rollout_extra,
                        "sampling_params": {
                            "temperature": temperature,
                            "top_p": 1.0,
                            "max_tokens": run.max_total - len(r.prompt_ids),
                        },
                        "model_resource": {
                            "model_name": self.server.model_name,
                            "base_url": self.server.base_url,
                            "api_key": tok,
                        },
                        "request_metadata": {
                            "job_id": job.job_id,
                            "sample_id": f"{where}-{g}",
                            "rollout_id": str(k),
                            "attempt_id": "0",
                        },
                    }
                )
        self.server.tokens.update(tokens)
        self.records, self.offered = {}, {}
        # what a call samples depends on the job's seed, the round and the call, not on timing
        self._call_seeds = {tok: f"{job.seed}|{where}|{i}" for i, tok in enumerate(tokens)}
        done = threading.Event()
        results: list = []
        errors: list[BaseException] = []

        calls = [self._pool.submit(self._call, p) for p in payloads]

        def drive() -> None:
            try:
                results.extend(call.result() for call in calls)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
            finally:
                done.set()

        th = threading.Thread(target=drive, name="opd-rollouts", daemon=True)
        th.start()
        self._pump(done)
        th.join()
        self.server.tokens.difference_update(tokens)
        if errors:
            raise EngineError(f"rollouts failed in {where}: {errors[0]}")
        metrics: dict[str, float] = {}
        rsum: dict[str, list[float]] = {}
        for t, _ in results:
            for k, v in ((t or {}).get("rollout_metrics") or {}).items():
                if isinstance(v, int | float):
                    rsum.setdefault(k, []).append(float(v))
        metrics.update({f"{ROLLOUT_METRIC_PREFIX}{k}": sum(v) / len(v) for k, v in rsum.items()})
        results = self._drop_malformed(results, where)
        failed = [(i, e) for i, (_, e) in enumerate(results) if e is not None]
        if failed:
            run.log(
                f"rollout function {job.rollout.name!r}: {len(failed)}/{len(results)} rollouts failed in {where}; "
                f"first error: {failed[0][1]}",
                "WARNING",
            )
        if len(failed) == len(results):
            raise EngineError(
                f"rollout function {job.rollout.name!r} failed every call ({len(results)}) in {where}: "
                f"{failed[0][1]}. Fix the rollout code (run its tests with `opd test`) and resubmit"
            )
        ok = [i for i, (_, e) in enumerate(results) if e is None]
        trajs = [results[i][0] for i in ok]
        metrics["trace/rollout/failure_rate"] = len(failed) / len(results)
        return tokens, groups, ok, trajs, metrics, dict(failed)

    def _drop_malformed(self, results: list, where: str) -> list:
        """Turn malformed trajectories into failed calls, logging one ``malformed trajectory:`` line per
        kind; a round whose every returned trajectory is malformed fails the job with the first line."""
        kinds: dict[str, tuple[Any, int]] = {}
        out, n_returned = [], 0
        for traj, err in results:
            problems = check_trajectory(traj["messages"]) if err is None else []
            n_returned += err is None
            for pr in problems:
                first, count = kinds.get(pr.kind, (pr, 0))
                kinds[pr.kind] = (first, count + 1)
            out.append(
                (traj, err) if not problems else (None, "; ".join(f"{MALFORMED} {p.kind}" for p in problems))
            )
        lines = [pr.line(count, len(results), where) for pr, count in kinds.values()]
        for line in lines:
            self.run.log(line, "WARNING")
        if lines and all(e is not None for _, e in out) and n_returned:
            raise EngineError(lines[0])
        return out

    def _task_scores(self, rows: list, groups: list[int], ok: list[int], trajs: list[dict], where: str):
        """(reward metrics, total per trajectory or None, record fields per trajectory or None): the job's
        reward functions, else the rollout's own ``reward_score`` when every trajectory carries one."""
        from opd_nb.engine import rewards

        job = self.run.job
        if job.rewards:
            samples = [
                rewards.Sample(
                    messages=t["messages"],
                    rollout_extra=rows[groups[i]].rollout_extra,
                    group=groups[i],
                    sample_id=f"{where}-{groups[i]}",
                    rollout_id=str(i),
                )
                for i, t in zip(ok, trajs, strict=True)
            ]
            res = self.run.reward_caller.submit(
                job.rewards, samples, job.job_id, where=where, log=self.run.log
            ).result()
            return dict(res.metrics), res.totals, res.per_sample
        if trajs and all(isinstance(t.get("reward_score"), int | float) for t in trajs):
            totals = [float(t["reward_score"]) for t in trajs]
            per = [
                {"reward_score": x, "reward_metrics": {}, "reward_status": "success", "reward_error": None}
                for x in totals
            ]
            return {"trace/reward/mean": sum(totals) / len(totals)}, totals, per
        return {}, None, None

    def validate(self, rows: list, where: str) -> dict[str, float]:
        """One greedy rollout per validation row through the rollout function, as training rollouts run:
        ``validation/data/reward/mean@1`` (with a reward) and ``validation/accuracy`` (task rows, judged on
        the trajectory's last assistant message; a failed rollout counts as wrong)."""
        from opd_nb.engine import task

        tokens, groups, ok, trajs, _, errors = self._rollouts(rows, 1, where, temperature=0.0)
        out: dict[str, float] = {}
        last = {
            groups[i]: next(
                (m.get("content") or "" for m in reversed(t["messages"]) if m.get("role") == "assistant"), ""
            )
            for i, t in zip(ok, trajs, strict=True)
        }
        solved = [(g, r.solution) for g, r in enumerate(rows) if isinstance(r.solution, str)]
        if solved:
            out["validation/accuracy"] = sum(
                g in last and task.is_correct(last[g], sol) for g, sol in solved
            ) / len(solved)
        _, totals, per = self._task_scores(rows, groups, ok, trajs, where)
        good = [x for x in (totals or []) if not math.isnan(x)]
        if good:
            out["validation/data/reward/mean@1"] = sum(good) / len(good)
        if self.run.recorder.enabled:
            t0 = time.perf_counter()
            self._record_validation(StepRollouts(rows, groups, ok, trajs, errors, [], per), tokens, where)
            out["timing_s/validation_record"] = time.perf_counter() - t0
        return out

    def _record_validation(self, info: StepRollouts, tokens: list[str], where: str) -> None:
        """Write the validation trajectories, their tokens scored by one no-grad student and teacher pass."""
        from opd_nb.engine.batch import left_pad

        run = self.run
        try:
            seqs, masks, _, _, info.turns, _ = self._samples(
                info.rows, tokens, info.groups, info.ok, info.trajs, where
            )
        except EngineError as exc:
            run.log(f"{where}: the validation rollouts were not recorded: {exc}", "WARNING")
            return
        scores = None
        if seqs:
            scores = run.score_tokens(
                left_pad(seqs, masks, [0] * len(seqs), run.tok.pad_token_id, run.device)
            )
        run.recorder.write("validation", run.step, self.to_record(info, scores, None, run.step))

    def to_record(self, info: StepRollouts, scores: Any, limit: int | None, step: int) -> list:
        """:class:`rollouts.Rollout` per call (a fair sample of at most `limit`; None: all), failed ones included."""
        from opd_nb.engine.rollouts import Rollout, Turn, fair_sample, ranks

        calls = list(range(len(info.groups)))
        sel = calls if limit is None else fair_sample(info.groups, limit, step)
        pos = {i: j for j, i in enumerate(info.ok)}
        rows_needed = [t[0] for i in sel if i in pos for t in info.turns[pos[i]] if t[0] is not None]
        scored = self.run.turns(scores, rows_needed)
        rank = ranks(info.groups)
        out = []
        for i in sel:
            g = info.groups[i]
            j = pos.get(i)
            if j is None:
                msgs = info.rows[g].messages
                out.append(Rollout(g, rank[i], msgs, [], agentic=True, error=info.errors.get(i, "failed")))
                continue
            turns, truncated = [], False
            for row, a, dropped, no_eos in info.turns[j]:
                base = scored[row] if row is not None else Turn([], [], [])
                turns.append(Turn(base.ids, base.student, base.teacher, message=a, dropped=dropped))
                truncated = truncated or bool(dropped) or no_eos
            reward = info.rewards[j] if info.rewards else None
            out.append(Rollout(g, rank[i], info.trajs[j]["messages"], turns, truncated, reward, agentic=True))
        return out

    def _samples(
        self, rows: list, tokens: list[str], groups: list[int], ok: list[int], trajs: list[dict], where: str
    ):
        """Training samples, one per assistant turn, with the ids the student actually generated.

        Returns (sequences, trained masks, owning trajectory per sample, message text per sample, turns per
        trajectory as in :attr:`StepRollouts.turns`, number of turns not generated through the endpoint).
        """
        run = self.run
        seqs, masks, owner, texts, turns, missing = [], [], [], [], [], 0
        for j, (i, t) in enumerate(zip(ok, trajs, strict=True)):
            msgs = t["messages"]
            # the tools the rollout offered the endpoint (the row's own when it offered none)
            tools = self.offered.get(tokens[i]) or rows[groups[i]].tools
            try:
                cut = turn_samples(run.tok, msgs, tools, self.records.get(tokens[i], []), run.max_total)
            except Exception as exc:  # noqa: BLE001
                raise EngineError(
                    f"{where}: the chat template failed on a trajectory returned by the rollout function: {exc}"
                ) from exc
            mine: list[tuple[int | None, int, list[int], bool]] = []
            turns.append(mine)
            for ts in cut:
                missing += not ts.generated
                if not any(ts.mask):
                    mine.append((None, ts.index, ts.dropped, ts.no_eos))
                    continue
                mine.append((len(seqs), ts.index, ts.dropped, ts.no_eos))
                seqs.append(ts.ids)
                masks.append(ts.mask)
                owner.append(j)
                texts.append(msgs[ts.index].get("content") or "")
        return seqs, masks, owner, texts, turns, missing

    def collect(self, rows: list, n: int, where: str):
        """Run n rollouts per row; returns (SeqBatch of assistant turns, reward metrics, task advantages,
        the :class:`StepRollouts` for the records)."""
        from opd_nb.engine import rewards
        from opd_nb.engine.batch import left_pad

        run = self.run
        tokens, groups, ok, trajs, metrics, errors = self._rollouts(rows, n, where, run.plan.temperature)
        reward_metrics, totals, per = self._task_scores(rows, groups, ok, trajs, where)
        metrics.update(reward_metrics)
        adv = None
        if totals is not None:
            ok_groups = [groups[i] for i in ok]
            metrics[ZERO_VARIANCE_GROUPS] = rewards.zero_variance_fraction(totals, ok_groups)
            adv = rewards.group_advantages(totals, ok_groups)
        seqs, masks, owner, texts, turns, missing = self._samples(rows, tokens, groups, ok, trajs, where)
        if missing:
            run.log(
                f"{where}: {missing} assistant turn(s) were not generated through the student endpoint; "
                "trained on their templated tokens instead",
                "WARNING",
            )
        if not seqs:
            raise EngineError(f"{where}: the rollout trajectories contain no assistant turns to train on")
        b = left_pad(seqs, masks, [groups[ok[j]] for j in owner], run.tok.pad_token_id, run.device)
        b.texts = texts
        import torch

        adv_t = None
        if adv is not None:
            adv_t = torch.nan_to_num(
                torch.tensor([adv[j] for j in owner], dtype=torch.float32, device=run.device)
            )
        return b, metrics, adv_t, StepRollouts(rows, groups, ok, trajs, errors, turns, per)
