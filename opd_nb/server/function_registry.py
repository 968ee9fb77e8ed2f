"""Registered functions: safe unpacking of uploaded zips, registration, and the instances that serve them.

The cloud unpacks a function's zip into its own sandbox and runs the SDK's function server there.
Locally each registered entity gets ``<data>/functions/<entity_id>/code`` and each loaded instance
is an :class:`opd_nb.functions.server.FunctionServer` subprocess on a loopback port.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import threading
import zipfile
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import JsonValue

from opd_nb import settings
from opd_nb.server import process_tree
from opd_nb.server.errors import ApiError
from opd_nb.server.limits import (
    MAX_ENTRY_NAME_BYTES,
    MAX_ENTRY_PATH_BYTES,
    MAX_UNPACKED_BYTES,
    MAX_ZIP_DIRECTORY_BYTES,
    MAX_ZIP_ENTRIES,
)
from opd_nb.server.responses import shown
from opd_nb.server.store import Store
from opd_nb.spec.ids import ENTITY_PREFIX, entity_kind
from opd_nb.wire.functions import Instance

MAX_ZIP_BYTES: int = (
    settings.MAX_ZIP_BYTES.default or 0
)  # the SDK's own hard limit (FC_OSS_FILE_SIZE_WARNING)
KIND_PREFIX = {kind: prefix.rstrip("-") for kind, prefix in ENTITY_PREFIX.items()}  # the documented forms


def new_id(prefix: str, nbytes: int = 6) -> str:
    """A random id with the prefix the cloud uses for the kind of thing (``rw-``, ``file-ft-``, ...)."""
    return f"{prefix}-{secrets.token_hex(nbytes)}"


def kind_of(entity_id: str) -> str | None:
    """Rewards and group rewards arrive under the same key; the id prefix tells them apart."""
    if "-ins-" in entity_id:
        return None
    return entity_kind(entity_id)


def _refuse(message: str) -> ApiError:
    return ApiError(400, "InvalidZip", message)


def _directory_size(path: Path) -> tuple[int, int] | None:
    """(entries, central directory bytes) from the end record, read before ``ZipFile`` parses anything."""
    end_record = getattr(zipfile, "_EndRecData", None)  # stable since Python 2; skip the pre-check without it
    if end_record is None:
        return None
    with open(path, "rb") as fh:
        rec = end_record(fh)
    if not rec:
        raise _refuse("the uploaded body is not a valid zip archive")
    # typeshed leaves out zipfile's private end-record indexes (present since Python 2)
    entries, size = zipfile._ECD_ENTRIES_TOTAL, zipfile._ECD_SIZE  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType, reportUnknownVariableType]
    return int(rec[entries]), int(rec[size])


def _check_name(name: str) -> None:
    """Names that could not be extracted here, or would land outside the function directory."""
    pure = PurePosixPath(name.replace("\\", "/"))
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":") or pure.is_absolute():
        raise _refuse(
            f"zip entry {shown(name)} has an absolute path; zip the function directory with relative paths"
        )
    if ".." in pure.parts:
        raise _refuse(
            f"zip entry {shown(name)} contains '..'; entries must stay inside the function directory"
        )
    if "\x00" in name or any(ord(c) < 32 for c in name):
        raise _refuse(f"zip entry {shown(name)} has a control character in its name")
    encoded = name.encode("utf-8", "surrogateescape")
    if len(encoded) > MAX_ENTRY_PATH_BYTES or any(
        len(p.encode("utf-8", "surrogateescape")) > MAX_ENTRY_NAME_BYTES for p in pure.parts
    ):
        raise _refuse(
            f"zip entry {shown(name, 80)} has a name over {MAX_ENTRY_NAME_BYTES} bytes per part "
            f"(or {MAX_ENTRY_PATH_BYTES} in all), which no file system here can hold"
        )


def _check_entries(zf: zipfile.ZipFile, max_unpacked: int) -> None:
    files: set[str] = set()
    dirs: set[str] = set()
    total = 0
    for info in zf.infolist():
        name = info.filename
        _check_name(name)
        if stat.S_ISLNK(info.external_attr >> 16):
            raise _refuse(
                f"zip entry {shown(name)} is a symbolic link; links are not "
                "allowed in function zips, copy the file instead"
            )
        parts = PurePosixPath(name.replace("\\", "/")).parts
        if not parts:
            continue
        key = "/".join(parts)
        parents = {"/".join(parts[:i]) for i in range(1, len(parts))}
        if info.is_dir():
            parents.add(key)
        elif key in files or key in dirs:
            raise _refuse(f"zip entry {shown(name)} appears twice (or is also a directory)")
        else:
            files.add(key)
        if clash := parents & files:
            raise _refuse(f"zip entry {shown(min(clash))} is both a file and a directory")
        dirs |= parents
        total += info.file_size
        if total > max_unpacked:
            raise _refuse(
                f"zip unpacks to more than {max_unpacked // 2**20} MiB; "
                "exclude data and model files from the function directory"
            )


def check_zip(path: Path, max_unpacked: int = MAX_UNPACKED_BYTES) -> None:
    """Refuse archives that could not be unpacked, could write outside their directory, or are too big.

    The entry count and directory size come from the end record first, so a zip of a million
    entries costs a read of its last 64 KiB, not the parse of every entry. Every entry's CRC is
    checked too (reading it all, within the unpacked cap): a zip that passes never fails to unpack.
    """
    try:
        size = _directory_size(path)
        if size is not None and (size[0] > MAX_ZIP_ENTRIES or size[1] > MAX_ZIP_DIRECTORY_BYTES):
            raise _refuse(
                f"the zip has {size[0]} entries ({size[1]} bytes of directory); at most "
                f"{MAX_ZIP_ENTRIES} are allowed: exclude data and environments from the function directory"
            )
        with zipfile.ZipFile(path) as zf:
            if len(zf.infolist()) > MAX_ZIP_ENTRIES:
                raise _refuse(f"the zip has more than {MAX_ZIP_ENTRIES} entries")
            _check_entries(zf, max_unpacked)
            bad = zf.testzip()
            if bad is not None:
                raise _refuse(f"zip entry {shown(bad)} is corrupt (bad CRC); zip the directory again")
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError):
        raise _refuse("the uploaded body is not a valid zip archive") from None
    except (RuntimeError, NotImplementedError) as exc:  # encrypted, or a compression zipfile lacks
        raise _refuse(f"the zip cannot be read: {shown(str(exc))}") from None


def unpack(zip_path: Path, dest: Path) -> None:
    """Unpack into ``dest`` via a temporary directory that never outlives a failure."""
    check_zip(zip_path)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with zipfile.ZipFile(zip_path) as zf:
            zf.extractall(tmp)
    except (OSError, zipfile.BadZipFile, RuntimeError, NotImplementedError, ValueError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _refuse(f"the zip could not be unpacked: {shown(str(exc))}") from None
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


def processor_path(name: str, func: str) -> tuple[str, str]:
    """(file relative to the code dir, dotted PROCESSOR_CLASS) the way the SDK's start.sh computes it."""
    rel = os.path.normpath(name).replace(os.sep, "/")
    if rel.startswith("../") or rel.startswith("/") or rel == ".." or "\x00" in rel:
        raise ApiError(
            400, "InvalidParameter", f"function file {shown(name)} must be a path relative to the zip root"
        )
    if not rel.endswith(".py"):
        rel += ".py"
    module = rel[: -len(".py")].replace("/", ".")
    return rel, f"{module}.{func}"


