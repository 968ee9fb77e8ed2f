"""Edit keys under ``training.<section>`` of a job YAML by lines, so comments and layout survive.

A config.yaml is documentation as much as data (the template explains every key in comments), so
a tool that changes one value must not re-dump the whole file. This edits only the lines of the
keys that change: a value is replaced in place (its trailing comment kept), a commented-out key
(``# algorithm: grpo``) is uncommented where it stands, a new key is appended to its section and
a key set to None is deleted. Only a layout it cannot follow falls back to a full re-dump.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from opd_nb.errors import OpdError


def yaml_scalar(value: Any) -> str:
    """A YAML scalar that reads back as the same Python value (1e-6 -> 1.0e-06, not the string)."""
    return (
        yaml.safe_dump(value, default_flow_style=True, allow_unicode=True)
        .splitlines()[0]
        .removesuffix(" ...")
        .strip()
    )


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _is_content(line: str) -> bool:
    """A line that holds YAML (not blank, not a comment)."""
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """Index just past the last content line of the block whose header is lines[start]."""
    last = start + 1
    for i in range(start + 1, len(lines)):
        if _is_content(lines[i]):
            if _indent(lines[i]) <= indent:
                break
            last = i + 1
    return last


def _find_header(lines: list[str], key: str, lo: int, hi: int, indent: int | None) -> int | None:
    pat = re.compile(rf"^(\s*){re.escape(key)}:\s*(#.*)?$")
    for i in range(lo, hi):
        m = pat.match(lines[i])
        if m and (indent is None or len(m.group(1)) == indent):
            return i
    return None


@dataclass
class _Section:
    """Where ``training.<section>`` sits: header line, its indent, end of its keys, key padding."""

    head: int
    head_indent: int
    end: int
    pad: str


def _locate(lines: list[str], section: str) -> _Section | None:
    top = _find_header(lines, "training", 0, len(lines), 0)
    if top is None:
        return None
    head = _find_header(lines, section, top + 1, _block_end(lines, top, 0), None)
    if head is None:
        return None
    head_indent = _indent(lines[head])
    end = _block_end(lines, head, head_indent)
    child = next((_indent(lines[i]) for i in range(head + 1, end) if _is_content(lines[i])), None)
    return _Section(head, head_indent, end, " " * (head_indent + 2 if child is None else child))


def _comments_end(lines: list[str], sec: _Section) -> int:
    """Past the comment lines trailing the section's last key (commented-out keys may sit there)."""
    end = sec.end
    while end < len(lines) and (
        not lines[end].strip()
        or (lines[end].lstrip().startswith("#") and _indent(lines[end]) > sec.head_indent)
    ):
        end += 1
    return end


def _with_comment(new: str, old: str, comment: str | None) -> str:
    """`new`, with the trailing comment of `old` kept at its column."""
    if not comment:
        return new
    column = old.index(comment.lstrip()) if comment.lstrip() in old else len(new) + 1
    return new.ljust(max(column, len(new) + 1)) + comment.lstrip()


def _set_key(lines: list[str], sec: _Section, key: str, value: Any) -> None:
    """Set (or, for None, delete) one key of the section in `lines`, in place."""
    pat = re.compile(rf"^{sec.pad}{re.escape(key)}:(\s*)([^#]*?)(\s*#.*)?$")
    hit = next((i for i in range(sec.head + 1, sec.end) if pat.match(lines[i])), None)
    if value is None:
        if hit is not None:
            del lines[hit]
            sec.end -= 1
        return
    new = f"{sec.pad}{key}: {yaml_scalar(value)}"
    if hit is not None:
        found = pat.match(lines[hit])  # it matched when `hit` was found
        lines[hit] = _with_comment(new, lines[hit], found.group(3) if found else None)
        return
    commented = re.compile(rf"^{sec.pad}#\s*{re.escape(key)}:(\s*)([^#]*?)(\s*#.*)?$")
    for i in range(sec.head + 1, _comments_end(lines, sec)):
        m = commented.match(lines[i])
        if m:
            lines[i] = _with_comment(new, lines[i], m.group(3))
            return
    lines.insert(sec.end, new)
    sec.end += 1


def edit_section(text: str, section: str, values: dict[str, Any]) -> str | None:
    """Set/remove keys under ``training.<section>`` by editing lines; None if the layout is unusual."""
    lines = text.splitlines()
    sec = _locate(lines, section)
    if sec is None:
        return None
    for key, value in values.items():
        _set_key(lines, sec, key, value)
    return "\n".join(lines) + ("\n" if text.endswith("\n") or not text else "")


def _redump(text: str, section: str, values: dict[str, Any]) -> str:
    """The fallback: load, change, dump (comments are lost, values are right)."""
    data = yaml.safe_load(text) or {}
    if not isinstance(data, dict):
        raise OpdError("config.yaml is not a mapping", fix="start from the template's config.yaml")
    training = data.get("training")
    if not isinstance(training, dict):
        training = data["training"] = {}
    sec = training.get(section) or {}
    training[section] = sec
    for key, value in values.items():
        if value is None:
            sec.pop(key, None)
        else:
            sec[key] = value
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def apply_values(text: str, values: dict[str, dict[str, Any]]) -> str:
    """`text` with `values` ({section: {key: value|None}}) applied; falls back to a full re-dump."""
    out = text
    for section, vals in values.items():
        edited = edit_section(out, section, vals)
        out = edited if edited is not None else _redump(out, section, vals)
    return out
