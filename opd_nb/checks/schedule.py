"""Schedule rules: fields counted in steps against the job's length, and fields the docs tie to another.

The job's length is steps = ceil(training rows / batch_size) x n_epochs (`opd_nb.spec.training_plan.training_steps`,
as Bailian counts it). Every step-counted hyper-parameter is compared with it: ``eval_steps`` (its rule,
``config.eval-steps-too-sparse``, is in :mod:`opd_nb.checks.config`), ``save_steps`` and ``lr_warmup_steps``.
Then the pairs the docs and the engine reference relate: ``save_steps`` only with ``save_strategy: steps``,
a warm-up only with a schedule that has one, ``ppo_mini_batch_size`` dividing ``batch_size x n_rollouts``,
``algorithm`` only with a reward.
"""

from __future__ import annotations

from opd_nb.checks.context import CheckContext
from opd_nb.spec.hyperparams import POLICY_LOSSES, Written
from opd_nb.spec.training_plan import training_steps

_HP = ("training", "hyper_parameters")


def check_schedule(ctx: CheckContext) -> None:
    """The rules that need no data first, then those that need the number of steps."""
    if not ctx.raw:
        return
    _save_strategy(ctx)
    _warmup_schedule(ctx)
    _mini_batch_divides(ctx)
    _algorithm_without_reward(ctx)
    steps = _total_steps(ctx)
    if steps is not None:
        _against_total(ctx, steps)


def _int(ctx: CheckContext, name: str) -> tuple[int | None, bool]:
    value, is_set = ctx.hp_value(name)
    if value is None or isinstance(value, bool) or not float(value).is_integer():
        return None, is_set
    return int(value), is_set


def _text(ctx: CheckContext, name: str) -> tuple[str | None, bool]:
    written = Written(ctx.hp)
    value = written.get(name)
    if not written.wrote(name):
        return value, False
    return (value, True) if isinstance(value, str) else (None, False)


def _total_steps(ctx: CheckContext) -> int | None:
    """Steps of the whole job, or None when the rows are unknown or too few for one (data.too-few-rows)."""
    batch, _ = _int(ctx, "batch_size")
    epochs, _ = _int(ctx, "n_epochs")
    rows = ctx.train_rows
    if rows is None or not batch or not epochs or batch < 1 or epochs < 1 or rows <= batch:
        return None
    return training_steps(rows, batch, epochs)


def _length(ctx: CheckContext, steps: int) -> str:
    batch, _ = _int(ctx, "batch_size")
    epochs, _ = _int(ctx, "n_epochs")
    return f"{steps} step(s) ({ctx.train_rows} rows / batch_size {batch} x {epochs} epoch(s))"


def _against_total(ctx: CheckContext, steps: int) -> None:
    """save_steps and lr_warmup_steps set beyond the job's last step."""
    save, save_set = _int(ctx, "save_steps")
    strategy, _ = _text(ctx, "save_strategy")
    if save_set and save and strategy == "steps" and save > steps:
        ctx.report.add(
            "config.save-steps-beyond-total",
            "warning",
            ctx.where((*_HP, "save_steps")),
            f"save_steps={save} is beyond the job's {_length(ctx, steps)}: no checkpoint is saved before the end, "
            "so there is none to choose from (the docs pick the best checkpoint by validation, not necessarily "
            "the last)",
            f"set save_steps <= {max(1, steps // 3)} (a few checkpoints), or add data / epochs",
        )
    warmup, warm_set = _int(ctx, "lr_warmup_steps")
    if warm_set and warmup and warmup >= steps:
        ctx.report.add(
            "config.warmup-beyond-total",
            "warning",
            ctx.where((*_HP, "lr_warmup_steps")),
            f"lr_warmup_steps={warmup} is not below the job's {_length(ctx, steps)}: the learning rate is still "
            "warming up from 0 when training ends, so it never reaches learning_rate",
            f"set lr_warmup_steps well below {steps} (e.g. {max(0, steps // 10)}), or 0",
        )