class InstanceState(StrEnum):
    """Where a function instance is (the SDK only sees ``status``: 1 running, -1 anything else)."""

    STARTING = "STARTING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    FAILED = "FAILED"
    DELETED = "DELETED"


FUNCTION_KINDS = {"rollout": "rollout", "reward": "reward", "group-reward": "group_reward"}  # URL -> kind


def register_function(store: Store, data_dir: Path, kind: str, name: str, func: str, unique_key: str) -> str:
    """Unpack the zip uploaded under ``unique_key`` for a new entity of ``kind``; returns its id."""
    upload = store.upload_path(unique_key)
    if not upload:
        raise ApiError(
            400,
            "InvalidParameter",
            f"no zip was uploaded for unique_key {shown(unique_key)}; PUT it to the "
            "URL from /fine-tunes/generate/faas/upload/url first",
        )
    rel, processor = processor_path(name, func)
    entity_id = new_id(KIND_PREFIX[kind])
    code_dir = data_dir / "functions" / entity_id / "code"
    store.begin_write(code_dir.parent)  # a kill -9 from here on leaves a directory the next start removes
    code_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        unpack(Path(upload), code_dir)
        if not (code_dir / rel).is_file():
            raise ApiError(400, "InvalidParameter", f"function file {shown(rel)} is not in the uploaded zip")
    except BaseException:
        shutil.rmtree(code_dir.parent, ignore_errors=True)  # a refused registration leaves nothing behind
        store.end_write(code_dir.parent)
        raise
    store.add_function(
        entity_id, kind, name, func, processor, unique_key, str(code_dir), finishes=(code_dir.parent,)
    )
    return entity_id


