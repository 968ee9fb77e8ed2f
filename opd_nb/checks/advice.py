"""The docs' advice on checkpoints and continued training (seed 002, 续训与 Checkpoint), as findings.

Why a module of its own: these rules read more than one key and, for continued training, the parent
job on its control plane; each says what it found, so a note changes with the config it is about.
- save_steps against eval_steps: the docs pick a reward job's best checkpoint by the validation reward
  measured at its step (``health.pick_checkpoint``); one saved between evaluations has none.
- save_total_limit: the docs keep 3-5 checkpoints (room to roll back; the best is not always the last).
- continued training: the same base, and a learning rate usually lowered; the parent's
  hyper-parameters are read where the plane shows them (a job's detail, locally and on Bailian).
"""

from __future__ import annotations

import re
from typing import Any

from opd_nb.checks.context import CheckContext, as_number
from opd_nb.constants import LOCAL_OUTPUT_PREFIX
from opd_nb.errors import OpdError
from opd_nb.spec.hyperparams import DEFAULTS, Written
from opd_nb.spec.training_plan import training_steps
from opd_nb.wire import http_client

KEEP_MIN, KEEP_MAX = 3, 5  # seed 002: "保留 3~5 个权衡空间与回滚需求"
SAVE_PER_EVAL = (2, 3)  # the docs' table: save_steps "建议 eval_steps × 2~3"
_JOB_ID = re.compile(r"ft-\d{12}-[0-9a-z]+")  # a fine-tune job id inside a model or checkpoint id
_HP = ("training", "hyper_parameters")


def check_advice(ctx: CheckContext) -> None:
    """Every advice rule (after the config and data rules: the row count sizes the job)."""
    _save_steps(ctx)
    _save_total_limit(ctx)
    model = ctx.raw.get("model")
    student = model.get("name") if isinstance(model, dict) else None
    if isinstance(student, str) and student.strip():
        continued_training(ctx, student.strip())


def _where(ctx: CheckContext, *keys: str) -> str:
    """The line of the first of `keys` the config sets, else the hyper_parameters block's."""
    for key in keys:
        if key in ctx.hp:
            return ctx.where((*_HP, key))
    return ctx.where(_HP) if "training" in ctx.raw else ctx.config_name


def _validated(ctx: CheckContext) -> bool:
    datasets = ctx.raw.get("datasets")
    return any(isinstance(d, dict) and d.get("type") == "validation" for d in datasets or [])


def _strategy(ctx: CheckContext) -> Any:
    return Written(ctx.hp).get("save_strategy")


def _saved_steps(ctx: CheckContext, save: int, limit: int | None) -> tuple[list[int], int] | None:
    """(the steps of the checkpoints the job keeps, its total steps), when the data sizes the job."""
    batch, _ = ctx.hp_value("batch_size")
    epochs, _ = ctx.hp_value("n_epochs")
    if not ctx.train_rows or not batch or not epochs or batch <= 0:
        return None
    total = training_steps(ctx.train_rows, int(batch), int(epochs))
    steps = list(range(save, total + 1, save))
    return (steps[-limit:] if limit else steps), total


def _save_steps(ctx: CheckContext) -> None:
    """A reward job whose save_steps is not a multiple of eval_steps saves checkpoints that will have no
    validation reward of their own, so the docs' pick cannot rank them (they show as unscored)."""
    if not ctx.has_reward or not _validated(ctx) or _strategy(ctx) != "steps":
        return
    save, _ = ctx.hp_value("save_steps")
    every, _ = ctx.hp_value("eval_steps")
    if not save or not every or save < 1 or every < 1 or int(save) % int(every) == 0:
        return
    save, every = int(save), int(every)
    limit, _ = ctx.hp_value("save_total_limit")
    sized = _saved_steps(ctx, save, int(limit) if limit and limit >= 1 else None)
    count = ""
    if sized is not None:
        steps, total = sized
        scored = [s for s in steps if s % every == 0 or s == total]
        shown = ", ".join(map(str, steps[:8])) + (", ..." if len(steps) > 8 else "")
        count = (
            f" Of the {len(steps)} checkpoint(s) it keeps (steps {shown}), "
            + ("none has one." if not scored else f"only {', '.join(map(str, scored))} will have one.")
            if steps
            else ""
        )
    near = max(every, round(save / every) * every)
    lo, hi = (every * k for k in SAVE_PER_EVAL)
    ctx.report.add(
        "config.save-steps-unscored",
        "warning",
        _where(ctx, "save_steps", "eval_steps"),
        f"save_steps {save} is not a multiple of eval_steps {every}: a checkpoint saved between two evaluations "
        "has no validation/data/reward/mean@1 of its own, and the docs pick the best checkpoint by that "
        f"score, so it is shown unscored and can never be picked.{count}",
        f"set save_steps: {near} (a multiple of eval_steps; the docs advise eval_steps x 2-3 = {lo}-{hi})",
    )


