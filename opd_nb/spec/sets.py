"""`--set KEY=VALUE`: the one grammar and key check of every verb that changes a config for one run.

`opd submit`, `opd check`, `opd estimate`, `opd config`, the `%opd` magics (the same parser) and the
workspace's `submit_job.py` (its own copy, kept equal by a test on a shared corpus) read a `--set` alike:

- KEY is a dotted path into config.yaml, or the bare name of a hyper-parameter or resource as the form
  and the docs write it (``n_epochs=2`` is ``training.hyper_parameters.n_epochs=2``);
- VALUE is JSON, else plain text (``2e-6`` is a number, ``cosine`` is text);
- a key the service would ignore (unknown, or a resource under hyper_parameters) is refused with the key
  to write instead, and so is a value outside the table's type and range; a mapping is never replaced
  by a plain value. Cross-key rules (batch_size against the rows, ...) are the preflight's, which runs on
  the config with the changes applied.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from opd_nb.errors import OpdError
from opd_nb.spec.hyperparams import OTHER_NAMES, PARAMS_BY_NAME, closest, value_problem
from opd_nb.spec.job import JobConfig, TrainingSpec, reported_by_service

EXAMPLE = "e.g. --set learning_rate=2.0e-6 (or --set training.hyper_parameters.learning_rate=2.0e-6)"
_SECTIONS = ("hyper_parameters", "resources")
_MAPPINGS = {"model": "model.name=qwen3.5-9b", "training": "training.hyper_parameters.n_epochs=2"}


def _refuse(item: str, problem: str, fix: str) -> OpdError:
    return OpdError(f"{item}: {problem}", where="--set", fix=fix)


def full_key(key: str) -> str:
    """A bare hyper-parameter or resource name as its full dotted key; any other key unchanged."""
    spec = PARAMS_BY_NAME.get(key)
    return f"training.{spec.section}.{key}" if spec is not None and "." not in key else key


def _suggest(name: str, section: str | None) -> str:
    """The key to write instead of an unknown `name` (another trainer's name, or a near spelling)."""
    near = closest(name, section)  # pyright: ignore[reportArgumentType]
    if near is None:
        known = ", ".join(
            p for p in PARAMS_BY_NAME if section is None or PARAMS_BY_NAME[p].section == section
        )
        return f"known keys: {known}"
    spec = PARAMS_BY_NAME[near]
    why = f" (`{name}` is another trainer's name for it)" if OTHER_NAMES.get(name.lower()) == near else ""
    return f"did you mean --set {near}=... (training.{spec.section}.{near}){why}?"


def _check_section_key(item: str, section: str, rest: list[str], value: Any) -> None:
    if not rest:
        if not isinstance(value, dict):
            raise _refuse(
                item, f"`training.{section}` is a mapping, not a value", "set one key in it, " + EXAMPLE
            )
        return
    name = ".".join(rest)
    spec = PARAMS_BY_NAME.get(name)
    if spec is None:
        raise _refuse(
            item, f"unknown key `{name}`: the service would ignore it without a word", _suggest(name, section)
        )
    if spec.section != section:
        raise _refuse(
            item,
            f"`{name}` belongs under training.{spec.section}, not training.{section}",
            f"write --set {name}=... (training.{spec.section}.{name})",
        )
    problem = value_problem(name, value, local=True)  # the target's own choices are the preflight's
    if problem:
        raise _refuse(item, f"{name}: {problem}", f"write a value the table allows, {EXAMPLE}")


def check_key(item: str, key: str, value: Any) -> None:
    """Refuse a key no config has, a key the service ignores, a table value out of range, a mapping replaced."""
    parts = key.split(".")
    top = parts[0]
    if top not in JobConfig.model_fields:
        reported = reported_by_service(top)
        if reported:
            raise _refuse(
                item, f"`{top}` is what the service reports about a job, not a config key", reported
            )
        if len(parts) == 1:
            raise _refuse(item, f"`{top}` is neither a config key nor a hyper-parameter", _suggest(top, None))
        near = difflib.get_close_matches(top, list(JobConfig.model_fields), n=1, cutoff=0.6)
        fix = f"did you mean `{near[0]}`?" if near else f"keys: {', '.join(JobConfig.model_fields)}"
        raise _refuse(item, f"unknown key `{top}`: the SDK refuses the whole config (error 1002)", fix)
    if top in _MAPPINGS and len(parts) == 1 and not isinstance(value, dict):
        raise _refuse(
            item,
            f"`{top}` is a mapping in the config, not a value",
            f"set one key in it, e.g. --set {_MAPPINGS[top]}",
        )
    if top != "training" or len(parts) == 1:
        return
    section = parts[1]
    if section in _SECTIONS:
        _check_section_key(item, section, parts[2:], value)
    elif section not in TrainingSpec.model_fields:
        spec = PARAMS_BY_NAME.get(section)
        fix = (
            f"write --set {section}=... (training.{spec.section}.{section})"
            if spec
            else _suggest(section, None)
        )
        raise _refuse(item, f"`training.{section}` is not a key of `training`", fix)


def parse_value(raw: str) -> Any:
    """VALUE as JSON (numbers, true/false, null, "quoted text", objects), else the text as written."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def parse_sets(items: Sequence[str]) -> dict[str, Any]:
    """`--set KEY=VALUE` items as {full dotted key: value}, each key and table value checked."""
    sets: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise OpdError(f"expected KEY=VALUE, got {item!r}", where="--set", fix=EXAMPLE)
        sets.update(normalize_sets({key: parse_value(raw)}, shown=item))
    return sets


def normalize_sets(sets: Mapping[str, Any] | None, *, shown: str | None = None) -> dict[str, Any]:
    """Changes given as a mapping (a Python caller's ``sets={"n_epochs": 2}``) as full keys, each checked
    like a `--set` (idempotent: full keys pass through unchanged)."""
    out: dict[str, Any] = {}
    for key, value in (sets or {}).items():
        full = full_key(str(key).strip())
        check_key(shown or f"{key}={json.dumps(value, default=str)}", full, value)
        out[full] = value
    return out
