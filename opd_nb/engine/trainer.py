"""The local OPD engine: what Bailian does to an OPD job, on local Hugging Face models.

One step: take ``batch_size`` prompts and get ``n_rollouts`` rollouts each from the job's
:class:`~opd_nb.engine.rollout_source.RolloutSource`: the student samples them itself
(:mod:`opd_nb.engine.native`; one batched decode loop, KV cache: :mod:`opd_nb.engine.sampling`) or,
in agentic mode, the user's rollout function drives the student through a local OpenAI-compatible
endpoint (:mod:`opd_nb.engine.agentic`); the loop never asks which. Score every student token with
the teacher (one no-grad forward per ``opd_teacher_max_num_batched_tokens`` budget, heads only on
the response window: :mod:`opd_nb.engine.scoring`); optionally score each trajectory with the reward
functions; then make ``ceil(batch_size x n_rollouts / ppo_mini_batch_size)`` optimizer updates
(:mod:`opd_nb.engine.updates`).

Estimators (:mod:`opd_nb.engine.estimators`, picked by name from its registry): ``pg_opd``
(default, the cloud's): per-token advantage -(log pi_s - log pi_t) on the sampled tokens, discount
0, GSPO-token clipped policy loss. ``gkd`` (local): exact reverse KL over the full vocabulary,
computed in chunks. A task reward adds a group-normalised advantage. The local meaning of the
cloud's hyper-parameters is in :mod:`opd_nb.engine.hparams`.

Each step also records a fair sample of its rollouts, and each evaluation
(:mod:`opd_nb.engine.native.evaluator`) every validation answer, with per-token student/teacher log-probs
taken from the tensors the step already has (:mod:`opd_nb.engine.rollouts`), and reports
``actor/entropy``, ``trace/distillation/teacher_kl`` and, with a reward,
``trace/reward/zero_variance_groups``. Checkpoints, resuming and the final model:
:mod:`opd_nb.engine.checkpoints`.

Speed: Llama-family models (Qwen3, Qwen2, Llama) run through :mod:`opd_nb.engine.lean`, the same
function with fused projections and a preallocated KV cache; others through ``transformers``. The
prompts' shared prefix runs once (:mod:`opd_nb.engine.batch`), and the process keeps freed memory
for reuse (:mod:`opd_nb.engine.allocator`).

This module: :func:`run` (the engine's entry point) and the :class:`Trainer` that builds the parts
(:class:`~opd_nb.engine.models.Models`, a :class:`~opd_nb.engine.samplers.Sampler`, the scorers,
the :class:`~opd_nb.engine.updates.Updater`, :class:`~opd_nb.engine.checkpoints.Checkpoints`, the
rollout source) and runs the loop; :func:`rollout_source` is the one place the mode is chosen.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opd_nb.constants import (
    EPOCH,
    GEN_SECONDS,
    LEARNING_RATE,
    LOSS,
    RECORD_SECONDS,
    RESPONSE_LENGTH,
    REWARD_MEAN,
    REWARD_SECONDS,
    STEP_SECONDS,
    TEACHER_SECONDS,
    TOKENS_PER_S,
    TRUNCATED_FRACTION,
    UPDATE_SECONDS,
    VALID_TOKEN_RATE,
    VALIDATION_ACCURACY,
)
from opd_nb.engine import hparams as hp_mod
from opd_nb.engine.api import METRICS_FILE, EngineError, EngineEvents, EngineJob, EngineResult
from opd_nb.engine.checkpoints import STATE_FILE
from opd_nb.engine.rollout_source import RolloutParts, RolloutSource
from opd_nb.engine.scoring import TokenScores
from opd_nb.spec.training_plan import evaluates_after
from opd_nb.traces import ids as trace_ids

if TYPE_CHECKING:
    from opd_nb.engine.batch import SeqBatch
    from opd_nb.engine.data import Row

__all__ = ["METRICS_FILE", "STATE_FILE", "ListEvents", "TokenScores", "Trainer", "rollout_source", "run"]


class ListEvents:
    """An :class:`EngineEvents` that records everything (tests, notebooks, the bench)."""

    def __init__(self, echo: bool = False):
        self.echo = echo
        self.logs: list[tuple[str, str]] = []
        self.rows: list[dict[str, Any]] = []
        self.progress_calls: list[tuple[int, int, int, int, float | None]] = []
        self.checkpoints: list[tuple[int, str, dict[str, float]]] = []

    def log(self, message: str, level: str = "INFO") -> None:
        self.logs.append((level, message))
        if self.echo:
            print(f"[{level}] {message}", flush=True)

    def progress(self, step: int, total_steps: int, epoch: int, n_epochs: int, eta_s: float | None) -> None:
        self.progress_calls.append((step, total_steps, epoch, n_epochs, eta_s))

    def metrics(self, row: dict[str, Any]) -> None:
        self.rows.append(dict(row))

    def checkpoint(self, step: int, path: str, metrics: dict[str, float]) -> None:
        self.checkpoints.append((step, path, dict(metrics)))

    def series(self, name: str) -> list[tuple[int, float]]:
        """(step, value) for every row that has metric `name`."""
        return [(r["step"], r[name]) for r in self.rows if name in r]

    @property
    def text(self) -> str:
        return "\n".join(m for _, m in self.logs)


def _fmt_eta(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(s)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _resolve_plan(job: EngineJob, n_student: int, log: Callable[..., None]) -> hp_mod.Plan:
    """The job's hyper-parameters resolved for this student, told to the user."""
    p = hp_mod.resolve(
        job.hyper_parameters,
        student_params=n_student,
        estimator=job.algorithm,
        local_learning_rate=job.local_learning_rate,
    )
    log(f"learning rate: cloud {p.cloud_learning_rate:g} -> local {p.learning_rate:g} ({p.lr_rule})")
    log(
        f"estimator {p.estimator}, policy loss {p.policy_loss}; batch_size={p.hp.batch_size} prompts x "
        f"n_rollouts={p.hp.n_rollouts} per step, ppo_mini_batch_size={p.hp.ppo_mini_batch_size} sequences per "
        f"update ({p.updates_per_step} update(s) per step); teacher max_model_len={p.teacher_max_model_len}, "
        f"max_num_batched_tokens={p.teacher_max_num_batched_tokens}"
    )
    return p


