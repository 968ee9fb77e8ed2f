"""Registered functions: safe unpacking of uploaded zips and the instances that serve them.

The cloud unpacks a function's zip into its own sandbox and runs the SDK's function server there.
Locally each registered entity gets ``<data>/functions/<entity_id>/code`` and each loaded instance
is an :class:`opd_nb.function_server.FunctionServer` subprocess on a loopback port.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import threading
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any

from opd_nb.server.errors import ApiError
from opd_nb.server.store import Store, now_text

MAX_ZIP_BYTES = 200 * 1024 * 1024  # the SDK's own hard limit (FC_OSS_FILE_SIZE_WARNING)
MAX_UNPACKED_BYTES = 1024 * 1024 * 1024
KIND_PREFIX = {"rollout": "ro", "reward": "rw", "group_reward": "grw"}


def new_id(prefix: str, nbytes: int = 6) -> str:
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


class InstanceManager:
    """Running function servers of this control plane (loaded by the SDK's `load`)."""

    def __init__(self, store: Store, data_dir: Path):
        self.store = store
        self.data_dir = data_dir
        self._servers: dict[str, Any] = {}
        self._lock = threading.Lock()

    def recover(self) -> None:
        """After a restart no instance of ours is running: stop leftovers, mark them stopped."""
        for row in self.store.all("SELECT instance_id, pid FROM instances WHERE status = 'RUNNING'"):
            kill_if_ours(row["pid"], "uvicorn")
            self.store.run(
                "UPDATE instances SET status = 'STOPPED', pid = NULL WHERE instance_id = ?",
                row["instance_id"],
            )

    def load(self, entity_id: str, tag: str, runtime: dict) -> dict:
        fn = self.store.one("SELECT * FROM functions WHERE entity_id = ?", entity_id)
        if fn is None:
            raise ApiError(
                404, "FunctionNotFound", f"function {entity_id!r} is not registered on this server"
            )
        instance_id = new_id(f"{KIND_PREFIX[fn['kind']]}-ins")
        log_path = self.data_dir / "functions" / entity_id / f"{instance_id}.log"
        self.store.run(
            "INSERT INTO instances(instance_id, entity_id, tag, status, token, log_path, runtime, created_at) "
            "VALUES (?,?,?,?,?,?,?,?)",
            instance_id,
            entity_id,
            tag,
            "STARTING",
            secrets.token_urlsafe(16),
            str(log_path),
            _json(runtime),
            now_text(),
        )
        return self._start(instance_id)

    def _start(self, instance_id: str) -> dict:
        from opd_nb.errors import OpdError
        from opd_nb.function_server import FunctionServer

        inst = self.store.one("SELECT * FROM instances WHERE instance_id = ?", instance_id)
        fn = self.store.one("SELECT * FROM functions WHERE entity_id = ?", inst["entity_id"])
        env = runtime_env(inst["runtime"])
        try:
            server = FunctionServer.start(
                fn["code_dir"],
                fn["kind"],
                fn["processor"],
                log_path=inst["log_path"],
                env=env,
                startup_timeout=90.0,
            )
        except OpdError as exc:
            self.store.run("UPDATE instances SET status = 'FAILED' WHERE instance_id = ?", instance_id)
            raise ApiError(400, "FunctionLoadFailed", str(exc)) from None
        with self._lock:
            self._servers[instance_id] = server
        self.store.run(
            "UPDATE instances SET status = 'RUNNING', url = ?, pid = ? WHERE instance_id = ?",
            server.url,
            server.pid,
            instance_id,
        )
        return self.describe(instance_id)

    def describe(self, instance_id: str) -> dict:
        inst = self.store.one("SELECT * FROM instances WHERE instance_id = ?", instance_id)
        running = inst["status"] == "RUNNING"
        return {
            "instanceId": instance_id,
            "instance_id": instance_id,
            "entity_id": inst["entity_id"],
            "status": 1 if running else -1,
            "state": inst["status"],
            "trigger_url": inst["url"],
            "trigger_token": inst["token"],
        }

    def query(self, instance_id: str) -> dict:
        inst = self.store.one("SELECT * FROM instances WHERE instance_id = ?", instance_id)
        if inst is None or inst["status"] == "DELETED":
            raise ApiError(404, "InstanceNotFound", f"function instance {instance_id!r} does not exist")
        with self._lock:
            server = self._servers.get(instance_id)
        if server is None or not server.alive():
            # Restarted control plane or crashed function server: bring it back, as a cloud sandbox would.
            return self._start(instance_id)
        return self.describe(instance_id)

    def log_entries(self, instance_id: str) -> list[str]:
        inst = self.store.one("SELECT * FROM instances WHERE instance_id = ?", instance_id)
        if inst is None:
            raise ApiError(404, "InstanceNotFound", f"function instance {instance_id!r} does not exist")
        try:
            with open(inst["log_path"], encoding="utf-8", errors="replace") as fh:
                return [line.rstrip("\n") for line in fh]
        except OSError:
            return []

    def delete(self, instance_id: str) -> None:
        inst = self.store.one("SELECT * FROM instances WHERE instance_id = ?", instance_id)
        if inst is None or inst["status"] == "DELETED":
            raise ApiError(404, "InstanceNotFound", f"function instance {instance_id!r} does not exist")
        with self._lock:
            server = self._servers.pop(instance_id, None)
        if server is not None:
            server.stop()
        self.store.run(
            "UPDATE instances SET status = 'DELETED', pid = NULL WHERE instance_id = ?", instance_id
        )

    def stop_all(self) -> None:
        with self._lock:
            servers = list(self._servers.items())
            self._servers.clear()
        for instance_id, server in servers:
            server.stop()
            self.store.run(
                "UPDATE instances SET status = 'STOPPED', pid = NULL WHERE instance_id = ?", instance_id
            )


def runtime_env(runtime: str | dict | None) -> dict[str, str]:
    import json

    data = json.loads(runtime) if isinstance(runtime, str) else (runtime or {})
    env = data.get("env") if isinstance(data, dict) else None
    if not isinstance(env, dict):
        return {}
    return {str(k): ("true" if v is True else "false" if v is False else str(v)) for k, v in env.items()}


def kill_if_ours(pid: int | None, marker: str) -> bool:
    """Kill `pid` only when its command line shows it is one of our processes (pids get reused)."""
    import signal

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


def _json(value: Any) -> str:
    import json

    return json.dumps(value)
