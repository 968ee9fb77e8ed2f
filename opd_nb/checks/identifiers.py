"""Identifier rules: ids with a documented form (:mod:`opd_nb.spec.ids`) in a place meant for another kind.

The SDK checks no id (dashscope-sdk.md §2.5), so a job id as the student, a rollout's entity id on a
reward, a file id in `file_name` or a path in `file_id` all reach the service, which then fails the job
(or, on `opd serve`, trains a stand-in). Each finding names the kind found, the kind the key takes, and
where the right id comes from.
"""

from __future__ import annotations

import re
from typing import Any

from opd_nb.checks.context import CheckContext
from opd_nb.spec.ids import (
    DOCUMENTED_ENTITY_KINDS,
    ENTITY_PREFIX,
    FILE_PREFIX,
    INSTANCE_MARK,
    describe,
    entity_kind,
    id_kind,
    job_of,
)

_MODEL_FIX = {
    "job": "use the job's output model (`finetuned_output` in `opd status {job}`), not the job id",
    "checkpoint": "export the checkpoint (`opd export {job} CHECKPOINT`) and use the model name it is published "
    "under (`opd checkpoints {job}`)",
    "file": "a model id is a Bailian model (e.g. qwen3.5-9b); a file id belongs under datasets[].file_id",
    "entity": "a model id is a Bailian model (e.g. qwen3.5-9b); an entity id belongs in functions[].entity_id",
    "instance": "a model id is a Bailian model (e.g. qwen3.5-9b)",
}


def check_identifiers(ctx: CheckContext) -> None:
    """Model ids, dataset sources and function entities, each against the id form its key takes."""
    _job_name(ctx)
    model = ctx.raw.get("model")
    student = model.get("name") if isinstance(model, dict) else None
    for path, value in ((("model", "name"), student), (("teacher_model",), ctx.raw.get("teacher_model"))):
        if isinstance(value, str) and value.strip():
            _model_id(ctx, path, value.strip())
    datasets = ctx.raw.get("datasets")
    for i, d in enumerate(datasets if isinstance(datasets, list) else []):
        if isinstance(d, dict):
            _dataset(ctx, i, d)
    for i, f in enumerate(ctx.raw_functions()):
        entity = f.get("entity_id")
        if isinstance(entity, str) and entity.strip():
            _entity(ctx, i, str(f.get("type", "rollout")), entity.strip())


# What the SDK appends: job_name = f"{name}-{uuid4()[:8]}" (with a letter: "-20260105" is a date, not a suffix).
_SUFFIX = re.compile(r"-(?=[0-9]*[a-f])[0-9a-f]{8}$")


def _job_name(ctx: CheckContext) -> None:
    """A name copied from a job list: it already ends with the suffix the SDK appends (so it gets two)."""
    name = ctx.raw.get("name")
    if isinstance(name, str) and (_SUFFIX.search(name) or id_kind(name) == "job"):
        ctx.report.add(
            "config.job-name-suffix",
            "info",
            ctx.where(("name",)),
            f"name {name!r} looks like a submitted job's name or id: the SDK appends its own -<8 hex>, so the job "
            f"is named {name}-<8 hex>",
            f"write the base name ({_SUFFIX.sub('', name)!r}) to tell experiments apart by it",
        )


def _model_id(ctx: CheckContext, path: tuple[str, ...], value: str) -> None:
    kind = id_kind(value)
    role = "teacher_model" if path == ("teacher_model",) else "model.name"
    if kind in _MODEL_FIX:
        ctx.report.add(
            "config.id-wrong-kind",
            "error",
            ctx.where(path),
            f"{role} {value!r} is {describe(kind)}, not a model id: the service cannot load it"
            + (" (locally it would train a stand-in instead)" if ctx.target == "local" else ""),
            _MODEL_FIX[kind].format(job=job_of(value) or "JOB"),
        )
    elif kind == "local-output" and role == "teacher_model" and ctx.target == "local":
        ctx.report.add(
            "config.finetuned-teacher",
            "warning",
            ctx.where(path),
            f"teacher_model {value!r} is a fine-tuned output of a local job: Bailian deploys only its own "
            "models as a teacher (the FAQ's teacher_model error), so this job runs only on `opd serve`",
            "for the cloud, keep a Bailian model larger than the student as the teacher (e.g. qwen3.5-397b-a17b)",
        )


def _dataset(ctx: CheckContext, i: int, d: dict[str, Any]) -> None:
    """A file id where a path goes and the reverse, a URL that is not one, and fields of another source kind."""
    rep = ctx.report
    src = d.get("data_source_type", "file_id") or "file_id"
    name, file_id, url = d.get("file_name"), d.get("file_id"), d.get("download_url")
    if isinstance(name, str) and id_kind(name) == "file" and not ctx.resolve(name).exists():
        rep.add(
            "config.id-wrong-kind",
            "error",
            ctx.where(("datasets", i, "file_name")),
            f"datasets[{i}].file_name {name!r} is {describe('file')}, not a local path: the SDK tries to open and "
            "upload it as a file (error 4011)",
            f"write `file_id: {name}` instead of `file_name:` (an uploaded file is submitted by its id)",
        )
    if isinstance(file_id, str) and file_id.strip():
        _file_id(ctx, i, file_id.strip(), bool(name))
    if src == "download_url" and isinstance(url, str) and url and not url.startswith(("http://", "https://")):
        rep.add(
            "config.id-wrong-kind",
            "error",
            ctx.where(("datasets", i, "download_url")),
            f"datasets[{i}].download_url {url!r} is not an http(s) URL: the service downloads the file from it",
            "write an https://... link, or use data_source_type: file_id with file_name for a local file "
            "(oss_mount with mount_storage for an OSS bucket)",
        )
    _other_source_fields(ctx, i, d, src)


