"""The documented forms of Bailian ids, read in one place: which kind of thing an id names.

Why: a config names models, uploaded files and registered functions by id, and an id of one kind
pasted where another belongs (a job id as the student, a file id as a path, a rollout entity on a
reward) passes the SDK, which checks no id format, and fails in the cloud. The forms, and where the
docs show them:

- a job: ``ft-…`` (seed 001, ``AgenticRL.logs(job_id="ft-xxx", lines=100)``);
- a checkpoint: ``{job_id}:checkpoint-{step}`` (bailian-lifecycle-2026.md, "List checkpoints");
- an uploaded file: ``file-…`` (dashscope-sdk.md §4.1, ``file_id: file-...``);
- a registered function (entity): ``ro-`` a Rollout, ``rw-`` a Reward (seed 002, "Entity ID（ro- 表示
  Rollout、rw- 表示 Reward）"); the local plane gives a group reward ``grw-``;
- a function instance: ``ro-ins-…`` / ``rw-ins-…`` (the SDK CLI's help, dashscope-sdk.md §2.5);
- a finished local job's output model: ``opd-local/<job_id>`` (``opd serve`` only).
"""

from __future__ import annotations

import re
from typing import Literal

from opd_nb.constants import LOCAL_OUTPUT_PREFIX

JOB_PREFIX = "ft-"
FILE_PREFIX = "file-"
CHECKPOINT_MARK = ":checkpoint-"
INSTANCE_MARK = "-ins-"
ENTITY_PREFIX = {"rollout": "ro-", "reward": "rw-", "group_reward": "grw-"}  # grw-: the local plane's
DOCUMENTED_ENTITY_KINDS = ("rollout", "reward")  # the prefixes seed 002 names

IdKind = Literal["job", "checkpoint", "file", "entity", "instance", "local-output"]
_JOB = re.compile(r"^ft-[0-9A-Za-z][0-9A-Za-z-]*$")
_CHECKPOINT = re.compile(r"^ft-[0-9A-Za-z-]+:checkpoint-\d+$")
_FILE = re.compile(r"^file-[0-9A-Za-z][0-9A-Za-z-]*$")
_ENTITY = re.compile(r"^(grw|rw|ro)-[0-9A-Za-z][0-9A-Za-z-]*$")
_KIND_WORDS: dict[str, str] = {
    "job": "a fine-tune job id (ft-…)",
    "checkpoint": "a checkpoint id (JOB:checkpoint-N)",
    "file": "an uploaded file id (file-…)",
    "entity": "a registered function's entity id (ro-/rw-…)",
    "instance": "a function instance id (ro-ins-/rw-ins-…)",
    "local-output": "a local job's output model (opd-local/…), which only `opd serve` knows",
}


def id_kind(text: str) -> IdKind | None:
    """Which documented kind of id `text` is, or None for anything else (a model id, a path, a typo)."""
    value = text.strip()
    if value.startswith(LOCAL_OUTPUT_PREFIX):
        return "local-output"
    if _CHECKPOINT.match(value):
        return "checkpoint"
    if _ENTITY.match(value):
        return "instance" if INSTANCE_MARK in value else "entity"
    if _FILE.match(value):
        return "file"
    if _JOB.match(value):
        return "job"
    return None


def describe(kind: IdKind) -> str:
    """The kind in words, with its form (for a finding's message)."""
    return _KIND_WORDS[kind]


def entity_kind(entity_id: str) -> str | None:
    """The function type an entity id's prefix names (rollout, reward, group_reward), or None."""
    value = entity_id.strip()
    for kind, prefix in sorted(ENTITY_PREFIX.items(), key=lambda kv: -len(kv[1])):
        if value.startswith(prefix):
            return kind
    return None


def job_of(text: str) -> str | None:
    """The job id inside a checkpoint id or a local output model id (None when there is none)."""
    value = text.strip()
    if value.startswith(LOCAL_OUTPUT_PREFIX):
        value = value[len(LOCAL_OUTPUT_PREFIX) :]
    head = re.split(r"[:/]", value, maxsplit=1)[0]
    return head if _JOB.match(head) else None
