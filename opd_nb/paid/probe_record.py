"""The record a finished probe leaves in the workspace (``.opd/probes.json``, by config hash), and the
one line a submit says, once per config, when no probe was run for it (:func:`probe_hint`).

Here, at the paid boundary, so that the submit every surface shares (`opd submit`, ``%opd submit``,
the MCP tool) reads it; `opd probe` (:mod:`opd_nb.experiments.probe`) writes it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from opd_nb.constants import ENTITY_STATE_DIR
from opd_nb.spec.job import DEFAULT_CONFIG

PROBES_FILE = "probes.json"


def config_hash(workspace: Path, config: str = DEFAULT_CONFIG) -> str:
    """What a probe's result is keyed by: the job YAML's bytes (models, limits, functions, data)."""
    return hashlib.sha256((workspace / config).read_bytes()).hexdigest()[:16]


def _records_path(workspace: Path) -> Path:
    return workspace / ENTITY_STATE_DIR / PROBES_FILE


def _records(workspace: Path) -> dict[str, Any]:
    try:
        data = json.loads(_records_path(workspace).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_probe(workspace: Path, key: str, summary: dict[str, Any]) -> None:
    """Remember a finished probe of this config (its verdicts and means) in the workspace's state dir."""
    records = _records(workspace)
    records[key] = summary
    path = _records_path(workspace)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records, indent=2, sort_keys=True), encoding="utf-8")


def probe_hint(workspace: Path, config: str = DEFAULT_CONFIG) -> str | None:
    """One line for `opd submit -c config` when no probe was run for this workspace and config (and none
    was mentioned for it yet); None otherwise. Mentioning it is recorded, so the line shows once."""
    if not (workspace / config).is_file():
        return None
    key = config_hash(workspace, config)
    records = _records(workspace)
    if key in records:
        return None
    try:
        record_probe(workspace, key, {"probed": False, "mentioned": True})
    except OSError:
        pass  # a read-only workspace still submits; the hint may then show again
    option = f" -c {config}" if config != DEFAULT_CONFIG else ""
    return (
        f"note: no probe was run for this config; `opd probe {workspace}{option}` checks with a few dozen chat "
        "calls that the teacher beats the student on your reward before a job is paid for"
    )
