"""Deployments: each served model is a bounded process of its own (``python -m opd_nb.engine.serving``).

Bailian's deployment API, locally. ``create`` starts a serving process for any model the local
engine can run (a job's ``opd-local/<job_id>``, a kept checkpoint's path, a ``--model-map`` id, a
cloud id's stand-in); the deployment is PENDING until the process answers, then RUNNING. At most
``max_deployments`` run at once (``opd serve --max-deployments``, else ``OPD_MAX_DEPLOYMENTS``, else 3); past that, ``create`` is a
4xx that says which ones to stop. ``delete`` stops the process; ``scale`` records the capacity
(locally one process serves a deployment whatever its capacity; capacity sizes its batch).

Base models are callable without a deployment, as on Bailian: the first call for a cloud id, a
bundled stand-in or a ``--model-map`` id starts a shared endpoint for its weights (at most
``MAX_BASE`` at once, the least recently used one is stopped first). Those are not listed.

Processes: each starts in its own process group (``start_new_session``), tagged for the process
tree rules (:mod:`opd_nb.server.process_tree`, owner ``deployment:<name>``), with its pid in the
store; it also exits by itself when the control plane is gone (it watches its parent). The control
plane stops them all when it stops; on the next start the leftovers of the previous run are reaped
and every deployment is started again, so deployments survive a restart and none outlives the server.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from opd_nb import settings
from opd_nb.constants import DELETED, FAILED, PENDING, RUNNING
from opd_nb.server import process_tree
from opd_nb.server.deploy.endpoints import MAX_BASE, DeploymentEndpoints
from opd_nb.server.deploy.restarts import DeploymentRestarts, deployment_events
from opd_nb.server.errors import ApiError
from opd_nb.server.launcher import ChildProcess, Launcher
from opd_nb.server.models import (
    LOCAL_PREFIX,
    ModelNotFound,
    ModelNotServable,
    ModelRegistry,
    ResolvedModel,
    job_of_path,
)
from opd_nb.server.records import DEFAULT_MAX_DEPLOYMENTS, MAX_DEPLOYMENTS_ENV
from opd_nb.server.store import Store
from opd_nb.wire.deploy_plans import LORA, charge_type
from opd_nb.wire.deployments import DeploymentEvent, DeploymentLocal, DeploymentOutput

MARKER = "opd_nb.engine.serving"  # the serving module: what a pid's command line must show to be ours
TOKEN_ENV = settings.SERVING_TOKEN.name  # read by the serving process (never on its command line)
STARTUP_TIMEOUT_S = 180.0
STOP_GRACE_S = 5.0
BATCH_PER_CAPACITY = 8

_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


def owner(name: str) -> str:
    """The process-tree owner of a deployment's (or base endpoint's) serving process."""
    return f"deployment:{name}"


def max_deployments_from_env() -> int:
    return settings.MAX_DEPLOYMENTS.get() or DEFAULT_MAX_DEPLOYMENTS


def _slug(model: str, resolved: ResolvedModel) -> str:
    """A name part without '/': the SDK puts deployment names into URL paths unescaped."""
    if resolved.kind == "path":
        job = job_of_path(resolved.path)
        name = Path(resolved.path).name
        model = f"{job}-{name}" if job else name
    return _SLUG.sub("-", model).strip("-.")[:64] or "model"


class DeploymentManager(DeploymentEndpoints, DeploymentRestarts):
    """The serving processes of this control plane (deployments and base-model endpoints)."""

    def __init__(
        self,
        store: Store,
        registry: ModelRegistry,
        data_dir: Path,
        launcher: Launcher,
        *,
        max_deployments: int | None = None,
        max_base: int = MAX_BASE,
    ):
        self.store = store
        self.registry = registry
        self.data_dir = data_dir
        self.launcher = launcher
        self.max_deployments = max_deployments or max_deployments_from_env()
        self.max_base = max_base
        self._procs: dict[str, ChildProcess] = {}
        self._started: dict[str, float] = {}
        self._used: dict[str, float] = {}  # base endpoints: last call (least recently used goes first)
        self._lock = threading.RLock()

    # ---- lifecycle ----------------------------------------------------------------------------
    def recover(self) -> None:
        """On start: stop leftovers of a previous server, start every deployment again (and watch them)."""
        self._start_watching()
        for row in self.store.live_deployments():
            process_tree.end(self.data_dir, owner(row["deployed_model"]), grace_s=1.0)  # a leftover, if any
            if row["is_base"]:
                self.store.drop_deployment(row["deployed_model"])
            elif row["status"] in (PENDING, RUNNING):
                with self._lock:
                    self._launch(row)

    def stop_all(self) -> None:
        """On shutdown: stop every process; deployments keep their rows and come back on the next start."""
        self._stop_watching()
        with self._lock:
            procs = list(self._procs.items())
            self._procs.clear()
        for name, proc in procs:
            self._stop(name, proc)
            row = self.store.deployment(name)
            if row and row["is_base"]:
                self.store.drop_deployment(name)
            elif row:
                self.store.set_deployment(name, pid=None, port=None)

    # ---- the API ------------------------------------------------------------------------------
    def create(
        self, model: str, capacity: int, suffix: str | None, plan: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Start a deployment of `model` (PENDING); `plan`: ``{"plan", "deploy_spec", "billing_method"}``
        as asked (the body checked it; locally every plan runs the same process)."""
        resolved = self._resolve(model)
        name = f"{_slug(model, resolved)}-{suffix or secrets.token_hex(3)}"
        with self._lock:
            existing = self.store.deployment(name)
            if existing and not existing["deleted"]:
                raise ApiError(
                    400,
                    "DeploymentExists",
                    f"a deployment named {name!r} exists already; pick another suffix or undeploy it first",
                )
            active = [r for r in self._active() if not r["is_base"]]
            if len(active) >= self.max_deployments:
                names = ", ".join(r["deployed_model"] for r in active)
                raise ApiError(
                    400,
                    "DeploymentLimitExceeded",
                    f"at most {self.max_deployments} deployments run at once on this server ({names}); "
                    "undeploy one first (`opd undeploy NAME` or Deployments.delete), or restart `opd serve` "
                    f"with `--max-deployments N` (or {MAX_DEPLOYMENTS_ENV}=N)",
                )
            row = {
                "deployed_model": name,
                "model_name": model,
                "base_model": self._base_model(model, resolved),
                "suffix": suffix,
                "capacity": capacity,
                "status": PENDING,
                "kind": resolved.kind,
                "path": resolved.path,
                "token": secrets.token_urlsafe(24),
                "is_base": 0,
                "plan": (plan or {}).get("plan") or LORA,
                "plan_spec": json.dumps({k: v for k, v in (plan or {}).items() if k != "plan"}),
            }
            self._launch(self.store.put_deployment(row))
        return self.get(name)

    def get(self, name: str) -> dict[str, Any]:
        row = self.store.deployment(name)
        if row is None or row["is_base"]:
            raise ApiError(
                404,
                "DeploymentNotFound",
                f"deployment {name!r} does not exist; `opd deployments` (GET /api/v1/deployments) lists them",
            )
        if row["deleted"]:
            raise ApiError(
                404,
                "DeploymentNotFound",
                f"deployment {name!r} was deleted; deploy {row['model_name']!r} again to serve it",
            )
        return self._refresh(row)

    def list(self, offset: int, limit: int) -> tuple[list[dict[str, Any]], int]:
        rows, total = self.store.deployments(offset, limit)
        return [self._refresh(r) for r in rows], total

    def scale(self, name: str, capacity: int) -> dict[str, Any]:
        """Record the new capacity (the running process keeps serving; its batch size follows on restart)."""
        if self.get(name)["capacity"] != capacity:
            self.store.set_deployment(name, capacity=capacity)
        return self.get(name)

    def delete(self, name: str) -> dict[str, Any]:
        row = self.get(name)
        with self._lock:
            proc = self._procs.pop(name, None)
        self._stop(name, proc)
        self.store.set_deployment(name, deleted=1, status=DELETED, pid=None, port=None)
        return {**row, "status": DELETED}

    # ---- processes ----------------------------------------------------------------------------
    def _stop(self, name: str, proc: ChildProcess | None) -> None:
        """Stop a serving process: its group, then anything else still tagged as its tree."""
        if proc is not None:
            stop_group(proc)
        process_tree.end(self.data_dir, owner(name), grace_s=1.0)

    def _active(self) -> list[dict[str, Any]]:
        return [r for r in self.store.live_deployments() if r["status"] in (PENDING, RUNNING)]

    def _dir(self, name: str) -> Path:
        path = self.data_dir / "deployments" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _launch(self, row: dict[str, Any]) -> None:
        """Start the serving process for `row` (caller holds the lock)."""
        name = row["deployed_model"]
        ddir = self._dir(name)
        ready = ddir / "ready.port"
        ready.unlink(missing_ok=True)
        env = process_tree.child_env(self.data_dir, owner(name))
        env[TOKEN_ENV] = row["token"]
        env.setdefault("OMP_NUM_THREADS", "2")
        args = ["--model", row["path"], "--name", name, "--ready-file", str(ready)]
        args += ["--max-batch", str(BATCH_PER_CAPACITY * int(row["capacity"]))]
        # Inside a request, holding the lock: no wait for a fork server still importing (a fresh process).
        proc = self.launcher.start(MARKER, args, env=env, log=ddir / "serving.log", wait_s=0.0)
        self._procs[name] = proc
        self._started[name] = time.monotonic()
        self.store.set_deployment(name, status=PENDING, pid=proc.pid, port=None, message=None)

    def _refresh(self, row: dict[str, Any]) -> dict[str, Any]:
        """Move PENDING to RUNNING once the process answers, to FAILED when it is gone."""
        name = row["deployed_model"]
        if row["status"] not in (PENDING, RUNNING) or row["deleted"]:
            return row
        proc = self._procs.get(name)
        if proc is None or proc.poll() is not None:
            code = proc.returncode if proc is not None else None
            message = f"the serving process exited (code {code})" if proc is not None else "not running"
            tail = _tail(self._dir(name) / "serving.log")
            return self._on_exit(row, proc, message + (f": {tail}" if tail else ""))
        if row["status"] == PENDING:
            port = _read_port(self._dir(name) / "ready.port")
            if port:
                self.store.set_deployment(name, status=RUNNING, port=port)
                return self.store.deployment(name) or row
            if time.monotonic() - self._started.get(name, time.monotonic()) > STARTUP_TIMEOUT_S:
                self._stop(name, proc)
                message = f"the serving process did not answer within {STARTUP_TIMEOUT_S:.0f}s"
                self.store.set_deployment(name, status=FAILED, pid=None, message=message)
                return self.store.deployment(name) or row
        return row

    def _resolve(self, model: str, not_found_status: int = 400) -> ResolvedModel:
        """A call's model (strict: an id Bailian does not document is model-not-found, a 404 to calls)."""
        try:
            return self.registry.resolve(model, "student", strict=True)
        except ModelNotFound as exc:
            raise ApiError(404, "ModelNotFound", str(exc)) from None
        except ModelNotServable as exc:
            raise ApiError(
                not_found_status,
                "ModelNotFound",
                f"{exc}. Base models and published models: GET /api/v1/models; deployments: "
                "GET /api/v1/deployments",
            ) from None

    def _base_model(self, model: str, resolved: ResolvedModel) -> str | None:
        """The root base model a fine-tuned output was trained from (through continued jobs), else the model."""
        job_id = model[len(LOCAL_PREFIX) :] if model.startswith(LOCAL_PREFIX) else resolved.job_id
        job = self.store.job(job_id) if job_id else None
        if job is not None:
            return job.base_model
        return None if resolved.kind == "path" else model


