"""Pydantic models of the job YAML, mirroring dashscope 2.0.2's `TuningModel` field for field.

Same field names, types, defaults and `extra="forbid"` as the SDK, so a config loads here if and only
if `TuningModel.load_from_yaml` accepts it (tests compare both on generated configs). Unlike the SDK,
errors point at `file:line` and say how to fix them. The YAML is read with PyYAML's SafeLoader, as
the SDK does, so `1e-6` stays a string here too (the checks flag it).
"""

from __future__ import annotations

import copy
import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError

from opd_nb.errors import OpdError

FunctionKind = Literal["rollout", "reward", "group_reward"]
DEFAULT_REQUIREMENTS = "./requirements.txt"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MountStorage(_Strict):
    region: str | None = None
    bucket: str | None = None
    file_path: str | None = None


class DatasetSpec(_Strict):
    type: Literal["training", "validation", "testing"] = "training"
    data_source_type: Literal["file_id", "download_url", "oss_mount"] | None = "file_id"
    file_name: str | None = None
    file_id: str | None = None
    download_url: str | None = None
    mount_storage: MountStorage | None = None


class FoundationModel(_Strict):
    name: str = None  # pyright: ignore[reportAssignmentType]  # as in the SDK: omitted is fine, an explicit null is not


class TrainingSpec(_Strict):
    type: Literal["reinforcement", "pg_opd"] = "reinforcement"
    hyper_parameters: dict[str, Any] = None  # pyright: ignore[reportAssignmentType]  # SDK: explicit null is refused
    resources: dict[str, Any] = None  # pyright: ignore[reportAssignmentType]


class Observability(BaseModel):
    """Empty in the SDK (and, unlike the others, not strict)."""


class FcModel(_Strict):
    zipdir: str = "./"
    classpath: str | None = ""
    filepath: str = ""
    classname: str = ""
    requirements_path: str | None = DEFAULT_REQUIREMENTS
    extra_files: list[str] | None = Field(default_factory=list)
    oss_id: str | None = None
    oss_signed_url: str | None = None


class Runtime(_Strict):
    layer_code: str | None = None
    cpu: float | None = None
    memory_size: int | None = None
    disk_size: int | None = None
    concurrency: int | None = None
    capacity: int | None = None
    max_capacity: int | None = None
    min_capacity: int | None = None
    memory_scale_threshold: float | None = None
    concurrency_scale_threshold: float | None = None
    enable_vpc_config: bool | None = None
    security_group_id: str | None = None
    switch_ids: list[str] | None = None
    vpc_id: str | None = None
    vpc_role: str | None = None
    enable_log: bool | None = None
    env: dict[str, Any] | None = None


class _FunctionBase(_Strict):
    name: str | None = None
    timeout: int | None = None
    fcmodel: FcModel | None = Field(default_factory=FcModel)
    runtime: Runtime | None = None
    entity_id: str | None = None
    instance_id: str | None = None
    instance_status: int | None = -1
    instance_url: str | None = None
    instance_token: str | None = None
    weight: float | None = None
    reward_metric_weight: dict[str, float] | None = None


class RolloutFunction(_FunctionBase):
    type: Literal["rollout"] = "rollout"


class RewardFunction(_FunctionBase):
    type: Literal["reward"] = "reward"


class GroupRewardFunction(_FunctionBase):
    type: Literal["group_reward"] = "group_reward"


def _function_tag(v: Any) -> Any:
    """The SDK's discriminator: a mapping without `type` is a rollout."""
    if isinstance(v, dict):
        return v.get("type", "rollout")
    return getattr(v, "type", "rollout")


FunctionSpec = Annotated[
    Annotated[RolloutFunction, Tag("rollout")]
    | Annotated[RewardFunction, Tag("reward")]
    | Annotated[GroupRewardFunction, Tag("group_reward")],
    Discriminator(_function_tag),
]


