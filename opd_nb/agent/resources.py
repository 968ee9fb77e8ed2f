"""MCP resources: what an agent reads rather than calls (a job, its metrics, its log, the rules).

Jobs are read on the plane `opd mcp` was started for (``--local [URL]`` / ``--cloud``, else the
environment, as `opd`); the reference texts are :mod:`opd_nb.agent.knowledge`'s, built from the
constants and rules the code itself uses.
"""

from __future__ import annotations

import json
from typing import Any

from opd_nb.agent.knowledge import metric_dictionary, preflight_rules, troubleshooting
from opd_nb.agent.models import JobInfo
from opd_nb.agent.planes import client_for

JSON = "application/json"
LOG_LINES = 500


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def register(app: Any) -> None:
    @app.resource(
        "opd://jobs/{job_id}", name="job", mime_type=JSON, description="a job, as `opd status --json`"
    )
    def job(job_id: str) -> str:
        return JobInfo.of(client_for(None, None).get(job_id)).model_dump_json(indent=2)

    @app.resource("opd://jobs/{job_id}/metrics", name="job-metrics", mime_type=JSON,
                  description="a job's metric rows under the docs' names (null where the plane has none)")  # fmt: skip
    def job_metrics(job_id: str) -> str:
        return _json(client_for(None, None).metrics(job_id))

    @app.resource("opd://jobs/{job_id}/log", name="job-log", mime_type="text/plain",
                  description=f"the last {LOG_LINES} lines of a job's log")  # fmt: skip
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
