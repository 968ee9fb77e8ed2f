"""Calling user reward functions over HTTP, the cloud's code path (the SDK's function server).

Each component gets ``concurrency`` calls in flight and ``timeout`` seconds per call. A failed or
timed-out call is logged and counted (``trace/reward/failure_rate``) and its sample gets no task
advantage; a component that fails *every* call of a step fails the job with its own error.
"""

from __future__ import annotations

import json
import math
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from opd_nb import reward_metrics
from opd_nb.engine.api import EngineError, RewardEndpoint
from opd_nb.engine.keepalive import KeptConnections


@dataclass
class Sample:
    """One scored trajectory: the full conversation (prompt turns + the student's turns)."""

    messages: list[dict]
    rollout_extra: dict[str, Any]
    group: int
    sample_id: str
    rollout_id: str


@dataclass
class RewardResult:
    totals: list[float]  # weighted sum over components per sample; NaN where a call failed
    metrics: dict[str, float] = field(default_factory=dict)  # trace/reward_metrics/<key>, failure rate, mean
    failures: list[str] = field(default_factory=list)
    # per sample, for rollout records: reward_score (None if a call failed), reward_metrics, reward_status,
    # reward_error (the first component's error)
    per_sample: list[dict[str, Any]] = field(default_factory=list)


def _error_text(status: int, data: bytes) -> str:
    text = data.decode("utf-8", "replace")
    try:
        body = json.loads(text)
    except ValueError:
        return f"HTTP {status}: {text[:300]}"
    if isinstance(body, dict):
        msg = body.get("message") or body.get("detail") or body.get("error") or body
        return f"HTTP {status}: {msg}"
    return f"HTTP {status}: {body}"


def _post(conns: KeptConnections, ep: RewardEndpoint, payload: dict) -> tuple[dict | None, str | None]:
    reply = conns.post_json(payload, ep.timeout)
    if isinstance(reply, str):
        return None, reply
    status, data = reply
    if status != 200:
        return None, _error_text(status, data)
    try:
        body = json.loads(data)
    except ValueError:
        return None, f"reply is not JSON: {data[:200].decode('utf-8', 'replace')}"
    if not isinstance(body, dict):
        return None, f"reply is not a JSON object: {str(body)[:200]}"
    if str(body.get("status", "success")) != "success":
        return (
            None,
            f"status {body.get('status')}: {body.get('error') or body.get('error_code') or 'no error text'}",
        )
    return body, None


def _meta(job_id: str, s: Sample) -> dict:
    return {"job_id": job_id, "sample_id": s.sample_id, "rollout_id": s.rollout_id, "attempt_id": "0"}


def _agent_output(s: Sample) -> dict:
    return {"messages": s.messages, "rollout_extra": s.rollout_extra}


