"""Tools over the planes themselves: the local `opd serve` (start, stop, status), the deployments a plane
runs (so a billed one a lost answer left behind can be found and undeployed), a job's full metric series.
Each calls the core function its `opd` verb calls."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from opd_nb.agent.planes import BaseUrlArg, IdArg, JobIdArg, PathArg, TargetArg, client_for, tool_errors
from opd_nb.client.deploy_results import DeploymentList
from opd_nb.constants import LOCAL_PORT
from opd_nb.plots.job_series import JobSeries
from opd_nb.server.serve_info import ServeInfo

MetricNamesArg = Annotated[
    list[IdArg] | None,
    Field(description="metric names (default: every metric the job reports)"),
]


@tool_errors
def serve_start(
    port: Annotated[
        int, Field(ge=0, le=65535, description="the port on 127.0.0.1 (0: a free one)")
    ] = LOCAL_PORT,
    data_dir: Annotated[
        PathArg | None, Field(description="where jobs are stored (default: the user's)")
    ] = None,
) -> ServeInfo:
    """Start the local control plane in the background on loopback (`opd serve start`), or report the
    one already running; free, nothing leaves this machine. Its jobs are target local."""
    from opd_nb.server import ServeOptions
    from opd_nb.server.serve_info import start_info

    return start_info(ServeOptions(port=port, data_dir=data_dir))


@tool_errors
def serve_stop() -> ServeInfo:
    """Stop the background local control plane (`opd serve stop`); its running jobs stop with it."""
    from opd_nb.server.serve_info import stop_info

    return stop_info()


@tool_errors
def serve_status() -> ServeInfo:
    """Whether the background local control plane runs, where, and its data folder (`opd serve status`)."""
    from opd_nb.server.serve_info import status_info

    return status_info()


@tool_errors
def list_deployments(
    target: TargetArg = None,
    base_url: BaseUrlArg = None,
    page: Annotated[int, Field(ge=1)] = 1,
    size: Annotated[int, Field(ge=1, le=100)] = 20,
) -> DeploymentList:
    """Deployments, newest first (`opd deployments`): on Bailian each RUNNING one is billed until
    `undeploy`. After a deploy whose answer was lost, look here before deploying again."""
    return client_for(target, base_url).deployments(page=page, size=size)


@tool_errors
def metric_series(
    job_id: JobIdArg,
    names: MetricNamesArg = None,
    global_steps: Annotated[
        bool, Field(description="a continued job's steps after its parent's (as the charts draw it)")
    ] = False,
    target: TargetArg = None,
    base_url: BaseUrlArg = None,
) -> JobSeries:
    """Every point of a job's metrics (`opd metrics`), each series in step order; `metrics` gives
    the summary, this the whole curve."""
    from opd_nb.plots.job_series import job_series

    return job_series(client_for(target, base_url), job_id, names, global_steps=global_steps)


TOOLS = (
    serve_start,
    serve_stop,
    serve_status,
    list_deployments,
    metric_series,
)  # registered by opd_nb.agent.server, in this order