class InstanceManager:
    """Running function servers of this control plane (loaded by the SDK's `load`)."""

    def __init__(self, store: Store, data_dir: Path):
        self.store = store
        self.data_dir = data_dir
        self._servers: dict[str, Any] = {}
        self._lock = threading.Lock()

    def recover(self) -> None:
        """After a restart no instance of ours is running: end leftover trees, mark them stopped."""
        for inst in self.store.instances_with_status(InstanceState.RUNNING):
            process_tree.end(self.data_dir, process_tree.instance_owner(inst["instance_id"]))
            self.store.set_instance(inst["instance_id"], status=InstanceState.STOPPED, pid=None)

    def load(self, entity_id: str, tag: str, runtime: dict[str, Any]) -> Instance:
        fn = self._function(entity_id)
        instance_id = new_id(f"{KIND_PREFIX[fn['kind']]}-ins")
        log_path = self.data_dir / "functions" / entity_id / f"{instance_id}.log"
        self.store.add_instance(
            instance_id,
            entity_id,
            tag,
            InstanceState.STARTING,
            secrets.token_urlsafe(16),
            str(log_path),
            runtime,
        )
        return self._start(instance_id)

    def _start(self, instance_id: str) -> Instance:
        from opd_nb.errors import OpdError
        from opd_nb.functions.server import FunctionServer, startup_seconds

        inst = self._existing(instance_id, deleted_ok=True)
        fn = self._function(inst["entity_id"])
        owner = process_tree.instance_owner(instance_id)
        env = {**runtime_env(inst["runtime"]), **process_tree.child_env(self.data_dir, owner, base={})}
        try:
            server = FunctionServer.start(
                fn["code_dir"],
                fn["kind"],
                fn["processor"],
                log_path=inst["log_path"],
                env=env,
                startup_timeout=startup_seconds(),
            )
        except OpdError as exc:
            self.store.set_instance(instance_id, status=InstanceState.FAILED)
            raise ApiError(400, "FunctionLoadFailed", str(exc)) from None
        with self._lock:
            self._servers[instance_id] = server
        self.store.set_instance(instance_id, status=InstanceState.RUNNING, url=server.url, pid=server.pid)
        return self.describe(instance_id)

    def describe(self, instance_id: str) -> Instance:
        inst = self._existing(instance_id, deleted_ok=True)
        return Instance(
            instanceId=instance_id,  # the field's wire name (the SDK's key)
            instance_id=instance_id,
            entity_id=inst["entity_id"],
            status=1 if inst["status"] == InstanceState.RUNNING else -1,
            state=inst["status"],
            trigger_url=inst["url"],
            trigger_token=inst["token"],
        )

    def _function(self, entity_id: str) -> dict[str, Any]:
        fn = self.store.function(entity_id)
        if fn is None:
            raise ApiError(
                404, "FunctionNotFound", f"function {entity_id!r} is not registered on this server"
            )
        return fn

    def _existing(self, instance_id: str, *, deleted_ok: bool = False) -> dict[str, Any]:
        inst = self.store.instance(instance_id)
        if inst is None or (inst["status"] == InstanceState.DELETED and not deleted_ok):
            raise ApiError(404, "InstanceNotFound", f"function instance {instance_id!r} does not exist")
        return inst

    def query(self, instance_id: str) -> Instance:
        self._existing(instance_id)
        with self._lock:
            server = self._servers.get(instance_id)
        if server is None or not server.alive():
            # Restarted control plane or crashed function server: bring it back, as a cloud sandbox would.
            return self._start(instance_id)
        return self.describe(instance_id)

    def log_entries(self, instance_id: str) -> list[str]:
        inst = self._existing(instance_id, deleted_ok=True)
        try:
            with open(inst["log_path"], encoding="utf-8", errors="replace") as fh:
                return [line.rstrip("\n") for line in fh]
        except OSError:
            return []

    def delete(self, instance_id: str) -> None:
        self._existing(instance_id)
        with self._lock:
            server = self._servers.pop(instance_id, None)
        if server is not None:
            server.stop()
        process_tree.end(self.data_dir, process_tree.instance_owner(instance_id))
        self.store.set_instance(instance_id, status=InstanceState.DELETED, pid=None)

    def stop_all(self) -> None:
        with self._lock:
            servers = list(self._servers.items())
            self._servers.clear()
        for instance_id, server in servers:
            server.stop()
            process_tree.end(self.data_dir, process_tree.instance_owner(instance_id))
            self.store.set_instance(instance_id, status=InstanceState.STOPPED, pid=None)


def runtime_env(runtime: str | dict[str, Any] | None) -> dict[str, str]:
    """The environment variables a function's runtime asks for, as strings (JSON booleans as true/false)."""
    data: JsonValue = json.loads(runtime) if isinstance(runtime, str) else (runtime or {})
    env = data.get("env") if isinstance(data, dict) else None
    if not isinstance(env, dict):
        return {}
    return {str(k): ("true" if v is True else "false" if v is False else str(v)) for k, v in env.items()}
