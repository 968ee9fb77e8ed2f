"""The one typed table of OPD hyper-parameters and resources.

The SDK knows no hyper-parameter keys at all (it passes everything through and the service ignores
what it does not know), so this table is the only schema there is. It feeds the checks, the CLI, the
notebook form, the typed job (:mod:`opd_nb.spec.training_plan`) and the docs. Sources: the Bailian OPD
training-configuration page (field names, the 4 groups, the documented starting points: learning_rate
1e-6, cosine, gspo, n_epochs 1, n_rollouts 8, batch_size 128, save_steps 100 / save_total_limit 3, MTU4 x
24) and the engine reference (verl/vLLM meaning of each key). "small" is a starting point for a <=14B
student, "large" for >=30B.
"""

from __future__ import annotations

import difflib
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from opd_nb.constants import LOCAL_ESTIMATORS

ParamType = Literal["int", "float", "str", "bool"]
Section = Literal["hyper_parameters", "resources"]


class ParamSpec(BaseModel):
    """One key of `training.hyper_parameters` or `training.resources`."""

    model_config = ConfigDict(frozen=True)

    name: str
    section: Section
    type: ParamType
    choices: list[Any] | None = None
    local_choices: list[Any] | None = None  # extra values only the local engine accepts (checked per target)
    ge: float | None = None
    local_ge: float | None = None  # a lower minimum only the local engine takes (its stand-ins are tiny)
    le: float | None = None
    default: Any = None
    help: str
    small: Any = None
    large: Any = None
    consumed_by_opd: bool = True
    group: str = ""  # algorithm | optimisation | throughput | evaluation | teacher | billing
    documented: list[Any] | None = None  # the values the docs show (another value of `form` is a warning)
    form: str | None = None  # a regex every value of this kind matches (a value that does not is an error)

    def problem(self, value: Any, *, local: bool = False) -> str | None:
        """Why `value` is not acceptable for this key (None when it is); `local`: on the local engine.

        A string that parses as a number is reported separately by the checks
        (`config.numeric-string`), so here it simply counts as the wrong type.
        """
        if value is None:
            return None  # the SDK strips None before submitting: same as leaving the key out
        if self.type == "bool":
            if not isinstance(value, bool):
                return f"expected true or false, got {value!r}"
            return None
        if self.type == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                if isinstance(value, float) and value.is_integer():
                    return f"expected a whole number, got {value!r} (write {int(value)})"
                return f"expected a whole number, got {value!r}"
        elif self.type == "float":
            if isinstance(value, bool) or not isinstance(value, int | float):
                return f"expected a number, got {value!r}"
            if not math.isfinite(value):
                return f"expected a finite number, got {value!r}"
        elif self.type == "str" and not isinstance(value, str):
            return f"expected text, got {value!r}"
        choices = [*(self.choices or []), *(self.local_choices or [])] if local else (self.choices or [])
        if self.choices is not None and value not in choices:
            return f"{value!r} is not one of {', '.join(map(str, choices))}"
        ge = self.local_ge if local and self.local_ge is not None else self.ge
        number = isinstance(value, int | float)  # the type checks above passed: a number when bounded
        if ge is not None and number and value < ge:
            return f"{value!r} is below the minimum {_num(ge)}"
        if self.le is not None and number and value > self.le:
            return f"{value!r} is above the maximum {_num(self.le)}"
        return None

    def range_text(self) -> str:
        """A short human description of the allowed values (for tables and forms)."""
        if self.choices is not None:
            return " | ".join(map(str, self.choices))
        if self.ge is not None or self.le is not None:
            lo = _num(self.ge) if self.ge is not None else "-inf"
            hi = _num(self.le) if self.le is not None else "inf"
            return f"{self.type} in [{lo}, {hi}]"
        return self.type


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) >= 1 else repr(x)


def _p(name: str, section: Section, type_: ParamType, help_: str, *, group: str, **kw: Any) -> ParamSpec:
    return ParamSpec(name=name, section=section, type=type_, help=help_, group=group, **kw)


HP: Section = "hyper_parameters"
RS: Section = "resources"

