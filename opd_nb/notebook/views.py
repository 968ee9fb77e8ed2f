"""Turn the CLI's typed "open this view" results into the notebook's widgets.

Commands run under ``%opd`` return typed results; most render themselves (``_repr_html_``). The
ones that stand for a widget are requests (``opd_nb.cli.view_requests``), because the CLI never
imports the notebook layer. This is the one place that maps each request type to its widget.
Widget modules are imported only for the request that needs them, keeping ``%opd jobs`` light.
"""

from __future__ import annotations

from typing import Any

from opd_nb.cli.view_requests import ConfigCellRequest, FormRequest, PlaygroundRequest, WatchRequest


def _monitor(request: WatchRequest) -> Any:
    from opd_nb.client import JobClient
    from opd_nb.notebook.monitor import JobMonitor

    return JobMonitor(list(request.job_ids), JobClient(request.target)).start()


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


_OPENERS: dict[type, Any] = {
    WatchRequest: _monitor,
    FormRequest: _form,
    PlaygroundRequest: _playground,
    ConfigCellRequest: _config_cell,
}


def open_view(result: Any) -> Any:
    """The widget a view request stands for; any other result is returned as it is."""
    opener = _OPENERS.get(type(result))
    return result if opener is None else opener(result)
