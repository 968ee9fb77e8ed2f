"""A job's function servers dying under it: the platform's failure, named for what it is.

A function server killed by a signal (``kill -9``, the out-of-memory killer) or exiting on its own is
not an error in the user's code, which only ever answers a call (its raise is a ``failed`` reply,
worded by :mod:`opd_nb.functions.reward_call`). So the worker watches its function servers while the
job trains; one that dies is said at once (which function, its pid, the signal or exit code) and
started again on the same port, once, as the cloud restarts a dead instance; the engine's calls wait
for it meanwhile (:mod:`opd_nb.engine.keepalive`). A second death is not restarted: the job fails
with a message that says what died and how, not "fix the reward code".

Also here: a function server's own log lines (uvicorn's, the user's prints), copied into the job's
log at a failure, keep their own level (:func:`function_log_lines`): a healthy ``INFO:`` line is no
ERROR.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opd_nb.engine.keepalive import give_up_on
from opd_nb.server.worker_exits import exit_reason

POLL_S = 0.2
SETTLE_S = 0.5  # a death waits this long before it counts: a stopping job ends its servers too
RESTARTS = 1  # as the cloud restarts a dead function instance
DIED_CODE = "FunctionServerDied"
_NAMES = "DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL"
# uvicorn's "INFO:     ...", "[ERROR] ...", logging's "... - name - INFO - ..."; a traceback's first and last lines.
_LEVEL = re.compile(rf"^\[?({_NAMES})[:\]\s]| - ({_NAMES}) - ")
_TRACEBACK = re.compile(
    r"^(Traceback \(most recent call last\):|[A-Za-z_.]*(Error|Exception|Exit|Interrupt)(:|$))"
)
_LEVELS = {"WARN": "WARNING", "FATAL": "ERROR", "CRITICAL": "ERROR", "DEBUG": "INFO"}

Log = Callable[[str, str], None]  # (message, level)


@dataclass
class Death:
    """One function server's death: which function, its pid, and how it ended."""

    what: str  # "reward function 'reward-1'"
    pid: int
    how: str  # "killed by SIGKILL (...)", "exited with code 3"

    def __str__(self) -> str:
        return f"the {self.what} server (pid {self.pid}) {self.how}"


class FunctionWatch:
    """Watches a job's function servers in a thread; restarts a dead one once (see the module doc)."""

    def __init__(
        self,
        servers: list[Any],
        names: list[str],
        log: Log,
        startup_s: float = 60.0,
        restart_allowed: Callable[[], bool] = lambda: True,
    ):
        self.servers, self.names, self.log, self.startup_s = servers, names, log, startup_s
        self.restart_allowed = restart_allowed  # False: the job is stopping (a signal, the server gone)
        self.deaths: list[Death] = []
        self.restarts: list[int] = [0] * len(servers)
        self.given_up: Death | None = None  # the death not restarted (the job cannot go on)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="opd-function-watch", daemon=True)

    def add(self, server: Any, name: str) -> None:
        """Watch one more started server (``name``: "reward function 'reward-1'")."""
        self.servers.append(server)
        self.names.append(name)
        self.restarts.append(0)

    def start(self) -> FunctionWatch:
        if self.servers:
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (before the job stops its servers on purpose)."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(self.startup_s + 5)

    def _watch(self) -> None:
        while not self._stop.wait(POLL_S):
            for i, server in enumerate(self.servers):
                code = server.process.poll()
                if code is not None and not self._stop.is_set() and self.given_up is None:
                    self._died(i, server, _ended(code))

    def _died(self, i: int, server: Any, how: str) -> None:
        if self._stop.wait(SETTLE_S) or not self.restart_allowed():
            self._stop.set()  # the job is stopping (its servers end with it): not a death to restart
            return
        death = Death(self.names[i], server.pid, how)
        self.deaths.append(death)
        if self.restarts[i] >= RESTARTS:
            self.given_up = death
            give_up_on(server.url)  # the engine's calls stop waiting for it: the step fails now
            self.log(f"{death} again: the platform's failure, not an error in your code; "
                     f"it was restarted {self.restarts[i]} time(s) already, so the job stops", "ERROR")  # fmt: skip
            return
        self.restarts[i] += 1
        self.log(f"{death}: the platform's failure, not an error in your code; restarting it "
                 "(once, as the cloud restarts a dead function instance)", "ERROR")  # fmt: skip
        try:
            server.restart(self.startup_s)
        except Exception as exc:  # it would not come back: the job stops, saying why
            self.given_up = death
            give_up_on(server.url)
            self.log(f"the {death.what} server could not be restarted: {exc}", "ERROR")
            return
        self.log(f"the {death.what} server is serving again at {server.url} (pid {server.pid})", "WARNING")

    def failure(self, exc: Exception) -> str | None:
        """The job's failure message when a function server's death stopped it: one not restarted, or
        one restarted whose calls failed the step anyway (an engine error); None otherwise."""
        from opd_nb.engine.api import EngineError

        death = self.given_up or (self.deaths[-1] if self.deaths and isinstance(exc, EngineError) else None)
        if death is None:
            return None
        times = (
            f" ({len(self.deaths)} deaths, restarted {sum(self.restarts)} time(s))"
            if len(self.deaths) > 1
            else ""
        )
        return (
            f"{death}{times}: the platform's failure, not an error in your code; the job could not go on. "
            "Resubmit it; if it happens again, look for what ended the process (memory: a reward holding "
            "large objects, `dmesg` for the out-of-memory killer)"
        )


def _ended(returncode: int) -> str:
    """How a function server ended, in the workers' words (``killed by SIGKILL``, ``exit code 3``)."""
    how = exit_reason(returncode)
    if how == "killed by SIGKILL":
        how += " (also how the kernel's out-of-memory killer ends a process)"
    return how


def function_line_level(line: str, previous: str) -> str:
    """The level a function server wrote ``line`` at: the one it names; ERROR for a traceback's first or
    last line; an indented line continues the one above; any other (a print of the user's code) is INFO."""
    if named := _LEVEL.search(line):
        name = named.group(1) or named.group(2)
        return _LEVELS.get(name, name)
    if _TRACEBACK.match(line):
        return "ERROR"
    return previous if line.startswith((" ", "\t")) else "INFO"


def function_log_lines(lines: list[str], label: str) -> list[tuple[str, str]]:
    """(level, line) for a function server's log lines, each at its own level (:func:`function_line_level`):
    ``INFO:`` stays INFO, a traceback is ERROR, a print is INFO."""
    out: list[tuple[str, str]] = []
    level = "INFO"
    for line in lines:
        level = function_line_level(line, level)
        out.append((level, f"[{label}] {line}"))
    return out
