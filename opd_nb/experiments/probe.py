"""`opd probe WS`: will OPD pay off? The teacher's ceiling and the student's floor on the user's own reward.

Before a job is paid for, :func:`probe` draws N prompts (seeded) from the workspace's validation data
(training data when there is none), samples K answers to each from the student (``model``) and the
teacher (``teacher_model``) through the plane's chat endpoint (each model's own chat template, the
job's answer room ``max_length - max_prompt_length``, temperature 1.0 as a job's rollouts sample, the
same seed for both sides; a teacher that is the student's own model is sampled once), and scores every answer
with the workspace's reward function in the SDK's function server, as a job does (pure distillation:
``opd eval``'s exact match). An agentic workspace's answers come from its rollout function
(:mod:`.probe_rollout`). The figures and verdicts are :mod:`.probe_result` and :mod:`.probe_verdicts`.

On Bailian every call is billed per token: :func:`probe` estimates the calls and tokens and sends
nothing without ``yes``; ``budget`` caps the calls or tokens sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from opd_nb.errors import OpdError
from opd_nb.experiments.evaluation import AnswerScorer, prompt_messages, workspace_function
from opd_nb.experiments.probe_plan import (
    DEFAULT_PROMPTS,
    DEFAULT_SAMPLES,
    Budget,
    ProbePlan,
    plan_probe,
    probe_cost,
    require_probe_consent,
)
from opd_nb.experiments.probe_result import (
    SIDES,
    ProbeAnswer,
    ProbeCost,
    ProbeResult,
    Side,
    side_figures,
    teacher_beats_share,
)
from opd_nb.experiments.probe_verdicts import ProbeFacts, verdicts
from opd_nb.paid.probe_record import record_probe

TEMPERATURE = 1.0  # a job's rollouts sample at 1.0 (the engine's plan)
CONCURRENCY = 8
LOCAL_TEACHER = "local/tiny-teacher"  # what a local job's documented teacher id runs on
Progress = Callable[[int, int], None]


def chat_model(target_kind: str, model: str, side: Side, student: str) -> str:
    """The id to call for one side. Bailian serves both ids as they are. The local plane runs a job's
    teacher id on the bundled teacher and a plain cloud id called by chat on the bundled student, so a
    plain teacher id (other than the student's own) is called by the bundled teacher's name there."""
    plain = "/" not in model and not model.startswith(("opd-local", "~"))
    if target_kind != "cloud" and side == "teacher" and plain and model != student:
        return LOCAL_TEACHER
    return model


def sample_seed(seed: int, prompt: int, sample: int) -> int:
    """The seed of one sample, the same on both sides (a model probed against itself answers alike)."""
    return (seed * 1_000_003 + prompt * 1_009 + sample) % 2**31


def probe(
    workspace: str | Path,
    *,
    config: str = "config.yaml",
    client: Any = None,
    prompts: int = DEFAULT_PROMPTS,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    budget: str | None = None,
    price: float | None = None,
    yes: bool = False,
    concurrency: int = CONCURRENCY,
    progress: Progress | None = None,
) -> ProbeResult:
    """Probe the teacher against the student of the workspace's job YAML `config` on its own reward (see
    the module). `workspace` is the folder or its config file."""
    from opd_nb.spec.job import workspace_config

    folder, config = workspace_config(Path(workspace), config)
    ws = folder.resolve()
    if client is None:
        from opd_nb.client import JobClient

        client = JobClient()
    plan = plan_probe(ws, prompts=prompts, samples=samples, seed=seed, config=config)
    cost = probe_cost(plan, price)
    require_probe_consent(client.target.kind, plan, cost, yes)  # before anything is sent
    caps = Budget(budget)
    started = time.monotonic()
    scorer = AnswerScorer(ws, config)
    scorer.start()
    try:
        run = _Run(plan, client, scorer, caps)
        answers = run.all(max(1, concurrency), progress)
    finally:
        scorer.stop()
    result = _result(plan, client, scorer, cost, caps, answers)
    result.seconds = time.monotonic() - started
    record_probe(ws, plan.config_hash, _record(result))
    return result


class _Run:
    """One probe's calls: each (side, prompt, sample) answered, then scored."""

    def __init__(self, plan: ProbePlan, client: Any, scorer: AnswerScorer, budget: Budget):
        self.plan, self.client, self.scorer, self.budget = plan, client, scorer, budget
        kind = client.target.kind
        self.models = {side: chat_model(kind, self._configured(side), side, plan.student) for side in SIDES}

    def _configured(self, side: Side) -> str:
        return self.plan.teacher if side == "teacher" else self.plan.student

    def all(self, concurrency: int, progress: Progress | None) -> list[ProbeAnswer]:
        jobs: list[tuple[Side, int, int]] = [
            (side, p, k)
            for p in range(len(self.plan.rows))
            for k in range(self.plan.samples)
            for side in (("student",) if self.plan.same_model else SIDES)
        ]
        if self.plan.agentic:
            answers = self._agentic(jobs, concurrency, progress)
        else:
            answers = _pool(lambda j: self.native(*j), jobs, concurrency, progress)
        if self.plan.same_model:  # the teacher's answers are the student's own (same model, same seeds)
            answers += [a.model_copy(update={"side": "teacher"}) for a in answers]
        return answers

    def native(self, side: Side, p: int, k: int) -> ProbeAnswer:
        """One chat call and its reward (nothing sent when the budget would be passed)."""
        out = ProbeAnswer(side=side, prompt=p, sample=k)
        row, worst = self.plan.rows[p], self.plan.max_length
        if not self.budget.reserve(worst):
            out.error = "not sent: the --budget is spent"
            return out
        try:
            reply = self.client.chat(
                self.models[side],
                prompt_messages(row),
                max_tokens=self.plan.max_tokens,
                temperature=TEMPERATURE,
                seed=sample_seed(self.plan.seed, p, k),
                tools=row.get("tools"),
            )
        except OpdError as exc:
            self.budget.settle(worst, 0)
            if exc.status is None or (400 <= exc.status < 500 and exc.status != 429):
                # no plane, or a model it does not serve: every call would say the same
                raise OpdError(
                    f"cannot probe {side} {self._configured(side)}: {exc.message}",
                    fix=exc.fix or f"name a model the plane serves in {self.plan.config} (`opd check`)",
                    status=exc.status,
                    code=exc.code,
                ) from None
            out.error, out.calls = exc.message, 1
            return out
        total = reply.usage.get("total_tokens")
        self.budget.settle(worst, int(total) if isinstance(total, int) else None)
        tokens = reply.usage.get("completion_tokens")
        out.answer, out.calls = reply.content, 1
        out.tokens = int(tokens) if isinstance(tokens, int) else None
        out.truncated = reply.finish_reason == "length"
        conversation = [*prompt_messages(row), {"role": "assistant", "content": reply.content}]
        return self._score(out, row, conversation)

    def _score(
        self, out: ProbeAnswer, row: dict[str, Any], conversation: list[dict[str, Any]]
    ) -> ProbeAnswer:
        index = out.prompt * self.plan.samples + out.sample
        if self.scorer.server is not None:
            score, metrics, error = self.scorer.score_conversation(
                row, conversation, f"{out.side}-{out.sample}", index, job_id="opd-probe"
            )
        else:
            score, metrics, error = self.scorer.score(row, out.answer, out.side, index)
        out.score, out.metrics = score, dict(metrics or {})
        if error:
            out.error, out.reward_failed = error, True
        return out

    def _agentic(
        self, jobs: list[tuple[Side, int, int]], concurrency: int, progress: Progress | None
    ) -> list[ProbeAnswer]:
        from opd_nb.experiments.probe_rollout import ChatRelay
        from opd_nb.functions.server import FunctionServer

        fn = workspace_function(self.plan.workspace, "rollout", self.plan.config)
        assert fn is not None  # plan.agentic says there is one
        relay = ChatRelay(self._relay_chat, self.budget.reserve, self.budget.settle, self.plan.max_length)
        server = FunctionServer.start(fn.code_dir, "rollout", fn.classpath, env=fn.env)
        try:
            return _pool(
                lambda j: self.rollout(relay, server.url, fn.timeout, *j), jobs, concurrency, progress
            )
        finally:
            server.stop()
            relay.close()

    def _relay_chat(self, model: str, messages: list[dict[str, Any]], params: dict[str, Any]) -> Any:
        return self.client.chat(model, messages, **params)

    def rollout(self, relay: Any, url: str, timeout: float, side: Side, p: int, k: int) -> ProbeAnswer:
        """One rollout of the user's function driving `side`'s model, and its reward."""
        from opd_nb.experiments.probe_rollout import call_rollout, rollout_payload

        out = ProbeAnswer(side=side, prompt=p, sample=k)
        row = self.plan.rows[p]
        key = relay.open_rollout(self.models[side])
        sampling = {
            "temperature": TEMPERATURE,
            "top_p": 1.0,
            "max_tokens": self.plan.max_tokens,
            "seed": sample_seed(self.plan.seed, p, k),
        }
        payload = rollout_payload(
            row, relay.base_url, self.models[side], key, sampling, (str(p), f"{side}-{k}")
        )
        trajectory, error = call_rollout(url, payload, timeout)
        calls = relay.rollouts[key]
        out.calls, out.tokens, out.truncated = calls.calls, calls.tokens, calls.truncated
        if trajectory is None:
            out.error = "; ".join([*calls.errors[:1], error or "the rollout failed"])
            return out
        messages = list(trajectory["messages"])
        out.answer = next(
            (str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "assistant"), ""
        )
        return self._score(out, row, messages)


