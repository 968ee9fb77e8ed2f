"""The notebook's one edge: the CLI's typed results mapped to the notebook's widgets, by type.

A command returns the same typed result to ``opd_nb.cli.invoke`` as it presents in a terminal; most
render themselves (``_repr_html_``). The ones a notebook shows live are mapped here, and only here:
a submit (``SubmitResult``) or a watch (``WatchRequest``) opens the job monitor, a sweep the multi-job
monitor, a ``Comparison`` the table with the overlaid curves, the other intents of ``opd_nb.cli.intents``
their views. Widget modules are imported only for the result that needs them, keeping ``%opd jobs`` light.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from opd_nb.cli.intents import (
    ChatRequest,
    ConfigCellRequest,
    EvalRequest,
    FormRequest,
    PlaygroundRequest,
    ProbeRequest,
    RolloutsRequest,
    SweepRequest,
    TracesRequest,
    WatchRequest,
)
from opd_nb.errors import OpdError

if TYPE_CHECKING:
    from opd_nb.client import SubmitResult
    from opd_nb.experiments import Comparison


def _monitor(request: WatchRequest) -> Any:
    """The monitor, its guard switch on with `--guard` (a watch with `--notify` is never handed back
    to the notebook: see ``opd_nb.cli._hand_back``)."""
    from opd_nb.client import JobClient
    from opd_nb.notebook.monitor import JobMonitor

    guard = request.guard if request.guard is not None else False
    monitor = JobMonitor(
        list(request.job_ids), JobClient(request.target), guard=guard, report_to=request.report_to
    )
    return monitor.start()


def _submitted(result: SubmitResult) -> Any:
    """The monitor of a submitted job, on the submit's own client, headed by what the terminal prints
    (the submit line and its notes: functions reused or registered, a skipped check, a smoke sample)."""
    from opd_nb.client import JobClient, resolve_target
    from opd_nb.notebook.monitor import JobMonitor

    client = result.client or JobClient(resolve_target(result.target_kind, base_url=result.base_url))
    notes = [result.headline(status=False), *result.note_lines()]
    return JobMonitor([result.job_id], client, notes=notes).start()


def _rollouts(request: RolloutsRequest) -> Any:
    from opd_nb.client import JobClient
    from opd_nb.notebook.rollout_viewer import RolloutViewer

    client = JobClient(request.target)
    return RolloutViewer(
        request.job_id, client, step=request.step, kind=request.kind, sort=request.sort, limit=request.limit
    )


def _traces(request: TracesRequest) -> Any:
    from opd_nb.client import JobClient
    from opd_nb.notebook.trajectory_view import TrajectoryView

    client = JobClient(request.target)
    return TrajectoryView(
        request.job_id,
        client,
        step=request.step,
        kind=request.kind,
        group=request.group,
        sample=request.sample,
        limit=request.limit,
    )


def _form(request: FormRequest) -> Any:
    from pathlib import Path

    from opd_nb.notebook.form import ConfigForm
    from opd_nb.spec.job import workspace_config

    folder, config = workspace_config(Path(request.workspace), request.config)
    return ConfigForm(str(folder), config=config, target=request.target)


def _playground(request: PlaygroundRequest) -> Any:
    from pathlib import Path

    from opd_nb.notebook.playground import RewardPlayground
    from opd_nb.spec.job import workspace_config

    folder, _ = workspace_config(Path(request.workspace))
    return RewardPlayground(
        str(folder), processor_class=request.processor_class, concurrency=request.concurrency
    )


def _config_cell(request: ConfigCellRequest) -> Any:
    from opd_nb.notebook.configcell import write_config_text

    if request.body is None:
        raise OpdError(
            "`config-cell` checks a cell's YAML body",
            fix="start a cell with `%%opd config [PATH]` and put the YAML of config.yaml below it",
        )
    return write_config_text(request.body, request.path, target=request.target)


def _sweep(request: SweepRequest) -> Any:
    from opd_nb.client import JobClient
    from opd_nb.notebook.experiment_views import SweepMonitor

    return SweepMonitor(request.sweep, JobClient(request.target)).start()


def _compare(comparison: Comparison) -> Any:
    from opd_nb.notebook.experiment_views import CompareView

    return CompareView(comparison)


def _chat(request: ChatRequest) -> Any:
    from opd_nb.client import JobClient
    from opd_nb.notebook.chat import ChatWidget

    chat = ChatWidget(
        request.model,
        JobClient(request.target),
        system=request.system,
        max_tokens=request.max_tokens,
        temperature=request.temperature,
    )
    if request.message:
        chat.send(request.message)
    return chat


def _eval(request: EvalRequest) -> Any:
    from opd_nb.client import JobClient
    from opd_nb.notebook.eval_view import EvalView

    return EvalView(
        request.workspace,
        request.models,
        JobClient(request.target),
        rows=request.rows,
        concurrency=request.concurrency,
        max_tokens=request.max_tokens,
        yes=request.yes,
    ).start()


def _probe(request: ProbeRequest) -> Any:
    """The probe, run in the cell (a few dozen calls), shown as its final view."""
    from opd_nb.cli.probe import run_request
    from opd_nb.client import JobClient
    from opd_nb.notebook.probe_view import ProbeView

    return ProbeView(run_request(JobClient(request.target), request))


def _probe_result(result: Any) -> Any:
    from opd_nb.notebook.probe_view import ProbeView

    return ProbeView(result)


_OPENERS: dict[type, Any] = {
    ProbeRequest: _probe,
    ChatRequest: _chat,
    EvalRequest: _eval,
    WatchRequest: _monitor,
    SweepRequest: _sweep,
    RolloutsRequest: _rollouts,
    TracesRequest: _traces,
    FormRequest: _form,
    PlaygroundRequest: _playground,
    ConfigCellRequest: _config_cell,
}
# The core's result types with a view, by the module that defines them: a result of one exists only once
# its module is loaded, so looking them up never imports the client or the experiments for `%opd check`.
_CORE_OPENERS: dict[tuple[str, str], Any] = {
    ("opd_nb.client.submit", "SubmitResult"): _submitted,
    ("opd_nb.experiments.compare", "Comparison"): _compare,
    ("opd_nb.experiments.probe_result", "ProbeResult"): _probe_result,
}


def _opener(cls: type) -> Any:
    """The view builder of a result type (None: shown as it is)."""
    if cls in _OPENERS:
        return _OPENERS[cls]
    for (module_name, name), opener in _CORE_OPENERS.items():
        module = sys.modules.get(module_name)
        if module is not None and getattr(module, name) is cls:
            return opener
    return None


def open_view(result: Any) -> Any:
    """The view a result is shown as in a notebook; a result without one is returned as it is."""
    opener = _opener(type(result))
    return result if opener is None else opener(result)
