"""A watcher's notifications, posted beside it: no poll, guard decision or cancel waits for a webhook.

A webhook answering after 30 s used to hold the watch loop for each alert it posted (and its
retries), so a guard that should cancel at step 2 cancelled at step 13: on Bailian, billed time. The
:class:`Outbox` takes each message at once and one background thread posts them in order through the
:class:`~opd_nb.watching.notify.Notifier` (each post bounded by its deadline); a failed post's line
is handed back at the watcher's next poll (:meth:`Outbox.take_lines`), and at the end the watcher
waits a bounded time for what is still queued (:meth:`Outbox.flush`), so the final message still goes.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from opd_nb.watching.notify import ATTEMPTS, MAX_WAIT_S, Notifier

Post = Callable[[Notifier], "str | None"]


class Outbox:
    """The messages of one watcher, posted in order by one daemon thread; the methods return at once."""

    def __init__(self, notifier: Notifier):
        self.notifier = notifier
        self._queue: queue.Queue[Post] = queue.Queue()
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def fmt(self) -> str:
        return self.notifier.fmt

    def __repr__(self) -> str:
        return f"Outbox({self.notifier!r})"

    def _put(self, post: Post) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._send_all, name="opd-notify", daemon=True)
            self._thread.start()
        self._queue.put(post)

    def _send_all(self) -> None:
        while True:
            post = self._queue.get()
            try:
                line = post(self.notifier)
            except Exception as exc:  # a bug in one message must not silence the rest
                line = f"notify: a message could not be posted ({type(exc).__name__})"
            if line:
                with self._lock:
                    self._lines.append(line)
            self._queue.task_done()

    def take_lines(self) -> list[str]:
        """The lines of the posts that failed since the last call (shown with the next poll)."""
        with self._lock:
            lines, self._lines = self._lines, []
        return lines

    def flush(self, timeout_s: float | None = None) -> list[str]:
        """Wait (at most `timeout_s`; default: what the queued posts can take) for the queue to empty;
        the failed posts' lines, and one line for what was still unsent."""
        waiting = self._queue.unfinished_tasks
        if timeout_s is None:
            per_post = ATTEMPTS * self.notifier.timeout_s + (ATTEMPTS - 1) * MAX_WAIT_S / 4
            timeout_s = max(1, waiting) * per_post
        done = threading.Event()
        threading.Thread(target=lambda: (self._queue.join(), done.set()), daemon=True).start()
        left = [] if done.wait(timeout_s) else [f"notify: {self._queue.unfinished_tasks} messages unsent"]
        return self.take_lines() + left

    # ---- the messages (as the Notifier's; each queued, returning None at once) ---------------------
    def alert(self, job_id: str, alert: Any) -> None:
        self._put(lambda n: n.alert(job_id, alert))

    def final(self, job: Any, extra: str = "") -> None:
        self._put(lambda n: n.final(job, extra))

    def contact_lost(self, job_id: str, where: str, problem: str, patience: str) -> None:
        self._put(lambda n: n.contact_lost(job_id, where, problem, patience))

    def contact_back(self, job_id: str, where: str, down: str, status: str) -> None:
        self._put(lambda n: n.contact_back(job_id, where, down, status))

    def gave_up(self, job_id: str, where: str, patience: str, status: str | None) -> None:
        self._put(lambda n: n.gave_up(job_id, where, patience, status))
