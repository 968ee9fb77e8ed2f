"""Calling user reward functions over HTTP, the cloud's code path (the SDK's function server).

Each component gets ``concurrency`` calls in flight and ``timeout`` seconds per call. A failed or
timed-out call is logged and counted (``trace/reward/failure_rate``) and its sample gets no task
advantage; a component that fails *every* call of a step fails the job with its own error. The
requests and the reading of replies are :mod:`opd_nb.functions.reward_call`'s (shared with ``opd eval`` and
the playground); this module adds the job's side: kept connections, weights, metrics, records.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from opd_nb.constants import REWARD_FAILURE_RATE, REWARD_METRIC_PREFIX, TRAIN_REWARD_MEAN
from opd_nb.engine.api import EngineError, RewardEndpoint
from opd_nb.engine.keepalive import KeptConnections
from opd_nb.functions import reward_call, reward_metrics
from opd_nb.functions.reward_call import CallOutcome


@dataclass
class Sample:
    """One scored trajectory: the full conversation (prompt turns + the student's turns)."""

    messages: list[dict[str, Any]]
    rollout_extra: dict[str, Any]
    group: int
    sample_id: str
    rollout_id: str


@dataclass
class RewardResult:
    totals: list[float]  # weighted sum over components per sample; NaN where a call failed
    metrics: dict[str, float] = field(
        default_factory=dict[str, float]
    )  # trace/reward_metrics/<key>, failure rate, mean
    failures: list[str] = field(default_factory=list[str])
    # per sample, for rollout records: reward_score (None if a call failed), reward_metrics, reward_status,
    # reward_error (the first component's error)
    per_sample: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])


