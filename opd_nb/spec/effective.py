"""The SDK's precedence, reproduced: defaults < YAML < `init(**kwargs)` (shallow) < truthy `run()` args.

`effective_job(workspace, **overrides)` answers "what would actually be submitted?" without talking
to any service. Its YAML (`EffectiveJob.to_yaml()`) loads in the SDK to the same `TuningModel`.
Sharp edges kept on purpose, because the SDK has them: `run()` values that are empty (`""`, `[]`,
`{}`, `None`) do not clear YAML values; `hyper_parameters`/`resources` given to `run()` replace the
whole YAML dict; `job_name` only works as a `run()` argument (in `init()` the SDK fails with 1002).
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from opd_nb.errors import OpdError
from opd_nb.results import ResultMixin
from opd_nb.spec.job import JobConfig, LineMap, parse_config_text, read_config_text, workspace_config

RUN_ARGS = (
    "model",
    "teacher_model",
    "job_name",
    "functions",
    "hyper_parameters",
    "resources",
    "training_datasets",
    "validation_datasets",
)


def _dump(obj: Any) -> Any:
    """SDK component objects, our models or plain dicts -> plain YAML-able data."""
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json", exclude_unset=True)
    return obj


def _dataset(item: Any, kind: str) -> dict[str, Any]:
    if isinstance(item, str | Path):
        return {"type": kind, "data_source_type": "file_id", "file_name": str(item)}
    d = dict(_dump(item))
    d.setdefault("type", kind)
    return d


def _strip_empty(value: Any) -> Any:
    """The SDK's `deep_remove_none`: drop None, "", [] and {} recursively."""
    if isinstance(value, dict):
        out = {k: _strip_empty(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, "", [], {})}
    if isinstance(value, list):
        out_l = [_strip_empty(v) for v in value]
        return [v for v in out_l if v not in (None, "", [], {})]
    return value


class EffectiveJob(ResultMixin, BaseModel):
    """What `AgenticRL().init(config, **init).run(**run_args)` would submit."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    workspace: str
    config_file: str
    config: JobConfig
    sources: dict[
        str, str
    ]  # top-level key (or "hyper_parameters.<k>") -> default | file:line | init() | run()
    data: dict[str, Any]  # the merged plain dict the config was validated from

    @property
    def training_type(self) -> str:
        return self.config.training_type

    def to_dict(self) -> dict[str, Any]:
        """The merged config as plain data (keys as the user/SDK would write them)."""
        return self.config.model_dump(mode="json", exclude_unset=True)

    def to_yaml(self) -> str:
        """YAML that `TuningModel.load_from_yaml` loads to the same model."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True, default_flow_style=False)

    def request(self) -> dict[str, Any]:
        """The `POST /fine-tunes` body the SDK builds (function ids shown as names, files as paths)."""
        c = self.config
        rollouts = [f.name or "rollout-<auto>" for f in c.functions_of("rollout")]
        rewards = [f.name or f"{f.type}-<auto>" for f in c.functions_of("reward", "group_reward")]
        body = {
            "model": c.model.name,
            "training_datasets": [d.model_dump(mode="json") for d in c.datasets if d.type == "training"],
            "validation_datasets": [d.model_dump(mode="json") for d in c.datasets if d.type == "validation"],
            "rollout": rollouts[0] if rollouts else None,
            "rewards": rewards,
            "hyper_parameters": c.training.hyper_parameters,
            "resource_config": c.training.resources,
            "training_type": c.training_type,
            "teacher_model": c.teacher_model,
            "job_name": f"{c.name}-<8 hex>",
        }
        return _strip_empty(body)

    def to_payload(self) -> dict[str, Any]:
        return {"config": self.to_dict(), "request": self.request(), "sources": self.sources}

    def __str__(self) -> str:
        return self.to_yaml().rstrip("\n")  # printed as-is (no rich markup) so `opd config > job.yaml` works

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td><code>{html.escape(k)}</code></td><td>{html.escape(v)}</td></tr>"
            for k, v in self.sources.items()
        )
        return (
            f"<div><b>Effective job</b> ({html.escape(self.training_type)}) from "
            f"<code>{html.escape(self.config_file)}</code><pre>{html.escape(self.to_yaml())}</pre>"
            f"<details><summary>where each value comes from</summary><table>{rows}</table></details></div>"
        )