def deployment_output(row: dict[str, Any]) -> DeploymentOutput:
    """A deployment as Bailian answers it (every field dashscope's DeploymentOutput declares) plus ``local``."""
    running = row["status"] == RUNNING
    spec = json.loads(row.get("plan_spec") or "{}")
    return DeploymentOutput(
        deployed_model=row["deployed_model"],
        gmt_create=row["gmt_create"],
        gmt_modified=row["gmt_modified"],
        status=row["status"],
        model_name=row["model_name"],
        base_model=row["base_model"],
        base_capacity=row["capacity"],
        capacity=row["capacity"],
        ready_capacity=row["capacity"] if running else 0,
        workspace_id="local",
        plan=row.get("plan") or LORA,
        charge_type=charge_type(row.get("plan"), spec.get("billing_method")),
        deploy_spec=spec.get("deploy_spec"),
        billing_method=spec.get("billing_method"),
        modifier="local",
        creator="local",
        local=DeploymentLocal(
            kind=row["kind"],
            path=row["path"],
            message=row.get("message"),
            events=[DeploymentEvent.model_validate(e) for e in deployment_events(row)],
        ),
    )


# ---- process helpers -------------------------------------------------------------------------------
def stop_group(proc: ChildProcess) -> None:
    """SIGTERM the process group, SIGKILL it after a grace period."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(STOP_GRACE_S)


def _read_port(path: Path) -> int | None:
    try:
        return int(path.read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def _tail(path: Path, n: int = 3) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in lines[-n:] if line.strip())[-600:]