def _pool(
    one: Callable[[Any], ProbeAnswer], jobs: list[Any], concurrency: int, progress: Progress | None
) -> list[ProbeAnswer]:
    """Run `one` over `jobs` on a thread pool; answers in the jobs' order."""
    done = 0
    out: list[ProbeAnswer | None] = [None] * len(jobs)
    if progress is not None:
        progress(0, len(jobs))
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="opd-probe") as pool:
        futures = {pool.submit(one, j): i for i, j in enumerate(jobs)}
        try:
            for fut in as_completed(futures):
                out[futures[fut]] = fut.result()
                done += 1
                if progress is not None:
                    progress(done, len(jobs))
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise
    return [a for a in out if a is not None]


def _job_estimate(plan: ProbePlan) -> str | None:
    """`opd estimate`'s line for the job this workspace would start (None where it cannot size it)."""
    from opd_nb.paid.estimate import estimate

    try:
        est = estimate(plan.workspace, config=plan.config)
    except OpdError:
        return None
    money = f"; {est.money_per_hour:,.2f} per billed hour" if est.money_per_hour is not None else ""
    return est.start_line() + money


def _result(
    plan: ProbePlan,
    client: Any,
    scorer: AnswerScorer,
    cost: ProbeCost,
    budget: Budget,
    answers: list[ProbeAnswer],
) -> ProbeResult:
    teacher = side_figures(plan.teacher, [a for a in answers if a.side == "teacher"])
    student = side_figures(plan.student, [a for a in answers if a.side == "student"])
    beats = teacher_beats_share(answers)
    estimate_line = _job_estimate(plan)
    facts = ProbeFacts(teacher, student, beats, answers, scorer.name, estimate_line, plan.max_tokens)
    return ProbeResult(
        workspace=str(plan.workspace),
        target=f"{client.target.kind} {client.target.base_url}",
        config_hash=plan.config_hash,
        config=plan.config,
        mode="agentic" if plan.agentic else "native",
        scorer=scorer.name,
        data=str(plan.data),
        prompts=len(plan.rows),
        samples=plan.samples,
        seed=plan.seed,
        max_tokens=plan.max_tokens,
        temperature=TEMPERATURE,
        teacher=teacher,
        student=student,
        teacher_beats_share=beats,
        verdicts=verdicts(facts),
        cost=cost,
        calls_sent=budget.calls,
        tokens_used=budget.tokens,
        budget=budget.spec,
        stopped_by_budget=budget.refused,
        job_estimate=estimate_line,
        answers=answers,
    )


def _record(result: ProbeResult) -> dict[str, Any]:
    return {
        "probed": True,
        "target": result.target,
        "verdicts": result.verdict_codes(),
        "teacher_mean": result.teacher.mean,
        "student_mean": result.student.mean,
        "prompts": result.prompts,
        "samples": result.samples,
    }