def _groups(samples: list[Sample]) -> list[list[int]]:
    groups: dict[int, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(s.group, []).append(i)
    return list(groups.values())


def _requests(
    ep: RewardEndpoint, samples: list[Sample], job_id: str
) -> list[tuple[list[int], reward_call.Request]]:
    """The calls: (the samples it scores, its body): one per sample, or (group reward) one per prompt."""
    answers = [
        reward_call.reward_request(
            s.messages,
            s.rollout_extra,
            s.rollout_extra.get("solution"),
            job_id=job_id,
            sample_id=s.sample_id,
            rollout_id=s.rollout_id,
        )
        for s in samples
    ]
    if ep.kind == "group_reward":
        return [(idx, reward_call.group_request([answers[i] for i in idx])) for idx in _groups(samples)]
    return [([i], a) for i, a in enumerate(answers)]


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
            self._endpoints[key] = (pool, KeptConnections(ep.url, ep.reconnect_s))
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
        calls: list[list[tuple[list[int], Future[list[CallOutcome]]]]] = []
        for ep in endpoints:
            pool, conns = self._calling(ep)
            calls.append(
                [
                    (idx, pool.submit(reward_call.call, conns.post, req, ep.timeout, url=ep.url))
                    for idx, req in _requests(ep, samples, job_id)
                ]
            )
        return PendingScores(endpoints, samples, job_id, where, log, calls, started)

    def close(self) -> None:
        for pool, conns in self._endpoints.values():
            pool.shutdown()
            conns.close()
        self._endpoints.clear()


@dataclass
class PendingScores:
    """Reward calls under way (see :meth:`RewardCaller.submit`)."""

    endpoints: list[RewardEndpoint]
    samples: list[Sample]
    job_id: str
    where: str
    log: Any
    calls: list[
        list[tuple[list[int], Future[list[CallOutcome]]]]
    ]  # per endpoint, per call: (its samples, its outcomes)
    started: float
    seconds: float = 0.0  # wall time of the calls themselves, once done

    def done(self) -> bool:
        """Whether every call has its reply (or its error)."""
        return all(f.done() for per_ep in self.calls for _, f in per_ep)

    def result(self) -> RewardResult:
        """The scores; raises EngineError (on the caller's thread) if a component failed every call."""
        per_ep: list[list[CallOutcome]] = []
        for futures in self.calls:
            outcomes: list[CallOutcome] = [CallOutcome()] * len(self.samples)
            for idx, fut in futures:
                for i, outcome in zip(idx, fut.result(), strict=True):
                    outcomes[i] = outcome
            per_ep.append(outcomes)
        ends = [o.finished for outcomes in per_ep for o in outcomes]
        self.seconds = max(ends) - self.started if ends else 0.0
        return _summarize(
            self.endpoints, self.samples, per_ep, where=self.where, log=self.log, job_id=self.job_id
        )


def _summarize(
    endpoints: list[RewardEndpoint],
    samples: list[Sample],
    per_ep: list[list[CallOutcome]],
    *,
    where: str,
    log: Any,
    job_id: str,
) -> RewardResult:
    """Totals, metrics and per-sample records from every component's outcomes."""
    totals = [0.0] * len(samples)
    calls = failed = 0
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    failures: list[str] = []
    per_sample: list[dict[str, Any]] = [
        {"reward_metrics": {}, "reward_status": "success", "reward_error": None} for _ in samples
    ]
    for ep, outcomes in zip(endpoints, per_ep, strict=True):
        errors = [o.error for o in outcomes if o.error is not None]
        calls += len(samples)
        failed += len(errors)
        _check(ep, samples, errors, where=where, log=log, failures=failures)
        for i, o in enumerate(outcomes):
            score = math.nan if o.score is None else o.score
            totals[i] += (
                ep.weight * score
            )  # NaN propagates: a failed component voids the sample's task signal
            _note(per_sample[i], ep, o, several=len(endpoints) > 1)
            if log is not None:
                reward_metrics.warn_once(
                    job_id, o.metrics or None, log
                )  # not silently dropped from the curves
            for k, v in o.metrics.items():
                try:
                    sums[k] = sums.get(k, 0.0) + float(v)
                    counts[k] = counts.get(k, 0) + 1
                except (TypeError, ValueError):
                    continue
    metrics = {f"{REWARD_METRIC_PREFIX}{k}": sums[k] / counts[k] for k in sums}
    metrics[REWARD_FAILURE_RATE] = failed / max(1, calls)
    ok = [t for t in totals if not math.isnan(t)]
    if ok:
        metrics[TRAIN_REWARD_MEAN] = sum(ok) / len(ok)
    for info, t in zip(per_sample, totals, strict=True):
        info["reward_score"] = None if math.isnan(t) else t
    return RewardResult(totals=totals, metrics=metrics, failures=failures, per_sample=per_sample)


def _check(
    ep: RewardEndpoint, samples: list[Sample], errors: list[str], *, where: str, log: Any, failures: list[str]
) -> None:
    """Log a component's failed scores; raise if it failed every one (the job cannot learn from it)."""
    if not errors:
        return
    msg = f"reward function {ep.name!r} ({ep.url}): {len(errors)}/{len(samples)} scores failed in {where}; first error: {errors[0]}"
    failures.append(msg)
    if log is not None:
        log(msg, "WARNING")
    if len(errors) == len(samples):
        n_calls = len(_groups(samples)) if ep.kind == "group_reward" else len(samples)
        raise EngineError(
            f"reward function {ep.name!r} failed every call ({n_calls}) in {where}: {errors[0]}. "
            "Fix the reward code (run its tests with `opd test`) and resubmit"
        )


def _note(info: dict[str, Any], ep: RewardEndpoint, o: CallOutcome, several: bool) -> None:
    """Fold one component's outcome for one sample into its record (metrics merged; with several
    components, each component's own score under ``reward_components``)."""
    info["reward_metrics"].update(o.metrics)
    if several:
        info.setdefault("reward_components", {})[ep.name] = o.score
    if o.error is not None:
        info["reward_status"] = "failed"
        if info["reward_error"] is None:
            info["reward_error"] = f"{ep.name}: {o.error}"


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
    out: list[float] = []
    for t, g in zip(totals, groups, strict=True):
        vals = by.get(g, [])
        if math.isnan(t) or len(vals) < 2:
            out.append(0.0)
            continue
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
        out.append((t - mean) / (std + eps))
    return out
