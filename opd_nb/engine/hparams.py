"""Bailian hyper-parameters -> what the local engine does with them (the *local meaning*).

The same ``config.yaml`` goes to the cloud and to the local engine, so nothing local is written
into ``hyper_parameters``. Every key keeps Bailian's meaning, with these explicit exceptions,
each logged at the start of a job:

* ``learning_rate``. A cloud rate of 1e-6 moves nothing on a ~0.1M-parameter stand-in within a
  rehearsal's few hundred steps. Rule: when the student has fewer than ``TINY_PARAMS`` (50M)
  parameters, ``local_lr = clamp(cloud_lr x 1000, 1e-4, 3e-3)`` (1e-6 -> 1e-3, the rate measured
  to distil the bundled pair in ~300 steps); larger students train at the cloud rate unchanged.
  Overrides, in order: ``EngineJob.local_learning_rate``, then the ``OPD_LOCAL_LR`` env variable.
* ``algorithm`` (gspo | grpo) picks the policy loss of the PG terms as on the cloud. The
  *estimator* is ``pg_opd`` (the cloud's) unless ``EngineJob.algorithm`` (or an ``algorithm``
  value naming an estimator of :data:`opd_nb.engine.estimators.REGISTRY`) asks for another, such
  as the local-only full-vocabulary ``gkd``.
* ``opd_teacher_max_model_len``: a response token at absolute position >= it (0-based, prompt
  included) gets no teacher score, exactly as a truncating teacher would; it is not trained on
  and lowers ``trace/distillation/valid_token_rate``.
* ``opd_teacher_max_num_batched_tokens``: the token budget of one teacher forward (rows are
  packed up to it). ``opd_teacher_gpu_memory_utilization`` only has meaning on a GPU teacher
  and is ignored.
* Batch semantics as on Bailian: ``batch_size`` prompts per step, ``n_rollouts`` samples per
  prompt, ``ppo_mini_batch_size`` sequences per optimizer update (so each step makes
  ``ceil(batch_size x n_rollouts / ppo_mini_batch_size)`` updates).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel

from opd_nb import settings
from opd_nb.constants import CLOUD_ESTIMATOR
from opd_nb.engine.api import EngineError
from opd_nb.engine.estimators import REGISTRY, unknown_estimator
from opd_nb.spec.hyperparams import PARAMS_BY_NAME
from opd_nb.spec.training_plan import HyperParameterError, TrainingPlan

TINY_PARAMS = 50_000_000
LR_SCALE = 1000.0
LR_MIN, LR_MAX = 1e-4, 3e-3
LR_ENV = settings.LOCAL_LR.name  # a local learning rate for every job of this process (after the job's own)

# The keys the local engine reads; their types, ranges, choices and defaults are the spec's table.
ENGINE_KEYS = (
    "algorithm",
    "learning_rate",
    "lr_scheduler_type",
    "lr_warmup_steps",
    "n_epochs",
    "batch_size",
    "n_rollouts",
    "ppo_mini_batch_size",
    "max_length",
    "max_prompt_length",
    "eval_steps",
    "save_steps",
    "save_strategy",
    "save_total_limit",
    "opd_teacher_max_model_len",
    "opd_teacher_max_num_batched_tokens",
)
POLICY_LOSSES = ("gspo", "grpo")


def cloud_defaults() -> dict[str, Any]:
    """The cloud's defaults (the spec's table) for the keys a job leaves out."""
    return {name: PARAMS_BY_NAME[name].default for name in ENGINE_KEYS}


class Plan(BaseModel):
    """The resolved local training plan of one job."""

    estimator: str  # a name in opd_nb.engine.estimators.REGISTRY
    policy_loss: Literal["gspo", "grpo"]
    cloud_learning_rate: float
    learning_rate: float
    lr_rule: str
    lr_scheduler_type: Literal["cosine", "linear", "constant", "constant_with_warmup"]
    lr_warmup_steps: int
    n_epochs: int
    batch_size: int
    n_rollouts: int
    ppo_mini_batch_size: int
    max_length: int
    max_prompt_length: int
    eval_steps: int
    save_steps: int
    save_strategy: Literal["steps", "epoch", "no"]
    save_total_limit: int | None
    teacher_max_model_len: int
    teacher_max_num_batched_tokens: int
    temperature: float = 1.0
    clip_low: float = 3e-4
    clip_high: float = 4e-4
    kl_clamp: float = 10.0

    @property
    def updates_per_step(self) -> int:
        return math.ceil(self.batch_size * self.n_rollouts / self.ppo_mini_batch_size)


def _estimator(algorithm: str, estimator: str | None) -> tuple[str, str]:
    """(estimator, policy loss): `algorithm` picks the policy loss (or names the estimator, local only)."""
    policy_loss = algorithm if algorithm in POLICY_LOSSES else "gspo"
    est = estimator or (algorithm if algorithm in REGISTRY else CLOUD_ESTIMATOR)
    if est not in REGISTRY:
        raise unknown_estimator(est)
    return est, policy_loss


def local_learning_rate_rule(
    cloud_lr: float, student_params: int, local_learning_rate: float | None
) -> tuple[float, str]:
    """(local learning rate, the rule that gave it): the job's override, ``OPD_LOCAL_LR``, the tiny-student
    mapping, or the cloud rate unchanged (see the module docstring)."""
    env_lr = settings.LOCAL_LR.raw()
    if local_learning_rate is not None:
        return (
            float(local_learning_rate),
            f"local override (EngineJob.local_learning_rate) {local_learning_rate:g}",
        )
    if env_lr:
        try:
            lr = float(env_lr)
        except ValueError:
            raise EngineError(
                f"{LR_ENV} = {env_lr!r} is not a number; set it to a learning rate such as 1e-3, or unset it"
            ) from None
        return lr, f"local override ({LR_ENV}) {lr:g}"
    if student_params < TINY_PARAMS:
        lr = min(LR_MAX, max(LR_MIN, cloud_lr * LR_SCALE))
        return lr, (
            f"tiny stand-in student ({student_params:,} params < {TINY_PARAMS:,}): local_lr = "
            f"clamp(cloud_lr x {LR_SCALE:g}, {LR_MIN:g}, {LR_MAX:g}) = {lr:g}"
        )
    return cloud_lr, f"student has {student_params:,} params: cloud learning rate used unchanged"


def resolve(
    hp: TrainingPlan | Mapping[str, Any] | None,
    *,
    student_params: int,
    estimator: str | None = None,
    local_learning_rate: float | None = None,
) -> Plan:
    """The local plan of a job's typed hyper-parameters (already checked against the spec's table and the
    rules across keys where the job was read, :class:`TrainingPlan`): the local-meaning rules above. A
    mapping is read into a :class:`TrainingPlan` first (a caller without one), its problems an EngineError."""
    if not isinstance(hp, TrainingPlan):
        try:
            hp = TrainingPlan.from_submitted(hp)
        except HyperParameterError as exc:
            raise EngineError(str(exc)) from None
    est, policy_loss = _estimator(hp.algorithm, estimator)
    lr, rule = local_learning_rate_rule(hp.learning_rate, student_params, local_learning_rate)
    local: dict[str, Any] = {
        "estimator": est,
        "policy_loss": policy_loss,
        "cloud_learning_rate": hp.learning_rate,
        "learning_rate": lr,
        "lr_rule": rule,
        "teacher_max_model_len": hp.opd_teacher_max_model_len,
        "teacher_max_num_batched_tokens": hp.opd_teacher_max_num_batched_tokens,
    }
    # every other plan field is the hyper-parameter of the same name
    shared = {
        k: getattr(hp, k) for k in Plan.model_fields if k in TrainingPlan.model_fields and k not in local
    }
    return Plan(**shared, **local)


def lr_lambda(plan: Plan, total_steps: int) -> Callable[[int], float]:
    """HF-style schedule multiplier: linear warm-up, then cosine/linear decay to 0, or constant."""
    warm = plan.lr_warmup_steps

    def f(step: int) -> float:
        if warm and step < warm:
            return (step + 1) / (warm + 1)
        if plan.lr_scheduler_type in ("constant", "constant_with_warmup"):
            return 1.0
        span = max(1, total_steps - warm)
        prog = min(1.0, (step - warm) / span)
        if plan.lr_scheduler_type == "linear":
            return max(0.0, 1.0 - prog)
        return 0.5 * (1.0 + math.cos(math.pi * prog))

    return f