def _save_total_limit(ctx: CheckContext) -> None:
    """The docs keep 3-5 checkpoints: fewer leaves no room to roll back to the best, which is not always
    the last; more keeps storage the pick will not use."""
    if _strategy(ctx) == "no":
        return
    limit, is_set = ctx.hp_value("save_total_limit")
    if limit is None or limit < 1 or KEEP_MIN <= limit <= KEEP_MAX:
        return
    few = limit < KEEP_MIN
    ctx.report.add(
        "config.save-total-limit",
        "info",
        _where(ctx, "save_total_limit"),
        f"save_total_limit {int(limit)}{'' if is_set else ' (the default)'} keeps "
        + (
            f"only the newest {int(limit)} checkpoint(s): the best one (by the validation reward, or where the "
            "loss levels off) is not necessarily the last, and an older one is deleted before you can pick it"
            if few
            else f"up to {int(limit)} checkpoints, more than the docs' 3-5 (each is stored until it expires)"
        ),
        f"set save_total_limit: {KEEP_MIN if few else KEEP_MAX} (the docs advise keeping {KEEP_MIN}-{KEEP_MAX})",
    )


# ---------------------------------------------------------------- continued training


def _parent_id(ctx: CheckContext, student: str) -> str | None:
    """The job whose output `student` names: as the local plane resolved it, else a job id in the name."""
    resolved = (ctx.local_models.get(student) or {}).get("output")
    if isinstance(resolved, dict) and isinstance(resolved.get("job_id"), str):
        return resolved["job_id"]
    found = _JOB_ID.search(student)
    return found.group(0) if found else None


def _continues(ctx: CheckContext, student: str) -> bool:
    resolved = (ctx.local_models.get(student) or {}).get("output")
    kind = resolved.get("kind") if isinstance(resolved, dict) else None
    return (
        student.startswith(LOCAL_OUTPUT_PREFIX)
        or "checkpoint-" in student
        or kind == "checkpoint"
        or _JOB_ID.search(student) is not None
    )


def _get(ctx: CheckContext, path: str, **params: Any) -> tuple[Any, str]:
    """(the answer's ``output``, or None and why not) of one read of the target's control plane."""
    import httpx

    try:
        base, key = ctx.api_base(), ctx.api_key()
    except OpdError as exc:
        return None, exc.message
    try:
        resp = http_client.get(
            f"{base}{path}",
            params=params or None,
            timeout=5.0,
            trust_env=False,
            headers={"Authorization": f"Bearer {key}"},
        )
    except httpx.HTTPError as exc:
        return None, f"no control plane answers at {base} ({type(exc).__name__})"
    if resp.status_code != 200:
        return None, f"{base} answered HTTP {resp.status_code}"
    try:
        return resp.json().get("output"), ""
    except ValueError:
        return None, f"{base} answered something that is not JSON"


def _parent_job(ctx: CheckContext, student: str) -> tuple[dict | None, str]:
    """The parent job's detail (its hyper-parameters, teacher), or None and what was tried."""
    job_id = _parent_id(ctx, student)
    if job_id is not None:
        out, why = _get(ctx, f"/fine-tunes/{job_id}")
        return (out, "") if isinstance(out, dict) else (None, why or f"job {job_id} has no detail")
    out, why = _get(ctx, "/fine-tunes", page_no=1, page_size=100)  # a job is found by the output it published
    jobs = out.get("jobs") if isinstance(out, dict) else None
    match = next(
        (j for j in jobs or [] if isinstance(j, dict) and j.get("finetuned_output") == student), None
    )
    return (match, "") if match else (None, why or "no job on this plane published it")


def _rate(value: Any) -> float | None:
    num = as_number(value)
    return None if num is None else float(num)


def continued_training(ctx: CheckContext, student: str) -> None:
    """`model` is an earlier job's output: the docs' rules for continuing (the same base, a learning rate
    usually lowered), with the parent's own values where its control plane shows them."""
    if not _continues(ctx, student):
        return
    lr, _ = ctx.hp_value("learning_rate")
    where = ctx.where(("model", "name"))
    parent, why = _parent_job(ctx, student)
    hp = parent.get("hyper_parameters") if parent else None
    parent_lr = _rate(Written(hp).get("learning_rate")) if isinstance(hp, dict) else None
    if parent is None or parent_lr is None:
        lower = f"{(lr or DEFAULTS.learning_rate) / 2:.1e}"
        ctx.report.add(
            "config.continued-training",
            "info",
            where,
            f"model {student!r} continues an earlier job: keep the same base model (a checkpoint cannot continue "
            "on another base) and the learning rate is usually lowered"
            + (f" (it is {lr:g})" if lr else "")
            + f"; the parent's hyper-parameters could not be read ({why or 'its detail lists none'})",
            f"set learning_rate: {lower} (half the last run's), and keep the same teacher and data format",
        )
        return
    job_id = parent.get("job_id") or _parent_id(ctx, student) or "?"
    found = f"model {student!r} continues job {job_id} (its learning_rate {parent_lr:g}"
    teacher, parent_teacher = ctx.raw.get("teacher_model"), parent.get("teacher_model")
    if parent_teacher and teacher and parent_teacher != teacher:
        found += f", its teacher {parent_teacher!r}, not {teacher!r}"
    found += ")"
    if lr is not None and lr < parent_lr:
        ctx.report.add(
            "config.continued-training",
            "info",
            where,
            f"{found}: this learning_rate {lr:g} is lower, as the docs advise for continued training; keep the "
            "same base model (a checkpoint cannot continue on another base)",
            "keep the same teacher and data format",
        )
        return
    ctx.report.add(
        "config.continued-training",
        "warning",
        _where(ctx, "learning_rate") if "learning_rate" in ctx.hp else where,
        f"{found}: this learning_rate {lr or 0:g} is not lower than the parent's; the docs lower it for "
        "continued training (the model already moved toward the teacher, a full rate overshoots)",
        f"set learning_rate: {parent_lr / 2:.1e} (half the parent's {parent_lr:g})",
    )