PARAMS: list[ParamSpec] = [
    # algorithm
    _p(
        "algorithm",
        HP,
        "str",
        "Policy-optimisation loss for the task-reward term (gspo: group sequence PO); "
        "unused by pure distillation.",
        group="algorithm",
        choices=["gspo", "grpo"],
        local_choices=list(LOCAL_ESTIMATORS),  # estimators only the local engine has (gkd: exact reverse KL)
        default="gspo",
        small="gspo",
        large="gspo",
    ),
    _p(
        "kl_loss_coef",
        HP,
        "float",
        "Accepted but not consumed by OPD: the teacher, not a KL penalty, keeps the "
        "student on track; leave it out.",
        group="algorithm",
        ge=0.0,
        default=None,
        consumed_by_opd=False,
    ),
    # optimisation
    _p(
        "learning_rate",
        HP,
        "float",
        "Peak learning rate; start at 1e-6 (distillation refines existing skills, "
        "large rates break the output format). Write 1.0e-6 in YAML, not 1e-6.",
        group="optimisation",
        ge=1e-12,
        le=1.0,
        default=1e-6,
        small=1e-6,
        large=1e-6,
    ),
    _p(
        "lr_scheduler_type",
        HP,
        "str",
        "Learning-rate schedule after warm-up.",
        group="optimisation",
        choices=["cosine", "linear", "constant", "constant_with_warmup"],
        default="cosine",
        small="cosine",
        large="cosine",
    ),
    _p(
        "lr_warmup_steps",
        HP,
        "int",
        "Steps of linear warm-up from 0 to learning_rate.",
        group="optimisation",
        ge=0,
        default=0,
        small=0,
        large=10,
    ),
    _p(
        "n_epochs",
        HP,
        "int",
        "Passes over the training set.",
        group="optimisation",
        ge=1,
        le=100,
        default=1,
        small=1,
        large=1,
    ),
    # throughput
    _p(
        "batch_size",
        HP,
        "int",
        "Prompts per training step; batch_size x n_rollouts samples are generated per step.",
        group="throughput",
        ge=1,
        default=128,
        small=32,
        large=128,
    ),
    _p(
        "n_rollouts",
        HP,
        "int",
        "Samples per prompt; use >= 2 with a reward (a group of 1 has zero advantage).",
        group="throughput",
        ge=1,
        le=64,
        default=8,
        small=8,
        large=8,
    ),
    _p(
        "ppo_mini_batch_size",
        HP,
        "int",
        "Sequences per optimiser update; must be <= batch_size x n_rollouts.",
        group="throughput",
        ge=1,
        default=64,
        small=64,
        large=256,
    ),
    _p(
        "max_length",
        HP,
        "int",
        "Longest prompt + response in tokens; longer samples are cut.",
        group="throughput",
        ge=16,
        le=262144,
        default=4096,
        small=2048,
        large=8192,
    ),
    _p(
        "max_prompt_length",
        HP,
        "int",
        "Longest prompt in tokens; longer prompts are cut or dropped.",
        group="throughput",
        ge=8,
        le=262144,
        default=1024,
        small=1024,
        large=2048,
    ),
    # evaluation and saving
    _p(
        "eval_steps",
        HP,
        "int",
        "Evaluate on the validation set every N steps; train >= 3 x eval_steps before judging a trend.",
        group="evaluation",
        ge=1,
        default=10,
        small=5,
        large=20,
    ),
    _p(
        "save_steps",
        HP,
        "int",
        "Save a checkpoint every N steps (with save_strategy: steps).",
        group="evaluation",
        ge=1,
        default=100,
        small=50,
        large=100,
    ),
    _p(
        "save_strategy",
        HP,
        "str",
        "When to save checkpoints.",
        group="evaluation",
        choices=["steps", "epoch", "no"],
        default="steps",
        small="steps",
        large="steps",
    ),
    _p(
        "save_total_limit",
        HP,
        "int",
        "Keep at most N checkpoints (the oldest are removed).",
        group="evaluation",
        ge=1,
        default=3,
        small=3,
        large=5,
    ),
    # teacher serving (vLLM engine arguments of the teacher deployment)
    _p(
        "opd_teacher_max_model_len",
        HP,
        "int",
        "Teacher context in tokens; keep >= max_length or tail tokens "
        "lose their teacher score (valid_token_rate < 1).",
        group="teacher",
        ge=256,
        local_ge=1,  # a tiny stand-in's window: tests and rehearsals make valid_token_rate < 1 on purpose
        le=1048576,
        default=8192,
        small=8192,
        large=16384,
    ),
    _p(
        "opd_teacher_max_num_batched_tokens",
        HP,
        "int",
        "Teacher tokens per scheduler batch; raise it with opd_teacher_max_model_len.",
        group="teacher",
        ge=256,
        local_ge=1,
        default=8192,
        small=8192,
        large=16384,
    ),
    _p(
        "opd_teacher_gpu_memory_utilization",
        HP,
        "float",
        "Share of teacher GPU memory for weights + KV cache; lower it when memory is tight.",
        group="teacher",
        ge=0.05,
        le=1.0,
        default=0.9,
        small=0.9,
        large=0.85,
    ),
    # resources
    _p(
        "charge_type",
        RS,
        "str",
        "Billing mode of the training units (mtu_postpaid: pay after use).",
        group="billing",
        # seed 002: "charge_type: mtu_postpaid 表示按 MTU（百炼算力规格单位）后付费计费"; training is billed in
        # MTUs, prepaid monthly or post-paid by the hour (the billing page names no prepaid id).
        documented=["mtu_postpaid"],
        form=r"mtu_[a-z]+",
        default="mtu_postpaid",
        small="mtu_postpaid",
        large="mtu_postpaid",
    ),
    _p(
        "mtu_spec_code",
        RS,
        "str",
        "Model training unit (MTU) spec.",
        group="billing",
        documented=[
            "MTU4"
        ],  # seed 002: "mtu_spec_code 指定规格（如 MTU4）" (type-IV units, 24 for qwen3.5-9b)
        form=r"MTU\d+",
        default="MTU4",
        small="MTU4",
        large="MTU4",
    ),
    _p(
        "mtu_capacity",
        RS,
        "int",
        "Number of training units.",
        group="billing",
        ge=1,
        default=24,
        small=24,
        large=48,
    ),
]

