"""Reading and scanning Bailian's OPD JSONL: the one cheap pass that every data rule is built on.

One row per line: ``{"messages": [{"role": ..., "content": ...}, ...], "rollout_extra": {"solution": ...}}``.
The scan is a single pass (orjson when installed, plain dict checks, no per-row pydantic) so that
checking a million-row file costs about as much as parsing it; see `bench/check_data.py`. The
preflight rules (`opd_nb.checks.data`) and the user helpers (`opd_nb.data.jsonl`) both build on it, so it
depends on neither.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opd_nb.errors import OpdError

try:
    import orjson as _orjson

    _loads = _orjson.loads
except ImportError:  # pragma: no cover - exercised only without orjson
    _orjson = None
    _loads = json.loads

ROLES = frozenset({"system", "user", "assistant", "tool"})
CHARS_PER_TOKEN = 3.5  # rough average for mixed English/Chinese/code with Qwen-style BPE vocabularies
TOKENS_PER_MESSAGE = 4  # chat-template framing per turn (role markers, separators)
UPLOAD_LIMIT_BYTES = 1024**3  # DATASETS_FILE_SIZE_WARNING: a hard limit in the SDK (error 4035)
MAX_EXAMPLES = 5  # line numbers kept per issue


def estimate_tokens(chars: int, n_messages: int) -> int:
    """Prompt tokens from characters (chars/3.5 plus per-turn framing)."""
    return math.ceil(chars / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE * n_messages


# ---------------------------------------------------------------- the fast scan


@dataclass
class Issue:
    """One kind of problem in a file: how many rows, the first line numbers, the first detail."""

    rule: str
    count: int = 0
    lines: list[int] = field(default_factory=list)
    detail: str = ""

    def add(self, line: int, detail: str = "") -> None:
        self.count += 1
        if len(self.lines) < MAX_EXAMPLES:
            self.lines.append(line)
        if not self.detail and detail:
            self.detail = detail

    def lines_text(self) -> str:
        more = ", ..." if self.count > len(self.lines) else ""
        return ", ".join(map(str, self.lines)) + more


@dataclass
class ScanResult:
    """Everything one pass over a JSONL file learns (no rows are kept)."""

    path: str
    size_bytes: int = 0
    n_lines: int = 0
    n_rows: int = 0  # rows that parsed as a JSON object with a non-empty messages list
    n_with_solution: int = 0
    issues: dict[str, Issue] = field(default_factory=dict)
    prompt_chars: list[int] = field(default_factory=list)  # per valid row, in order
    prompt_tokens: list[int] = field(default_factory=list)  # estimated, per valid row
    row_lines: list[int] = field(default_factory=list)  # line number of each valid row
    keys: dict[int, int] = field(default_factory=dict)  # prompt hash -> first line
    duplicates: Issue = field(default_factory=lambda: Issue("data.duplicate-prompt"))
    missing_solution: Issue = field(default_factory=lambda: Issue("data.missing-solution"))
    patterns: Counter = field(default_factory=Counter)

    def issue(self, rule: str) -> Issue:
        got = self.issues.get(rule)
        if got is None:
            got = self.issues[rule] = Issue(rule)
        return got


def _json_error(raw: bytes) -> str:
    """The standard parser's message (with column) for a line that failed to parse."""
    try:
        text = raw.decode("utf-8").rstrip("\r\n")  # the line alone: an error at its end stays on it
    except UnicodeDecodeError as exc:
        return f"not UTF-8 ({exc.reason} at byte {exc.start})"
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        body = text.rstrip()
        if exc.pos >= len(body) - 1 and body.endswith(","):
            return f"trailing comma at the end of the line (column {len(body)}); is the row split over lines?"
        return f"{exc.msg} (column {exc.colno})"
    except ValueError as exc:
        return str(exc)
    return "invalid JSON"


