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
from typing import Any, Literal

from pydantic import BaseModel

from opd_nb import settings
from opd_nb.constants import CLOUD_ESTIMATOR
from opd_nb.engine.api import EngineError
from opd_nb.engine.estimators import REGISTRY, unknown_estimator
from opd_nb.spec.hyperparams import PARAMS_BY_NAME, value_problem

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
_KINDS: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool}


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


def _coerce(value: Any, kind: type) -> Any:
    """`value` as the engine reads it: YAML's "1e-6" is 1e-6 and 2.0 is 2, as on the cloud. Raises ValueError."""
    if kind is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(value)
        return int(value)
    if kind is float:
        return float(value)
    return kind(value)


def _read(d: dict[str, Any]) -> dict[str, Any]:
    """Every engine key of `d` coerced and checked against the spec's table (all problems in one error)."""
    out: dict[str, Any] = {}
    problems: list[str] = []
    for name in ENGINE_KEYS:
        raw = d[name]
        if (
            name == "algorithm" and isinstance(raw, str) and raw in REGISTRY
        ):  # local: it may name the estimator
            out[name] = raw
            continue
        try:
            out[name] = _coerce(raw, _KINDS[PARAMS_BY_NAME[name].type])
            problem = value_problem(name, out[name])
        except (TypeError, ValueError):
            problem = value_problem(name, raw) or f"expected a {PARAMS_BY_NAME[name].type}"
        if problem:
            problems.append(f"hyper_parameters.{name} = {raw!r}: {problem}")
    if problems:
        raise EngineError("; ".join(problems) + "; fix it in config.yaml")
    return out


def _check_batch_and_lengths(v: dict[str, Any], given: dict[str, Any]) -> None:
    """The rules across keys: a step's sequences fill its updates, a prompt leaves room for a response.

    Only max_length given: prompts may use all but 1 token of it (so a small max_length alone is valid).
    """
    total = v["batch_size"] * v["n_rollouts"]
    if v["ppo_mini_batch_size"] > total:
        raise EngineError(
            f"hyper_parameters.ppo_mini_batch_size = {v['ppo_mini_batch_size']} exceeds batch_size x n_rollouts = "
            f"{v['batch_size']} x {v['n_rollouts']} = {total} sequences per step (Bailian requires <=); lower it"
        )
    if v["max_prompt_length"] >= v["max_length"] and "max_prompt_length" not in given:
        v["max_prompt_length"] = v["max_length"] - 1
    if v["max_prompt_length"] >= v["max_length"]:
        raise EngineError(
            f"hyper_parameters.max_prompt_length = {v['max_prompt_length']} leaves no room for a response within "
            f"max_length = {v['max_length']}; raise max_length or lower max_prompt_length"
        )


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
    hp: dict[str, Any],
    *,
    student_params: int,
    estimator: str | None = None,
    local_learning_rate: float | None = None,
) -> Plan:
    """Validate the job's hyper-parameters (the spec's table, then the rules across keys) and apply the
    local-meaning rules above."""
    given = {k: v for k, v in (hp or {}).items() if v is not None}
    v = _read({**cloud_defaults(), **given})
    _check_batch_and_lengths(v, given)
    est, policy_loss = _estimator(str(v["algorithm"]), estimator)
    lr, rule = local_learning_rate_rule(v["learning_rate"], student_params, local_learning_rate)
    local: dict[str, Any] = {
        "estimator": est,
        "policy_loss": policy_loss,
        "cloud_learning_rate": v["learning_rate"],
        "learning_rate": lr,
        "lr_rule": rule,
        "teacher_max_model_len": v["opd_teacher_max_model_len"],
        "teacher_max_num_batched_tokens": v["opd_teacher_max_num_batched_tokens"],
    }
    # every other plan field is the hyper-parameter of the same name
    same: dict[str, Any] = {k: v[k] for k in Plan.model_fields if k in v and k not in local}
    return Plan(**same, **local)


def lr_lambda(plan: Plan, total_steps: int):
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
