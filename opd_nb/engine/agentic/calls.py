"""One round of calls to the user's rollout function, with the student served while they run.

Each call gets ``model_resource = {model_name, base_url, api_key}``, where ``api_key`` is a fresh
per-call token; what a call samples depends on the job's seed, the round and the call, not on timing.
A failing call is logged and counted; a round whose every call fails (or whose every returned
trajectory is malformed) fails the job with the first error.
"""

from __future__ import annotations

import secrets
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue

from opd_nb.constants import ROLLOUT_FAILURE_RATE, ROLLOUT_METRIC_PREFIX
from opd_nb.engine.agentic.endpoint import Generation, StudentEndpoint
from opd_nb.engine.api import EngineError
from opd_nb.engine.keepalive import KeptConnections
from opd_nb.engine.trajectory import MALFORMED, check_trajectory
from opd_nb.functions.rollout_reply import CallResult, agent_output
from opd_nb.traces import ids as trace_ids

if TYPE_CHECKING:
    from opd_nb.engine.api import RolloutEndpoint
    from opd_nb.engine.data import Row
    from opd_nb.engine.rollout_source import RolloutParts


@dataclass
class RolloutRound:
    """What one round of rollout calls returned."""

    tokens: list[str]  # the api key of each call
    groups: list[int]  # row index per call
    ok: list[int]  # calls that returned a well-formed trajectory
    trajs: list[dict[str, Any]]  # their agent_output, parallel to ok
    metrics: dict[str, float]  # the rollout function's own rollout_metrics (means) and the failure rate
    errors: dict[int, str]  # call index -> error, for failed calls


def rollout_metrics(results: list[CallResult]) -> dict[str, float]:
    """The mean of each numeric ``rollout_metrics`` key over the calls that reported it."""
    rsum: dict[str, list[float]] = {}
    for t, _ in results:
        reported: JsonValue = t.get("rollout_metrics") if t else None
        for k, v in reported.items() if isinstance(reported, dict) else ():
            if isinstance(v, int | float):
                rsum.setdefault(k, []).append(float(v))
    return {f"{ROLLOUT_METRIC_PREFIX}{k}": sum(v) / len(v) for k, v in rsum.items()}


class RolloutCalls:
    """Calls the job's rollout function on a thread pool while the engine thread serves the student."""

    def __init__(
        self, parts: RolloutParts, rollout: RolloutEndpoint, endpoint: StudentEndpoint, generation: Generation
    ):
        self.parts, self.rollout = parts, rollout
        self.endpoint = endpoint
        self.generation = generation
        ep = rollout
        self._pool = ThreadPoolExecutor(max_workers=max(1, ep.concurrency), thread_name_prefix="opd-rollout")
        self._conns = KeptConnections(ep.url, ep.reconnect_s)

    def close(self) -> None:
        self._pool.shutdown()
        self._conns.close()

    def _payload(
        self, row: Row, g: int, k: int, token: str, where: str, temperature: float
    ) -> dict[str, Any]:
        """The request of the `k`-th call for row `g`, whose api key is `token`."""
        return {
            "func_type": "rollout",
            "messages": row.messages,
            "tools": row.tools,
            "ground_truth": row.rollout_extra.get("solution"),
            "rollout_extra": row.rollout_extra,
            "sampling_params": {
                "temperature": temperature,
                "top_p": 1.0,
                "max_tokens": self.parts.max_total - len(row.prompt_ids),
            },
            "model_resource": {
                "model_name": self.endpoint.model_name,
                "base_url": self.endpoint.base_url,
                "api_key": token,
            },
            "request_metadata": {
                "job_id": self.parts.job.job_id,
                "sample_id": trace_ids.sample_id(where, g),
                "rollout_id": str(k),
                "attempt_id": "0",
            },
        }

    def _call(self, payload: dict[str, Any]) -> CallResult:
        """One rollout call (on a thread of the pool): (agent_output, None) or (None, error)."""
        self.generation.call_started()
        try:
            reply = self._conns.post_json(payload, self.rollout.timeout)
        finally:
            self.generation.call_ended()
        return (None, reply) if isinstance(reply, str) else agent_output(*reply)

    def _call_all(self, payloads: list[dict[str, Any]], tokens: list[str], where: str) -> list[CallResult]:
        """Make the calls while serving their generation requests on this (the engine's) thread."""
        job = self.parts.job
        self.endpoint.tokens.update(tokens)
        # what a call samples depends on the job's seed, the round and the call, not on timing
        self.generation.start_round({tok: f"{job.seed}|{where}|{i}" for i, tok in enumerate(tokens)})
        done = threading.Event()
        results: list[CallResult] = []
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
        self.generation.pump(done)
        th.join()
        self.endpoint.tokens.difference_update(tokens)
        if errors:
            raise EngineError(f"rollouts failed in {where}: {errors[0]}")
        return results

    def run(self, rows: list[Row], n: int, where: str, temperature: float) -> RolloutRound:
        """Call the rollout function n times per row."""
        tokens: list[str] = []
        payloads: list[dict[str, Any]] = []
        groups: list[int] = []
        for g, r in enumerate(rows):
            for k in range(n):
                tok = "opd-" + secrets.token_hex(12)
                tokens.append(tok)
                groups.append(g)
                payloads.append(self._payload(r, g, k, tok, where, temperature))
        results = self._call_all(payloads, tokens, where)
        metrics = rollout_metrics(results)
        results = self._drop_malformed(results, where)
        name = self.rollout.name
        failed = [(i, e) for i, (_, e) in enumerate(results) if e is not None]
        if failed:
            self.parts.log(
                f"rollout function {name!r}: {len(failed)}/{len(results)} rollouts failed in {where}; "
                f"first error: {failed[0][1]}",
                "WARNING",
            )
        if len(failed) == len(results):
            raise EngineError(
                f"rollout function {name!r} failed every call ({len(results)}) in {where}: "
                f"{failed[0][1]}. Fix the rollout code (run its tests with `opd test`) and resubmit"
            )
        ok = [
            i for i, (t, e) in enumerate(results) if e is None and t is not None
        ]  # a call without error has one
        trajs = [t for t, e in results if e is None and t is not None]
        metrics[ROLLOUT_FAILURE_RATE] = len(failed) / len(results)
        return RolloutRound(tokens, groups, ok, trajs, metrics, dict(failed))

    def _drop_malformed(self, results: list[CallResult], where: str) -> list[CallResult]:
        """Turn malformed trajectories into failed calls, logging one ``malformed trajectory:`` line per
        kind; a round whose every returned trajectory is malformed fails the job with the first line."""
        kinds: dict[str, tuple[Any, int]] = {}
        out: list[CallResult] = []
        n_returned = 0
        for traj, err in results:
            problems = check_trajectory(traj["messages"]) if err is None and traj is not None else []
            n_returned += err is None
            for pr in problems:
                first, count = kinds.get(pr.kind, (pr, 0))
                kinds[pr.kind] = (first, count + 1)
            out.append(
                (traj, err) if not problems else (None, "; ".join(f"{MALFORMED} {p.kind}" for p in problems))
            )
        lines = [pr.line(count, len(results), where) for pr, count in kinds.values()]
        for line in lines:
            self.parts.log(line, "WARNING")
        if lines and all(e is not None for _, e in out) and n_returned:
            raise EngineError(lines[0])
        return out
