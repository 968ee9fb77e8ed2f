"""Data in other shapes -> Bailian's OPD JSONL (`opd data convert`), with every dropped row and why.

Why: most chat data sets come as ShareGPT, Alpaca, OpenAI-chat or prompt/completion records, while an
OPD row is a *prompt* (`messages` ending with the user turn) plus the ground truth in
`rollout_extra.solution`. Each record's prompt is the conversation up to its last user turn; the answer
after it (ShareGPT's last `gpt` turn, Alpaca's `output`, the last assistant message, `completion`)
becomes the solution, or `--solution-field` names the record's field that holds it. A record that
cannot give a prompt is dropped and counted under its reason, with its line (the file line where the
record starts, in a pretty-printed JSON array too); a row kept without an answer is listed the same
way. The output is then scanned with the same rules as `opd check`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from opd_nb.errors import OpdError
from opd_nb.results import ResultMixin
from opd_nb.spec.dataset import scan_jsonl
from opd_nb.views import render

Format = Literal["sharegpt", "alpaca", "openai-chat", "prompt-completion"]
FORMATS: tuple[str, ...] = ("sharegpt", "alpaca", "openai-chat", "prompt-completion")
# ShareGPT speaker names -> chat roles (the common variants of the format).
SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "model": "assistant",
    "function_call": "assistant",
    "observation": "tool",
    "tool": "tool",
    "function": "tool",
}
OPENAI_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


class Dropped(BaseModel):
    """Records of one kind (left out for one reason, or kept without a solution): how many, and the
    first lines (1-based lines of the input file, where each record starts)."""

    count: int = 0
    lines: list[int] = Field(default_factory=list)

    def add(self, line: int) -> None:
        self.count += 1
        if len(self.lines) < 10:
            self.lines.append(line)


class Conversion(ResultMixin, BaseModel):
    """What `opd data convert` did: rows written, rows dropped (by reason), and the output's own check."""

    source: str
    output: str
    format: str
    read: int = 0
    written: int = 0
    with_solution: int = 0
    without_solution: Dropped = Field(default_factory=Dropped)  # rows kept with no answer to use as solution
    dropped: dict[str, Dropped] = Field(default_factory=dict)
    output_problems: list[str] = Field(default_factory=list)  # findings of the scan of the written file

    @property
    def ok(self) -> bool:
        return self.written > 0 and not self.output_problems

    def drop(self, reason: str, line: int) -> None:
        self.dropped.setdefault(reason, Dropped()).add(line)

    def __str__(self) -> str:
        lines = [
            f"{self.source} ({self.format}) -> {self.output}: {self.written} of {self.read} record(s) written, "
            f"{self.with_solution} with rollout_extra.solution"
        ]
        for reason, d in sorted(self.dropped.items(), key=lambda kv: -kv[1].count):
            lines.append(f"  dropped {d.count}: {reason} ({_lines_text(d)})")
        if self.without_solution.count:
            lines.append(
                f"  kept {self.without_solution.count} without a solution (empty or missing answer; "
                f"{_lines_text(self.without_solution)}): a reward that reads rollout_extra.solution gets none"
            )
        lines += [f"  output problem: {p}" for p in self.output_problems]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = [(f"dropped: {reason}", d.count, _lines_text(d)) for reason, d in self.dropped.items()]
        if self.without_solution.count:
            ns = self.without_solution
            rows.append(("kept without a solution (empty or missing answer)", ns.count, _lines_text(ns)))
        head = (
            f"<div><b>{render.esc(self.source)}</b> ({render.esc(self.format)}) -> <code>{render.esc(self.output)}"
            f"</code>: {self.written} of {self.read} record(s) written, {self.with_solution} with a solution</div>"
        )
        problems = "".join(f'<div class="bad">{render.esc(p)}</div>' for p in self.output_problems)
        dropped = render.table(["records", "count", "where"], rows) if rows else ""
        return render.box(head + dropped + problems)


