"""Remembered function entities: which registered reward/rollout a workspace can reuse, and why.

Registering a function zips the workspace and uploads it; once the code is stable that is wasted
time (the docs: pass the component's ``entity_id``, ``rw-…``/``ro-…``, to skip it). The workspace's
``submit_job.py`` records each entity id the SDK returns in ``.opd/entities.json``, keyed by target
(base URL), function name and type, with a hash of exactly what the SDK would zip; the next submit
passes the id while that hash is unchanged.

``submit_job.py`` must run where opd-nb is not installed, so it carries its own copy of the hash and
of the file format; this module is the same algorithm over this package's zip-member walk
(:func:`opd_nb.checks.function_code.zip_members`, which mirrors the SDK), and ``tests/test_entities.py``
proves that both hash alike and that the members are the ones the SDK's own ``zip_dir`` writes. The
state file holds ids and hashes only, never a key; it is git-ignored and kept out of the zip.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from opd_nb.checks.function_code import exclude_patterns, zip_members
from opd_nb.constants import (
    ENTITY_STATE_DIR,
    ENTITY_STATE_FILE,
    ENTITY_STATE_NOTE,
    SDK_GENERATED_FILES,
    SDK_START_SCRIPT_ENV,
)
from opd_nb.errors import OpdError
from opd_nb.results import ResultMixin

STATE_DIR = ENTITY_STATE_DIR  # also added to FC_ZIP_EXCLUDE_PATTERNS by submit_job.py: never zipped
STATE_FILE = ENTITY_STATE_FILE
STATE_VERSION = 1
GENERATED_FILES = SDK_GENERATED_FILES
LAYER_REQUIREMENTS = "requirements.txt"  # the SDK builds the dependency layer from zipdir/requirements.txt
START_SCRIPT_ENV = SDK_START_SCRIPT_ENV  # baked into the generated start.sh: part of "what would be zipped"
STATE_NOTE = ENTITY_STATE_NOTE


def state_path(workspace: str | Path) -> Path:
    return Path(workspace) / STATE_DIR / STATE_FILE


def zip_patterns() -> list[str]:
    """The SDK's exclusion patterns as submit_job.py sets them (the one rule: ``exclude_patterns``)."""
    return exclude_patterns()


def _sdk_version() -> str:
    try:
        from importlib.metadata import version

        return version("dashscope")
    except Exception:  # not installed: the hash still covers the code
        return ""


def _file_digest(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).hexdigest().encode()


def code_hash(
    zipdir: str | Path,
    *,
    type: str,
    classpath: str | None = "",
    filepath: str | None = "",
    classname: str | None = "",
    requirements_path: str | None = "./requirements.txt",
    extra_files: Sequence[str] | None = (),
    patterns: list[str] | None = None,
    cwd: str | Path = ".",
) -> str:
    """sha256 of what the SDK would zip and register for one function (same bytes as submit_job.py).

    `cwd` is where the SDK runs (submit_job.py changes into the workspace): relative extra files
    are read from there.
    """
    root = Path(zipdir)
    header = {
        "type": type,
        "classpath": classpath or "",
        "filepath": filepath or "",
        "classname": classname or "",
        "requirements_path": requirements_path or "",
        "extra_files": list(extra_files or []),
        "sdk": _sdk_version(),
        "env": {k: os.environ.get(k, "") for k in START_SCRIPT_ENV},
    }
    digest = hashlib.sha256(json.dumps(header, sort_keys=True).encode("utf-8") + b"\n")
    patterns = zip_patterns() if patterns is None else patterns
    for rel in sorted(p.relative_to(root).as_posix() for p in zip_members(root, patterns)):
        if rel not in GENERATED_FILES:
            digest.update(rel.encode("utf-8") + b"\0" + _file_digest(root / rel) + b"\n")
    for extra in extra_files or []:  # added at the zip's root unless a pattern excludes the name
        path = Path(cwd) / extra
        if not path.is_file() or any(fnmatch.fnmatch(path.name, p) for p in patterns):
            continue
        digest.update(b"extra\0" + path.name.encode("utf-8") + b"\0" + _file_digest(path) + b"\n")
    layer = root / LAYER_REQUIREMENTS
    digest.update(b"requirements\0" + (layer.read_bytes() if layer.is_file() else b""))
    return "sha256:" + digest.hexdigest()


