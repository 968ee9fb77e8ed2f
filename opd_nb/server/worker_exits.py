"""A job worker's exit codes, defined once: the worker exits with them, the job manager reads them."""

from __future__ import annotations

import signal

EXIT_INTERRUPTED = 75  # the worker stopped on SIGTERM/SIGINT; its job stays RUNNING (EX_TEMPFAIL)


def exit_reason(returncode: int | None) -> str:
    """A worker's exit in words: ``killed by SIGKILL``, ``exit code 1``."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    if returncode == EXIT_INTERRUPTED:
        return "stopped by a signal (SIGTERM/SIGINT)"
    return f"exit code {returncode}"