class JobConfig(_Strict):
    """The whole job as the SDK's YAML defines it (`TuningModel`)."""

    name: str = Field(default="agentic-rl", min_length=1, max_length=256)
    model: FoundationModel = FoundationModel()
    teacher_model: str | None = None
    functions: list[FunctionSpec] = Field(default_factory=list)
    datasets: list[DatasetSpec] = Field(default_factory=list)
    training: TrainingSpec = TrainingSpec()
    observability: Observability | None = Observability()

    @property
    def hyper_parameters(self) -> dict[str, Any]:
        return dict(self.training.hyper_parameters or {})

    @property
    def resources(self) -> dict[str, Any]:
        return dict(self.training.resources or {})

    def functions_of(self, *kinds: str) -> list[Any]:
        return [f for f in self.functions if f.type in kinds]

    @property
    def training_type(self) -> str:
        """What the SDK submits: a teacher forces `pg_opd`."""
        return "pg_opd" if self.teacher_model else self.training.type


# ---------------------------------------------------------------- line-aware YAML

KeyPath = tuple[str | int, ...]


@dataclass
class LineMap:
    """Where each key (or list item) of a YAML document starts, 1-based; and which keys `--set` changed."""

    filename: str
    lines: dict[KeyPath, int] = field(default_factory=dict)
    overridden: dict[KeyPath, str] = field(
        default_factory=dict
    )  # path a `--set` (or a flag) wrote -> its label

    def line(self, path: KeyPath) -> int | None:
        """Line of `path`, or of its longest prefix present in the document."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return None

    def where(self, path: KeyPath) -> str:
        """`--set a.b.c` for a value a `--set` wrote, `file:line` when the key (or a parent) is in the file,
        else `file: a.b[0].c`."""
        path = tuple(path)
        for n in range(len(path), 0, -1):
            if path[:n] in self.overridden:
                return self.overridden[path[:n]]
        line = self.line(path)
        if line is not None:
            return f"{self.filename}:{line}"
        return f"{self.filename}: {key_path_text(path)}" if path else self.filename


def key_path_text(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _record(node: yaml.Node, path: KeyPath, lines: dict[KeyPath, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            sub = (*path, key)
            lines.setdefault(sub, key_node.start_mark.line + 1)
            _record(value_node, sub, lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            sub = (*path, i)
            lines.setdefault(sub, item.start_mark.line + 1)
            _record(item, sub, lines)


# Syntax errors whose cause a reader cannot guess from PyYAML's words: (code, what it means, the fix).
MULTIPLE_DOCUMENTS = "yaml-multiple-documents"
TAB = "yaml-tab"


def _syntax_error(exc: yaml.MarkedYAMLError, text: str, filename: str) -> OpdError:
    """A PyYAML error as file:line, what went wrong in words, and the fix."""
    mark = exc.problem_mark or exc.context_mark
    if "could not find expected ':'" in str(exc.problem) and exc.context_mark is not None:
        mark = exc.context_mark  # the key that lacks its `: `, not the line after it
    line_no = mark.line + 1 if mark else None
    where = f"{filename}:{line_no}" if line_no else filename
    problem = " ".join(x for x in (exc.context, exc.problem) if x)
    lines = text.splitlines()
    line = lines[mark.line] if mark and mark.line < len(lines) else ""
    if "expected a single document" in problem:
        return OpdError(
            f"the file holds more than one YAML document (a `---` line at {where} starts another); the SDK "
            "reads exactly one and refuses the file (error 1001)",
            where=where,
            fix="delete that `---` line and everything that belongs to the other document, or keep one config per file",
            code=MULTIPLE_DOCUMENTS,
        )
    if "'\\t'" in problem or "\t" in line[: mark.column + 1 if mark else 0]:
        return OpdError(
            "a tab character: YAML allows only spaces for indentation and around `key: value`",
            where=where,
            fix="replace the tab(s) on that line with spaces (2 per level, as in the rest of the file)",
            code=TAB,
        )
    fix = "fix the indentation or quoting on that line"
    hint = _indent_hint(lines, mark.line) if mark else None
    if "\uff1a" in line:
        fix = "a full-width colon `：` (a Chinese input method's): YAML needs `:` followed by a space"
    elif "could not find expected ':'" in problem:
        fix = "a key without `: ` (write `key: value`, with a space after the colon), or an unclosed quote above"
    elif hint:
        fix = hint
    elif "mapping values are not allowed" in problem:
        fix = "its value holds ': ' (quote the value), or the line is indented deeper than its siblings"
    return OpdError(f"YAML syntax error: {problem}", where=where, fix=fix)


def _indent_hint(lines: list[str], index: int) -> str | None:
    """When line `index` is indented deeper than the content line above it, which opens no block: say so."""

    def indent(text: str) -> int:
        return len(text) - len(text.lstrip(" "))

    def content(text: str) -> bool:
        return bool(text.strip()) and not text.strip().startswith("#")

    if index >= len(lines) or not content(lines[index]):
        return None
    above = next((i for i in range(index - 1, -1, -1) if content(lines[i])), None)
    if above is None:
        return None
    opens = lines[above].split(" #")[0].rstrip().endswith(":") or lines[above].lstrip().startswith("- ")
    if indent(lines[index]) > indent(lines[above]) and not opens:
        return (
            f"line {index + 1} is indented deeper than line {above + 1} above it, which opens no block: one of "
            "them is at the wrong level (a key moved out of its block, or one indented too far)"
        )
    return None


def load_yaml_with_lines(text: str, filename: str = "config.yaml") -> tuple[Any, LineMap]:
    """Parse like the SDK (SafeLoader) and remember each key's line. Syntax errors -> OpdError."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(exc, text, filename) from None
    except yaml.YAMLError as exc:
        raise OpdError(f"YAML error: {exc}", where=filename) from None
    finally:
        loader.dispose()
    lines: dict[KeyPath, int] = {}
    if node is not None:
        _record(node, (), lines)
    return data, LineMap(filename, lines)


