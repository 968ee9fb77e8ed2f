"""MCP resources: what an agent reads rather than calls (a job, its metrics, its log, the rules).

Jobs are read on the plane `opd mcp` was started for (``--local [URL]`` / ``--cloud``, else the
environment, as `opd`); the reference texts are :mod:`opd_nb.agent.knowledge`'s, built from the
constants and rules the code itself uses.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from opd_nb.agent.knowledge import metric_dictionary, preflight_rules, troubleshooting
from opd_nb.agent.models import JobInfo
from opd_nb.agent.planes import MAX_ID_CHARS, client_for
from opd_nb.errors import OpdError

JSON = "application/json"
LOG_LINES = 500


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def job_errors(fn: Callable[[str], str]) -> Callable[[str], str]:
    """A job template's failures as the tools' one line: a job id too long or holding a NUL is refused
    before any request, a job the plane does not have is "not found" (-32602), any other OpdError its line."""
    from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError

    @functools.wraps(fn)
    def read(job_id: str) -> str:
        if len(job_id) > MAX_ID_CHARS or "\x00" in job_id:
            raise ResourceNotFoundError(
                f"not a job id ({len(job_id):,} characters{', with a NUL' if chr(0) in job_id else ''}): "
                f"a job id has at most {MAX_ID_CHARS} (fix: take one from the list_jobs tool)"
            )
        try:
            return fn(job_id)
        except OpdError as exc:
            raise (ResourceNotFoundError if exc.status == 404 else ResourceError)(str(exc)) from None

    return read


def register(app: Any) -> None:
    @app.resource(
        "opd://jobs/{job_id}", name="job", mime_type=JSON, description="a job, as `opd status --json`"
    )
    @job_errors
    def job(job_id: str) -> str:
        return JobInfo.of(client_for(None, None).get(job_id)).model_dump_json(indent=2)

    @app.resource("opd://jobs/{job_id}/metrics", name="job-metrics", mime_type=JSON,
                  description="a job's metric rows under the docs' names (null where the plane has none)")  # fmt: skip
    @job_errors
    def job_metrics(job_id: str) -> str:
        return _json(client_for(None, None).metrics(job_id))

    @app.resource("opd://jobs/{job_id}/log", name="job-log", mime_type="text/plain",
                  description=f"the last {LOG_LINES} lines of a job's log")  # fmt: skip
    @job_errors
    def job_log(job_id: str) -> str:
        from opd_nb.watching.log_search import search_logs

        found = search_logs(client_for(None, None), job_id, None, LOG_LINES)
        return "\n".join(f"{line.line}: {line.text}" for line in found.lines)

    @app.resource("opd://rules/preflight", name="preflight-rules", mime_type=JSON,
                  description="every `check` rule id and what it catches (each finding carries its fix)")  # fmt: skip
    def rules() -> str:
        return _json(preflight_rules())

    @app.resource("opd://docs/metrics", name="metric-dictionary", mime_type=JSON,
                  description="the metric dictionary: each metric name the jobs report and what it means")  # fmt: skip
    def metrics_doc() -> str:
        return _json(metric_dictionary())

    @app.resource("opd://docs/troubleshooting", name="troubleshooting", mime_type=JSON,
                  description="the troubleshooting table as the health rules encode it: rule, metric, example, fix")  # fmt: skip
    def troubleshooting_doc() -> str:
        return _json(troubleshooting())
