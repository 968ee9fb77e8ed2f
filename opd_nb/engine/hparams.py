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
from typing import TYPE_CHECKING, Any, Self

from pydantic import BaseModel

from opd_nb import settings
from opd_nb.constants import CLOUD_ESTIMATOR
from opd_nb.engine.api import EngineError
from opd_nb.engine.estimators import REGISTRY, unknown_estimator
from opd_nb.spec.hyperparams import POLICY_LOSSES, PolicyLoss
from opd_nb.spec.training_plan import HyperParameterError, TrainingPlan

TINY_PARAMS = 50_000_000
LR_SCALE = 1000.0
LR_MIN, LR_MAX = 1e-4, 3e-3
LR_ENV = settings.LOCAL_LR.name  # a local learning rate for every job of this process (after the job's own)


class Plan(BaseModel):
    """The resolved local training plan of one job: its :class:`TrainingPlan` whole, plus what only the
    local engine decides (the estimator, the local learning rate, the loss constants)."""

    hp: TrainingPlan  # the job's hyper-parameters as submitted (learning_rate: the cloud's rate)
    estimator: str  # a name in opd_nb.engine.estimators.REGISTRY
    policy_loss: PolicyLoss
    learning_rate: float  # the local rate (see the module docstring)
    lr_rule: str
    temperature: float = 1.0
    clip_low: float = 3e-4
    clip_high: float = 4e-4
    kl_clamp: float = 10.0

    @property
    def cloud_learning_rate(self) -> float:
        return self.hp.learning_rate

    @property
    def teacher_max_model_len(self) -> int:
        return self.hp.opd_teacher_max_model_len

    @property
    def teacher_max_num_batched_tokens(self) -> int:
        return self.hp.opd_teacher_max_num_batched_tokens

    @property
    def updates_per_step(self) -> int:
        return self.hp.updates_per_step

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy; an update naming a hyper-parameter (``ppo_mini_batch_size=2``) changes the held plan."""
        update = update or {}
        mine = {
            k: v for k, v in update.items() if k in Plan.model_fields or k not in TrainingPlan.model_fields
        }
        held = {k: v for k, v in update.items() if k not in mine}
        if held:
            mine["hp"] = self.hp.model_copy(update=held)
        return super().model_copy(update=mine, deep=deep)

    if not TYPE_CHECKING:  # typed code reads ``plan.hp.batch_size``; callers without types may drop ``hp``

        def __getattr__(self, name: str) -> Any:
            held = self.__dict__.get("hp")
            if held is not None and name in TrainingPlan.model_fields:  # a Plan field is found before this
                return getattr(held, name)
            return super().__getattr__(name)


_POLICY_LOSS: dict[str, PolicyLoss] = {loss: loss for loss in POLICY_LOSSES}


def _estimator(algorithm: str, estimator: str | None) -> tuple[str, PolicyLoss]:
    """(estimator, policy loss): `algorithm` picks the policy loss (or names the estimator, local only)."""
    policy_loss = _POLICY_LOSS.get(algorithm, "gspo")
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
    return Plan(hp=hp, estimator=est, policy_loss=policy_loss, learning_rate=lr, lr_rule=rule)


def lr_lambda(plan: Plan, total_steps: int) -> Callable[[int], float]:
    """HF-style schedule multiplier: linear warm-up, then cosine/linear decay to 0, or constant."""
    warm, schedule = plan.hp.lr_warmup_steps, plan.hp.lr_scheduler_type

    def f(step: int) -> float:
        if warm and step < warm:
            return (step + 1) / (warm + 1)
        if schedule in ("constant", "constant_with_warmup"):
            return 1.0
        span = max(1, total_steps - warm)
        prog = min(1.0, (step - warm) / span)
        if schedule == "linear":
            return max(0.0, 1.0 - prog)
        return 0.5 * (1.0 + math.cos(math.pi * prog))

    return f