def _file_id(ctx: CheckContext, i: int, file_id: str, has_name: bool) -> None:
    rep = ctx.report
    where = ctx.where(("datasets", i, "file_id"))
    kind = id_kind(file_id)
    if has_name:
        rep.add(
            "config.dataset-source-fields",
            "warning",
            where,
            f"datasets[{i}] has both file_name and file_id: the SDK uploads file_name and submits the new id, so "
            f"file_id {file_id!r} is ignored",
            "keep file_name to upload the local file, or only file_id to reuse the uploaded one",
        )
    elif kind not in (None, "file") or "/" in file_id or file_id.endswith((".jsonl", ".json")):
        what = describe(kind) if kind else "a path"
        rep.add(
            "config.id-wrong-kind",
            "error",
            where,
            f"datasets[{i}].file_id {file_id!r} is {what}, not an uploaded file's id ({FILE_PREFIX}…)",
            "for a local file write `file_name: data/train.jsonl` (the SDK uploads it); file_id takes the id "
            "an upload returned",
        )
    elif kind is None:
        rep.add(
            "config.id-wrong-kind",
            "warning",
            where,
            f"datasets[{i}].file_id {file_id!r} does not have the form of an uploaded file's id ({FILE_PREFIX}…)",
            "copy the id an upload returned (the SDK's upload and the console show it), or use file_name",
        )


_SOURCE_FIELDS = {
    "file_id": ("file_name", "file_id"),
    "download_url": ("download_url",),
    "oss_mount": ("mount_storage",),
}


def _other_source_fields(ctx: CheckContext, i: int, d: dict[str, Any], src: str) -> None:
    """Fields that belong to another data_source_type: the SDK sends them, the service reads only its own."""
    if src not in _SOURCE_FIELDS:
        return
    for other, fields in _SOURCE_FIELDS.items():
        if other == src:
            continue
        for key in fields:
            if d.get(key) not in (None, "", {}, []):
                ctx.report.add(
                    "config.dataset-source-fields",
                    "warning",
                    ctx.where(("datasets", i, key)),
                    f"datasets[{i}].{key} belongs to data_source_type {other}, but this dataset is {src}: it is "
                    "not used",
                    f"set data_source_type: {other} to use it, or delete `{key}`",
                )
    storage = d.get("mount_storage")
    if src == "oss_mount" and isinstance(storage, dict):
        missing = [k for k in ("region", "bucket", "file_path") if not storage.get(k)]
        if missing:
            ctx.report.add(
                "config.dataset-source-missing",
                "error",
                ctx.where(("datasets", i, "mount_storage")),
                f"datasets[{i}].mount_storage lacks {', '.join(missing)}: the service cannot find the file",
                "write mount_storage: {region: cn-beijing, bucket: my-bucket, file_path: data/train.jsonl}",
            )


def _entity(ctx: CheckContext, i: int, ftype: str, entity: str) -> None:
    """An entity id of another function type, an instance id, or no entity form at all."""
    where = ctx.where(("functions", i, "entity_id"))
    owner = entity_kind(entity)
    if INSTANCE_MARK in entity:
        problem = f"is {describe('instance')}, not an entity id: an instance is one loaded copy of an entity"
    elif owner is None:
        prefixes = " or ".join(ENTITY_PREFIX[k] for k in DOCUMENTED_ENTITY_KINDS)
        ctx.report.add(
            "config.id-wrong-kind",
            "warning",
            where,
            f"functions[{i}].entity_id {entity!r} does not have an entity id's form ({prefixes}…)",
            "copy the entity_id a registration returned (submit_job.py remembers them in .opd/entities.json)",
        )
        return
    elif owner != ftype and {owner, ftype} == {"reward", "group_reward"}:
        ctx.report.add(
            "config.id-wrong-kind",
            "warning",
            where,
            f"functions[{i}].entity_id {entity!r} has the {owner} prefix ({ENTITY_PREFIX[owner]}…), but this "
            f"function is a {ftype}: `opd serve` tells the two apart by the prefix (the docs name only ro-/rw-)",
            f"use the entity id registered for this {ftype}, or delete entity_id to register it again",
        )
        return
    elif owner != ftype:
        problem = f"is a {owner} entity ({ENTITY_PREFIX[owner]}…), but this function is a {ftype}"
    else:
        return
    ctx.report.add(
        "config.id-wrong-kind",
        "error",
        where,
        f"functions[{i}].entity_id {entity!r} {problem}: the SDK skips registering this function and submits "
        "the id as it is, so the service runs the wrong code or none",
        f"use the entity id registered for this {ftype} ({ENTITY_PREFIX.get(ftype, '')}…), or delete entity_id "
        "to register the code again",
    )