def scan_jsonl(path: str | Path, *, collect_patterns: bool = False) -> ScanResult:  # noqa: C901, PLR0915 - the hot loop: one inlined pass per row, see bench/check_data.py
    """Validate every line of a JSONL file in one pass; problems are grouped by rule with line numbers.

    Rules (ids used by `opd check`): data.bad-json, data.not-object, data.missing-messages,
    data.empty-messages, data.bad-message, data.unknown-role, data.role-order, data.no-user-turn,
    data.empty-content, data.blank-line; plus duplicates and rows without `rollout_extra.solution`.
    """
    p = Path(path)
    res = ScanResult(path=str(p))
    try:
        res.size_bytes = p.stat().st_size
    except OSError as exc:
        raise OpdError(f"cannot read {p}: {exc.strerror}", where=str(p)) from None
    roles = ROLES
    loads = _loads
    keys = res.keys
    chars_out = res.prompt_chars
    tokens_out = res.prompt_tokens
    lines_out = res.row_lines
    patterns = res.patterns if collect_patterns else None
    issue = res.issue
    n_lines = 0
    with_solution = 0
    with open(p, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            n_lines += 1
            try:
                row = loads(raw)
            except ValueError:
                if raw.strip():
                    issue("data.bad-json").add(lineno, _json_error(raw))
                else:
                    issue("data.blank-line").add(lineno)
                continue
            if type(row) is not dict:
                issue("data.not-object").add(lineno, f"got a JSON {type(row).__name__}")
                continue
            msgs = row.get("messages")
            if type(msgs) is not list:
                issue("data.missing-messages").add(
                    lineno, "no `messages` key" if msgs is None else f"`messages` is a {type(msgs).__name__}"
                )
                continue
            if not msgs:
                issue("data.empty-messages").add(lineno)
                continue
            chars = 0
            seen_user = False
            prev = None
            order_problem = None
            bad = False
            key_parts = []
            for i, m in enumerate(msgs):
                if type(m) is not dict:
                    issue("data.bad-message").add(lineno, f"message {i} is not an object")
                    bad = True
                    break
                role = m.get("role")
                content = m.get("content")
                if role not in roles:
                    issue("data.unknown-role").add(lineno, f"message {i} has role {role!r}")
                    bad = True
                    break
                if type(content) is str:
                    if not content or content.isspace():
                        if not (role == "assistant" and m.get("tool_calls")):
                            issue("data.empty-content").add(lineno, f"message {i} ({role})")
                            bad = True
                            break
                    chars += len(content)
                    key_parts.append(role)
                    key_parts.append(content)
                elif content is None and role == "assistant" and m.get("tool_calls"):
                    key_parts.append(role)
                elif type(content) is list and content:
                    key_parts.append(role)
                    key_parts.append(json.dumps(content, sort_keys=True))
                    for part in content:
                        if type(part) is dict and type(part.get("text")) is str:
                            chars += len(part["text"])
                else:
                    issue("data.empty-content").add(lineno, f"message {i} ({role}) has no content")
                    bad = True
                    break
                if order_problem is None:
                    if role == "system":
                        if i:
                            order_problem = f"system message at position {i} (only the first may be system)"
                    elif role == "user":
                        seen_user = True
                    elif role == "assistant":
                        if not seen_user:
                            order_problem = f"assistant message at position {i} before any user message"
                    elif prev not in ("assistant", "tool"):
                        order_problem = f"tool message at position {i} does not follow an assistant message"
                prev = role
            if bad:
                continue
            if not seen_user:
                issue("data.no-user-turn").add(lineno)
                continue
            if order_problem is None and prev == "assistant":
                order_problem = "the last message is an assistant turn (a prompt must end with user or tool)"
            if order_problem is not None:
                issue("data.role-order").add(lineno, order_problem)
                continue
            extra = row.get("rollout_extra")
            if type(extra) is dict and extra.get("solution") not in (None, ""):
                with_solution += 1
            else:
                res.missing_solution.add(lineno)
            key = hash(tuple(key_parts))
            if key in keys:
                res.duplicates.add(lineno, f"same prompt as line {keys[key]}")
            else:
                keys[key] = lineno
            chars_out.append(chars)
            tokens_out.append(estimate_tokens(chars, len(msgs)))
            lines_out.append(lineno)
            if patterns is not None:
                patterns[">".join(m["role"] for m in msgs)] += 1
    res.n_lines = n_lines
    res.n_rows = len(lines_out)
    res.n_with_solution = with_solution
    return res


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """All rows of a JSONL file; the first unparsable line -> OpdError with `file:line` and the parser's message."""
    p = Path(path)
    if not p.is_file():
        raise OpdError(
            f"data file not found: {p}", where=str(p), fix="check the path (relative to the workspace)"
        )
    rows: list[dict[str, Any]] = []
    with open(p, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                row = _loads(raw)
            except ValueError:
                raise OpdError(
                    f"line is not valid JSON: {_json_error(raw)}",
                    where=f"{p}:{lineno}",
                    fix="one JSON object per line; no trailing commas, double quotes only",
                ) from None
            if not isinstance(row, dict):
                raise OpdError(
                    f"each line must be a JSON object, got a {type(row).__name__}",
                    where=f"{p}:{lineno}",
                    fix='write {"messages": [...], "rollout_extra": {...}} per line',
                )
            rows.append(row)
    return rows


RULE_TEXT = {
    "data.bad-json": "line is not valid JSON",
    "data.not-object": "line is not a JSON object",
    "data.missing-messages": "row has no `messages` list",
    "data.empty-messages": "`messages` is empty",
    "data.bad-message": "a message is not an object",
    "data.unknown-role": "unknown role",
    "data.role-order": "impossible role order",
    "data.no-user-turn": "no user message",
    "data.empty-content": "empty message content",
}
RULE_FIX = {
    "data.bad-json": "one JSON object per line; no trailing commas, double quotes only",
    "data.not-object": 'write {"messages": [...], "rollout_extra": {...}} per line',
    "data.missing-messages": 'add "messages": [{"role": "user", "content": "..."}]',
    "data.empty-messages": "add at least one user message",
    "data.bad-message": 'each message is {"role": ..., "content": ...}',
    "data.unknown-role": "use system, user, assistant or tool",
    "data.role-order": "optional system first, then user (and assistant/tool turns), ending with user or tool",
    "data.no-user-turn": "add a user message with the task input",
    "data.empty-content": "give every message non-empty content (or drop the row)",
}


def load_tokenizer(tokenizer_path: str | Path) -> Any:
    """A local Hugging Face tokenizer (lazy `transformers` import; no hub access)."""
    try:
        from transformers.models.auto.tokenization_auto import AutoTokenizer
    except ImportError:
        raise OpdError(
            "exact token counts need `transformers`",
            where="tokenizer",
            fix="pip install 'opd-nb[engine]' or drop --tokenizer to use the estimate",
        ) from None
    p = Path(tokenizer_path)
    if not p.exists():
        raise OpdError(
            f"tokenizer path not found: {p}", where=str(p), fix="pass a local model or tokenizer directory"
        )
    try:
        return AutoTokenizer.from_pretrained(str(p), local_files_only=True)
    except Exception as exc:  # transformers raises many types for a bad directory
        raise OpdError(
            f"cannot load a tokenizer from {p}: {exc}",
            where=str(p),
            fix="pass a directory with tokenizer.json / tokenizer_config.json",
        ) from None


def prompt_token_counts(rows: Iterable[dict[str, Any]], tokenizer: Any) -> list[int]:
    """Exact prompt tokens per row: the chat template with the generation prompt when the tokenizer has one."""
    tok = load_tokenizer(tokenizer) if isinstance(tokenizer, str | Path) else tokenizer
    has_template = bool(getattr(tok, "chat_template", None))
    out: list[int] = []
    for row in rows:
        msgs = row["messages"]
        if has_template:
            ids = tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            out.append(len(ids))
        else:
            text = "\n".join(str(m.get("content") or "") for m in msgs)
            out.append(len(tok(text, add_special_tokens=True)["input_ids"]))
    return out
