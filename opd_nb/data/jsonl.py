"""Data helpers for Bailian's OPD JSONL: load, validate, build rows, split, and describe.

One row per line: ``{"messages": [{"role": ..., "content": ...}, ...], "rollout_extra": {"solution": ...}}``.
The scan itself lives in `opd_nb.spec.dataset` (re-exported here); `validate` applies the same
preflight rules as `opd check`.
"""

from __future__ import annotations

import html
import json
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opd_nb.errors import OpdError
from opd_nb.results import ResultMixin
from opd_nb.spec.dataset import (
    CHARS_PER_TOKEN,
    ROLES,
    RULE_FIX,
    RULE_TEXT,
    UPLOAD_LIMIT_BYTES,
    Issue,
    ScanResult,
    estimate_tokens,
    load_tokenizer,
    prompt_token_counts,
    read_jsonl,
    scan_jsonl,
)
from opd_nb.views import theme

__all__ = [  # the scan's names too: `opd_nb.data` (the package re-exports these) is the user-facing path
    "CHARS_PER_TOKEN",
    "ROLES",
    "RULE_FIX",
    "RULE_TEXT",
    "UPLOAD_LIMIT_BYTES",
    "DataStats",
    "Issue",
    "ScanResult",
    "Split",
    "SplitFiles",
    "estimate_tokens",
    "load_jsonl",
    "load_tokenizer",
    "prompt_key",
    "prompt_token_counts",
    "read_jsonl",
    "scan_jsonl",
    "split",
    "split_file",
    "stats",
    "to_rows",
    "validate",
    "write_jsonl",
]


# ---------------------------------------------------------------- load / write


def load_jsonl(path: str | Path, *, require_solution: bool = False) -> list[dict[str, Any]]:
    """Rows of a JSONL file that passed validation; any problem -> OpdError naming the first bad line."""
    res = scan_jsonl(path)
    for rule, issue in res.issues.items():
        if rule == "data.blank-line":
            continue
        raise OpdError(
            f"{RULE_TEXT.get(rule, rule)}: {issue.detail or 'see the row'} "
            f"({issue.count} row(s): lines {issue.lines_text()})",
            where=f"{path}:{issue.lines[0]}",
            fix=RULE_FIX.get(rule, "fix the row"),
        )
    if require_solution and res.missing_solution.count:
        ms = res.missing_solution
        raise OpdError(
            f"{ms.count} row(s) have no rollout_extra.solution (lines {ms.lines_text()})",
            where=f"{path}:{ms.lines[0]}",
            fix='add "rollout_extra": {"solution": "..."} to each row',
        )
    return read_jsonl(path)


