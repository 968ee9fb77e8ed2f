"""One job client for the CLI and the notebook, blocking (:class:`JobClient`) or async (:class:`AsyncJobClient`).

Both talk to either control plane (a local `opd serve` or Bailian) and both run the same plans
from :mod:`opd_nb.client._calls`: each method only picks a plan, and the two classes differ only
in how they perform its steps (``httpx.Client`` and ``time.sleep`` vs ``httpx.AsyncClient`` and
``asyncio.sleep``). Errors are :class:`OpdError` with ``status`` (HTTP status, None when no answer
came) and ``code`` (the service's error code). The API key goes into the Authorization header
only: never logged or repr'd.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Self, TypeVar

import httpx

from opd_nb.client import _calls as calls
from opd_nb.client._calls import Plan, Reply, Send, Step
from opd_nb.client.deploy_results import ChatReply, Deployment, DeploymentList
from opd_nb.client.job_results import Checkpoint, Job, JobEvent, JobList, LogPage
from opd_nb.client.rollout_results import RolloutPage
from opd_nb.client.sse import aparse_sse, parse_sse
from opd_nb.client.target import Target, require_key, resolve_target
from opd_nb.paid.consent import is_paid, request_id, require_consent
from opd_nb.paid.start_size import deploy_line, deploy_size, deploy_warnings
from opd_nb.traces.page import TracesPage
from opd_nb.wire import http_client
from opd_nb.wire.deploy_plans import check_plan

__all__ = [
    "AsyncJobClient",
    "Checkpoint",
    "Job",
    "JobClient",
    "JobEvent",
    "JobList",
    "LogPage",
    "RolloutPage",
]

T = TypeVar("T")
CHAT_TIMEOUT_S = 600.0


def require_deploy_consent(target_kind: str, model: str, plan: str | None, capacity: int, yes: bool) -> None:
    """A deploy on Bailian costs money: without `yes` it is refused (the one consent rule,
    :mod:`opd_nb.paid.consent`), naming the model, the plan and the price per hour where known."""
    size = deploy_size(model, plan, capacity)
    require_consent(
        target_kind,
        yes,
        deploy_line(size),
        fix="rerun with --yes to deploy it (stop it later with `opd undeploy NAME --cloud`)",
        warnings=deploy_warnings(size) if is_paid(target_kind) else (),
    )


class _Base:
    """What both clients share: the target, the limits, the headers and the plans they run."""

    def __init__(self, target: Target | None = None, *, timeout: float = 30.0, retries: int = 3):
        self.target = target or resolve_target()
        self.timeout = timeout
        self.retries = retries

    def _headers(self) -> dict[str, str]:
        require_key(
            self.target
        )  # every request builds its headers here: no cloud request leaves without a key
        headers = {"Accept": "application/json", "User-Agent": "opd-nb"}
        if self.target.api_key is not None:
            headers["Authorization"] = f"Bearer {self.target.api_key.get_secret_value()}"
        return headers

    def _url(self, step: Send | calls.Call[Any]) -> str:
        if step.api == "compatible":
            return calls.compatible_base(self.target.base_url) + step.path
        return self.target.base_url + step.path

    def _timeout(self, step: Send | calls.Call[Any]) -> float:
        """Model calls generate (and may start a model first): they get longer than the others."""
        return max(self.timeout, CHAT_TIMEOUT_S) if step.api == "compatible" else self.timeout

    def _stream_call(
        self, model: str, messages: str | list[dict[str, Any]], params: dict[str, Any]
    ) -> calls.Call[ChatReply]:
        return calls.chat(model, calls.chat_body(model, messages, True, **params))

    def _plan(self, call: calls.Call[T]) -> Plan[T | None]:
        return calls.perform(call, self.target, self.retries)

    def _required(self, call: calls.Call[T]) -> Plan[T]:
        return calls.required(call, self.target, self.retries)

    def _wait_plan(
        self, job_id: str, poll_s: float, timeout_s: float | None, on_update: Callable[[Job], None] | None
    ) -> Plan[Job]:
        return calls.wait(
            job_id, self.target, self.retries, poll_s=poll_s, timeout_s=timeout_s, on_update=on_update
        )

    def _deploy_plan(
        self,
        model: str,
        capacity: int,
        suffix: str | None,
        plan: str | None,
        deploy_spec: dict[str, Any] | None,
        billing_method: str | None,
        yes: bool,
        request: str | None = None,
    ) -> Plan[Deployment]:
        """The plan's fields, then the consent, are checked here, before anything is sent (both clients).
        A paid create is sent once, named by `suffix`, else by its request id (`request`, else a new one),
        so a lost answer is found by that name (:func:`opd_nb.client._calls.deploy_once`)."""
        check_plan(plan, deploy_spec, billing_method)
        require_deploy_consent(self.target.kind, model, plan, capacity, yes)
        paid = is_paid(self.target.kind)
        if paid:
            suffix = suffix or request or request_id()
        call = calls.deploy(
            model, capacity, suffix, plan=plan, deploy_spec=deploy_spec, billing_method=billing_method
        )
        if not paid or suffix is None:
            return self._required(call)
        return calls.deploy_once(call, suffix, self.target, self.retries)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.target})"


class JobClient(_Base):
    """Blocking client (CLI, widgets' polling threads).

    It keeps one ``httpx.Client`` (its connection pool) from the first call on, so a monitor that polls
    every second reuses its connections instead of opening new ones each call; httpx's pool is
    thread-safe (a monitor's polling thread and the kernel's thread share it). Leaving a ``with
    client:`` block closes them, and the next call opens a new pool, so closing never breaks another
    holder of the client. (No public ``close``: the public methods are the API's calls, the same on
    :class:`AsyncJobClient`, whose pool lives for one call because it belongs to one event loop.)
    """

    def __init__(self, target: Target | None = None, *, timeout: float = 30.0, retries: int = 3):
        super().__init__(target, timeout=timeout, retries=retries)
        self._http: httpx.Client | None = None
        self._http_lock = threading.Lock()

    def _pool(self) -> httpx.Client:
        """The kept ``httpx.Client``, opened on first use (and again after a close)."""
        with self._http_lock:
            if self._http is None or self._http.is_closed:
                self._http = http_client.client(timeout=self.timeout)  # headers go with each request
            return self._http

    def _close_pool(self) -> None:
        """Close the kept connections (a later call opens new ones)."""
        with self._http_lock:
            http, self._http = self._http, None
        if http is not None:
            http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close_pool()

    def _run(self, plan: Plan[T]) -> T:
        reply: Reply = None
        while True:
            try:
                step = plan.send(reply)
            except StopIteration as done:
                return done.value
            reply = self._perform(self._pool(), step)  # per step: a close between steps costs nothing

    def _perform(self, http: httpx.Client, step: Step) -> Reply:
        if isinstance(step, calls.Sleep):
            time.sleep(step.seconds)
            return None
        try:
            return http.request(
                step.method,
                self._url(step),
                params=step.params,
                json=step.json,
                headers=self._headers(),  # per request, as before the pool: the target's key as it is now
                timeout=self._timeout(step),
            )
        except httpx.TransportError as exc:
            return exc

    def get(self, job_id: str) -> Job:
        return self._run(calls.read_job(job_id, self.target, self.retries))

    def list(self, page: int = 1, size: int = 20) -> JobList:
        return self._run(self._required(calls.list_jobs(page, size)))

    def logs(self, job_id: str, offset: int = 0, lines: int = 200) -> LogPage:
        return self._run(self._required(calls.job_logs(job_id, offset, lines)))

    def events(self, job_id: str) -> Iterator[JobEvent]:
        """Server-sent events until the job ends (`status` events, then `log` lines)."""
        call = calls.job_stream(job_id)
        timeout = httpx.Timeout(self.timeout, read=None)
        try:
            with http_client.stream(
                call.method, self._url(call), headers=self._headers(), timeout=timeout
            ) as r:
                if r.status_code >= 400:
                    r.read()
                    raise calls.error_for(r, call.what)
                yield from parse_sse(r.iter_lines())
        except httpx.TransportError as exc:
            raise calls.unreachable(self.target, exc) from None

    def cancel(self, job_id: str, reason: str | None = None) -> Job:
        """Cancel; ``reason`` (who and why) is recorded in the job's message and log by `opd serve`."""
        return self._run(calls.cancel(job_id, self.target, self.retries, reason))

    def delete(self, job_id: str) -> None:
        self._run(self._plan(calls.delete_job(job_id)))

    def wait(
        self,
        job_id: str,
        *,
        poll_s: float = 2.0,
        timeout_s: float | None = None,
        on_update: Callable[[Job], None] | None = None,
    ) -> Job:
        return self._run(self._wait_plan(job_id, poll_s, timeout_s, on_update))

    def metrics(self, job_id: str) -> list[dict[str, Any]] | None:
        """Per-step metrics (local control plane only; None where the API has none, e.g. the cloud)."""
        return self._run(self._plan(calls.job_metrics(job_id)))

    def checkpoints(self, job_id: str) -> list[Checkpoint] | None:
        """Saved checkpoints (local control plane only; None where the API has none)."""
        return self._run(self._plan(calls.job_checkpoints(job_id)))

    def export_checkpoint(self, job_id: str, checkpoint: str, model_name: str | None = None) -> Checkpoint:
        """Export a checkpoint (Bailian may auto-export only the best); its ``model_name`` is what to deploy."""
        return self._run(calls.export(job_id, checkpoint, model_name, self.target, self.retries))

    def rollouts(
        self, job_id: str, step: int | None = None, kind: str | None = None, limit: int | None = None
    ) -> RolloutPage | None:
        """A step's recorded samples with token log-probs (the latest step by default; `kind`: train
        or validation). Local control plane only; None where the API has none (Bailian's console
        shows trajectories)."""
        return self._run(self._plan(calls.job_rollouts(job_id, step, kind, limit)))

    def traces(
        self,
        job_id: str,
        step: int | None = None,
        kind: str | None = None,
        group: int | None = None,
        sample: int | None = None,
        limit: int | None = None,
    ) -> TracesPage | None:
        """A step's traced function calls as span trees, each tied to its rollout record (the latest step
        by default; `group`/`sample`: one record's). Local control plane only; None where the API has
        none (on Bailian the spans go to ARMS: the console's Trajectory tab)."""
        return self._run(self._plan(calls.job_traces(job_id, step, kind, group, sample, limit)))

    def models(self) -> list[dict[str, Any]] | None:
        """What the local engine can run (local control plane only; None where the API has none)."""
        return self._run(self._plan(calls.list_models()))

    # ---- deployments and the chat API (the same calls on Bailian and `opd serve`) ---------------
    def deploy(
        self,
        model: str,
        capacity: int = 1,
        suffix: str | None = None,
        *,
        plan: str | None = None,
        deploy_spec: dict[str, Any] | None = None,
        billing_method: str | None = None,
        yes: bool = False,
        request_id: str | None = None,
    ) -> Deployment:
        """Deploy `model` (PENDING at first; :meth:`wait_deployed` waits for RUNNING). Costs money on Bailian.

        `plan` (lora, ptu, mu) and the fields it needs are checked before anything is sent; on Bailian it
        needs `yes` (the consent rule, :func:`require_deploy_consent`), whichever front end calls it, and is
        sent once: `request_id` (an agent's, else a new one) names it when `suffix` does not."""
        return self._run(
            self._deploy_plan(model, capacity, suffix, plan, deploy_spec, billing_method, yes, request_id)
        )

    def deployments(self, page: int = 1, size: int = 20) -> DeploymentList:
        return self._run(self._required(calls.list_deployments(page, size)))

    def deployment(self, deployed_model: str) -> Deployment:
        return self._run(self._required(calls.get_deployment(deployed_model)))

    def find_deployment(self, suffix: str) -> Deployment | None:
        """The deployment named ``...-suffix`` (a paid create's request id), else None."""
        return self._run(calls.find_deployment(suffix, self.target, self.retries))

    def wait_deployed(
        self, deployed_model: str, *, poll_s: float = 1.0, timeout_s: float | None = 600
    ) -> Deployment:
        """Poll until the deployment is RUNNING (FAILED or a timeout: OpdError)."""
        return self._run(
            calls.wait_deployed(deployed_model, self.target, self.retries, poll_s=poll_s, timeout_s=timeout_s)
        )

    def scale(self, deployed_model: str, capacity: int) -> Deployment:
        return self._run(self._required(calls.scale_deployment(deployed_model, capacity)))

    def undeploy(self, deployed_model: str) -> Deployment:
        return self._run(self._required(calls.delete_deployment(deployed_model)))

    def chat(
        self,
        model: str,
        messages: str | list[dict[str, Any]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> ChatReply:
        """One answer from the compatible-mode chat API (a base model, or a deployed name)."""
        params = {
            "max_tokens": max_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "seed": seed,
            "tools": tools,
        }
        body = calls.chat_body(model, messages, False, **params)
        return self._run(self._required(calls.chat(model, body)))

    def chat_stream(
        self,
        model: str,
        messages: str | list[dict[str, Any]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
    ) -> Iterator[str]:
        """The answer's text as it is generated (pieces, in order)."""
        call = self._stream_call(
            model,
            messages,
            {"max_tokens": max_tokens, "temperature": temperature, "top_p": top_p, "seed": seed},
        )
        timeout = httpx.Timeout(self.timeout, read=CHAT_TIMEOUT_S)
        try:
            with http_client.stream(
                call.method, self._url(call), json=call.json, headers=self._headers(), timeout=timeout
            ) as r:
                if r.status_code >= 400:
                    r.read()
                    raise calls.error_for(r, call.what)
                for line in r.iter_lines():
                    piece = calls.stream_delta(line)
                    if piece:
                        yield piece
        except httpx.TransportError as exc:
            raise calls.unreachable(self.target, exc) from None


class AsyncJobClient(_Base):
    """The same operations for asyncio code (notebook cells with top-level await)."""

    async def _run(self, plan: Plan[T]) -> T:
        async with http_client.async_client(timeout=self.timeout, headers=self._headers()) as http:
            reply: Reply = None
            while True:
                try:
                    step = plan.send(reply)
                except StopIteration as done:
                    return done.value
                reply = await self._perform(http, step)

    async def _perform(self, http: httpx.AsyncClient, step: Step) -> Reply:
        if isinstance(step, calls.Sleep):
            await asyncio.sleep(step.seconds)
            return None
        try:
            return await http.request(
                step.method, self._url(step), params=step.params, json=step.json, timeout=self._timeout(step)
            )
        except httpx.TransportError as exc:
            return exc

    async def get(self, job_id: str) -> Job:
        return await self._run(calls.read_job(job_id, self.target, self.retries))

    async def list(self, page: int = 1, size: int = 20) -> JobList:
        return await self._run(self._required(calls.list_jobs(page, size)))

    async def logs(self, job_id: str, offset: int = 0, lines: int = 200) -> LogPage:
        return await self._run(self._required(calls.job_logs(job_id, offset, lines)))

    async def events(self, job_id: str) -> AsyncIterator[JobEvent]:
        """Server-sent events until the job ends (`status` events, then `log` lines)."""
        call = calls.job_stream(job_id)
        timeout = httpx.Timeout(self.timeout, read=None)
        try:
            async with http_client.async_client(timeout=timeout, headers=self._headers()) as http:
                async with http.stream(call.method, self._url(call)) as r:
                    if r.status_code >= 400:
                        await r.aread()
                        raise calls.error_for(r, call.what)
                    async for event in aparse_sse(r.aiter_lines()):
                        yield event
        except httpx.TransportError as exc:
            raise calls.unreachable(self.target, exc) from None

    async def cancel(self, job_id: str, reason: str | None = None) -> Job:
        return await self._run(calls.cancel(job_id, self.target, self.retries, reason))

    async def delete(self, job_id: str) -> None:
        await self._run(self._plan(calls.delete_job(job_id)))

    async def wait(
        self,
        job_id: str,
        *,
        poll_s: float = 2.0,
        timeout_s: float | None = None,
        on_update: Callable[[Job], None] | None = None,
    ) -> Job:
        return await self._run(self._wait_plan(job_id, poll_s, timeout_s, on_update))

    async def metrics(self, job_id: str) -> list[dict[str, Any]] | None:
        """Per-step metrics (local control plane only; None where the API has none, e.g. the cloud)."""
        return await self._run(self._plan(calls.job_metrics(job_id)))

    async def checkpoints(self, job_id: str) -> list[Checkpoint] | None:
        """Saved checkpoints (local control plane only; None where the API has none)."""
        return await self._run(self._plan(calls.job_checkpoints(job_id)))

    async def export_checkpoint(
        self, job_id: str, checkpoint: str, model_name: str | None = None
    ) -> Checkpoint:
        """Export a checkpoint (Bailian may auto-export only the best); its ``model_name`` is what to deploy."""
        return await self._run(calls.export(job_id, checkpoint, model_name, self.target, self.retries))

    async def rollouts(
        self, job_id: str, step: int | None = None, kind: str | None = None, limit: int | None = None
    ) -> RolloutPage | None:
        """A step's recorded samples with token log-probs (the latest step by default; `kind`: train
        or validation). Local control plane only; None where the API has none (Bailian's console
        shows trajectories)."""
        return await self._run(self._plan(calls.job_rollouts(job_id, step, kind, limit)))

    async def traces(
        self,
        job_id: str,
        step: int | None = None,
        kind: str | None = None,
        group: int | None = None,
        sample: int | None = None,
        limit: int | None = None,
    ) -> TracesPage | None:
        """A step's traced function calls as span trees (see :meth:`JobClient.traces`)."""
        return await self._run(self._plan(calls.job_traces(job_id, step, kind, group, sample, limit)))

    async def models(self) -> list[dict[str, Any]] | None:
        """What the local engine can run (local control plane only; None where the API has none)."""
        return await self._run(self._plan(calls.list_models()))

    # ---- deployments and the chat API (the same calls on Bailian and `opd serve`) ---------------
    async def deploy(
        self,
        model: str,
        capacity: int = 1,
        suffix: str | None = None,
        *,
        plan: str | None = None,
        deploy_spec: dict[str, Any] | None = None,
        billing_method: str | None = None,
        yes: bool = False,
        request_id: str | None = None,
    ) -> Deployment:
        """Deploy `model` (PENDING at first; :meth:`wait_deployed` waits for RUNNING). Costs money on Bailian.

        `plan` (lora, ptu, mu) and the fields it needs are checked before anything is sent; on Bailian it
        needs `yes` (the consent rule, :func:`require_deploy_consent`), whichever front end calls it, and is
        sent once: `request_id` (an agent's, else a new one) names it when `suffix` does not."""
        return await self._run(
            self._deploy_plan(model, capacity, suffix, plan, deploy_spec, billing_method, yes, request_id)
        )

    async def deployments(self, page: int = 1, size: int = 20) -> DeploymentList:
        return await self._run(self._required(calls.list_deployments(page, size)))

    async def deployment(self, deployed_model: str) -> Deployment:
        return await self._run(self._required(calls.get_deployment(deployed_model)))

    async def find_deployment(self, suffix: str) -> Deployment | None:
        """The deployment named ``...-suffix`` (a paid create's request id), else None."""
        return await self._run(calls.find_deployment(suffix, self.target, self.retries))

    async def wait_deployed(
        self, deployed_model: str, *, poll_s: float = 1.0, timeout_s: float | None = 600
    ) -> Deployment:
        """Poll until the deployment is RUNNING (FAILED or a timeout: OpdError)."""
        return await self._run(
            calls.wait_deployed(deployed_model, self.target, self.retries, poll_s=poll_s, timeout_s=timeout_s)
        )

    async def scale(self, deployed_model: str, capacity: int) -> Deployment:
        return await self._run(self._required(calls.scale_deployment(deployed_model, capacity)))

    async def undeploy(self, deployed_model: str) -> Deployment:
        return await self._run(self._required(calls.delete_deployment(deployed_model)))

    async def chat(
        self,
        model: str,
        messages: str | list[dict[str, Any]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> ChatReply:
        """One answer from the compatible-mode chat API (a base model, or a deployed name)."""
        params = {
            "max_tokens": max_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "seed": seed,
            "tools": tools,
        }
        body = calls.chat_body(model, messages, False, **params)
        return await self._run(self._required(calls.chat(model, body)))

    async def chat_stream(
        self,
        model: str,
        messages: str | list[dict[str, Any]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
    ) -> AsyncIterator[str]:
        """The answer's text as it is generated (pieces, in order)."""
        call = self._stream_call(
            model,
            messages,
            {"max_tokens": max_tokens, "temperature": temperature, "top_p": top_p, "seed": seed},
        )
        timeout = httpx.Timeout(self.timeout, read=CHAT_TIMEOUT_S)
        try:
            async with http_client.async_client(timeout=timeout, headers=self._headers()) as http:
                async with http.stream(call.method, self._url(call), json=call.json) as r:
                    if r.status_code >= 400:
                        await r.aread()
                        raise calls.error_for(r, call.what)
                    async for line in r.aiter_lines():
                        piece = calls.stream_delta(line)
                        if piece:
                            yield piece
        except httpx.TransportError as exc:
            raise calls.unreachable(self.target, exc) from None