def _groups(samples: list[Sample]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(s.group, []).append(i)
    return groups


def _payloads(ep: RewardEndpoint, samples: list[Sample], job_id: str) -> list[dict]:
    """The calls' bodies: one per sample, or (group reward) one per prompt's group."""
    if ep.kind == "group_reward":
        return [
            {
                "func_type": "group_reward",
                "agent_outputs": [_agent_output(samples[i]) for i in idx],
                "ground_truth": samples[idx[0]].rollout_extra.get("solution"),
                "request_metadata": _meta(job_id, samples[idx[0]]),
            }
            for idx in _groups(samples).values()
        ]
    return [
        {
            "func_type": "reward",
            "ground_truth": s.rollout_extra.get("solution"),
            "agent_output": _agent_output(s),
            "request_metadata": _meta(job_id, s),
        }
        for s in samples
    ]


def _read_scores(
    ep: RewardEndpoint, samples: list[Sample], outs: list[tuple[dict | None, str | None]]
) -> tuple[list[float], list[dict | None], list[str | None]]:
    """(score, reward_metrics, error) per sample from the replies; NaN score where the call failed."""
    scores = [math.nan] * len(samples)
    rmetrics: list[dict | None] = [None] * len(samples)
    errors: list[str | None] = [None] * len(samples)
    if ep.kind == "group_reward":
        for idx, (body, err) in zip(_groups(samples).values(), outs, strict=True):
            rewards = ((body or {}).get("reward") or {}).get("rewards") if body else None
            if err is None and (not isinstance(rewards, list) or len(rewards) != len(idx)):
                err = f"group reward returned {0 if not isinstance(rewards, list) else len(rewards)} rewards for {len(idx)} outputs"
            if err is not None:
                for i in idx:
                    errors[i] = err
                continue
            for i, r in zip(idx, rewards, strict=True):
                try:
                    scores[i] = float(r["reward_score"])
                    rmetrics[i] = r.get("reward_metrics") or None
                except (KeyError, TypeError, ValueError):
                    errors[i] = f"group reward entry has no numeric reward_score: {str(r)[:200]}"
        return scores, rmetrics, errors
    for i, (body, err) in enumerate(outs):
        if err is None:
            try:
                reward = body["reward"]  # type: ignore[index]
                scores[i] = float(reward["reward_score"])
                rmetrics[i] = reward.get("reward_metrics") or None
                continue
            except (KeyError, TypeError, ValueError):
                err = f"reply has no numeric reward.reward_score: {str(body)[:200]}"
        errors[i] = err
    return scores, rmetrics, errors


class RewardCaller:
    """A job's reward calls: per endpoint, ``concurrency`` threads over kept-alive connections.

    Why: new connections every step cost ~20% on the demo's 64 calls per step; httpx's client cost
    more CPU than the function server itself (see :class:`~opd_nb.engine.keepalive.KeptConnections`); and :meth:`submit` returns
    at once, so the trainer runs the teacher pass while the calls are under way.
    """

    def __init__(self) -> None:
        self._endpoints: dict[tuple[str, int], tuple[ThreadPoolExecutor, KeptConnections]] = {}

    def _calling(self, ep: RewardEndpoint) -> tuple[ThreadPoolExecutor, KeptConnections]:
        key = (ep.url, max(1, ep.concurrency))
        if key not in self._endpoints:
            pool = ThreadPoolExecutor(max_workers=key[1], thread_name_prefix=f"opd-reward-{ep.name}")
            self._endpoints[key] = (pool, KeptConnections(ep.url))
        return self._endpoints[key]

    def submit(
        self,
        endpoints: list[RewardEndpoint],
        samples: list[Sample],
        job_id: str,
        *,
        where: str,
        log: Any = None,
    ) -> PendingScores:
        """Start scoring `samples` with every component; :meth:`PendingScores.result` waits for them."""
        started = time.perf_counter()
        calls = []
        for ep in endpoints:
            pool, conns = self._calling(ep)
            calls.append([pool.submit(_timed_post, conns, ep, p) for p in _payloads(ep, samples, job_id)])
        return PendingScores(endpoints, samples, job_id, where, log, calls, started)

    def close(self) -> None:
        for pool, conns in self._endpoints.values():
            pool.shutdown()
            conns.close()
        self._endpoints.clear()


def _timed_post(conns: KeptConnections, ep: RewardEndpoint, payload: dict):
    return _post(conns, ep, payload), time.perf_counter()


@dataclass
class PendingScores:
    """Reward calls under way (see :meth:`RewardCaller.submit`)."""

    endpoints: list[RewardEndpoint]
    samples: list[Sample]
    job_id: str
    where: str
    log: Any
    calls: list[list[Future]]  # per endpoint, per call: ((body, error), finished at)
    started: float
    seconds: float = 0.0  # wall time of the calls themselves, once done

    def done(self) -> bool:
        """Whether every call has its reply (or its error)."""
        return all(f.done() for futures in self.calls for f in futures)

    def result(self) -> RewardResult:
        """The scores; raises EngineError (on the caller's thread) if a component failed every call."""
        done = [[f.result() for f in futures] for futures in self.calls]
        ends = [end for per_ep in done for _, end in per_ep]
        self.seconds = max(ends) - self.started if ends else 0.0
        per_ep = [
            _read_scores(ep, self.samples, [out for out, _ in outs])
            for ep, outs in zip(self.endpoints, done, strict=True)
        ]
        return _summarize(
            self.endpoints, self.samples, per_ep, where=self.where, log=self.log, job_id=self.job_id
        )


def _summarize(
    endpoints: list[RewardEndpoint], samples: list[Sample], per_ep: list, *, where: str, log: Any, job_id: str
) -> RewardResult:
    """Totals, metrics and per-sample records from every component's (scores, metrics, errors)."""
    totals = [0.0] * len(samples)
    calls = failed = 0
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    failures: list[str] = []
    per_sample: list[dict[str, Any]] = [
        {"reward_metrics": {}, "reward_status": "success", "reward_error": None} for _ in samples
    ]
    for ep, (scores, rmetrics, errs) in zip(endpoints, per_ep, strict=True):
        errors = [e for e in errs if e is not None]
        n_calls = len({s.group for s in samples}) if ep.kind == "group_reward" else len(samples)
        n_failed = sum(1 for x in scores if math.isnan(x))
        calls += len(samples)
        failed += n_failed
        if errors:
            msg = f"reward function {ep.name!r} ({ep.url}): {n_failed}/{len(samples)} scores failed in {where}; first error: {errors[0]}"
            failures.append(msg)
            if log is not None:
                log(msg, "WARNING")
        if samples and n_failed == len(samples):
            raise EngineError(
                f"reward function {ep.name!r} failed every call ({n_calls}) in {where}: {errors[0] if errors else 'no score'}. "
                "Fix the reward code (run its tests with `opd test`) and resubmit"
            )
        for i, (sc, rm, e) in enumerate(zip(scores, rmetrics, errs, strict=True)):
            totals[i] += ep.weight * sc  # NaN propagates: a failed component voids the sample's task signal
            _note(per_sample[i], ep, sc, rm, e, several=len(endpoints) > 1)
            if log is not None:
                reward_metrics.warn_once(job_id, rm, log)  # not silently dropped from the curves
            for k, v in (rm or {}).items():
                try:
                    sums[k] = sums.get(k, 0.0) + float(v)
                    counts[k] = counts.get(k, 0) + 1
                except (TypeError, ValueError):
                    continue
    metrics = {f"trace/reward_metrics/{k}": sums[k] / counts[k] for k in sums}
    metrics["trace/reward/failure_rate"] = failed / max(1, calls)
    ok = [t for t in totals if not math.isnan(t)]
    if ok:
        metrics["trace/reward/mean"] = sum(ok) / len(ok)
    for info, t in zip(per_sample, totals, strict=True):
        info["reward_score"] = None if math.isnan(t) else t
    return RewardResult(totals=totals, metrics=metrics, failures=failures, per_sample=per_sample)


def _note(
    info: dict[str, Any], ep: RewardEndpoint, score: float, rm: dict | None, err: str | None, several: bool
):
    """Fold one component's result for one sample into its record (metrics merged; with several components,
    each component's own score under ``reward_components``)."""
    info["reward_metrics"].update(rm or {})
    if several:
        info.setdefault("reward_components", {})[ep.name] = None if math.isnan(score) else score
    if math.isnan(score):
        info["reward_status"] = "failed"
        if info["reward_error"] is None:
            info["reward_error"] = f"{ep.name}: {err or 'no score'}"


def zero_variance_fraction(totals: list[float], groups: list[int]) -> float:
    """Share of groups whose scored samples all got the same reward (their group advantage is 0).

    A group with fewer than two scored samples counts as zero-variance: it carries no task signal either.
    """
    by: dict[int, list[float]] = {}
    for t, g in zip(totals, groups, strict=True):
        by.setdefault(g, [])
        if not math.isnan(t):
            by[g].append(t)
    if not by:
        return 0.0
    flat = sum(1 for v in by.values() if len(v) < 2 or max(v) == min(v))
    return flat / len(by)


def group_advantages(totals: list[float], groups: list[int], eps: float = 1e-4) -> list[float]:
    """(r - mean_group) / (std_group + eps); failed samples (NaN) get 0 and are left out of the stats."""
    by: dict[int, list[float]] = {}
    for t, g in zip(totals, groups, strict=True):
        if not math.isnan(t):
            by.setdefault(g, []).append(t)
    out = []
    for t, g in zip(totals, groups, strict=True):
        vals = by.get(g, [])
        if math.isnan(t) or len(vals) < 2:
            out.append(0.0)
            continue
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
        out.append((t - mean) / (std + eps))
    return out
