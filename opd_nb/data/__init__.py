"""Data as users hold it: Bailian's OPD JSONL read, built, split, described and validated, and other shapes converted.

The user-facing path is ``opd_nb.data`` (README, tutorials): it re-exports the helpers users call
(:mod:`.jsonl`: ``to_rows``, ``split``, ``stats``, ``validate``, ...; :mod:`.conversion`: ``convert``).
"""

from __future__ import annotations

from opd_nb.data.conversion import convert
from opd_nb.data.jsonl import (
    CHARS_PER_TOKEN,
    ROLES,
    RULE_FIX,
    RULE_TEXT,
    UPLOAD_LIMIT_BYTES,
    DataStats,
    Issue,
    ScanResult,
    Split,
    SplitFiles,
    estimate_tokens,
    load_jsonl,
    load_tokenizer,
    prompt_key,
    prompt_token_counts,
    read_jsonl,
    scan_jsonl,
    split,
    split_file,
    stats,
    to_rows,
    validate,
    write_jsonl,
)

__all__ = [
    "CHARS_PER_TOKEN",
    "DataStats",
    "Issue",
    "ROLES",
    "RULE_FIX",
    "RULE_TEXT",
    "ScanResult",
    "Split",
    "SplitFiles",
    "UPLOAD_LIMIT_BYTES",
    "convert",
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