# ---------------------------------------------------------------- parsing with explained errors


@dataclass
class ConfigProblem:
    """One reason the SDK would refuse this config (its error 1001/1002), explained."""

    path: KeyPath
    where: str
    message: str
    fix: str
    kind: str = "schema"  # schema | functions-null | empty | syntax


@dataclass
class ParsedConfig:
    data: Any
    lines: LineMap
    config: JobConfig | None
    problems: list[ConfigProblem]

    @property
    def ok(self) -> bool:
        return self.config is not None and not self.problems


_FIELDS: dict[str, list[str]] = {
    "top": list(JobConfig.model_fields),
    "model": list(FoundationModel.model_fields),
    "function": list(RewardFunction.model_fields),
    "fcmodel": list(FcModel.model_fields),
    "runtime": list(Runtime.model_fields),
    "dataset": list(DatasetSpec.model_fields),
    "mount_storage": list(MountStorage.model_fields),
    "training": list(TrainingSpec.model_fields),
}


def _context_of(path: KeyPath) -> str:
    """Which model a key path lands in (to suggest the right field names)."""
    if not path:
        return "top"
    head = path[0]
    if head == "functions":
        if len(path) >= 3 and path[2] in ("fcmodel", "runtime"):
            return str(path[2])
        return "function"
    if head == "datasets":
        return "mount_storage" if len(path) >= 3 and path[2] == "mount_storage" else "dataset"
    if head in ("model", "training"):
        return str(head)
    return "top"


_PLACES = {  # where a key of each model lives, in the words of the YAML
    "top": "the top level (no indentation)",
    "model": "`model:`",
    "function": "a function (`functions: - ...`)",
    "fcmodel": "`fcmodel:` of a function",
    "runtime": "`runtime:` of a function",
    "dataset": "a dataset (`datasets: - ...`)",
    "mount_storage": "`mount_storage:` of a dataset",
    "training": "`training:`",
}