def _save_strategy(ctx: CheckContext) -> None:
    """save_steps (and save_total_limit) set where save_strategy makes them mean nothing."""
    strategy, strategy_set = _text(ctx, "save_strategy")
    if strategy not in ("epoch", "no"):
        return
    unused = [
        k
        for k in ("save_steps", "save_total_limit")
        if k in ctx.hp and (k == "save_steps" or strategy == "no")
    ]
    for key in unused:
        ctx.report.add(
            "config.save-field-unused",
            "warning",
            ctx.where((*_HP, key)),
            f"{key} is set but save_strategy is {strategy!r}: "
            + (
                "checkpoints are saved once per epoch, not every save_steps"
                if strategy == "epoch"
                else "no checkpoint is saved at all"
            ),
            "set save_strategy: steps to save every save_steps (the docs' steps + 100 + 3), or delete "
            f"`{key}`",
        )


def _warmup_schedule(ctx: CheckContext) -> None:
    """A warm-up with a schedule that has none (HF's `constant`), or `constant_with_warmup` without one."""
    schedule, schedule_set = _text(ctx, "lr_scheduler_type")
    warmup, warm_set = _int(ctx, "lr_warmup_steps")
    if schedule == "constant" and warm_set and warmup:
        ctx.report.add(
            "config.warmup-unused",
            "warning",
            ctx.where((*_HP, "lr_warmup_steps")),
            f"lr_warmup_steps={warmup} with lr_scheduler_type constant: that schedule has no warm-up (HF "
            "semantics), so the warm-up is ignored",
            "use lr_scheduler_type: constant_with_warmup, or delete lr_warmup_steps",
        )
    elif schedule == "constant_with_warmup" and schedule_set and not warmup:
        ctx.report.add(
            "config.warmup-unused",
            "info",
            ctx.where((*_HP, "lr_scheduler_type")),
            "lr_scheduler_type constant_with_warmup with lr_warmup_steps 0: no warm-up happens (the same as constant)",
            "set lr_warmup_steps (e.g. 10), or use constant",
        )


def _mini_batch_divides(ctx: CheckContext) -> None:
    """batch_size x n_rollouts not a multiple of ppo_mini_batch_size: the last update of every step is short."""
    batch, b_set = _int(ctx, "batch_size")
    n_roll, n_set = _int(ctx, "n_rollouts")
    mini, m_set = _int(ctx, "ppo_mini_batch_size")
    if (
        not (batch and n_roll and mini)
        or batch < 1
        or n_roll < 1
        or mini < 1
        or not (b_set or n_set or m_set)
    ):
        return
    samples = batch * n_roll
    if mini > samples or samples % mini == 0:
        return  # too large is config.mini-batch-too-large
    ctx.report.add(
        "config.mini-batch-divides",
        "warning",
        ctx.where((*_HP, "ppo_mini_batch_size")),
        f"batch_size {batch} x n_rollouts {n_roll} = {samples} samples per step is not a multiple of "
        f"ppo_mini_batch_size {mini}: each step's last optimiser update gets only {samples % mini} sample(s), a "
        "noisier update than the others",
        f"set ppo_mini_batch_size to a divisor of {samples} (e.g. {_divisor_near(samples, mini)})",
    )


def _divisor_near(n: int, want: int) -> int:
    return min((d for d in range(1, n + 1) if n % d == 0), key=lambda d: (abs(d - want), -d))


def _algorithm_without_reward(ctx: CheckContext) -> None:
    """`algorithm` set in a job without a reward: the docs say it takes no part in pure distillation."""
    value = ctx.hp.get("algorithm")
    if value in POLICY_LOSSES and not ctx.has_reward:  # gkd (local) is the loss itself
        ctx.report.add(
            "config.algorithm-unused",
            "info",
            ctx.where((*_HP, "algorithm")),
            f"algorithm {ctx.hp['algorithm']!r} has no effect here: it shapes the task-reward term, and this job "
            "registers no reward (pure distillation)",
            "leave it out, or add a reward function for it to act on",
        )
