"""`opd estimate`: how big a job is before it starts, and what it holds per hour.

Everything here follows from the workspace (rows, hyper-parameters, resources); nothing is guessed.
OPD on Bailian bills training units by the hour, rounded up to whole hours. The units held per
wall-clock hour are known from the resources, but the wall-clock hours are not known in advance,
so the estimate gives the price of each billed hour and says so instead of inventing a duration.

Smoke runs (`opd submit --smoke [N]`) are sized here too: `SMOKE_STEPS` steps of training rows, one
epoch, `SMOKE_VALIDATION_ROWS` validation rows. The workspace's `submit_job.py` keeps the same
numbers (it must work without opd-nb; a test keeps them equal). The steps formula is
:func:`opd_nb.spec.training_plan.training_steps`, the one the engine counts with.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from opd_nb import settings
from opd_nb.constants import SMOKE_STEPS, SMOKE_SUFFIX, SMOKE_VALIDATION_ROWS
from opd_nb.errors import OpdError
from opd_nb.results import ResultMixin
from opd_nb.spec.dataset import scan_jsonl
from opd_nb.spec.effective import effective_job
from opd_nb.spec.hyperparams import Written
from opd_nb.spec.job import workspace_config
from opd_nb.spec.training_plan import evaluation_passes, steps_per_epoch, training_steps

PRICE_VAR = settings.PRICE_PER_UNIT_HOUR.name  # money per training unit per hour, in the account's currency
WALL_CLOCK_NOTE = "wall-clock hours are not known before the job runs; the bill is units x hours, each started hour billed whole"


def billed_hours(elapsed_s: float) -> int:
    """Hours the console bills for `elapsed_s` seconds of training: every started hour counts whole."""
    return max(1, math.ceil(elapsed_s / 3600)) if elapsed_s > 0 else 0


def smoke_rows(batch_size: int, requested: int | None, available: int) -> int:
    """Training rows of a smoke run: `requested`, else enough for `SMOKE_STEPS` steps; never more than there are."""
    want = requested if requested else SMOKE_STEPS * batch_size
    return min(want, available)


def price_from_env(price: float | None) -> float | None:
    """`--price` if given, else `OPD_PRICE_PER_UNIT_HOUR`; a value that is not a positive number is a user error."""
    if price is not None:
        raw, where = str(price), "--price"
    elif settings.PRICE_PER_UNIT_HOUR.raw():
        raw, where = settings.PRICE_PER_UNIT_HOUR.raw() or "", PRICE_VAR
    else:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value <= 0:
        raise OpdError(
            f"price {raw!r} is not a positive number", where=where, fix="e.g. 12.5 (per unit-hour)"
        )
    return value


class Estimate(ResultMixin, BaseModel):
    """The size of one job; see the README's `opd estimate` section for each field."""

    workspace: str
    job_name: str
    student: str | None
    teacher: str | None
    smoke: bool = False
    train_rows: int | None
    validation_rows: int | None
    batch_size: int
    n_epochs: int
    n_rollouts: int
    eval_steps: int
    max_length: int
    teacher_max_model_len: int
    steps_per_epoch: int | None
    steps: int | None
    rollouts_per_step: int
    rollouts: int | None
    eval_passes: int | None
    eval_samples: int | None
    generated_tokens_max: int | None
    teacher_tokens_max: int | None
    reward_functions: int
    reward_calls: int | None
    charge_type: str | None
    mtu_spec_code: str | None
    mtu_capacity: int | None
    unit_hours_per_hour: int | None
    price_per_unit_hour: float | None = None
    money_per_hour: float | None = None
    minimum_charge: float | None = None  # one billed hour: what any start costs at least
    wall_clock_hours: None = None  # never estimated
    note: str = WALL_CLOCK_NOTE

    def resources_line(self) -> str:
        return f"{self.mtu_spec_code or '?'} x {self.mtu_capacity if self.mtu_capacity is not None else '?'}"

    def start_line(self) -> str:
        """One line on what would start: what a paid start shows before it asks for --yes."""
        n = lambda v: "?" if v is None else str(v)  # noqa: E731
        return (
            f"{self.job_name}{' (smoke run)' if self.smoke else ''}: student {self.student or '?'}, teacher "
            f"{self.teacher or 'none'}, {n(self.train_rows)} rows x {self.n_epochs} epoch(s) = {n(self.steps)} "
            f"steps, {self.rollouts_per_step} rollouts/step, resources {self.resources_line()}"
        )

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(str(self))}</pre>"

    def __str__(self) -> str:
        n = lambda v: "unknown (no local training file)" if v is None else f"{v:,}"  # noqa: E731
        lines = [
            f"estimate for {self.workspace}{' (smoke run)' if self.smoke else ''}",
            f"  steps: {n(self.steps)} = ceil({n(self.train_rows)} rows / batch_size {self.batch_size})"
            f" x {self.n_epochs} epoch(s)",
            f"  rollouts: {n(self.rollouts)} ({self.rollouts_per_step} per step = batch_size x n_rollouts)",
            f"  evaluation passes: {n(self.eval_passes)} (before training, every {self.eval_steps} steps and after the last),"
            f" {n(self.eval_samples)} samples",
            f"  generated tokens <= {n(self.generated_tokens_max)}; teacher-scored tokens <= "
            f"{n(self.teacher_tokens_max)}",
            f"  reward calls: {n(self.reward_calls)} ({self.reward_functions} reward function(s))",
            f"  resources: {self.resources_line()} ({self.charge_type or '?'}): "
            f"{n(self.unit_hours_per_hour)} unit-hours per hour",
        ]
        if self.money_per_hour is not None:
            lines.append(
                f"  money: {self.money_per_hour:,.2f} per billed hour ({self.price_per_unit_hour:g} per unit-hour); "
                f"any start costs at least {self.minimum_charge:,.2f}"
            )
        else:
            lines.append(f"  money: set {PRICE_VAR} (or --price) to see the price per billed hour")
        lines.append(f"  note: {self.note}")
        return "\n".join(lines)