def rollout_source(parts: RolloutParts, n_rollouts: int) -> RolloutSource:
    """The job's rollouts: the user's rollout function when it registered one (agentic), else native."""
    rollout = parts.job.rollout
    if rollout is not None:
        from opd_nb.engine.agentic.source import Agentic

        return Agentic(parts, rollout)
    from opd_nb.engine.native.source import NativeRollouts

    return NativeRollouts(parts, n_rollouts)


def _step_line(row: dict[str, Any], total: int, epoch: int, n_epochs: int, eta: float) -> str:
    """The log line of a step's metrics `row`."""
    extra = "".join(
        f", {k.split('/')[-1]}={row[k]:.3f}" for k in (VALIDATION_ACCURACY, REWARD_MEAN) if k in row
    )
    return (
        f"step {row['step']}/{total} (epoch {epoch}/{n_epochs}): "
        f"loss={row[LOSS]:.4f}, valid_token_rate={row[VALID_TOKEN_RATE]:.3f}{extra}, "
        f"{row[STEP_SECONDS] * 1000:.0f} ms/step, ETA {_fmt_eta(eta)}"
    )


def _step_metrics(metrics: dict[str, Any], b: SeqBatch, reward_seconds: float, t: tuple[float, ...]) -> None:
    """A step's response lengths, stage times (`t`: its six time stamps) and throughput."""
    t0, t1, t2, t3, t4, t5 = t
    metrics[RESPONSE_LENGTH] = float(b.target_mask.sum(-1).float().mean())
    if b.truncated is not None:
        metrics[TRUNCATED_FRACTION] = float(b.truncated.float().mean())
    metrics[GEN_SECONDS] = t1 - t0
    metrics[TEACHER_SECONDS] = t2 - t1
    metrics[REWARD_SECONDS] = reward_seconds  # beside the teacher
    metrics[UPDATE_SECONDS] = t4 - t3
    metrics[RECORD_SECONDS] = t5 - t4
    metrics[STEP_SECONDS] = t5 - t0
    metrics[TOKENS_PER_S] = float(b.attention_mask.sum()) / max(1e-9, t5 - t0)