def _apply_run(data: dict[str, Any], sources: dict[str, str], run: dict[str, Any]) -> None:
    """Apply `run()` arguments over the config, in place, as the SDK's `run()` does."""
    if "model" in run:
        base = given if isinstance(given := data.get("model"), dict) else {}
        data["model"] = {**base, "name": run["model"]}
        sources["model"] = "run()"
    if "functions" in run:
        funcs = run["functions"]
        data["functions"] = [_dump(f) for f in (funcs if isinstance(funcs, list | tuple) else [funcs])]
        sources["functions"] = "run()"
    datasets = [_dataset(d, "training") for d in run.get("training_datasets") or []]
    datasets += [_dataset(d, "validation") for d in run.get("validation_datasets") or []]
    if datasets:
        data["datasets"] = datasets
        sources["datasets"] = "run()"
    for key in ("hyper_parameters", "resources"):
        if key in run:
            _replace_training_block(data, sources, key, dict(run[key]))
    for arg, field in (("job_name", "name"), ("teacher_model", "teacher_model")):
        if arg in run:
            data[field] = run[arg]
            sources[field] = "run()"


def _replace_training_block(data: dict[str, Any], sources: dict[str, str], key: str, value: dict) -> None:
    """`run(hyper_parameters=...)` replaces the whole block (not a merge), so its sources do too."""
    training = dict(data.get("training") or {})
    training[key] = value
    data["training"] = training
    sources[f"training.{key}"] = "run()"
    for k in [k for k in sources if k.startswith(f"training.{key}.")]:
        del sources[k]
    for k in value:
        sources[f"training.{key}.{k}"] = "run()"


def _drop_rewards(data: dict[str, Any], sources: dict[str, str]) -> None:
    """opd-nb's pure-distillation switch: keep every function except reward functions."""
    if not isinstance(data.get("functions"), list):
        return
    kept = [
        f
        for f in data["functions"]
        if not (isinstance(f, dict) and f.get("type") in ("reward", "group_reward"))
    ]
    if kept:
        data["functions"] = kept
    else:
        data.pop("functions", None)
    sources["functions"] = "no_reward"


def effective_job(
    workspace: str | Path = ".",
    *,
    config: str = "config.yaml",
    init: dict[str, Any] | None = None,
    no_reward: bool = False,
    sets: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> EffectiveJob:
    """Merge defaults < YAML (+ `--set` changes) < `init` kwargs < truthy `run()` overrides, as the SDK does.

    `workspace` is the folder, or its config file (`ws/config.yaml`). `sets` are `--set` changes
    (:func:`opd_nb.spec.sets.parse_sets`), written into the YAML's data as submit_job.py does.
    `overrides` are `run()` arguments: model, teacher_model, job_name, functions, hyper_parameters,
    resources, training_datasets, validation_datasets (paths, dicts or SDK dataset objects).
    `no_reward=True` drops reward functions (opd-nb's switch for pure distillation).
    """
    unknown = sorted(set(overrides) - set(RUN_ARGS))
    if unknown:
        raise OpdError(
            f"unknown run() argument(s): {', '.join(unknown)}",
            where="effective_job",
            fix=f"use one of {', '.join(RUN_ARGS)}",
        )
    from opd_nb.spec.sets import normalize_sets  # sets.py reads job.py's models: imported when used

    ws, config = workspace_config(workspace, config)
    sets = normalize_sets(sets)
    path = ws / config if not Path(config).is_absolute() else Path(config)
    if not path.is_file():
        raise OpdError(
            f"config file not found: {path}",
            where=str(path),
            fix="create the workspace with `opd new`, or pass the workspace folder (or its config file)",
        )
    parsed = parse_config_text(read_config_text(path), config, sets=sets)
    if parsed.problems:
        p = parsed.problems[0]
        raise OpdError(p.message, where=p.where, fix=p.fix)
    data: dict[str, Any] = dict(parsed.data)
    sources = _sources(data, parsed.lines)

    for key, value in (init or {}).items():  # shallow, like `d.update(kwargs)` in load_from_yaml
        data[key] = _dump(value) if not isinstance(value, list) else [_dump(v) for v in value]
        sources[key] = "init()"

    _apply_run(data, sources, {k: v for k, v in overrides.items() if v})  # only truthy run() arguments count
    if no_reward:
        _drop_rewards(data, sources)

    try:
        job = JobConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err.get("loc", ()))
        src = sources.get(str(err.get("loc", ("",))[0]), "config")
        hint = " (`job_name` only works as a run() argument)" if "job_name" in loc else ""
        raise OpdError(
            f"`{loc}`: {err.get('msg')}{hint}",
            where=src,
            fix="fix the value; the SDK would refuse it with error 1002",
        ) from None
    return EffectiveJob(workspace=str(ws), config_file=str(path), config=job, sources=sources, data=data)


def _sources(data: dict[str, Any], lines: LineMap) -> dict[str, str]:
    out: dict[str, str] = {}
    for key in JobConfig.model_fields:
        out[key] = lines.where((key,)) if key in data else "default"
    training = data.get("training")
    if isinstance(training, dict):
        for sec in ("hyper_parameters", "resources"):
            block = training.get(sec)
            if isinstance(block, dict):
                for k in block:
                    out[f"training.{sec}.{k}"] = lines.where(("training", sec, k))
    return out