def _lines_text(d: Dropped) -> str:
    """'line 8' or 'lines 13, 19, ...' (the first ten)."""
    more = ", ..." if d.count > len(d.lines) else ""
    return f"line{'s' if d.count > 1 else ''} {', '.join(map(str, d.lines))}{more}"


class _Skip(Exception):
    """This record cannot become an OPD row; the message is the reason (counted, not raised)."""


def _text(content: Any) -> str:
    """A message's text: a string, or OpenAI content parts joined."""
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type", "text") == "text"
        )
    return "" if content is None else str(content)


def _prompt_and_answer(messages: list[dict[str, str]]) -> tuple[list[dict[str, str]], str | None]:
    """(messages through the last user turn, the assistant answer right after it or None)."""
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
    if last_user is None:
        raise _Skip("no user turn")
    answers = [
        m["content"] for m in messages[last_user + 1 :] if m["role"] == "assistant" and m["content"].strip()
    ]
    return messages[: last_user + 1], (answers[-1] if answers else None)


def _turns(raw: Any, roles: dict[str, str], role_key: str, text_key: str) -> list[dict[str, str]]:
    if not isinstance(raw, list) or not raw:
        raise _Skip("no conversation list")
    out = []
    for turn in raw:
        if not isinstance(turn, dict):
            raise _Skip("a turn that is not an object")
        name = str(turn.get(role_key, "")).strip().lower()
        if name not in roles:
            raise _Skip(f"unknown role {name!r}")
        text = _text(turn.get(text_key))
        if roles[name] in ("system", "user") and not text.strip():
            raise _Skip(f"empty {roles[name]} message")
        out.append({"role": roles[name], "content": text})
    return out


def _sharegpt(rec: dict[str, Any]) -> tuple[list[dict[str, str]], str | None]:
    raw = rec.get("conversations", rec.get("conversation", rec.get("items")))
    messages = _turns(raw, SHAREGPT_ROLES, "from", "value")
    if isinstance(rec.get("system"), str) and rec["system"].strip() and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": rec["system"]})
    return _prompt_and_answer(messages)


def _openai(rec: dict[str, Any]) -> tuple[list[dict[str, str]], str | None]:
    return _prompt_and_answer(_turns(rec.get("messages"), OPENAI_ROLES, "role", "content"))


def _alpaca(rec: dict[str, Any]) -> tuple[list[dict[str, str]], str | None]:
    instruction, extra = _text(rec.get("instruction")).strip(), _text(rec.get("input")).strip()
    if not instruction and not extra:
        raise _Skip("empty instruction and input")
    messages = []
    if isinstance(rec.get("system"), str) and rec["system"].strip():
        messages.append({"role": "system", "content": rec["system"]})
    for pair in rec.get("history") or []:  # [[user, assistant], ...]
        if isinstance(pair, list | tuple) and len(pair) == 2:
            messages += [
                {"role": "user", "content": str(pair[0])},
                {"role": "assistant", "content": str(pair[1])},
            ]
    messages.append({"role": "user", "content": "\n\n".join(t for t in (instruction, extra) if t)})
    output = _text(rec.get("output")).strip()
    return messages, output or None


def _prompt_completion(rec: dict[str, Any]) -> tuple[list[dict[str, str]], str | None]:
    prompt = _text(rec.get("prompt")).strip()
    if not prompt:
        raise _Skip("empty prompt")
    completion = _text(rec.get("completion")).strip()
    return [{"role": "user", "content": prompt}], completion or None


READERS: dict[str, Callable[[dict[str, Any]], tuple[list[dict[str, str]], str | None]]] = {
    "sharegpt": _sharegpt,
    "alpaca": _alpaca,
    "openai-chat": _openai,
    "prompt-completion": _prompt_completion,
}


def _records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line, record) of a JSONL file or of a JSON array file (the line where each record starts, as an
    editor numbers it); a JSONL line that is not JSON comes back as a _Skip."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark (Windows editors) is not data
    except (OSError, UnicodeDecodeError) as exc:
        raise OpdError(
            f"cannot read {path}: {exc}", where=str(path), fix="pass a UTF-8 JSON or JSONL file"
        ) from None
    if text.lstrip().startswith("["):
        yield from _array_records(text, path)
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError:
            yield number, _Skip("not valid JSON")


