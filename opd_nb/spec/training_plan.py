"""A job's hyper-parameters, typed: read once from what was submitted, then carried whole.

The table (:class:`opd_nb.spec.hyperparams.HyperParameters`) declares each key and what it may be;
:class:`TrainingPlan` is that model with the service's reading: one job's values of every key, read from
a submitted ``hyper_parameters`` mapping the way the service reads it (a numeric string such as YAML's
``1e-6`` is its number, a left-out key its default, an unknown key ignored), checked against the table
and the rules across keys, all problems in one error. The control plane reads a job body into it once
(``server/bodies.py``), keeps it in the job record, and hands the same object to the engine, which holds
it with only its local meaning added (``engine/hparams.py``); the client reads a job's echoed
hyper-parameters into it (leniently: a value another service accepted is not ours to refuse). The one
steps formula and the one updates-per-step formula live here too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Self

from pydantic import model_validator

from opd_nb.constants import CLOUD_ESTIMATOR
from opd_nb.spec.hyperparams import HP, HyperParameters, ParamSpec, params_in, value_problem

FIX = "fix training.hyper_parameters in config.yaml"
_KINDS: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool}


def steps_per_epoch(rows: int, batch_size: int) -> int:
    """Optimiser steps of one epoch: ceil(rows / batch_size) (the last batch may be short)."""
    return math.ceil(rows / batch_size)


def training_steps(rows: int, batch_size: int, n_epochs: int) -> int:
    """Optimiser steps of a job: ceil(rows / batch_size) per epoch, times n_epochs."""
    return steps_per_epoch(rows, batch_size) * n_epochs


def evaluates_after(step: int, total_steps: int, eval_steps: int) -> bool:
    """Whether a job with validation data evaluates after ``step``: before training (step 0), every
    ``eval_steps`` steps, and after the last step."""
    return step == 0 or step % eval_steps == 0 or step == total_steps


def evaluation_passes(total_steps: int, eval_steps: int) -> int:
    """How many times a job with validation data evaluates (:func:`evaluates_after`): step 0, then
    ceil(total_steps / eval_steps) times (every ``eval_steps`` and the last)."""
    return 1 + math.ceil(total_steps / eval_steps)


class HyperParameterError(ValueError):
    """Submitted hyper-parameters the job cannot run with: every problem, with its key, value and fix."""


class TrainingPlan(HyperParameters):
    """Every hyper-parameter of one job, as it trains (defaults filled in, ``max_prompt_length`` resolved).

    Its fields are the table's (:class:`~opd_nb.spec.hyperparams.HyperParameters`); this class adds the
    service's reading. Build it with :meth:`from_submitted` (or validate a mapping: the same reading); a
    plan's own dump validates back to itself, so it crosses a process as JSON and arrives the same."""

    @model_validator(mode="before")
    @classmethod
    def _read(cls, data: Any) -> Any:
        """A mapping is read as submitted hyper-parameters (see :func:`read_submitted`)."""
        if isinstance(data, Mapping):
            return read_submitted(data)  # type: ignore[arg-type]
        return data

    @classmethod
    def from_submitted(cls, submitted: Mapping[str, Any] | None) -> Self:
        """The plan of a submitted ``hyper_parameters`` (None: all defaults); raises
        :class:`HyperParameterError` naming every key the job cannot run with."""
        return cls.model_construct(**read_submitted(submitted or {}))

    @classmethod
    def lenient(cls, submitted: Mapping[str, Any] | None) -> Self:
        """The plan a job's echoed hyper-parameters describe, each value the table cannot read left at its
        default and no rule across keys applied: for showing a job some service already accepted."""
        values: dict[str, Any] = {}
        for spec in params_in(HP):
            raw = (submitted or {}).get(spec.name)
            if raw is None:
                continue
            value = _coerced(spec, raw)
            if value is not None and value_problem(spec.name, value) is None:
                values[spec.name] = value
        return cls.model_construct(**{**_defaults(), **values})

    @property
    def updates_per_step(self) -> int:
        """Optimiser updates of one step: ceil(batch_size x n_rollouts / ppo_mini_batch_size)."""
        return math.ceil(self.batch_size * self.n_rollouts / self.ppo_mini_batch_size)

    def steps_per_epoch(self, rows: int) -> int:
        return steps_per_epoch(rows, self.batch_size)

    def steps(self, rows: int) -> int:
        """The job's optimiser steps over ``rows`` training rows (:func:`training_steps`)."""
        return training_steps(rows, self.batch_size, self.n_epochs)


def _defaults() -> dict[str, Any]:
    return {spec.name: spec.default for spec in params_in(HP)}


def _coerced(spec: ParamSpec, raw: Any) -> Any:
    """``raw`` as the service reads it: YAML's "1e-6" is 1e-6 and 2.0 is 2 (None: it cannot be read)."""
    kind = _KINDS[spec.type]
    try:
        if kind is int:
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                return None
            return int(raw.strip()) if isinstance(raw, str) else int(raw)
        if kind is float:
            if isinstance(raw, bool):
                return None
            return float(raw)
        return raw if isinstance(raw, kind) else None
    except (TypeError, ValueError, OverflowError):
        return None


def read_submitted(submitted: Mapping[str, Any]) -> dict[str, Any]:
    """Every hyper-parameter's value from a submitted mapping: checked per key against the table (the local
    engine's extra choices and minimums included), then across keys; raises :class:`HyperParameterError`."""
    given = {str(k): v for k, v in submitted.items() if v is not None}  # the SDK drops None: left out
    values, problems = _defaults(), []
    for spec in params_in(HP):
        if spec.name not in given:
            continue
        raw = given[spec.name]
        value = _coerced(spec, raw)
        problem = value_problem(spec.name, raw if value is None else value)
        if spec.name == "algorithm" and value == CLOUD_ESTIMATOR:
            problem = None  # the local engine reads the cloud's estimator by name too
        if value is None and problem is None:
            problem = f"expected a {spec.type}"
        if problem:
            problems.append(f"hyper_parameters.{spec.name} = {raw!r}: {problem}")
        else:
            values[spec.name] = value
    if not problems:
        problems = _across_keys(values, given)
    if problems:
        raise HyperParameterError("; ".join(problems) + f"; {FIX}")
    return values


def _across_keys(v: dict[str, Any], given: Mapping[str, Any]) -> list[str]:
    """The rules across keys (``v`` is resolved in place): a step's sequences fill its updates, a prompt
    leaves room for a response. Only max_length given: prompts may use all but 1 token of it."""
    total = v["batch_size"] * v["n_rollouts"]
    if v["ppo_mini_batch_size"] > total:
        return [
            f"hyper_parameters.ppo_mini_batch_size = {v['ppo_mini_batch_size']} exceeds batch_size x n_rollouts "
            f"= {v['batch_size']} x {v['n_rollouts']} = {total} sequences per step (Bailian requires <=); lower it"
        ]
    if v["max_prompt_length"] >= v["max_length"] and "max_prompt_length" not in given:
        v["max_prompt_length"] = v["max_length"] - 1
    if v["max_prompt_length"] >= v["max_length"]:
        return [
            f"hyper_parameters.max_prompt_length = {v['max_prompt_length']} leaves no room for a response "
            f"within max_length = {v['max_length']}; raise max_length or lower max_prompt_length"
        ]
    return []