def function_hash(workspace: str | Path, function: Any) -> str:
    """The code hash of one function of a `JobConfig` (zipdir resolved against the workspace)."""
    fc = function.fcmodel
    zipdir = Path(workspace) / (fc.zipdir or "./")
    return code_hash(
        zipdir,
        type=str(function.type),
        classpath=fc.classpath,
        filepath=fc.filepath,
        classname=fc.classname,
        requirements_path=fc.requirements_path,
        extra_files=fc.extra_files,
        cwd=workspace,
    )


def key_name(function: Any) -> str:
    """The name a function is remembered under (an unnamed one by its classpath)."""
    if function.name:
        return str(function.name)
    fc = function.fcmodel
    return f"unnamed:{(fc.classpath or f'{fc.filepath}:{fc.classname}') if fc else ''}"


def normalize_target(base_url: str) -> str:
    return base_url.rstrip("/")


class EntityRecord(BaseModel):
    """One registered function: where, which, the code it was registered with, and its ids."""

    target: str
    name: str
    type: str
    code_hash: str
    entity_id: str
    layer_code: str | None = None
    reward_metric_weight: dict[str, float] | None = None
    registered_at: str = ""


class EntityState(BaseModel):
    """The whole `.opd/entities.json`."""

    version: int = STATE_VERSION
    note: str = STATE_NOTE
    entities: list[EntityRecord] = Field(default_factory=list)

    @classmethod
    def load(cls, workspace: str | Path) -> EntityState:
        """The workspace's state (empty when there is none); a damaged file is an OpdError."""
        path = state_path(workspace)
        if not path.is_file():
            return cls()
        try:
            return cls.model_validate_json(path.read_text(encoding="utf-8"))
        except (ValidationError, ValueError, OSError) as exc:
            raise OpdError(
                f"cannot read {path}: {str(exc).splitlines()[0]}",
                where=str(path),
                fix="delete the file; the next submit registers the functions again",
            ) from None

    def save(self, workspace: str | Path) -> Path:
        """Write atomically (a reader never sees half a file)."""
        path = state_path(workspace)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp-{os.getpid()}")
        tmp.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        return path

    def find(self, target: str, name: str, type: str) -> EntityRecord | None:
        target = normalize_target(target)
        for record in self.entities:
            if (record.target, record.name, record.type) == (target, name, type):
                return record
        return None

    def remember(self, record: EntityRecord) -> None:
        """Add or replace the record for its (target, name, type)."""
        record.target = normalize_target(record.target)
        record.registered_at = record.registered_at or time.strftime("%Y-%m-%dT%H:%M:%S")
        self.forget(record.target, record.name, record.type)
        self.entities.append(record)

    def forget(self, target: str, name: str, type: str) -> None:
        key = (normalize_target(target), name, type)
        self.entities = [r for r in self.entities if (r.target, r.name, r.type) != key]


@dataclass(frozen=True)
class Registration(ResultMixin):
    """What the next submit would do with one function: reuse an entity or register anew, and why."""

    name: str
    type: str
    entity_id: str | None  # the entity it would reuse; None: it registers
    note: str

    @property
    def reused(self) -> bool:
        return self.entity_id is not None


def registration_plan(
    workspace: str | Path, functions: Iterable[Any], target: str, *, fresh: bool = False
) -> list[Registration]:
    """For each function of a `JobConfig`: reuse its remembered entity (code unchanged) or register."""
    state = EntityState.load(workspace)
    plan = []
    for function in functions:
        name, kind = key_name(function), str(function.type)
        if function.entity_id:
            plan.append(
                Registration(
                    name, kind, function.entity_id, f"using {name} ({function.entity_id}) from the config"
                )
            )
            continue
        record = state.find(target, name, kind)
        if fresh:
            note = f"registering {name}: --fresh"
        elif record is None:
            note = f"registering {name}: new on {normalize_target(target)} (no earlier registration to reuse)"
        elif record.code_hash != function_hash(workspace, function):
            note = f"registering {name}: code changed since {record.entity_id} was registered"
        else:
            plan.append(
                Registration(
                    name, kind, record.entity_id, f"reusing {name} ({record.entity_id}), code unchanged"
                )
            )
            continue
        plan.append(Registration(name, kind, None, note))
    return plan