def _int_hp(hp: dict[str, Any], name: str) -> int:
    value = Written(hp).get(name)
    try:
        return int(float(value))
    except (TypeError, ValueError):
        raise OpdError(
            f"{name} is {value!r}, not a number",
            where=f"training.hyper_parameters.{name}",
            fix="run `opd check` and fix the errors",
        ) from None


def _rows(ws: Path, datasets: list[Any], kind: str) -> int | None:
    """Rows of the local files of one dataset kind; None when one is not a local file (file_id, url)."""
    total = 0
    for d in datasets:
        if d.type != kind:
            continue
        path = ws / d.file_name if d.file_name else None
        if path is None or not path.is_file():
            return None
        total += scan_jsonl(path).n_rows
    return total


def _shape(hp: dict[str, Any]) -> dict[str, int]:
    names = ("batch_size", "n_epochs", "n_rollouts", "eval_steps", "max_length", "opd_teacher_max_model_len")
    shape = {name: _int_hp(hp, name) for name in names}
    for name in ("batch_size", "n_epochs", "eval_steps"):
        if shape[name] < 1:
            raise OpdError(
                f"{name} is {shape[name]}; it must be at least 1",
                where=f"training.hyper_parameters.{name}",
                fix="run `opd check` and fix the errors",
            )
    return shape


def _resources(res: dict[str, Any]) -> tuple[str | None, str | None, int | None]:
    written = Written(res)
    capacity = written.get("mtu_capacity")
    try:
        units = int(capacity) if capacity is not None else None
    except (TypeError, ValueError):
        units = None
    charge, spec = written.get("charge_type"), written.get("mtu_spec_code")
    return charge, spec, units


def estimate(
    workspace: str | Path = ".",
    *,
    config: str = "config.yaml",
    sets: dict[str, Any] | None = None,
    smoke: int | None = None,
    price: float | None = None,
    model: str | None = None,
    teacher_model: str | None = None,
    job_name: str | None = None,
    no_reward: bool = False,
) -> Estimate:
    """Size the job the workspace would submit (`smoke`: 0 for the default smoke size, N for N rows).

    `workspace` is the folder or its config file; `sets` are `--set` changes (:mod:`opd_nb.spec.sets`).
    """
    ws, config = workspace_config(workspace, config)
    ws = ws.resolve()
    eff = effective_job(
        ws, config=config, sets=sets, model=model, teacher_model=teacher_model, no_reward=no_reward
    )
    cfg = eff.config
    hp = dict(cfg.training.hyper_parameters or {})
    shape = _shape(hp)
    rows, val_rows = _rows(ws, cfg.datasets, "training"), _rows(ws, cfg.datasets, "validation")
    if smoke is not None:
        shape["n_epochs"] = 1
        rows = smoke_rows(shape["batch_size"], smoke, rows) if rows is not None else smoke or None
        val_rows = min(val_rows, SMOKE_VALIDATION_ROWS) if val_rows is not None else None
    charge, spec, units = _resources(cfg.training.resources or {})
    unit_price = price_from_env(price)
    per_hour = unit_price * units if unit_price is not None and units is not None else None
    rewards = len(cfg.functions_of("reward", "group_reward"))
    return Estimate(
        workspace=str(ws),
        job_name=(job_name or cfg.name) + (SMOKE_SUFFIX if smoke is not None else ""),
        student=cfg.model.name,
        teacher=cfg.teacher_model,
        smoke=smoke is not None,
        train_rows=rows,
        validation_rows=val_rows,
        batch_size=shape["batch_size"],
        n_epochs=shape["n_epochs"],
        n_rollouts=shape["n_rollouts"],
        eval_steps=shape["eval_steps"],
        max_length=shape["max_length"],
        teacher_max_model_len=shape["opd_teacher_max_model_len"],
        **_counts(shape, rows, val_rows, rewards, bool(cfg.teacher_model)),
        charge_type=charge,
        mtu_spec_code=spec,
        mtu_capacity=units,
        unit_hours_per_hour=units,
        price_per_unit_hour=unit_price,
        money_per_hour=per_hour,
        minimum_charge=per_hour,
    )


def _counts(
    shape: dict[str, int], rows: int | None, val_rows: int | None, rewards: int, teacher: bool
) -> dict[str, Any]:
    """Steps, rollouts, evaluations, token bounds and reward calls (None where the rows are unknown)."""
    per_step = shape["batch_size"] * shape["n_rollouts"]
    steps = training_steps(rows, shape["batch_size"], shape["n_epochs"]) if rows else None
    passes = None if steps is None else evaluation_passes(steps, shape["eval_steps"])
    eval_samples = None if passes is None or val_rows is None else passes * val_rows
    samples = None if steps is None else steps * per_step + (eval_samples or 0)
    window = min(shape["max_length"], shape["opd_teacher_max_model_len"])
    return {
        "steps_per_epoch": None if not rows else steps_per_epoch(rows, shape["batch_size"]),
        "steps": steps,
        "rollouts_per_step": per_step,
        "rollouts": None if steps is None else steps * per_step,
        "eval_passes": passes,
        "eval_samples": eval_samples,
        "generated_tokens_max": None if samples is None else samples * shape["max_length"],
        "teacher_tokens_max": None if samples is None or not teacher else samples * window,
        "reward_functions": rewards,
        "reward_calls": None if samples is None else samples * rewards,
    }