def write_jsonl(rows: Iterable[dict[str, Any]], path: str | Path) -> Path:
    """Write rows as UTF-8 JSONL (one object per line, non-ASCII kept readable)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False))
            fh.write("\n")
    return p


# ---------------------------------------------------------------- building rows


def _columns(source: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """Records and column names from a list of dicts, a pandas DataFrame or a datasets.Dataset."""
    mod = type(source).__module__
    if mod.startswith("pandas"):
        return source.to_dict(orient="records"), [str(c) for c in source.columns]
    if mod.startswith("datasets"):
        return list(source), list(source.column_names)
    if isinstance(source, Sequence) and not isinstance(source, str | bytes):
        records = list(source)
        cols: list[str] = []
        for r in records[:100]:
            if not isinstance(r, dict):
                raise OpdError(
                    f"expected a list of dicts, found a {type(r).__name__}",
                    where="to_rows",
                    fix="pass a list of dicts, a pandas DataFrame or a datasets.Dataset",
                )
            cols.extend(k for k in r if k not in cols)
        return records, cols
    raise OpdError(
        f"cannot build rows from a {type(source).__name__}",
        where="to_rows",
        fix="pass a list of dicts, a pandas DataFrame or a datasets.Dataset",
    )


def to_rows(
    source: Any,
    *,
    prompt: str | None = "prompt",
    solution: str | None = "solution",
    system: str | None = None,
    system_prompt: str | None = None,
    messages: str | None = None,
    extra: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Bailian OPD rows from records, with a column mapping.

    `prompt` names the user-text column (or `messages` a column that already holds a chat list);
    `system` names a system-text column, or `system_prompt` gives one text for all rows;
    `solution` names the ground-truth column (None: no rollout_extra.solution); `extra` columns are
    copied into `rollout_extra`.
    """
    if not messages and not prompt:
        raise OpdError(
            "to_rows needs the user's text: prompt=None and no messages column",
            where="to_rows",
            fix="name the prompt column (prompt='question') or a chat column (messages='chat')",
        )
    records, cols = _columns(source)
    wanted = [c for c in ([messages] if messages else [prompt]) + [solution, system, *extra] if c]
    if solution == "solution" and "solution" not in cols:
        wanted.remove("solution")  # the default mapping is optional
        solution = None
    missing = [c for c in wanted if c not in cols]
    if missing:
        raise OpdError(
            f"column(s) not found: {', '.join(missing)}",
            where="to_rows",
            fix=f"map to existing columns ({', '.join(cols) or 'none'}), e.g. prompt='question'",
        )
    rows: list[dict[str, Any]] = []
    for i, rec in enumerate(records):
        if messages:
            msgs = rec[messages]
            if hasattr(msgs, "tolist"):
                msgs = msgs.tolist()
            msgs = [dict(m) for m in msgs]
        else:
            msgs = []
            sys_text = rec[system] if system else system_prompt
            if sys_text:
                msgs.append({"role": "system", "content": str(sys_text)})
            text = rec[prompt or ""]  # prompt is set when messages is not (checked above)
            if text is None or (isinstance(text, float) and math.isnan(text)):
                raise OpdError(
                    f"record {i} has no value in column {prompt!r}",
                    where=f"to_rows: record {i}",
                    fix="drop or fill empty prompts first",
                )
            msgs.append({"role": "user", "content": str(text)})
        row: dict[str, Any] = {"messages": msgs}
        rollout_extra: dict[str, Any] = {}
        if solution:
            value = rec[solution]
            rollout_extra["solution"] = value if isinstance(value, str) else _plain(value)
        for c in extra:
            rollout_extra[c] = _plain(rec[c])
        if rollout_extra:
            row["rollout_extra"] = rollout_extra
        rows.append(row)
    return rows


def _plain(value: Any) -> Any:
    """numpy/pandas scalars -> plain Python (so json.dumps works)."""
    if hasattr(value, "item") and not isinstance(value, list | dict | str):
        try:
            return value.item()
        except (ValueError, AttributeError):
            pass
    if not isinstance(value, list | dict | str) and hasattr(value, "tolist"):
        return value.tolist()
    return value


# ---------------------------------------------------------------- split


def prompt_key(row: dict[str, Any]) -> str:
    """A stable identity of a row's prompt (the messages), used for splitting and overlap checks."""
    return json.dumps(row.get("messages"), sort_keys=True, ensure_ascii=False)


@dataclass
class Split:
    train: list[dict[str, Any]]
    validation: list[dict[str, Any]]

    def write(
        self, directory: str | Path, train: str = "train.jsonl", validation: str = "validation.jsonl"
    ) -> tuple[Path, Path]:
        d = Path(directory)
        return write_jsonl(self.train, d / train), write_jsonl(self.validation, d / validation)

    def __iter__(self):  # allows `train, val = split(...)`
        yield self.train
        yield self.validation


