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
  value of ``pg_opd``/``gkd``) asks for the local-only full-vocabulary ``gkd``.
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
import os
from typing import Any, Literal

from pydantic import BaseModel

from opd_nb.engine.api import EngineError

TINY_PARAMS = 50_000_000
LR_SCALE = 1000.0
LR_MIN, LR_MAX = 1e-4, 3e-3

# Used when opd_nb.spec is unavailable; kept equal to the spec's defaults.
_FALLBACK_DEFAULTS: dict[str, Any] = {
    "algorithm": "gspo",
    "learning_rate": 1e-6,
    "lr_scheduler_type": "cosine",
    "lr_warmup_steps": 0,
    "n_epochs": 1,
    "batch_size": 128,
    "n_rollouts": 8,
    "ppo_mini_batch_size": 64,
    "max_length": 4096,
    "max_prompt_length": 1024,
    "eval_steps": 10,
    "save_steps": 100,
    "save_strategy": "steps",
    "save_total_limit": 3,
    "opd_teacher_max_model_len": 8192,
    "opd_teacher_max_num_batched_tokens": 8192,
}


def cloud_defaults() -> dict[str, Any]:
    """The cloud's defaults (from the spec when present) for keys a job leaves out."""
    out = dict(_FALLBACK_DEFAULTS)
    try:
        from opd_nb.spec.hyperparams import PARAMS_BY_NAME
    except Exception:  # noqa: BLE001 - the spec is optional for the engine
        return out
    for name in out:
        spec = PARAMS_BY_NAME.get(name)
        if spec is not None and spec.default is not None:
            out[name] = spec.default
    return out


class Plan(BaseModel):
    """The resolved local training plan of one job."""

    estimator: Literal["pg_opd", "gkd"]
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


def _coerce(name: str, value: Any, kind: type) -> Any:
    try:
        if kind is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind is float:
            return float(value)  # YAML reads 1e-6 as the string "1e-6"; accept it as the cloud does
        return str(value)
    except (TypeError, ValueError):
        raise EngineError(
            f"hyper_parameters.{name} = {value!r} is not a valid {kind.__name__}; fix it in config.yaml"
        ) from None


def resolve(
    hp: dict[str, Any],
    *,
    student_params: int,
    estimator: str | None = None,
    local_learning_rate: float | None = None,
) -> Plan:
    """Validate the job's hyper-parameters and apply the local-meaning rules above."""
    d = cloud_defaults()
    d.update({k: v for k, v in (hp or {}).items() if v is not None})
    ints = [
        "lr_warmup_steps",
        "n_epochs",
        "batch_size",
        "n_rollouts",
        "ppo_mini_batch_size",
        "max_length",
        "max_prompt_length",
        "eval_steps",
        "save_steps",
        "opd_teacher_max_model_len",
        "opd_teacher_max_num_batched_tokens",
    ]
    v: dict[str, Any] = {k: _coerce(k, d[k], int) for k in ints}
    if d.get("save_total_limit") is not None:
        v["save_total_limit"] = _coerce("save_total_limit", d["save_total_limit"], int)
    cloud_lr = _coerce("learning_rate", d["learning_rate"], float)
    for k in ints:
        if v[k] < (0 if k == "lr_warmup_steps" else 1):
            raise EngineError(
                f"hyper_parameters.{k} = {v[k]} must be {'>= 0' if k == 'lr_warmup_steps' else '>= 1'}"
            )
    if not cloud_lr > 0:
        raise EngineError(f"hyper_parameters.learning_rate = {cloud_lr} must be > 0")
    total = v["batch_size"] * v["n_rollouts"]
    if v["ppo_mini_batch_size"] > total:
        raise EngineError(
            f"hyper_parameters.ppo_mini_batch_size = {v['ppo_mini_batch_size']} exceeds batch_size x n_rollouts = "
            f"{v['batch_size']} x {v['n_rollouts']} = {total} sequences per step (Bailian requires <=); lower it"
        )
    if v["max_prompt_length"] >= v["max_length"] and "max_prompt_length" not in (hp or {}):
        v["max_prompt_length"] = (
            v["max_length"] - 1
        )  # only max_length was given: prompts may use all but 1 token
    if v["max_prompt_length"] >= v["max_length"]:
        raise EngineError(
            f"hyper_parameters.max_prompt_length = {v['max_prompt_length']} leaves no room for a response within "
            f"max_length = {v['max_length']}; raise max_length or lower max_prompt_length"
        )
    algo = str(d.get("algorithm", "gspo"))
    policy_loss = algo if algo in ("gspo", "grpo") else "gspo"
    est = estimator or (algo if algo in ("pg_opd", "gkd") else "pg_opd")
    if est not in ("pg_opd", "gkd"):
        raise EngineError(f"unknown estimator {est!r}; use pg_opd (the cloud's) or gkd (local full-vocab KL)")
    if algo not in ("gspo", "grpo", "pg_opd", "gkd"):
        raise EngineError(f"hyper_parameters.algorithm = {algo!r} is not one of gspo, grpo")
    sched = str(d["lr_scheduler_type"])
    if sched not in ("cosine", "linear", "constant", "constant_with_warmup"):
        raise EngineError(
            f"hyper_parameters.lr_scheduler_type = {sched!r} is not one of cosine, linear, constant"
        )
    strategy = str(d["save_strategy"])
    if strategy not in ("steps", "epoch", "no"):
        raise EngineError(f"hyper_parameters.save_strategy = {strategy!r} is not one of steps, epoch, no")

    env_lr = os.environ.get("OPD_LOCAL_LR")
    if local_learning_rate is not None:
        lr, rule = (
            float(local_learning_rate),
            f"local override (EngineJob.local_learning_rate) {local_learning_rate:g}",
        )
    elif env_lr:
        lr = _coerce("OPD_LOCAL_LR", env_lr, float)
        rule = f"local override (OPD_LOCAL_LR) {lr:g}"
    elif student_params < TINY_PARAMS:
        lr = min(LR_MAX, max(LR_MIN, cloud_lr * LR_SCALE))
        rule = (
            f"tiny stand-in student ({student_params:,} params < {TINY_PARAMS:,}): local_lr = "
            f"clamp(cloud_lr x {LR_SCALE:g}, {LR_MIN:g}, {LR_MAX:g}) = {lr:g}"
        )
    else:
        lr, rule = cloud_lr, f"student has {student_params:,} params: cloud learning rate used unchanged"
    return Plan(
        estimator=est,
        policy_loss=policy_loss,
        cloud_learning_rate=cloud_lr,
        learning_rate=lr,
        lr_rule=rule,
        lr_scheduler_type=sched,
        lr_warmup_steps=v["lr_warmup_steps"],
        n_epochs=v["n_epochs"],
        batch_size=v["batch_size"],
        n_rollouts=v["n_rollouts"],
        ppo_mini_batch_size=v["ppo_mini_batch_size"],
        max_length=v["max_length"],
        max_prompt_length=v["max_prompt_length"],
        eval_steps=v["eval_steps"],
        save_steps=v["save_steps"],
        save_strategy=strategy,
        save_total_limit=v.get("save_total_limit"),
        teacher_max_model_len=v["opd_teacher_max_model_len"],
        teacher_max_num_batched_tokens=v["opd_teacher_max_num_batched_tokens"],
    )


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