# What the service reports about a job (the SDK's `FineTuneOutput`), which a config cannot set: the docs'
# multi-experiment advice names `finetuned_output` as if it could ("job_name identifies the experiment,
# finetuned_output the output model"), and the SDK refuses a config with it whole (error 1002).
_REPORTED_BY_SERVICE = {
    "finetuned_output": "the service names the trained model itself: read it as `finetuned_output` of the "
    "finished job (`opd status JOB`); to keep experiments apart, change only `name:`",
    "finetuned_model": "the service names the trained model itself: read it as `finetuned_output` of the "
    "finished job (`opd status JOB`); to keep experiments apart, change only `name:`",
    "job_id": "the service gives each job its id: read it from the submit's result (`opd jobs` lists them)",
    "status": "the service sets a job's status: follow it with `opd watch JOB`",
    "base_model": "the student is `model:` (`model.name` or `model: <id>`); the service reports `base_model`",
    "training_file_ids": "list the data under `datasets:` (type: training); the SDK uploads it and the service "
    "reports the file ids",
    "validation_file_ids": "list the data under `datasets:` (type: validation); the SDK uploads it and the "
    "service reports the file ids",
    "create_time": "the service records when a job was created",
    "end_time": "the service records when a job ended",
}


def reported_by_service(key: str) -> str | None:
    """What to do instead of setting `key`, a field the service reports about a job; None for any other key."""
    what = _REPORTED_BY_SERVICE.get(key)
    return f"remove `{key}`: {what}" if what else None


def _home_of(key: str, here: str) -> str | None:
    """Where `key` belongs when it is not a key of `here` (a hyper-parameter one level off, `classpath`
    on the function instead of its `fcmodel`), or None for a key no level knows (a typo)."""
    from opd_nb.spec.hyperparams import PARAMS_BY_NAME

    spec = PARAMS_BY_NAME.get(key)
    if spec is not None:
        return f"`training.{spec.section}`"
    if key in ("hyper_parameters", "resources") and here != "training":
        return _PLACES["training"]
    homes = [ctx for ctx, fields in _FIELDS.items() if key in fields and ctx != here]
    return " or ".join(_PLACES[c] for c in homes) if homes else None


def _clean_loc(loc: tuple[Any, ...]) -> KeyPath:
    """Drop the union tags pydantic inserts after `functions[i]`."""
    out: list[str | int] = []
    for i, part in enumerate(loc):
        if i == 2 and loc[0] == "functions" and part in ("rollout", "reward", "group_reward"):
            continue
        out.append(part)
    return tuple(out)


def _explain(err: Mapping[str, Any], lines: LineMap) -> ConfigProblem:
    path = _clean_loc(tuple(err.get("loc", ())))
    etype = err.get("type", "")
    where = lines.where(path)
    dotted = key_path_text(path)
    if etype == "extra_forbidden":
        key = str(path[-1]) if path else "?"
        ctx = _context_of(path[:-1])
        home = _home_of(key, ctx)
        reported = reported_by_service(key) if ctx == "top" else None
        if ctx == "top" and key == "job_name":
            fix = "the YAML key is `name` (the SDK appends a random suffix)"
        elif reported:
            return ConfigProblem(
                path,
                where,
                f"`{key}` is what the service reports about a job, not a config key: the SDK refuses the whole "
                "config (error 1002)",
                reported,
            )
        elif home:
            return ConfigProblem(
                path,
                where,
                f"`{key}` is at the wrong level (`{dotted}`): it belongs under {home}, and here the SDK refuses "
                "the whole config (error 1002)",
                f"move `{key}` under {home} (check its indentation)",
                kind="misplaced",
            )
        else:
            near = difflib.get_close_matches(key, _FIELDS[ctx], n=1, cutoff=0.6)
            fix = f"did you mean `{near[0]}`?" if near else f"allowed keys here: {', '.join(_FIELDS[ctx])}"
        return ConfigProblem(
            path, where, f"unknown key `{dotted}`: the SDK refuses the whole config (error 1002)", fix
        )
    if etype in ("union_tag_invalid", "union_tag_not_found"):
        return ConfigProblem(
            path,
            where,
            f"`{dotted}.type` must be rollout, reward or group_reward",
            "set `type: reward` (or rollout / group_reward)",
        )
    if etype == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        return ConfigProblem(
            path, where, f"`{dotted}` is {err.get('input')!r}; expected {expected}", f"use one of {expected}"
        )
    if etype in ("string_too_short", "string_too_long") and path == ("name",):
        return ConfigProblem(
            path,
            where,
            "the job name must be 1 to 256 characters",
            "set `name:` to a short id such as my-opd-job",
            kind="name",
        )
    if path == ("model",) and isinstance(err.get("input"), str):
        name = err["input"]
        return ConfigProblem(
            path,
            where,
            f"`model` is the text {name!r}; the SDK expects a mapping with the model id under `name`",
            f"write `model: {{name: {name}}}` (or `name: {name}` indented under `model:`)",
        )
    msg = err.get("msg", "invalid value")
    return ConfigProblem(
        path,
        where,
        f"`{dotted or 'config'}`: {msg} (got {err.get('input')!r})",
        "fix the value to the type the SDK expects (see `opd config --help` and the docs)",
    )


