"""Turn the CLI's typed "open this view" results into the notebook's widgets.

Commands run under ``%opd`` return typed results; most render themselves (``_repr_html_``). The
ones that stand for a widget are requests (``opd_nb.cli.view_requests``), because the CLI never
imports the notebook layer. This is the one place that maps each request type to its widget.
Widget modules are imported only for the request that needs them, keeping ``%opd jobs`` light.
"""

from __future__ import annotations

from typing import Any

from opd_nb.cli.view_requests import (
    ChatRequest,
    CompareRequest,
    ConfigCellRequest,
    EvalRequest,
    FormRequest,
    PlaygroundRequest,
    RolloutsRequest,
    SweepRequest,
    TracesRequest,
    WatchRequest,
)


def _monitor(request: WatchRequest) -> Any:
    """The monitor; after `%opd submit`, on the submit's own client, headed by what the terminal prints
    (the submit line and its notes: functions reused or registered, a skipped check, a smoke sample)."""
    from opd_nb.client import JobClient
    from opd_nb.notebook.monitor import JobMonitor

    guard = request.guard if request.guard is not None else False
    submitted = request.submitted
    client = submitted.client if submitted is not None else None
    notes = [submitted.headline(status=False), *submitted.note_lines()] if submitted is not None else []
    monitor = JobMonitor(
        list(request.job_ids),
        client or JobClient(request.target),
        guard=guard,
        notes=notes,
        report_to=request.report_to,
    )
    return monitor.start()


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
    from opd_nb.notebook.form import ConfigForm

    return ConfigForm(request.workspace, config=request.config, target=request.target)


def _playground(request: PlaygroundRequest) -> Any:
    from opd_nb.notebook.playground import RewardPlayground

    return RewardPlayground(
        request.workspace, processor_class=request.processor_class, concurrency=request.concurrency
    )


def _config_cell(request: ConfigCellRequest) -> Any:
    from opd_nb.notebook.configcell import write_config_text

    return write_config_text(request.body, request.path, target=request.target)


def _sweep(request: SweepRequest) -> Any:
    from opd_nb.client import JobClient
    from opd_nb.notebook.experiment_views import SweepMonitor

    return SweepMonitor(request.sweep, JobClient(request.target)).start()


def _compare(request: CompareRequest) -> Any:
    from opd_nb.notebook.experiment_views import CompareView

    return CompareView(request.comparison)


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


_OPENERS: dict[type, Any] = {
    ChatRequest: _chat,
    EvalRequest: _eval,
    WatchRequest: _monitor,
    SweepRequest: _sweep,
    CompareRequest: _compare,
    RolloutsRequest: _rollouts,
    TracesRequest: _traces,
    FormRequest: _form,
    PlaygroundRequest: _playground,
    ConfigCellRequest: _config_cell,
}


def open_view(result: Any) -> Any:
    """The widget a view request stands for; any other result is returned as it is."""
    opener = _OPENERS.get(type(result))
    return result if opener is None else opener(result)
