"""trackio: the local store (``~/.cache/huggingface/trackio`` or ``$TRACKIO_DIR``), never a Space by default.

A run per job, grouped by the chain it continues; opd's health alerts become trackio alerts (the
ones Hugging Face's training skill tells agents to read), rollout samples a ``trackio.Table``.

A job is one run, by its name: a second report or a restarted watch deletes the earlier run of that
name and writes it again (replaced: a point trackio has cannot be changed, and one logged again is a
second row at its step).
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from typing import Any

from opd_nb.health.rules import HealthAlert
from opd_nb.trackers.backends import SAMPLE_COLUMNS
from opd_nb.trackers.records import RunInfo

SAMPLES_KEY = "rollouts/samples"
FINAL_STATUS = "final_status"  # the title of the alert that carries the job's end
MAX_EARLIER = 100  # earlier runs of a job deleted at most (each report of an older opd made one)


class Run:
    name = "trackio"

    def __init__(self) -> None:
        import trackio

        self._trackio = trackio
        self._run: Any = None
        self._project = ""

    def start(self, run: RunInfo) -> None:
        # trackio.init finishes "the current run" of its context: a context of our own per job, so two
        # jobs reported from one process (the monitor, a sweep) do not end each other's runs.
        self._project = run.project
        self._forget(run.project, run.name)
        self._run = contextvars.Context().run(
            self._trackio.init,
            project=run.project,
            name=run.name,
            group=run.group,
            config=run.config,
            space_id=None,
            embed=False,
            auto_log_gpu=False,
            auto_log_cpu=False,
        )

    def _forget(self, project: str, name: str) -> None:
        """Delete every earlier run of `name` in the local store (older opd versions made one per report)."""
        from trackio.sqlite_storage import SQLiteStorage

        for _ in range(MAX_EARLIER):
            if not SQLiteStorage.delete_run(project, name):
                break

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        self._run.log(values, step=step)

    def log_samples(self, step: int, rows: Sequence[Sequence[Any]]) -> None:
        table = self._trackio.Table(columns=list(SAMPLE_COLUMNS), data=[list(r) for r in rows])
        self._run.log({SAMPLES_KEY: table}, step=step)

    def log_alert(self, step: int | None, alert: HealthAlert) -> None:
        level = self._trackio.AlertLevel.ERROR if alert.severity == "error" else self._trackio.AlertLevel.WARN
        self._run.alert(title=alert.rule, text=str(alert), level=level)

    def finish(self, status: str, summary: dict[str, Any]) -> None:
        # trackio keeps a run's config as it was at its first log and has no summary: the end is an alert
        text = ", ".join(f"{k}: {v}" for k, v in {"status": status, **summary}.items())
        self._run.alert(title=FINAL_STATUS, text=text, level=self._trackio.AlertLevel.INFO)
        self._run.finish()

    def where(self) -> str:
        from trackio.utils import TRACKIO_DIR

        return f"trackio project {self._project!r} in {TRACKIO_DIR}: trackio show --project {self._project!r}"
