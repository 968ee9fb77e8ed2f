"""YAML rules: what PyYAML (the SDK's loader) accepts in config.yaml but the author did not mean.

These read the file's own structure before any field is: the node tree PyYAML composes, with each
scalar's resolved type and its line. The SDK loads with ``yaml.SafeLoader`` (YAML 1.1, dashscope-sdk.md
§4.1), so ``no`` is false, ``010`` is 8, ``1:30`` is 90, ``2024-01-05`` a date, an empty value null,
and a repeated key silently keeps its last value. Syntax (tabs, a second document), encoding and the
wrong-level keys are explained where the file is parsed (:mod:`opd_nb.spec.job`); the rest is here.
"""

from __future__ import annotations

import re
import types
import typing
import unicodedata
from typing import Any, Literal

import yaml
from pydantic import BaseModel

from opd_nb.checks.context import CheckContext
from opd_nb.spec.hyperparams import PARAMS_BY_NAME
from opd_nb.spec.job import JobConfig, KeyPath, RewardFunction, key_path_text

Kind = Literal["text", "number", "bool", "mapping", "list", "any"]
_TAG = "tag:yaml.org,2002:"
_OCTAL = re.compile(r"^[-+]?0[0-7_]+$")  # YAML 1.1: a leading zero is octal (010 is 8)
_OCTAL_12 = re.compile(r"^[-+]?0o[0-7]+$")  # YAML 1.2's octal: YAML 1.1 reads it as text
_SECTIONS = ("hyper_parameters", "resources")