def split(rows: Sequence[dict[str, Any]], validation: float | int = 0.1, *, seed: int = 0) -> Split:
    """Deterministic train/validation split; rows sharing a prompt land on the same side (no overlap).

    `validation` is a fraction (0 < f < 1) or a number of prompts.
    """
    rows = list(rows)
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(prompt_key(r), []).append(i)
    keys = sorted(groups)
    random.Random(seed).shuffle(keys)
    if isinstance(validation, float):
        if not 0 < validation < 1:
            raise OpdError(
                f"validation fraction must be between 0 and 1, got {validation}",
                where="split",
                fix="e.g. validation=0.1 or validation=50 (rows)",
            )
        n_val = max(1, round(len(keys) * validation)) if len(keys) > 1 else 0
    else:
        n_val = int(validation)
    if len(keys) and not 0 <= n_val < len(keys):
        raise OpdError(
            f"cannot hold out {n_val} of {len(keys)} distinct prompts",
            where="split",
            fix="use a smaller validation size",
        )
    val_keys = set(keys[:n_val])
    train_idx = sorted(i for k in keys if k not in val_keys for i in groups[k])
    val_idx = sorted(i for k in val_keys for i in groups[k])
    return Split([rows[i] for i in train_idx], [rows[i] for i in val_idx])