class Trainer:
    """One job run: builds the parts, then runs the loop over them (whatever the rollouts' source)."""

    def __init__(self, job: EngineJob, events: EngineEvents, should_stop: Callable[[], bool]):
        import torch

        from opd_nb.engine import allocator
        from opd_nb.engine.checkpoints import Checkpoints
        from opd_nb.engine.data import JobData
        from opd_nb.engine.estimators import make_estimator
        from opd_nb.engine.models import Models
        from opd_nb.engine.rollouts import Recorder
        from opd_nb.engine.samplers import make_sampler
        from opd_nb.engine.scoring import StudentScorer, TeacherScorer
        from opd_nb.engine.updates import Updater

        allocator.keep_freed_memory()
        self.job, self.events, self.should_stop = job, events, should_stop
        self.out = Path(job.output_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.models = m = Models(job, self.log)
        self.tok, self.device = m.tok, m.device
        self.plan = p = _resolve_plan(job, m.n_student, self.log)
        self.data = JobData(job, m.tok, p, self.log)
        estimator = make_estimator(p, m.student, m.teacher)
        self.student_scorer = StudentScorer(m.student, m.s_lean, p.hp.ppo_mini_batch_size)
        self.teacher_scorer = TeacherScorer(
            m.teacher, m.t_lean, p.teacher_max_num_batched_tokens, estimator.teacher_logprobs
        )
        self.updater = Updater(self.student_scorer, estimator, p, self.data.total_steps)
        self.step = 0
        self.metrics_tail: dict[str, float] = {}
        self._t_start, self._steps_here = 0.0, 0  # the loop's start and steps so far (ETA)
        self.max_total = m.max_total(p.hp.max_length)
        self.sampler = make_sampler(job.sampler, m, self.max_total)
        self.checkpoints = Checkpoints(self.out, job, p, m, self.updater, self.data, events, self.log)
        random.seed(job.seed)
        torch.manual_seed(job.seed)  # pyright: ignore[reportUnknownMemberType] - torch's stub leaves its Generator partly untyped
        self.resumed = self.checkpoints.load(Path(job.resume_from)) if job.resume_from else None
        if self.resumed is not None:
            self.step, self.metrics_tail = self.resumed.step, self.resumed.metrics_tail
        self.recorder = Recorder(self.out, m.tok, self.log)
        if self.recorder.enabled:
            self.recorder.start(self.step)
        parts = RolloutParts(
            job, m.tok, self.max_total, self.device, self.sampler, self.score_tokens, self.log
        )
        self.source = rollout_source(parts, p.hp.n_rollouts)

    def log(self, message: str, level: str = "INFO") -> None:
        self.events.log(message, level)

    def score_tokens(self, b: SeqBatch) -> TokenScores:
        """No-grad student and teacher log-probs of a batch's tokens (validation records)."""
        from opd_nb.engine.scoring import score_tokens

        return score_tokens(self.student_scorer, self.teacher_scorer, b, self.plan.teacher_max_model_len)

    # ---- one step -------------------------------------------------------------------------------
    def train_step(self, rows: list[Row], epoch: int) -> dict[str, Any]:
        """Rollouts, teacher scores (beside the reward functions), updates and records of one step."""
        t0 = time.perf_counter()
        where = trace_ids.where("train", self.step + 1)  # also the calls' sample ids (their spans' link)
        got = self.source.collect(rows, self.plan.hp.n_rollouts, self.plan.temperature, where)
        metrics: dict[str, Any] = dict(got.metrics)
        b = got.batch
        t1 = time.perf_counter()
        window = b.window
        t_vals = self.teacher_scorer.score(b, window)  # while the reward functions score the same rollouts
        t2 = time.perf_counter()
        adv_task = got.task_advantage(metrics)
        t3 = time.perf_counter()
        metrics[LEARNING_RATE] = self.updater.lr()
        scores = self.updater.update(b, t_vals, adv_task, window, metrics, self.step)
        self.updater.sched.step()
        t4 = time.perf_counter()
        if self.recorder.enabled:
            step = self.step + 1
            self.recorder.write("train", step, got.records(scores, self.recorder.per_step, step))
        t5 = time.perf_counter()
        _step_metrics(metrics, b, got.reward_seconds, (t0, t1, t2, t3, t4, t5))
        return metrics

    def evaluate(self) -> dict[str, float]:
        """Validation metrics now (greedy answers, through the rollout function in agentic jobs)."""
        if not self.data.validation:
            return {}
        return self.source.evaluate(self.data.validation, self.step, self.recorder)

    # ---- the loop -------------------------------------------------------------------------------
    def emit(self, row: dict[str, Any]) -> None:
        """One metrics row to ``metrics.jsonl`` and the events (numbers as floats, the step an int)."""
        clean = {
            k: (float(v) if isinstance(v, float | int) and k not in ("step",) else v) for k, v in row.items()
        }
        with (self.out / METRICS_FILE).open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(clean) + "\n")
        self.events.metrics(clean)

    def run(self) -> EngineResult:
        """The loop; the recorder and the rollout source (its endpoint, its callers) closed after."""
        try:
            return self._loop()
        finally:
            self.recorder.close()
            self.source.close()

    def _loop(self) -> EngineResult:
        p, data = self.plan, self.data
        start_epoch, start_cursor = (self.resumed.epoch, self.resumed.cursor) if self.resumed else (0, 0)
        if self.step == 0 and data.validation:  # evaluates_after(0, ...): the job's first evaluation
            ev = self.evaluate()
            if ev:
                self.emit({"step": 0, EPOCH: 0.0, **ev})
                self.log("before training: " + ", ".join(f"{k}={v:.4f}" for k, v in ev.items()))
        self.log(
            f"training {data.total_steps} steps ({p.hp.n_epochs} epoch(s) x {data.steps_per_epoch} steps over "
            f"{len(data.train)} prompts)"
        )
        self._t_start, self._steps_here = time.perf_counter(), 0
        for epoch in range(start_epoch, p.hp.n_epochs):
            if not self._epoch(epoch, start_cursor if epoch == start_epoch else 0):
                break
        final = self.checkpoints.publish()
        self.log(f"published the final model to {final} after {self.step} step(s)")
        return EngineResult(
            final_checkpoint=final,
            steps=self.step,
            epochs=p.hp.n_epochs,
            metrics_tail=self.metrics_tail,
        )

    def _epoch(self, epoch: int, cursor: int) -> bool:
        """Train through `epoch` from data position `cursor`; False when a stop was requested."""
        p, data = self.plan, self.data
        order = data.epoch_order(epoch)
        while cursor < len(order):
            if self.should_stop():
                self.log(f"stop requested; stopping after step {self.step}/{data.total_steps}", "WARNING")
                return False
            rows = [data.train[i] for i in order[cursor : cursor + p.hp.batch_size]]
            cursor += len(rows)
            metrics = self.train_step(rows, epoch)
            self.step += 1
            self._steps_here += 1
            if evaluates_after(self.step, data.total_steps, p.hp.eval_steps):
                metrics.update(self.evaluate())
            row = {"step": self.step, EPOCH: round(self.step / data.steps_per_epoch, 4), **metrics}
            self.emit(row)
            self.metrics_tail = {k: float(v) for k, v in row.items() if isinstance(v, int | float)}
            self._report(row, epoch)
            self._save(epoch, cursor, len(order))
        return True

    def _report(self, row: dict[str, Any], epoch: int) -> None:
        """Progress and ETA every step; a log line at the first, last and every 20th of the steps."""
        total, n_epochs = self.data.total_steps, self.plan.hp.n_epochs
        eta = (time.perf_counter() - self._t_start) / self._steps_here * (total - self.step)
        self.events.progress(self.step, total, epoch + 1, n_epochs, eta)
        if self.step % max(1, total // 20) == 0 or self.step in (1, total):
            self.log(_step_line(row, total, epoch + 1, n_epochs, eta))

    def _save(self, epoch: int, cursor: int, n_rows: int) -> None:
        """A checkpoint when the save strategy says so (resuming at the next row). Which one is best is
        not the engine's to say: `health.rules.pick_checkpoint` is the one rule, over the metric rows."""
        end = cursor >= n_rows
        if not self.checkpoints.due(self.step, end):
            return
        self.checkpoints.save(self.step, epoch + 1 if end else epoch, 0 if end else cursor, self.metrics_tail)


def run(
    job: EngineJob, events: EngineEvents, should_stop: Callable[[], bool] = lambda: False
) -> EngineResult:
    """Run one job to completion; raises EngineError (plain words) for job-level failures."""
    try:
        return Trainer(job, events, should_stop).run()
    except EngineError as exc:
        events.log(f"job failed: {exc}", "ERROR")
        raise
