"""Plain-HTTP helpers for the tests that drive their own `opd serve` (faults, reliability, restart).

Those tests kill, restart and damage servers, so they talk raw HTTP rather than through our client:
what a job shows must not depend on the client's retries."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import httpx

T = TypeVar("T")
H = {"Authorization": "Bearer server-test"}  # any key: a loopback server without OPD_SERVE_API_KEY


def wait_until(fn: Callable[[], T], timeout: float, what: str, every: float = 0.2) -> T:
    """``fn()``'s first truthy value, polled every ``every`` seconds for up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def job_view(api: str, job_id: str) -> dict:
    return httpx.get(f"{api}/fine-tunes/{job_id}", headers=H).json()["output"]


def job_logs(api: str, job_id: str) -> list[str]:
    out = httpx.get(f"{api}/fine-tunes/{job_id}/logs", headers=H, params={"line": 10000}).json()
    return out["output"]["logs"]
