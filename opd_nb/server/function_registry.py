"""Registered functions: safe unpacking of uploaded zips, registration, and the instances that serve them.

The cloud unpacks a function's zip into its own sandbox and runs the SDK's function server there.
Locally each registered entity gets ``<data>/functions/<entity_id>/code`` and each loaded instance
is an :class:`opd_nb.function_server.FunctionServer` subprocess on a loopback port.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import stat
import threading
import zipfile
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Any

from opd_nb.server.errors import ApiError
from opd_nb.server.store import Store

MAX_ZIP_BYTES = 200 * 1024 * 1024  # the SDK's own hard limit (FC_OSS_FILE_SIZE_WARNING)
MAX_UNPACKED_BYTES = 1024 * 1024 * 1024
KIND_PREFIX = {"rollout": "ro", "reward": "rw", "group_reward": "grw"}


def new_id(prefix: str, nbytes: int = 6) -> str:
    """A random id with the prefix the cloud uses for the kind of thing (``rw-``, ``file-ft-``, ...)."""
    return f"{prefix}-{secrets.token_hex(nbytes)}"


def kind_of(entity_id: str) -> str | None:
    """Rewards and group rewards arrive under the same key; the id prefix tells them apart."""
    if "-ins-" in entity_id:
        return None
    for kind, prefix in (("group_reward", "grw-"), ("reward", "rw-"), ("rollout", "ro-")):
        if entity_id.startswith(prefix):
            return kind
    return None


def check_zip(path: Path, max_unpacked: int = MAX_UNPACKED_BYTES) -> None:
    """Refuse archives that could write outside their directory or exhaust the disk."""
    try:
        with zipfile.ZipFile(path) as zf:
            total = 0
            for info in zf.infolist():
                name = info.filename
                pure = PurePosixPath(name.replace("\\", "/"))
                if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":") or pure.is_absolute():
                    raise ApiError(
                        400,
                        "InvalidZip",
                        f"zip entry {name!r} has an absolute path; zip the "
                        "function directory with relative paths",
                    )
                if ".." in pure.parts:
                    raise ApiError(
                        400,
                        "InvalidZip",
                        f"zip entry {name!r} contains '..'; entries must stay inside the function directory",
                    )
                mode = info.external_attr >> 16
                if stat.S_ISLNK(mode):
                    raise ApiError(
                        400,
                        "InvalidZip",
                        f"zip entry {name!r} is a symbolic link; links are not "
                        "allowed in function zips, copy the file instead",
                    )
                total += info.file_size
                if total > max_unpacked:
                    raise ApiError(
                        400,
                        "InvalidZip",
                        f"zip unpacks to more than {max_unpacked // 2**20} MiB; "
                        "exclude data and model files from the function directory",
                    )
    except zipfile.BadZipFile:
        raise ApiError(400, "InvalidZip", "the uploaded body is not a valid zip archive") from None


def unpack(zip_path: Path, dest: Path) -> None:
    check_zip(zip_path)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(tmp)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


def processor_path(name: str, func: str) -> tuple[str, str]:
    """(file relative to the code dir, dotted PROCESSOR_CLASS) the way the SDK's start.sh computes it."""
    rel = os.path.normpath(name).replace(os.sep, "/")
    if rel.startswith("../") or rel.startswith("/") or rel == "..":
        raise ApiError(400, "InvalidParameter", f"function file {name!r} must be relative to the zip root")
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
            f"no zip was uploaded for unique_key {unique_key!r}; PUT it to the "
            "URL from /fine-tunes/generate/faas/upload/url first",
        )
    rel, processor = processor_path(name, func)
    entity_id = new_id(KIND_PREFIX[kind])
    code_dir = data_dir / "functions" / entity_id / "code"
    code_dir.parent.mkdir(parents=True, exist_ok=True)
    unpack(Path(upload), code_dir)
    if not (code_dir / rel).is_file():
        shutil.rmtree(code_dir.parent, ignore_errors=True)
        raise ApiError(400, "InvalidParameter", f"function file {rel!r} is not in the uploaded zip")
    store.add_function(entity_id, kind, name, func, processor, unique_key, str(code_dir))
    return entity_id


class InstanceManager:
    """Running function servers of this control plane (loaded by the SDK's `load`)."""

    def __init__(self, store: Store, data_dir: Path):
        self.store = store
        self.data_dir = data_dir
        self._servers: dict[str, Any] = {}
        self._lock = threading.Lock()

    def recover(self) -> None:
        """After a restart no instance of ours is running: stop leftovers, mark them stopped."""
        for inst in self.store.instances_with_status(InstanceState.RUNNING):
            kill_if_ours(inst["pid"], "uvicorn")
            self.store.set_instance(inst["instance_id"], status=InstanceState.STOPPED, pid=None)

    def load(self, entity_id: str, tag: str, runtime: dict) -> dict:
        fn = self.store.function(entity_id)
        if fn is None:
            raise ApiError(
                404, "FunctionNotFound", f"function {entity_id!r} is not registered on this server"
            )
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

    def _start(self, instance_id: str) -> dict:
        from opd_nb.errors import OpdError
        from opd_nb.function_server import FunctionServer

        inst = self.store.instance(instance_id)
        fn = self.store.function(inst["entity_id"])
        try:
            server = FunctionServer.start(
                fn["code_dir"],
                fn["kind"],
                fn["processor"],
                log_path=inst["log_path"],
                env=runtime_env(inst["runtime"]),
                startup_timeout=90.0,
            )
        except OpdError as exc:
            self.store.set_instance(instance_id, status=InstanceState.FAILED)
            raise ApiError(400, "FunctionLoadFailed", str(exc)) from None
        with self._lock:
            self._servers[instance_id] = server
        self.store.set_instance(instance_id, status=InstanceState.RUNNING, url=server.url, pid=server.pid)
        return self.describe(instance_id)

    def describe(self, instance_id: str) -> dict:
        inst = self.store.instance(instance_id)
        return {
            "instanceId": instance_id,
            "instance_id": instance_id,
            "entity_id": inst["entity_id"],
            "status": 1 if inst["status"] == InstanceState.RUNNING else -1,
            "state": inst["status"],
            "trigger_url": inst["url"],
            "trigger_token": inst["token"],
        }

    def _existing(self, instance_id: str, *, deleted_ok: bool = False) -> dict:
        inst = self.store.instance(instance_id)
        if inst is None or (inst["status"] == InstanceState.DELETED and not deleted_ok):
            raise ApiError(404, "InstanceNotFound", f"function instance {instance_id!r} does not exist")
        return inst

    def query(self, instance_id: str) -> dict:
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
        self.store.set_instance(instance_id, status=InstanceState.DELETED, pid=None)

    def stop_all(self) -> None:
        with self._lock:
            servers = list(self._servers.items())
            self._servers.clear()
        for instance_id, server in servers:
            server.stop()
            self.store.set_instance(instance_id, status=InstanceState.STOPPED, pid=None)


def runtime_env(runtime: str | dict | None) -> dict[str, str]:
    """The environment variables a function's runtime asks for, as strings (JSON booleans as true/false)."""
    data = json.loads(runtime) if isinstance(runtime, str) else (runtime or {})
    env = data.get("env") if isinstance(data, dict) else None
    if not isinstance(env, dict):
        return {}
    return {str(k): ("true" if v is True else "false" if v is False else str(v)) for k, v in env.items()}


def kill_if_ours(pid: int | None, marker: str) -> bool:
    """Kill `pid` only when its command line shows it is one of our processes (pids get reused)."""

    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    if marker not in cmdline:
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        return False
    return True
