"""The result the workspace's ``submit_job.py`` (or opd-nb's own SDK runner) writes to ``--result-file``.

A declared, versioned protocol between two programs that cannot share code (the script runs with only the
SDK): ``protocol`` names its version (:data:`opd_nb.constants.SUBMIT_RESULT_PROTOCOL`, generated into the
script), a result without it is an older script's (version 0, the same fields). Every version keeps
``job_id``: a script newer than this opd-nb may already have started a (paid) job, so its result is read
for the fields this version knows rather than refused; a field of the wrong type is one line.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from opd_nb.constants import SUBMIT_RESULT_PROTOCOL
from opd_nb.errors import OpdError


class ScriptResult(BaseModel):
    """One submit's outcome: the job id (None when the service refused it), and what the script knows."""

    model_config = ConfigDict(extra="ignore")

    protocol: int = 0
    job_id: str | None = None
    status: str | None = None  # with --wait: the job's final status
    target: str | None = None  # the control plane's API base
    functions: list[dict[str, Any]] = []  # each function's entity: registered or reused
    status_code: int | None = None  # the SDK runner's: the service's HTTP status
    code: str | None = None  # and its error code and message, when it refused the job
    message: str | None = None


def read_script_result(data: dict[str, Any]) -> ScriptResult:
    """`data` read as the protocol it declares (a newer one for the fields this version knows); an OpdError
    for a mistyped field."""
    try:
        return ScriptResult.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        newer = data.get("protocol", 0)
        hint = (
            "upgrade opd-nb (pip install -U opd-nb): the script writes a newer result protocol"
            if isinstance(newer, int) and newer > SUBMIT_RESULT_PROTOCOL
            else "copy submit_job.py from a new workspace (`opd new`)"
        )
        raise OpdError(
            f"the submit's result has a bad {where!r}: {first['msg']}", fix=hint, exit_code=1
        ) from None
