"""The one typed table of OPD hyper-parameters and resources: the fields of :class:`HyperParameters`
(``TrainingPlan``'s) and :class:`Resources`.

The SDK knows no hyper-parameter keys at all (it passes everything through and the service ignores
what it does not know), so this model is the only schema there is. Each field declares a key once: its
type (a Literal is its value set), default, description and :class:`Row` (group, range, documented
values, small/large presets). ``PARAMS`` is derived from it, and every surface reads that: ``--set``
(:mod:`opd_nb.spec.sets`), the notebook form, the preflight (through :class:`Written`, which also knows
which keys the user wrote), the typed job (:mod:`opd_nb.spec.training_plan`) the engine holds, and
``submit_job.py``'s generated key list (:mod:`opd_nb.workspace.template_keys`). Sources: the Bailian OPD
training-configuration page (field names, the 4 groups, the documented starting points: learning_rate
1e-6, cosine, gspo, n_epochs 1, n_rollouts 8, batch_size 128, save_steps 100 / save_total_limit 3, MTU4 x
24) and the engine reference (verl/vLLM meaning of each key). "small" is a starting point for a <=14B
student, "large" for >=30B.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field

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


@dataclass(frozen=True)
class Row:
    """What the table says of one field beyond its type, default and description (see :func:`param`)."""

    group: str
    choices: tuple[Any, ...] | None = None  # for a `str` field; a Literal field's values are its choices
    local_choices: tuple[Any, ...] | None = None
    ge: float | None = None
    local_ge: float | None = None
    le: float | None = None
    small: Any = None
    large: Any = None
    consumed_by_opd: bool = True
    documented: tuple[Any, ...] | None = None
    form: str | None = None


def param(default: Any, help_: str, *, group: str, **row: Any) -> Any:
    """One field of the table: its default, its description, and its :class:`Row` (pydantic keeps the row
    in the field's metadata and does not validate by it: the reading in ``training_plan`` does, per target)."""
    info = Field(default, description=help_)
    info.metadata.append(Row(group=group, **row))
    return info


PolicyLoss = Literal["gspo", "grpo"]  # the cloud's values of `algorithm`, and the engine's policy losses
POLICY_LOSSES: tuple[PolicyLoss, ...] = get_args(PolicyLoss)
LrSchedule = Literal["cosine", "linear", "constant", "constant_with_warmup"]
SaveStrategy = Literal["steps", "epoch", "no"]


class HyperParameters(BaseModel):
    """The table of ``training.hyper_parameters``: one field per key, in table order, each with its type,
    default, description and :class:`Row`. :class:`opd_nb.spec.training_plan.TrainingPlan` is this model
    with the service's reading; ``PARAMS`` and every surface (``--set``, the form, the checks, the engine,
    ``submit_job.py``'s key list) are derived from it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    # algorithm
    algorithm: str = param(
        "gspo",
        "Policy-optimisation loss for the task-reward term (gspo: group sequence PO); "
        "unused by pure distillation.",
        group="algorithm",
        choices=POLICY_LOSSES,
        local_choices=LOCAL_ESTIMATORS,  # estimators only the local engine has (gkd: exact reverse KL)
        small="gspo",
        large="gspo",
    )
    kl_loss_coef: float | None = param(
        None,
        "Accepted but not consumed by OPD: the teacher, not a KL penalty, keeps the "
        "student on track; leave it out.",
        group="algorithm",
        ge=0.0,
        consumed_by_opd=False,
    )
    # optimisation
    learning_rate: float = param(
        1e-6,
        "Peak learning rate; start at 1e-6 (distillation refines existing skills, "
        "large rates break the output format). Write 1.0e-6 in YAML, not 1e-6.",
        group="optimisation",
        ge=1e-12,
        le=1.0,
        small=1e-6,
        large=1e-6,
    )
    lr_scheduler_type: LrSchedule = param(
        "cosine",
        "Learning-rate schedule after warm-up.",
        group="optimisation",
        small="cosine",
        large="cosine",
    )
    lr_warmup_steps: int = param(
        0, "Steps of linear warm-up from 0 to learning_rate.", group="optimisation", ge=0, small=0, large=10
    )
    n_epochs: int = param(
        1, "Passes over the training set.", group="optimisation", ge=1, le=100, small=1, large=1
    )
    # throughput
    batch_size: int = param(
        128,
        "Prompts per training step; batch_size x n_rollouts samples are generated per step.",
        group="throughput",
        ge=1,
        small=32,
        large=128,
    )
    n_rollouts: int = param(
        8,
        "Samples per prompt; use >= 2 with a reward (a group of 1 has zero advantage).",
        group="throughput",
        ge=1,
        le=64,
        small=8,
        large=8,
    )
    ppo_mini_batch_size: int = param(
        64,
        "Sequences per optimiser update; must be <= batch_size x n_rollouts.",
        group="throughput",
        ge=1,
        small=64,
        large=256,
    )
    max_length: int = param(
        4096,
        "Longest prompt + response in tokens; longer samples are cut.",
        group="throughput",
        ge=16,
        le=262144,
        small=2048,
        large=8192,
    )
    max_prompt_length: int = param(
        1024,
        "Longest prompt in tokens; longer prompts are cut or dropped.",
        group="throughput",
        ge=8,
        le=262144,
        small=1024,
        large=2048,
    )
    # evaluation and saving
    eval_steps: int = param(
        10,
        "Evaluate on the validation set every N steps; train >= 3 x eval_steps before judging a trend.",
        group="evaluation",
        ge=1,
        small=5,
        large=20,
    )
    save_steps: int = param(
        100,
        "Save a checkpoint every N steps (with save_strategy: steps).",
        group="evaluation",
        ge=1,
        small=50,
        large=100,
    )
    save_strategy: SaveStrategy = param(
        "steps", "When to save checkpoints.", group="evaluation", small="steps", large="steps"
    )
    save_total_limit: int = param(
        3,
        "Keep at most N checkpoints (the oldest are removed).",
        group="evaluation",
        ge=1,
        small=3,
        large=5,
    )
    # teacher serving (vLLM engine arguments of the teacher deployment)
    opd_teacher_max_model_len: int = param(
        8192,
        "Teacher context in tokens; keep >= max_length or tail tokens "
        "lose their teacher score (valid_token_rate < 1).",
        group="teacher",
        ge=256,
        local_ge=1,  # a tiny stand-in's window: tests and rehearsals make valid_token_rate < 1 on purpose
        le=1048576,
        small=8192,
        large=16384,
    )
    opd_teacher_max_num_batched_tokens: int = param(
        8192,
        "Teacher tokens per scheduler batch; raise it with opd_teacher_max_model_len.",
        group="teacher",
        ge=256,
        local_ge=1,
        small=8192,
        large=16384,
    )
    opd_teacher_gpu_memory_utilization: float = param(
        0.9,
        "Share of teacher GPU memory for weights + KV cache; lower it when memory is tight.",
        group="teacher",
        ge=0.05,
        le=1.0,
        small=0.9,
        large=0.85,
    )


class Resources(BaseModel):
    """The table of ``training.resources`` (as :class:`HyperParameters`)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    charge_type: str = param(
        "mtu_postpaid",
        "Billing mode of the training units (mtu_postpaid: pay after use).",
        group="billing",
        # seed 002: "charge_type: mtu_postpaid 表示按 MTU（百炼算力规格单位）后付费计费"; training is billed in
        # MTUs, prepaid monthly or post-paid by the hour (the billing page names no prepaid id).
        documented=("mtu_postpaid",),
        form=r"mtu_[a-z]+",
        small="mtu_postpaid",
        large="mtu_postpaid",
    )
    mtu_spec_code: str = param(
        "MTU4",
        "Model training unit (MTU) spec.",
        group="billing",
        # seed 002: "mtu_spec_code 指定规格（如 MTU4）" (type-IV units, 24 for qwen3.5-9b)
        documented=("MTU4",),
        form=r"MTU\d+",
        small="MTU4",
        large="MTU4",
    )
    mtu_capacity: int = param(24, "Number of training units.", group="billing", ge=1, small=24, large=48)


HP: Section = "hyper_parameters"
RS: Section = "resources"
_TYPES: dict[Any, ParamType] = {int: "int", float: "float", str: "str", bool: "bool"}


def _kind(annotation: Any) -> tuple[ParamType, list[Any] | None]:
    """(the table's type, the choices a Literal spells) of a field's annotation (``X | None``: X)."""
    if get_origin(annotation) is Literal:
        return "str", list(get_args(annotation))
    if get_origin(annotation) in (Union, UnionType):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    return _TYPES[annotation], None


def _listed(values: tuple[Any, ...] | None) -> list[Any] | None:
    return None if values is None else list(values)


def rows_of(model: type[BaseModel], section: Section) -> list[ParamSpec]:
    """The table rows a model's fields declare (see :func:`param`), in field order."""
    rows: list[ParamSpec] = []
    for name, info in model.model_fields.items():
        row = next(m for m in info.metadata if isinstance(m, Row))
        type_, choices = _kind(info.annotation)
        rows.append(
            ParamSpec(
                name=name,
                section=section,
                type=type_,
                choices=choices if choices is not None else _listed(row.choices),
                local_choices=_listed(row.local_choices),
                ge=row.ge,
                local_ge=row.local_ge,
                le=row.le,
                default=info.default,
                help=info.description or "",
                small=row.small,
                large=row.large,
                consumed_by_opd=row.consumed_by_opd,
                group=row.group,
                documented=_listed(row.documented),
                form=row.form,
            )
        )
    return rows


PARAMS: list[ParamSpec] = [*rows_of(HyperParameters, HP), *rows_of(Resources, RS)]
PARAMS_BY_NAME: dict[str, ParamSpec] = {p.name: p for p in PARAMS}


DEFAULTS = HyperParameters()  # the typed defaults: ``DEFAULTS.eval_steps`` is the table's, as an int


class Written:
    """One config section as the user wrote it, over the table's defaults: the checks and the estimate read
    values through it, so "the value a job gets" and "did the user write it" are one rule each."""

    def __init__(self, section: Mapping[str, Any] | None) -> None:
        self.raw: dict[str, Any] = {str(k): v for k, v in (section or {}).items() if v is not None}

    def wrote(self, name: str) -> bool:
        """Whether the user wrote a value for ``name`` (a null counts as left out, as the SDK drops it)."""
        return name in self.raw

    def get(self, name: str) -> Any:
        """The value as written, else the table's default (``name`` must be a key of the table)."""
        return self.raw[name] if name in self.raw else PARAMS_BY_NAME[name].default


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