_SPACE = re.compile(r"\s*")
_JSON_FIX = "correct the JSON there (a trailing comma, a missing comma or quote?); nothing was written"


def _array_records(text: str, path: Path) -> Iterator[tuple[int, Any]]:
    """The elements of a JSON array, each with the file line it starts on (a pretty-printed array
    spreads one record over many lines, so its index is not a line)."""
    decoder = json.JSONDecoder()
    pos, line, seen = _SPACE.match(text).end() + 1, 1, 0  # pyright: ignore[reportOptionalMemberAccess]

    def advance(to: int) -> None:
        nonlocal pos, line, seen
        line += text.count("\n", seen, to)
        pos = seen = to

    advance(_SPACE.match(text, pos).end())  # pyright: ignore[reportOptionalMemberAccess]
    if text.startswith("]", pos):
        return
    while True:
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise OpdError(
                f"not a JSON array: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                where=f"{path}:{exc.lineno}",
                fix=_JSON_FIX,
            ) from None
        yield line, value
        advance(_SPACE.match(text, end).end())  # pyright: ignore[reportOptionalMemberAccess]
        if text.startswith(",", pos):
            advance(_SPACE.match(text, pos + 1).end())  # pyright: ignore[reportOptionalMemberAccess]
            continue
        if text.startswith("]", pos) and not text[pos + 1 :].strip():
            return
        advance(pos)
        raise OpdError(
            f"not a JSON array: expected ',' or ']' (line {line})", where=f"{path}:{line}", fix=_JSON_FIX
        )


def _field(rec: dict[str, Any], dotted: str) -> Any:
    value: Any = rec
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _row(rec: Any, fmt: str, system: str | None, solution_field: str | None) -> dict[str, Any]:
    if isinstance(rec, _Skip):
        raise rec
    if not isinstance(rec, dict):
        raise _Skip("not a JSON object")
    messages, answer = READERS[fmt](rec)
    if system and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": system})
    if solution_field:
        value = _field(rec, solution_field)
        answer = None if value is None or (isinstance(value, str) and not value.strip()) else value
        if answer is None:
            raise _Skip(f"no value in --solution-field {solution_field}")
    row: dict[str, Any] = {"messages": messages}
    if answer is not None:
        row["rollout_extra"] = {"solution": answer}
    return row


def _write_rows(
    src: Path, fh: Any, result: Conversion, system: str | None, solution_field: str | None
) -> None:
    for line, rec in _records(src):
        result.read += 1
        try:
            row = _row(rec, result.format, system, solution_field)
        except _Skip as why:
            result.drop(str(why), line)
            continue
        fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        result.written += 1
        if "rollout_extra" in row:
            result.with_solution += 1
        else:
            result.without_solution.add(line)


def convert(
    source: str | Path,
    output: str | Path,
    *,
    source_format: str,
    system: str | None = None,
    solution_field: str | None = None,
) -> Conversion:
    """Read `source` in `source_format`, write Bailian OPD JSONL to `output`; say what was dropped and why."""
    if source_format not in READERS:
        raise OpdError(
            f"unknown format {source_format!r}", where="--from", fix=f"use one of: {', '.join(FORMATS)}"
        )
    src, dst = Path(source), Path(output)
    if not src.is_file():
        raise OpdError(f"{src} does not exist", where=str(src), fix="pass the file to convert")
    if dst.resolve() == src.resolve():
        raise OpdError("the output would overwrite the input", where=str(dst), fix="write to another file")
    result = Conversion(source=str(src), output=str(dst), format=source_format)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")  # the output appears whole or not at all
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            _write_rows(src, fh, result, system, solution_field)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    scan = scan_jsonl(dst)
    result.output_problems = [
        f"{rule}: {i.count} row(s), lines {i.lines_text()}" for rule, i in scan.issues.items()
    ]
    return result
