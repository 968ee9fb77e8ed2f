"""Where a model answers: a RUNNING deployment, or the shared endpoint of a base model.

A mixin of :class:`~opd_nb.server.deploy.manager.DeploymentManager` (as :mod:`~opd_nb.server.deploy.restarts` is):
the manager starts and stops serving processes, this answers inference calls with the
:class:`Endpoint` to forward to. Base models are callable without a deployment, as on Bailian: the
first call for a cloud id, a bundled stand-in or a ``--model-map`` id starts a shared endpoint for
its weights (at most ``MAX_BASE`` at once; the least recently used one is stopped first).
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

from opd_nb.constants import FAILED, LOCAL_HOST, PENDING, RUNNING
from opd_nb.server.errors import ApiError
from opd_nb.server.launcher import ChildProcess
from opd_nb.server.models import ResolvedModel
from opd_nb.server.store import Store

MAX_BASE = 2
BASE_KINDS = ("stand-in", "mapped")  # callable directly; the others are fine-tuned outputs


@dataclass(frozen=True)
class Endpoint:
    """Where a model answers: the serving process's OpenAI base URL and its bearer token."""

    url: str
    token: str
    name: str


def deploy_hint(model: str) -> str:
    return (
        f"deploy it first: `opd deploy {model}` (or Deployments.call(model={model!r}, capacity=1)), "
        "wait until it is RUNNING, then call the deployed_model name it answers"
    )


def not_deployed(store: Store, model: str, resolved: ResolvedModel) -> ApiError:
    """A fine-tuned output called by its model name: name its deployed_model, or say to deploy it."""
    live = [r["deployed_model"] for r in store.deployments_of(model)]
    if live:
        return ApiError(
            400,
            "ModelNotDeployed",
            f"model {model!r} is an exported model name, not a deployment: chat with its deployed_model "
            f"{live[0]!r} instead (the name Deployments.call answered; `opd deployments` lists it)",
        )
    return ApiError(
        400,
        "ModelNotDeployed",
        f"model {model!r} is a fine-tuned output ({resolved.kind} {resolved.path}), and fine-tuned "
        f"models answer only once deployed; {deploy_hint(model)}",
    )


class DeploymentEndpoints:
    """Inference lookups for the deployment manager (needs its store, lock, processes and helpers)."""

    store: Store
    max_base: int
    _lock: threading.RLock
    _procs: dict[str, ChildProcess]
    _used: dict[str, float]

    def _launch(self, row: dict[str, Any]) -> None: ...  # DeploymentManager's
    def _active(self) -> list[dict[str, Any]]: ...  # DeploymentManager's
    def _refresh(self, row: dict[str, Any]) -> dict[str, Any]: ...  # DeploymentManager's
    def _stop(self, name: str, proc: ChildProcess | None) -> None: ...  # DeploymentManager's
    def _resolve(self, model: str, not_found_status: int = 400) -> ResolvedModel: ...  # DeploymentManager's

    def endpoint(self, model: str) -> Endpoint:
        """Where `model` answers: a RUNNING deployment, or the base-model endpoint for a base model."""
        row = self.store.deployment(model)
        if row is not None and not row["is_base"]:
            return self._deployed(row)
        resolved = self._resolve(model, not_found_status=404)
        if resolved.kind not in BASE_KINDS:
            raise not_deployed(self.store, model, resolved)
        return self._base(model, resolved)

    def _deployed(self, row: dict[str, Any]) -> Endpoint:
        name = row["deployed_model"]
        if row["deleted"]:
            raise ApiError(
                400,
                "ModelNotDeployed",
                f"deployment {name!r} was deleted, so it no longer answers; {deploy_hint(row['model_name'])}",
            )
        row = self._refresh(row)
        if row["status"] == PENDING:
            raise ApiError(
                400,
                "DeploymentNotReady",
                f"deployment {name!r} is still starting (PENDING); retry when "
                f"`opd deployments` (GET /api/v1/deployments/{name}) says RUNNING",
            )
        if row["status"] != RUNNING or not row["port"]:
            raise ApiError(
                400,
                "DeploymentFailed",
                f"deployment {name!r} is {row['status']}: {row['message'] or 'its process is gone'}; "
                f"undeploy it and deploy {row['model_name']!r} again",
            )
        return Endpoint(f"http://{LOCAL_HOST}:{row['port']}/v1", row["token"], name)

    def _base(self, model: str, resolved: ResolvedModel) -> Endpoint:
        name = "base-" + hashlib.sha1(resolved.path.encode()).hexdigest()[:12]
        with self._lock:
            row = self.store.deployment(name)
            if row is None or row["deleted"] or row["status"] == FAILED:
                self._evict_base()
                row = {
                    "deployed_model": name,
                    "model_name": model,
                    "base_model": model,
                    "suffix": None,
                    "capacity": 2,
                    "status": PENDING,
                    "kind": resolved.kind,
                    "path": resolved.path,
                    "token": secrets.token_urlsafe(24),
                    "is_base": 1,
                }
                self._launch(self.store.put_deployment(row))
            self._used[name] = time.monotonic()
        row = self._wait_ready(name)
        return Endpoint(f"http://{LOCAL_HOST}:{row['port']}/v1", row["token"], name)

    def _wait_ready(self, name: str) -> dict[str, Any]:
        while True:
            current = self.store.deployment(name)
            if current is None:
                raise ApiError(
                    400, "ModelUnavailable", f"the local endpoint {name!r} was removed while it started"
                )
            row = self._refresh(current)
            if row["status"] == RUNNING:
                return row
            if row["status"] != PENDING:
                raise ApiError(
                    400,
                    "ModelUnavailable",
                    f"the local endpoint for {row['model_name']!r} failed to start: {row['message']}",
                )
            time.sleep(0.1)

    def _evict_base(self) -> None:
        bases = [r for r in self._active() if r["is_base"]]
        while len(bases) >= self.max_base:
            oldest = min(bases, key=lambda r: self._used.get(r["deployed_model"], 0.0))
            bases.remove(oldest)
            self._stop(oldest["deployed_model"], self._procs.pop(oldest["deployed_model"], None))
            self.store.drop_deployment(oldest["deployed_model"])
