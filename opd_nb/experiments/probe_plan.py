"""What a probe will send before it sends anything: its prompts, limits, cost, budget and consent.
The record a finished probe leaves for `opd submit` is :mod:`opd_nb.paid.probe_record`.
"""

from __future__ import annotations

import random
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opd_nb.errors import OpdError
from opd_nb.experiments.probe_result import ProbeCost
from opd_nb.paid.probe_record import config_hash
from opd_nb.spec.job import DEFAULT_CONFIG, require_config_file

DEFAULT_PROMPTS = 32
DEFAULT_SAMPLES = 4
BUDGET_GRAMMAR = re.compile(r"^\s*(\d+)\s*(calls?|tokens?)?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class ProbePlan:
    """The probe's inputs, read from the workspace as a job reads them."""

    workspace: Path
    config: str  # the job YAML in the workspace it was read from (`-c/--config`)
    student: str
    teacher: str
    data: Path
    rows: list[dict[str, Any]]  # the drawn prompts, in draw order
    samples: int
    seed: int
    max_length: int
    max_tokens: int  # each answer's room: max_length - max_prompt_length
    config_hash: str
    agentic: bool

    @property
    def same_model(self) -> bool:
        """The teacher is the student's own model: its answers are the student's, sampled once."""
        return self.teacher == self.student

    def calls(self) -> int:
        return len(self.rows) * self.samples * (1 if self.same_model else 2)


def draw_rows(rows: list[dict[str, Any]], n: int, seed: int) -> list[dict[str, Any]]:
    """`n` rows drawn without replacement by `seed` (all of them, in a seeded order, when fewer)."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    return [rows[i] for i in order[:n]]


def plan_probe(
    workspace: Path, *, prompts: int, samples: int, seed: int, config: str = DEFAULT_CONFIG
) -> ProbePlan:
    """Read the workspace's job YAML `config`: its models, limits, data (validation, else training), mode."""
    from opd_nb.experiments.evaluation import data_file, read_rows, workspace_function
    from opd_nb.spec.effective import effective_job
    from opd_nb.spec.hyperparams import Written

    if prompts < 1 or samples < 1:
        raise OpdError("--prompts and --samples must be at least 1", fix="e.g. --prompts 32 --samples 4")
    where = str(require_config_file(workspace, config))
    cfg = effective_job(workspace, config=config).config
    if not cfg.teacher_model:
        raise OpdError(
            f"{config} names no teacher_model: there is nothing to probe",
            where=where,
            fix="set teacher_model: to the teacher a job would distil from",
        )
    written = Written(dict(cfg.training.hyper_parameters or {}))
    max_length, max_prompt = int(written.get("max_length")), int(written.get("max_prompt_length"))
    data = data_file(workspace, "validation", config)
    if not data.is_file():
        data = data_file(workspace, "training", config)
    if not data.is_file():
        raise OpdError(
            "no local validation or training data to draw prompts from",
            where=where,
            fix="name a local JSONL file under `datasets:` (file_name)",
        )
    return ProbePlan(
        workspace=workspace,
        config=config,
        student=str(cfg.model.name),
        teacher=str(cfg.teacher_model),
        data=data,
        rows=draw_rows(read_rows(data), prompts, seed),
        samples=samples,
        seed=seed,
        max_length=max_length,
        max_tokens=max(1, max_length - max_prompt),
        config_hash=config_hash(workspace, config),
        agentic=workspace_function(workspace, "rollout", config) is not None,
    )


def probe_cost(plan: ProbePlan, price: float | None) -> ProbeCost:
    """N x K x 2 calls (N x K when the teacher is the student's model), each at most the job's max_length
    tokens; money at `price` per million tokens."""
    if price is not None and not price > 0:
        raise OpdError(f"--price is {price}; it must be a positive number", fix="e.g. --price 2.0")
    tokens = plan.calls() * plan.max_length
    money = tokens * price / 1e6 if price is not None else None
    return ProbeCost(
        chat_calls=plan.calls(),
        tokens_max=tokens,
        price_per_million_tokens=price,
        money_max=money,
        agentic=plan.agentic,
    )


def require_probe_consent(target_kind: str, plan: ProbePlan, cost: ProbeCost, yes: bool) -> None:
    """On Bailian every call is billed per token: without `yes` nothing is sent (code needs-confirmation)."""
    from opd_nb.paid.consent import require_consent

    what = (
        f"this probe makes {cost.line()}: {len(plan.rows)} prompts x {plan.samples} samples x "
        f"{'1 model' if plan.same_model else '2 models'} ({plan.teacher}, {plan.student})"
    )
    require_consent(target_kind, yes, what, fix="rerun with --yes to make these calls (--budget caps them)")


class Budget:
    """A cap on calls or tokens: a call is sent only when its worst case fits (so the cap is never passed)."""

    def __init__(self, spec: str | None):
        self.spec = spec
        self.calls_cap: int | None = None
        self.tokens_cap: int | None = None
        if spec is not None:
            m = BUDGET_GRAMMAR.match(spec)
            if not m:
                raise OpdError(
                    f"--budget {spec!r} is not a number of calls or tokens",
                    fix="e.g. --budget 64 (calls), --budget 64calls or --budget 20000tokens",
                )
            if (m.group(2) or "calls").lower().startswith("token"):
                self.tokens_cap = int(m.group(1))
            else:
                self.calls_cap = int(m.group(1))
        self.calls = self.tokens = 0
        self.refused = False
        self._lock = threading.Lock()

    def reserve(self, worst_tokens: int) -> bool:
        """Count one call of at most `worst_tokens` tokens; False (nothing to send) when it would not fit."""
        with self._lock:
            if self.calls_cap is not None and self.calls + 1 > self.calls_cap:
                self.refused = True
                return False
            if self.tokens_cap is not None and self.tokens + worst_tokens > self.tokens_cap:
                self.refused = True
                return False
            self.calls += 1
            self.tokens += worst_tokens
            return True

    def settle(self, worst_tokens: int, used: int | None) -> None:
        """Replace a reserved call's worst case by the tokens it used (when the reply says)."""
        if used is not None:
            with self._lock:
                self.tokens += used - worst_tokens
