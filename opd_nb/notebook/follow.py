"""Keep a job's view current while the job runs: the rollout viewer and the trace view follow new steps
as the monitor does, instead of waiting for a press on *refresh*.

A daemon thread asks for the job (one small request) every few seconds; when its step moved, or it
ended, the view reloads (a view on the latest step moves to the new latest; one the user moved to an
earlier step stays there) and its displayed output, the saved snapshot included, is replaced. It stops
once the job has ended, or when told to.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from opd_nb.errors import OpdError

FOLLOW_EVERY_S = 3.0


class FollowedView(Protocol):
    job_id: str

    @property
    def client(self) -> Any: ...

    def refresh(self) -> Any: ...

    def _refresh_static(self, *, force: bool = False) -> None: ...


class JobFollower:
    """Refreshes ``view`` whenever its job's step moves, until the job ends."""

    def __init__(self, view: FollowedView, every_s: float = FOLLOW_EVERY_S):
        self.view = view
        self.every_s = every_s
        self.refreshes = 0
        self._stop = threading.Event()
        self._seen: tuple[Any, bool] | None = None
        self._thread = threading.Thread(target=self._run, name=f"opd-follow-{view.job_id}", daemon=True)

    def start(self) -> JobFollower:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def poll_once(self) -> bool:
        """One look at the job; refreshes the view if its step moved. Returns True once the job ended."""
        try:
            job = self.view.client.get(self.view.job_id)
        except Exception:  # noqa: BLE001 - a flaky network must not end the following
            return False
        progress = getattr(job, "progress", None)
        now = (getattr(progress, "step", None), bool(job.terminal))
        first = self._seen is None
        if first and not job.terminal:  # the view was loaded just now, from a job still running
            self._seen = now
            return False
        if first or now != self._seen:  # an ended job gets one last reload: it may have ended since
            self._seen = now
            try:
                self.view.refresh()
            except OpdError:
                return bool(job.terminal)
            self.refreshes += 1
        # every look: the saved snapshot catches up (throttled); the job's end at once (the last look)
        self.view._refresh_static(force=bool(job.terminal))
        return bool(job.terminal)

    def _run(self) -> None:
        while not self.poll_once() and not self._stop.wait(self.every_s):
            pass