def apply_overrides(
    data: dict[str, Any], sets: Mapping[str, Any], lines: LineMap, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """`data` with each `--set KEY=VALUE` written at its dotted path (mappings on the way are created);
    `lines` remembers the paths, so findings about them point at the `--set` (or at the flag `labels`
    names for a key, e.g. ``{"teacher_model": "--teacher-model"}``). The grammar and the key rules are
    :mod:`opd_nb.spec.sets`; here only what the YAML's own shape allows is refused."""
    out = copy.deepcopy(data)
    for key, value in sets.items():
        node = out
        *parents, leaf = key.split(".")
        for i, part in enumerate(parents):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                path = ".".join(parents[: i + 1])
                raise OpdError(
                    f"--set {key}: `{path}` is {child!r} in the config, not a mapping",
                    where=lines.where(tuple(parents[: i + 1])),
                    fix=f"set `{path}` itself, or fix it in the YAML",
                )
            node = child
        if isinstance(node.get(leaf), dict) and not isinstance(value, dict):
            inner = next(iter(node[leaf]), "key")
            raise OpdError(
                f"--set {key}={json.dumps(value, default=str)}: `{key}` is a mapping in the config, not a value",
                where="--set",
                fix=f"set one key inside it, e.g. --set {key}.{inner}=VALUE",
            )
        node[leaf] = value
        lines.overridden[tuple(key.split("."))] = (labels or {}).get(key, f"--set {key}")
    return out


def parse_config_text(
    text: str,
    filename: str = "config.yaml",
    *,
    sets: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
) -> ParsedConfig:
    """Parse a job YAML without raising for schema problems: every problem comes back explained.

    `sets` (full dotted keys, as :func:`opd_nb.spec.sets.parse_sets` returns them) are applied over the
    file before the schema is checked, as submit_job.py's `--set` does (`labels`: see apply_overrides).
    """
    try:
        data, lines = load_yaml_with_lines(text, filename)
    except OpdError as exc:
        lm = LineMap(filename)
        return ParsedConfig(
            None,
            lm,
            None,
            [ConfigProblem((), exc.where or filename, exc.message, exc.fix or "", kind=exc.code or "syntax")],
        )
    if sets and isinstance(data, dict):
        data = apply_overrides(data, sets, lines, labels)
    if data is None:
        return ParsedConfig(
            None,
            lines,
            None,
            [
                ConfigProblem(
                    (),
                    filename,
                    "the config is empty (the SDK fails with error 1001)",
                    "write at least `name`, `model`, `teacher_model` and `datasets`",
                    kind="empty",
                )
            ],
        )
    if not isinstance(data, dict):
        return ParsedConfig(
            data,
            lines,
            None,
            [
                ConfigProblem(
                    (),
                    f"{filename}:1",
                    f"the config must be a mapping of keys, not a {type(data).__name__}",
                    "start the file with `name: my-opd-job`",
                    kind="schema",
                )
            ],
        )
    problems: list[ConfigProblem] = []
    if "functions" in data and data["functions"] is None:
        problems.append(
            ConfigProblem(
                ("functions",),
                lines.where(("functions",)),
                "`functions: null` is rejected by the SDK's loader (error 1002), although the docs suggest it",
                "delete the `functions:` line for pure distillation",
                kind="functions-null",
            )
        )
    try:
        config = JobConfig.model_validate(data)
    except ValidationError as exc:
        config = None
        for err in exc.errors():
            loc = tuple(err.get("loc", ()))
            if loc and loc[0] == "functions" and data.get("functions") is None:
                continue  # already explained above
            problems.append(_explain(err, lines))
    return ParsedConfig(data, lines, config, problems)


NOT_UTF8 = "yaml-encoding"  # OpdError.code of a config that is not UTF-8 text


def read_config_text(path: str | Path) -> str:
    """The config's text as the SDK reads it (UTF-8); other bytes -> OpdError at the first bad line:column."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise OpdError(f"cannot read the config: {exc.strerror or exc}", where=str(p)) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        column = exc.start - (before.rfind(b"\n") + 1) + 1
        if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
            what = "UTF-16 text (a byte-order mark FF FE / FE FF starts the file)"
        else:
            what = f"not UTF-8 text: byte 0x{raw[exc.start]:02x} (an editor's GBK or Latin-1 encoding, most likely)"
        raise OpdError(
            f"{what}; the SDK opens the config as UTF-8 and fails with error 1001",
            where=f"{p}:{line}:{column}",
            fix="save the file as UTF-8 (e.g. `iconv -f GBK -t UTF-8 config.yaml -o config.yaml.new`)",
            code=NOT_UTF8,
        ) from None


DEFAULT_CONFIG = "config.yaml"


def workspace_config(workspace: str | Path, config: str = DEFAULT_CONFIG) -> tuple[Path, str]:
    """(workspace folder, config name) for a path a user typed: the folder, or the config file in it.

    `opd check ws/config.yaml` is a form the README shows; every verb that takes a workspace accepts it.
    A `--config` that names a different file than the path is refused rather than guessed.
    """
    ws = Path(workspace).expanduser()
    if ws.suffix in (".yaml", ".yml") and not ws.is_dir():
        if config not in (DEFAULT_CONFIG, ws.name) and Path(config).name != ws.name:
            raise OpdError(
                f"two configs given: {ws} and --config {config}",
                where="--config",
                fix=f"pass the workspace folder with --config {config}, or just {ws}",
            )
        return ws.parent, ws.name
    return ws, config


def require_config_file(ws: Path, config: str = DEFAULT_CONFIG) -> Path:
    """The job YAML `config` in workspace `ws`; one that is not there is one line naming it and the fix
    (every verb that takes `-c/--config` and runs a job's inputs: submit, probe)."""
    path = ws / config
    if not path.is_file():
        fix = (
            "pass the workspace folder (create one with `opd new`)"
            if config == DEFAULT_CONFIG
            else f"pass -c/--config with a job YAML that is in {ws} (e.g. config.yaml)"
        )
        raise OpdError(f"no {config} in {ws}", fix=fix)
    return path


def load_config(path: str | Path) -> JobConfig:
    """Load a job YAML like the SDK would; any mistake -> OpdError with `file:line` and a fix."""
    p = Path(path)
    if not p.is_file():
        raise OpdError(
            f"config file not found: {p}", where=str(p), fix="create it with `opd new` or pass the right path"
        )
    parsed = parse_config_text(read_config_text(p), str(p))
    if parsed.problems:
        first = parsed.problems[0]
        more = f" (+{len(parsed.problems) - 1} more; run `opd check`)" if len(parsed.problems) > 1 else ""
        raise OpdError(first.message + more, where=first.where, fix=first.fix)
    assert parsed.config is not None
    return parsed.config