PARAMS_BY_NAME: dict[str, ParamSpec] = {p.name: p for p in PARAMS}


def params_in(section: Section) -> list[ParamSpec]:
    """The table rows of one section, in table order."""
    return [p for p in PARAMS if p.section == section]


def value_problem(name: str, value: Any, *, local: bool = True) -> str | None:
    """Why `value` is not acceptable for hyper-parameter `name`, with the allowed range (None when it is,
    or when the table has no such key); `local`: on the local engine (its extra choices and minimums).

    A numeric string counts as its number, as at submit (:mod:`opd_nb.spec.training_plan`).
    """
    spec = PARAMS_BY_NAME.get(name)
    if spec is None:
        return None
    problem = spec.problem(_as_submitted(spec, value), local=local)
    if problem is None or spec.choices is not None:  # a choice problem already lists the accepted values
        return problem
    return f"{problem} (allowed: {spec.range_text()})"


def _as_submitted(spec: ParamSpec, value: Any) -> Any:
    """A numeric string as the number the engine reads from it (else the value unchanged)."""
    if not isinstance(value, str) or spec.type not in ("int", "float"):
        return value
    try:
        return int(value.strip()) if spec.type == "int" else float(value.strip())
    except ValueError:
        return value


# What other trainers call these keys (opd-engine.md §3.3 and §3.6: verl's and HF/TRL's names, vLLM's engine
# arguments behind opd_teacher_*). A key written in another trainer's words is ignored by the service
# like any unknown key; the checks and `--set` name the OPD key instead.
OTHER_NAMES: dict[str, str] = {
    "lr": "learning_rate",
    "warmup_steps": "lr_warmup_steps",
    "num_warmup_steps": "lr_warmup_steps",
    "num_train_epochs": "n_epochs",
    "total_epochs": "n_epochs",
    "train_batch_size": "batch_size",
    "per_device_train_batch_size": "batch_size",
    "num_generations": "n_rollouts",
    "rollout.n": "n_rollouts",
    "n": "n_rollouts",
    "test_freq": "eval_steps",
    "save_freq": "save_steps",
    "max_model_len": "opd_teacher_max_model_len",
    "max_num_batched_tokens": "opd_teacher_max_num_batched_tokens",
    "gpu_memory_utilization": "opd_teacher_gpu_memory_utilization",
}


def closest(name: str, section: Section | None = None, cutoff: float = 0.6) -> str | None:
    """The known key closest to an unknown one (for 'did you mean ...'): another trainer's name for it
    (``OTHER_NAMES``), else the nearest spelling."""
    name = str(name)  # a YAML key can be a bool or a number (`on:`, `1:`)
    pool = [p.name for p in PARAMS if section is None or p.section == section]
    alias = OTHER_NAMES.get(name.strip().lower())
    if alias in pool:
        return alias
    match = difflib.get_close_matches(name.lower(), pool, n=1, cutoff=cutoff)
    return match[0] if match else None


def starting_point(size: Literal["small", "large"] = "small") -> dict[str, dict[str, Any]]:
    """`{"hyper_parameters": {...}, "resources": {...}}` filled with one column of the table."""
    out: dict[str, dict[str, Any]] = {HP: {}, RS: {}}
    for p in PARAMS:
        value = p.small if size == "small" else p.large
        if value is not None and p.consumed_by_opd:
            out[p.section][p.name] = value
    return out
