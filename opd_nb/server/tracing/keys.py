"""The credential of a job's function servers on the OTLP route: ``<job id>.<HMAC of it>``.

Why per job and signed: the route must know which job a span belongs to, and only that job's function
servers (which get it in ``OTEL_EXPORTER_OTLP_TRACES_HEADERS``) may write there. The secret lives only
in this server process, fresh each run (a restarted server restarts its jobs' function servers with new
tokens). The user's API key is no credential here, and this token is none on the API.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets


class TraceKeys:
    """Signs and checks the OTLP tokens of this server run."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)

    def _mac(self, job_id: str) -> str:
        return hmac.new(self._secret, job_id.encode("utf-8", "replace"), hashlib.sha256).hexdigest()

    def token(self, job_id: str) -> str:
        return f"{job_id}.{self._mac(job_id)}"

    def job_of(self, token: str | None) -> str | None:
        """The job a token was signed for, or None for anything else (the API key included)."""
        job_id, dot, mac = str(token or "").rpartition(".")
        if not dot or not job_id:
            return None
        return (
            job_id
            if hmac.compare_digest(self._mac(job_id).encode(), mac.encode("utf-8", "replace"))
            else None
        )
