"""Reading Bailian-format JSONL and tokenising each prompt once per job (never per step).

A row is ``{"messages": [...], "rollout_extra": {...}, "tools": [...]?}``. The prompt is the
conversation without trailing assistant turns (a trailing assistant turn is a reference answer,
not something the student is fed). Bad rows raise ``EngineError`` naming file, line and key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from pydantic import JsonValue

from opd_nb.engine.api import EngineError
from opd_nb.spec.training_plan import steps_per_epoch, training_steps

ROLES = {"system", "user", "assistant", "tool"}


@dataclass
class Row:
    messages: list[dict[str, Any]]  # the prompt turns
    rollout_extra: dict[str, Any] = field(default_factory=dict[str, Any])
    tools: list[dict[str, Any]] | None = None
    prompt_ids: list[int] = field(default_factory=list[int])
    line: int = 0

    @property
    def solution(self) -> Any:
        return self.rollout_extra.get("solution")


def _fail(path: Path, line: int, msg: str) -> EngineError:
    return EngineError(f"{path}:{line}: {msg}")


def _tools(given: JsonValue, p: Path, n: int) -> list[dict[str, Any]] | None:
    """A row's ``tools``: None, or a list of tool schemas (JSON objects)."""
    if given is None:
        return None
    tools = [t for t in given if isinstance(t, dict)] if isinstance(given, list) else []
    if not isinstance(given, list) or len(tools) != len(given):
        raise _fail(p, n, "key 'tools' must be a list of tool schemas (JSON objects)")
    return tools


def read_rows(path: str | Path) -> list[Row]:
    p = Path(path)
    if not p.is_file():
        raise EngineError(f"data file {str(p)!r} does not exist")
    rows: list[Row] = []
    with p.open(encoding="utf-8") as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                obj: JsonValue = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise _fail(
                    p, n, f"not valid JSON ({exc.msg} at column {exc.colno}); write one JSON object per line"
                ) from None
            if not isinstance(obj, dict):
                raise _fail(p, n, "each line must be a JSON object with a 'messages' list")
            msgs = obj.get("messages")
            if not isinstance(msgs, list) or not msgs:
                raise _fail(p, n, "key 'messages' is missing or empty; give a list of {role, content} turns")
            prompt: list[dict[str, Any]] = []
            for i, m in enumerate(msgs):
                if not isinstance(m, dict) or m.get("role") not in ROLES:
                    raise _fail(p, n, f"messages[{i}].role must be one of {sorted(ROLES)}")
                if "content" not in m and not m.get("tool_calls"):
                    raise _fail(p, n, f"messages[{i}] has no 'content'")
                prompt.append(m)
            while prompt and prompt[-1]["role"] == "assistant":
                prompt.pop()
            if not prompt:
                raise _fail(p, n, "messages has no user turn before the assistant turns")
            extra = obj.get("rollout_extra") or {}
            if not isinstance(extra, dict):
                raise _fail(p, n, "key 'rollout_extra' must be a JSON object")
            rows.append(
                Row(messages=prompt, rollout_extra=extra, tools=_tools(obj.get("tools"), p, n), line=n)
            )
    if not rows:
        raise EngineError(f"data file {str(p)!r} has no rows")
    return rows


def template_ids(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
) -> list[int]:
    """Token ids of the chat template applied to `messages` (any transformers return shape)."""
    kw: dict[str, Any] = {"tokenize": True, "add_generation_prompt": add_generation_prompt}
    if tools:
        kw["tools"] = tools
    out = tokenizer.apply_chat_template(messages, **kw)
    if hasattr(out, "keys"):
        out = out["input_ids"]
    return [int(t) for t in out]


def tokenize_rows(
    rows: list[Row], tokenizer: Any, max_prompt_length: int, path: str, log: Any = None
) -> list[Row]:
    """Fill `prompt_ids`; rows longer than max_prompt_length are dropped (and counted in the log)."""
    kept: list[Row] = []
    dropped: list[int] = []
    unk = getattr(tokenizer, "unk_token_id", None)
    unk_lines: list[int] = []
    for r in rows:
        try:
            r.prompt_ids = template_ids(tokenizer, r.messages, tools=r.tools, add_generation_prompt=True)
        except Exception as exc:  # noqa: BLE001 - template errors are data errors
            raise EngineError(
                f"{path}:{r.line}: the chat template failed on this row's messages: {exc}"
            ) from exc
        if unk is not None and unk in r.prompt_ids:
            unk_lines.append(r.line)
        if len(r.prompt_ids) > max_prompt_length:
            dropped.append(r.line)
        else:
            kept.append(r)
    if dropped and log is not None:
        log(
            f"{path}: dropped {len(dropped)} prompt(s) longer than max_prompt_length={max_prompt_length} tokens "
            f"(lines {', '.join(map(str, dropped[:10]))}{'...' if len(dropped) > 10 else ''})",
            "WARNING",
        )
    if unk_lines and log is not None:
        log(
            f"{path}: {len(unk_lines)} prompt(s) contain characters the tokenizer maps to its unknown token "
            f"(lines {', '.join(map(str, unk_lines[:10]))}); check that the model's tokenizer fits the data",
            "WARNING",
        )
    if not kept:
        raise EngineError(f"{path}: every prompt is longer than max_prompt_length={max_prompt_length} tokens")
    return kept


class JobData:
    """A job's tokenised training and validation rows, its steps, and each epoch's order of rows."""

    def __init__(self, job: Any, tokenizer: Any, plan: Any, log: Any):
        self.seed = job.seed
        self.train = tokenize_rows(
            read_rows(job.train_file), tokenizer, plan.hp.max_prompt_length, job.train_file, log
        )
        self.validation: list[Row] = []
        if job.validation_file:
            self.validation = tokenize_rows(
                read_rows(job.validation_file), tokenizer, plan.hp.max_prompt_length, job.validation_file, log
            )
        self.steps_per_epoch = steps_per_epoch(len(self.train), plan.hp.batch_size)
        self.total_steps = training_steps(len(self.train), plan.hp.batch_size, plan.hp.n_epochs)

    def epoch_order(self, epoch: int) -> list[int]:
        """The training rows' order in `epoch`: a permutation of its own generator (not the job's RNG)."""
        import torch

        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order = cast("list[int]", torch.randperm(len(self.train), generator=g).tolist())  # pyright: ignore[reportUnknownMemberType] - torch types tolist() as a bare list
        return order
