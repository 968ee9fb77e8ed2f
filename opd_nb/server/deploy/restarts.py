"""A deployment whose serving process dies is started again, once, after a backoff, and says so.

Why: a killed serving process used to leave its deployment FAILED for good (calls got a clear 400,
but nothing brought it back), while a cloud deployment heals itself. A mixin of
:class:`~opd_nb.server.deploy.manager.DeploymentManager`: a watcher thread notices the exit within
:data:`WATCH_POLL_S`; a deployment that was RUNNING goes back to PENDING and is relaunched after
:data:`RESTART_BACKOFF_S` (doubling per restart, :data:`MAX_RESTARTS` in its lifetime); after that
it is FAILED with the reason. Each step is an entry in the deployment's ``local.events``.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from opd_nb.constants import FAILED, PENDING, RUNNING
from opd_nb.server.launcher import ChildProcess
from opd_nb.server.store import Store
from opd_nb.server.store.db import now_text

MAX_RESTARTS = 1
RESTART_BACKOFF_S = 2.0
WATCH_POLL_S = 1.0


class DeploymentRestarts:
    """Restart-once for the deployment manager (needs its store, lock, processes and ``_launch``)."""

    store: Store
    _lock: Any
    _procs: dict[str, ChildProcess]

    def _launch(self, row: dict[str, Any]) -> None: ...  # DeploymentManager's
    def _active(self) -> list[dict[str, Any]]: ...  # DeploymentManager's
    def _refresh(self, row: dict[str, Any]) -> dict[str, Any]: ...  # DeploymentManager's
    def _dir(self, name: str) -> Path: ...  # DeploymentManager's

    def _start_watching(self) -> None:
        self._stopping = threading.Event()
        self._restarting: set[str] = set()
        threading.Thread(target=self._watch, name="opd-deployment-watch", daemon=True).start()

    def _stop_watching(self) -> None:
        self._stopping.set()

    def _watch(self) -> None:
        """Notice a serving process's exit without waiting for someone to ask about its deployment."""
        while not self._stopping.wait(WATCH_POLL_S):
            for row in self._active():
                try:
                    self._refresh(row)
                except Exception:  # a transient store error: the next poll tries again
                    continue

    def _on_exit(self, row: dict[str, Any], proc: ChildProcess | None, reason: str) -> dict[str, Any]:
        """The serving process of ``row`` is gone: restart it (once, after a backoff) or mark it FAILED."""
        name = row["deployed_model"]
        if name in self._restarting or self._stopping.is_set():
            return row  # a restart is on its way, or the server is stopping (rows come back at start)
        restarts = int(row.get("restarts") or 0)
        if proc is not None and row["status"] == RUNNING and restarts < MAX_RESTARTS:
            delay = RESTART_BACKOFF_S * 2**restarts
            self._restarting.add(name)
            note = f"{reason}; restarting it in {delay:g}s (restart {restarts + 1} of {MAX_RESTARTS})"
            self._event(name, "restarting", note)
            self.store.set_deployment(
                name, status=PENDING, pid=None, port=None, restarts=restarts + 1, message=note
            )
            timer = threading.Timer(delay, self._restart, args=(name,))
            timer.daemon = True
            timer.start()
            return self.store.deployment(name) or row
        if restarts:
            reason += f"; it was restarted {restarts} time(s) already: undeploy it and deploy again"
        self._event(name, "failed", reason)
        self.store.set_deployment(name, status=FAILED, pid=None, port=None, message=reason)
        return self.store.deployment(name) or row

    def _restart(self, name: str) -> None:
        with self._lock:
            try:
                row = self.store.deployment(name)
                if row and not row["deleted"] and row["status"] == PENDING and not self._stopping.is_set():
                    self._launch(row)
                    self._event(
                        name, "restarted", f"serving process started again (pid {self._procs[name].pid})"
                    )
            finally:
                self._restarting.discard(name)

    def _event(self, name: str, kind: str, message: str) -> None:
        row = self.store.deployment(name)
        events = json.loads((row or {}).get("events") or "[]")
        events.append({"time": now_text(), "event": kind, "message": message})
        self.store.set_deployment(name, events=json.dumps(events))


def deployment_events(row: dict[str, Any]) -> list[dict[str, Any]]:
    """What happened to a deployment's process (restarts, failures), oldest first."""
    return json.loads(row.get("events") or "[]")