def check_yaml_structure(ctx: CheckContext) -> None:
    """Every mapping and scalar of the file, against what its key expects."""
    if not ctx.text or ctx.parsed.problems and ctx.parsed.data is None:
        return
    try:
        root = yaml.compose(ctx.text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return  # a syntax error: already explained by the parser
    if root is not None:
        _walk(ctx, root, (), set())


def _walk(ctx: CheckContext, node: yaml.Node, path: KeyPath, seen: set[int]) -> None:
    if id(node) in seen:  # an alias: its anchor was checked where it was written
        return
    seen.add(id(node))
    if path and _shape(ctx, node, path):
        return
    if isinstance(node, yaml.MappingNode):
        _mapping(ctx, node, path)
        for key_node, value_node in node.value:
            if key_node.tag == _TAG + "merge":
                continue
            key = str(key_node.value)
            sub = (*path, key)
            if sub in ctx.parsed.lines.overridden:
                continue  # a `--set` replaced what the file says here
            _key(ctx, key_node, sub)
            if isinstance(value_node, yaml.ScalarNode):
                _scalar(ctx, value_node, sub, node)
            else:
                _walk(ctx, value_node, sub, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            if isinstance(item, yaml.ScalarNode):
                _scalar(ctx, item, (*path, i), None)
            else:
                _walk(ctx, item, (*path, i), seen)


def _shape(ctx: CheckContext, node: yaml.Node, path: KeyPath) -> bool:
    """A list written where a mapping belongs (`- ` before each key) or keys where a list belongs (no `- `)."""
    kind, _ = expected_kind(path)
    dotted = key_path_text(path)
    if kind == "mapping" and isinstance(node, yaml.SequenceNode):
        problem = f"`{dotted}` is written as a list (its lines start with `- `), but it is a mapping of keys"
        fix = f"remove the `- ` before the keys under `{path[-1]}:`"
    elif kind == "list" and isinstance(node, yaml.MappingNode):
        problem = f"`{dotted}` is written as a mapping, but it is a list: each item starts with `- `"
        fix = f"start each item under `{path[-1]}:` with `- ` (e.g. `- type: training`)"
    else:
        return False
    ctx.report.add(
        "config.yaml-block-shape", "error", _at(ctx, node), problem + " (the SDK refuses it, error 1002)", fix
    )
    ctx.explained.add(path)
    return True


def _at(ctx: CheckContext, node: yaml.Node) -> str:
    return f"{ctx.config_name}:{node.start_mark.line + 1}"


def _source(ctx: CheckContext, node: yaml.Node) -> str:
    return ctx.text[node.start_mark.index : node.end_mark.index].strip()


def _mapping(ctx: CheckContext, node: yaml.MappingNode, path: KeyPath) -> None:
    """Repeated keys (the last one wins without a word), and a `<<:` merge of several anchors that bring
    the same key with different values (the first one listed wins: not what a later-wins reader expects)."""
    first: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    for key_node, value_node in node.value:
        if key_node.tag == _TAG + "merge":
            _merge_sources(ctx, path, key_node, value_node, set(first))
            continue
        key = str(key_node.value)
        if key in first:
            _duplicate(ctx, path, key, first[key], (key_node, value_node))
        else:
            first[key] = (key_node, value_node)


def _merge_sources(
    ctx: CheckContext, path: KeyPath, key_node: yaml.Node, value_node: yaml.Node, written: set[str]
) -> None:
    if not isinstance(value_node, yaml.SequenceNode):
        return
    brought: dict[str, yaml.Node] = {}
    for src in value_node.value:
        if not isinstance(src, yaml.MappingNode):
            continue
        for k, v in src.value:
            key = str(k.value)
            if key in brought and key not in written and _source(ctx, brought[key]) != _source(ctx, v):
                ctx.report.add(
                    "config.yaml-merge-conflict",
                    "warning",
                    _at(ctx, key_node),
                    f"the merge `{_source(ctx, key_node)}: {_source(ctx, value_node)}` brings "
                    f"`{key_path_text((*path, key))}` twice (lines {brought[key].start_mark.line + 1} and "
                    f"{v.start_mark.line + 1}): YAML keeps the anchor listed first ({_source(ctx, brought[key])}), "
                    "not the later one",
                    f"write `{key}:` in the mapping itself to choose, or list the anchor that should win first",
                )
            brought.setdefault(key, v)


def _duplicate(
    ctx: CheckContext,
    path: KeyPath,
    key: str,
    first: tuple[yaml.Node, yaml.Node],
    again: tuple[yaml.Node, yaml.Node],
) -> None:
    one, two = _source(ctx, first[1]), _source(ctx, again[1])
    same = one == two
    line_one, line_two = first[0].start_mark.line + 1, again[0].start_mark.line + 1
    shown = key_path_text((*path, key))
    ctx.report.add(
        "config.yaml-duplicate-key",
        "warning" if same else "error",
        _at(ctx, again[0]),
        f"`{shown}` is written twice (lines {line_one} and {line_two}): YAML silently keeps the last "
        + ("(both say the same)" if same else f"value, so line {line_one} is ignored"),
        f"delete one of them (line {line_one} or {line_two})"
        + ("" if same else "; if both blocks were meant, merge their keys into one"),
    )


_INVISIBLE = {"\u00a0": "a no-break space", "\u3000": "a full-width space", "\u200b": "a zero-width space",
              "\ufeff": "a byte-order mark", "\u200e": "a left-to-right mark", "\u2060": "a word joiner"}  # fmt: skip


def _invisible(ctx: CheckContext, node: yaml.ScalarNode, path: KeyPath, what: str) -> bool:
    """Text that holds a character no one sees (pasted from a web page or a chat), or stray spaces in quotes:
    a model id, a key or a path that looks right and matches nothing."""
    text = str(node.value)
    odd = next((c for c in text if c in _INVISIBLE or unicodedata.category(c) in ("Cf", "Zl", "Zp")), None)
    padded = node.style in ("'", '"') and text != text.strip() and expected_kind(path)[0] == "text"
    if odd is None and not padded:
        return False
    name = _INVISIBLE.get(odd or "", f"the invisible character U+{ord(odd):04X}" if odd else "")
    problem = f"holds {name}" if odd else "has spaces inside its quotes"
    clean = "".join(c for c in text if c != odd).strip()
    ctx.report.add(
        "config.yaml-invisible-character",
        "error",
        _at(ctx, node),
        f"{what} {text!r} {problem}: it matches nothing the text without it would match",
        f"retype it as {clean!r}",
    )
    ctx.explained.add(path)
    return True


def _key(ctx: CheckContext, key_node: yaml.Node, path: KeyPath) -> None:
    """A key that YAML reads as something other than text (`on:` is true, `1:` is 1), or holds an invisible character."""
    if isinstance(key_node, yaml.ScalarNode) and _invisible(ctx, key_node, path, "the key"):
        return
    if isinstance(key_node, yaml.ScalarNode) and key_node.style is None and key_node.tag != _TAG + "str":
        value = yaml.safe_load(key_node.value)
        ctx.report.add(
            "config.yaml-implicit-type",
            "error",
            _at(ctx, key_node),
            f"the key `{key_node.value}` is read as the {_type_words(key_node.tag)} {_shown(value)}, not as the text "
            f"{key_node.value!r}: no config key matches it",
            f'quote it: "{key_node.value}":',
        )
        ctx.explained.update({path, (*path[:-1], value)})  # the schema sees the loaded key


def _scalar(ctx: CheckContext, node: yaml.ScalarNode, path: KeyPath, parent: yaml.MappingNode | None) -> None:
    kind, nullable = expected_kind(path)
    tag = node.tag.removeprefix(_TAG)
    if tag == "null" and node.style is None:
        _null(ctx, node, path, kind, nullable, parent)
        return
    if tag == "str" and _invisible(ctx, node, path, f"`{key_path_text(path)}`"):
        return
    if node.style is not None or tag == "str" and not _OCTAL_12.match(node.value):
        return  # quoted text, or plain text YAML did not reinterpret
    if kind == "text" and tag != "str":
        value = yaml.safe_load(node.value)
        ctx.report.add(
            "config.yaml-implicit-type",
            "error",
            _at(ctx, node),
            f"`{key_path_text(path)}: {node.value}` is read as the {_type_words(node.tag)} {_shown(value)}"
            f"{_why(node.value, tag)}, not as the text {node.value!r} the field needs",
            f'quote it: {path[-1]}: "{node.value}"',
        )
        ctx.explained.add(path)
    elif kind == "number" and tag in ("int", "float", "str") or kind == "any" and tag in ("int", "float"):
        _number_form(ctx, node, path, tag)


def _number_form(ctx: CheckContext, node: yaml.ScalarNode, path: KeyPath, tag: str) -> None:
    """A number YAML 1.1 reads as another number (010, 1:30), or as text (0o17)."""
    text = node.value.strip()
    if tag == "str":
        meant = int(text.replace("0o", ""), 8)
        problem, fix = f"is read as the text {text!r} (YAML 1.1 has no `0o` octal)", f"write {meant}"
    elif ":" in text:
        value = yaml.safe_load(text)
        problem, fix = (
            f"is read as {_shown(value)}: YAML 1.1 reads `a:b` as a base-60 number",
            "write the number of seconds/steps you mean, or quote it if it is text",
        )
    elif _OCTAL.match(text) and text.lstrip("+-") not in ("0", "0_"):
        value = yaml.safe_load(text)
        problem, fix = (
            f"is read as {_shown(value)}: YAML 1.1 reads a number with a leading 0 as octal",
            f"write {int(text.replace('_', ''), 10)} (no leading zero)",
        )
    else:
        return
    ctx.report.add(
        "config.yaml-number-form",
        "error",
        _at(ctx, node),
        f"`{key_path_text(path)}: {text}` {problem}",
        fix,
    )
    ctx.explained.add(path)


def _null(
    ctx: CheckContext,
    node: yaml.ScalarNode,
    path: KeyPath,
    kind: Kind | None,
    nullable: bool,
    parent: yaml.MappingNode | None,
) -> None:
    """An empty value (or `~`/`null`): a dropped hyper-parameter, or a block whose keys lost their indentation."""
    dotted = key_path_text(path)
    if len(path) == 3 and path[:2] in (("training", "hyper_parameters"), ("training", "resources")):
        spec = PARAMS_BY_NAME.get(str(path[-1]))
        default = f" {spec.default!r}" if spec is not None and spec.default is not None else ""
        ctx.report.add(
            "config.yaml-null-value",
            "warning",
            _at(ctx, node),
            f"`{path[-1]}:` has no value ({_null_words(ctx, node)}): the SDK drops the key and the service uses its "
            f"default{default}",
            "write its value, or delete the line",
        )
        ctx.explained.add(path)
        return
    if nullable or kind is None or path == ("functions",):
        return  # optional (teacher_model, file_id, runtime ...), or the functions-null rule's
    siblings = _keys_after(parent, node) if parent is not None else []
    children = [k for k in siblings if expected_kind((*path, k))[0] is not None]
    ctx.report.add(
        "config.yaml-null-value",
        "error",
        _at(ctx, node),
        f"`{dotted}:` has nothing under it (YAML reads it as null) and the SDK refuses the config (error 1002)"
        + (f"; {', '.join(children[:3])} below it belong inside it" if children else ""),
        f"indent {', '.join(children[:3])} two more spaces under `{path[-1]}:`"
        if children
        else f"write its {kind}, or delete the line",
    )
    ctx.explained.add(path)


def _null_words(ctx: CheckContext, node: yaml.Node) -> str:
    written = _source(ctx, node)
    return f"YAML reads `{written}` as null" if written else "YAML reads an empty value as null"


def _shown(value: Any) -> str:
    """A loaded scalar as YAML would print it (false, 8, 2024-01-05), for a message."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _keys_after(parent: yaml.MappingNode, node: yaml.Node) -> list[str]:
    keys = [str(k.value) for k, _ in parent.value]
    index = next(i for i, (_, v) in enumerate(parent.value) if v is node)
    return keys[index + 1 :]


def _type_words(tag: str) -> str:
    return {"bool": "boolean", "int": "number", "float": "number", "timestamp": "date", "null": "null"}.get(
        tag.removeprefix(_TAG), tag.removeprefix(_TAG)
    )


def _why(text: str, tag: str) -> str:
    if tag == "bool":
        return " (YAML 1.1 reads yes/no/on/off as booleans)"
    if tag == "int" and _OCTAL.match(text.strip()):
        return " (a leading 0 is octal in YAML 1.1)"
    if ":" in text and tag in ("int", "float"):
        return " (a:b is a base-60 number in YAML 1.1)"
    return ""


# ---------------------------------------------------------------- what each key expects (from the schema)


def expected_kind(path: KeyPath) -> tuple[Kind | None, bool]:
    """(what the key at `path` holds, whether null is allowed) as the SDK's models and the OPD table say;
    (None, True) for a key no model knows."""
    if len(path) == 3 and path[0] == "training" and path[1] in _SECTIONS:
        spec = PARAMS_BY_NAME.get(str(path[2]))
        if spec is None or spec.section != path[1]:
            return None, True
        return {"str": "text", "int": "number", "float": "number", "bool": "bool"}[spec.type], True  # pyright: ignore[reportReturnType]
    annotation: Any = JobConfig
    for part in path:
        annotation = _step(annotation, part)
        if annotation is None:
            return None, True
    return _kind(annotation)


def _unwrap(annotation: Any) -> tuple[list[Any], bool]:
    """The non-None members of an annotation (Optional, unions, Annotated unwrapped) and whether None is one."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        members, nullable = [], False
        for arg in typing.get_args(annotation):
            inner, null = _unwrap(arg)
            members += inner
            nullable = nullable or null or arg is type(None)
        return [m for m in members if m is not type(None)], nullable
    return ([] if annotation is type(None) else [annotation]), annotation is type(None)


def _step(annotation: Any, part: str | int) -> Any:
    members, _ = _unwrap(annotation)
    for member in members:
        origin = typing.get_origin(member)
        if isinstance(member, type) and issubclass(member, BaseModel) and isinstance(part, str):
            model = RewardFunction if member.__name__.endswith("Function") else member
            field = model.model_fields.get(part)
            if field is not None:
                return field.annotation
        elif origin is list and isinstance(part, int):
            return typing.get_args(member)[0]
        elif origin is dict and isinstance(part, str):
            return typing.get_args(member)[1]
    return None


def _kind(annotation: Any) -> tuple[Kind | None, bool]:
    members, nullable = _unwrap(annotation)
    kinds: set[str] = set()
    for member in members:
        origin = typing.get_origin(member)
        if member is str or origin is Literal and all(isinstance(a, str) for a in typing.get_args(member)):
            kinds.add("text")
        elif member in (int, float):
            kinds.add("number")
        elif member is bool:
            kinds.add("bool")
        elif origin is list:
            kinds.add("list")
        elif origin is dict or isinstance(member, type) and issubclass(member, BaseModel):
            kinds.add("mapping")
        else:
            kinds.add("any")
    if len(kinds) != 1:
        return ("any" if kinds else None), nullable
    return kinds.pop(), nullable  # pyright: ignore[reportReturnType]