@dataclass
class SplitFiles(ResultMixin):
    """What `opd data split` wrote: the two files and their row counts."""

    source: str
    train: str
    validation: str
    train_rows: int
    validation_rows: int

    def to_payload(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __str__(self) -> str:
        return (
            f"{self.source} -> {self.train} ({self.train_rows} rows), {self.validation} "
            f"({self.validation_rows} rows); no prompt is on both sides"
        )


def split_file(
    path: str | Path, out_dir: str | Path, validation: float | int = 0.1, *, seed: int = 0
) -> SplitFiles:
    """Split a valid OPD JSONL file into out_dir/train.jsonl and out_dir/validation.jsonl (see `split`)."""
    src, out = Path(path), Path(out_dir)
    if not src.is_file():
        raise OpdError(f"{src} does not exist", where=str(src), fix="pass the JSONL file to split")
    targets = (out / "train.jsonl", out / "validation.jsonl")
    if src.resolve() in {t.resolve() for t in targets}:
        raise OpdError(
            f"splitting {src} into its own folder would overwrite it",
            where=str(out),
            fix="pass another --out",
        )
    parts = split(load_jsonl(src), validation, seed=seed)
    train, val = parts.write(out)
    return SplitFiles(str(src), str(train), str(val), len(parts.train), len(parts.validation))


# ---------------------------------------------------------------- stats


def _quantiles(values: list[int]) -> dict[str, float]:
    if not values:
        return {"min": 0, "p50": 0, "p90": 0, "p99": 0, "max": 0, "mean": 0.0}
    s = sorted(values)

    def q(f: float) -> int:
        return s[min(len(s) - 1, int(f * (len(s) - 1) + 0.5))]

    return {
        "min": s[0],
        "p50": q(0.5),
        "p90": q(0.9),
        "p99": q(0.99),
        "max": s[-1],
        "mean": round(sum(s) / len(s), 1),
    }


@dataclass
class DataStats(ResultMixin):
    """Rows, role patterns and prompt lengths of a data set (text and HTML reprs)."""

    source: str
    rows: int
    with_solution: int
    role_patterns: dict[str, int]
    prompt_chars: dict[str, float]
    prompt_tokens: dict[str, float]
    tokens_exact: bool
    problems: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def to_payload(self) -> dict[str, Any]:
        return self.to_dict()

    def headline(self) -> str:
        """'FILE: N rows, M with rollout_extra.solution[, K invalid]' (the text, the table's title, the HTML)."""
        invalid = f", {self.problems} invalid" if self.problems else ""
        return f"{self.source}: {self.rows} rows, {self.with_solution} with rollout_extra.solution{invalid}"

    def _lines(self) -> list[str]:
        kind = "exact" if self.tokens_exact else "estimated, chars/3.5"
        t, c = self.prompt_tokens, self.prompt_chars
        out = [
            self.headline(),
            f"prompt tokens ({kind}): min {t['min']}  p50 {t['p50']}  p90 {t['p90']}  p99 {t['p99']}  "
            f"max {t['max']}  mean {t['mean']}",
            f"prompt chars: min {c['min']}  p50 {c['p50']}  max {c['max']}",
            "role patterns:",
        ]
        out += [f"  {n:>8}  {pat}" for pat, n in self.role_patterns.items()]
        return out

    def __str__(self) -> str:
        return "\n".join(self._lines())

    def __rich__(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        table = Table(title=Text(self.headline()), show_header=True)
        table.add_column("measure")
        for col in ("min", "p50", "p90", "p99", "max", "mean"):
            table.add_column(col, justify="right")
        for name, d in (
            ("prompt tokens" + ("" if self.tokens_exact else " (est.)"), self.prompt_tokens),
            ("prompt chars", self.prompt_chars),
        ):
            table.add_row(name, *(str(d[k]) for k in ("min", "p50", "p90", "p99", "max", "mean")))
        for pat, n in self.role_patterns.items():
            table.add_row(Text(f"pattern {pat}"), str(n), "", "", "", "", "")
        return table

    def _repr_html_(self) -> str:
        def row(name: str, d: dict[str, float]) -> str:
            cells = "".join(f"<td>{d[k]}</td>" for k in ("min", "p50", "p90", "p99", "max", "mean"))
            return f"<tr><th>{html.escape(name)}</th>{cells}</tr>"

        pats = "".join(
            f"<tr><td><code>{html.escape(p)}</code></td><td>{n}</td></tr>"
            for p, n in self.role_patterns.items()
        )
        tok = "prompt tokens" + ("" if self.tokens_exact else " (estimated)")
        return (
            f"<div><b>{html.escape(self.source)}</b>: {self.rows} rows, {self.with_solution} with solution"
            + (", " + theme.status_span("bad", f"{self.problems} invalid") if self.problems else "")
            + "<table><tr><th></th><th>min</th><th>p50</th><th>p90</th><th>p99</th><th>max</th><th>mean</th></tr>"
            + row(tok, self.prompt_tokens)
            + row("prompt chars", self.prompt_chars)
            + "</table>"
            + f"<table><tr><th>role pattern</th><th>rows</th></tr>{pats}</table></div>"
        )


def stats(source: Any, *, tokenizer_path: str | Path | None = None) -> DataStats:
    """Describe a JSONL file (path) or rows (list of dicts): rows, role patterns, prompt length distribution."""
    if isinstance(source, str | Path):
        res = scan_jsonl(source, collect_patterns=True)
        name = str(source)
        rows_for_tok: list[dict[str, Any]] | None = None
        problems = sum(i.count for r, i in res.issues.items() if r != "data.blank-line")
    else:
        import tempfile

        rows_for_tok = list(source)
        with tempfile.TemporaryDirectory() as tmp:
            res = scan_jsonl(write_jsonl(rows_for_tok, Path(tmp) / "rows.jsonl"), collect_patterns=True)
        name = f"{len(rows_for_tok)} rows"
        problems = sum(i.count for r, i in res.issues.items() if r != "data.blank-line")
    tokens = res.prompt_tokens
    exact = False
    if tokenizer_path is not None:
        if rows_for_tok is None:
            rows_for_tok = read_jsonl(source)
        valid = [r for r in rows_for_tok if isinstance(r.get("messages"), list) and r["messages"]]
        tokens = prompt_token_counts(valid, tokenizer_path)
        exact = True
    return DataStats(
        source=name,
        rows=res.n_rows,
        with_solution=res.n_with_solution,
        role_patterns=dict(res.patterns.most_common()),
        prompt_chars=_quantiles(res.prompt_chars),
        prompt_tokens=_quantiles(tokens),
        tokens_exact=exact,
        problems=problems,
    )


def validate(
    path: str | Path,
    *,
    require_solution: bool = False,
    max_prompt_length: int | None = None,
    min_rows: int | None = None,
) -> Any:
    """Check one JSONL file with the same rules as `opd check`; returns a CheckReport."""
    from opd_nb.checks.data import check_data_file

    return check_data_file(
        path, require_solution=require_solution, max_prompt_length=max_prompt_length, min_rows=min_rows
    )
