"""Plain-HTTP helpers for the tests that drive their own `opd serve` (faults, reliability, restart).

Those tests kill, restart and damage servers, so they talk raw HTTP rather than through our client:
what a job shows must not depend on the client's retries."""

from __future__ import annotations

import io
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx

from opd_nb.wire import http_client

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


# These polls go through the package's one HTTP rule (one TLS context per process, not one per
# call); still a new connection each time, so a restarted server is asked afresh.
def job_view(api: str, job_id: str) -> dict:
    return http_client.get(f"{api}/fine-tunes/{job_id}", headers=H).json()["output"]


def job_logs(api: str, job_id: str) -> list[str]:
    out = http_client.get(f"{api}/fine-tunes/{job_id}/logs", headers=H, params={"line": 10000}).json()
    return out["output"]["logs"]


def register_reward(
    api: str, tmp_path: Path, extra: str = "", func: str = "RewardProcessor", key: str = "rw"
) -> str:
    """The template's reward (plus ``extra`` as ``functions/reward/extra.py``, whose class is ``func``),
    zipped, PUT to its signed URL under upload key ``key`` and registered over plain HTTP."""
    from opd_nb.workspace.new import create

    ws = Path(create("reward", tmp_path / "ws").path)
    if extra:
        (ws / "functions" / "reward" / "extra.py").write_text(extra)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path in (ws / "functions").rglob("*.py"):
            zf.write(path, path.relative_to(ws).as_posix())
    url = httpx.post(api + "/fine-tunes/generate/faas/upload/url", headers=H, json={"unique_key": key})
    assert httpx.put(url.json()["output"]["url"], content=buf.getvalue()).status_code == 200
    name = "functions/reward/extra.py" if extra else "functions/reward/reward.py"
    body = {"name": name, "unique_key": key, "func": func}
    out = httpx.post(api + "/fine-tunes/create/reward", headers=H, json=body)
    assert out.status_code == 200, out.text
    return out.json()["output"]["reward_id"]
