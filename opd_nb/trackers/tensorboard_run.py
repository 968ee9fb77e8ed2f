"""TensorBoard: event files under ``./runs/<job id>`` (or ``$OPD_TENSORBOARD_DIR/<job id>``).

Written with TensorBoard's own event-file writer and protos (numpy only: neither TensorFlow nor torch
is imported), so `tensorboard --logdir runs` overlays a job and its continued jobs on one step axis.
Scalars are TensorBoard's float32; the config, alerts, final status and sample tables are text
summaries (TensorBoard has no table type: each table is Markdown).

A job is one run directory: a second report or a restarted watch writes the run again in a new event
file and, once it is closed, removes the directory's earlier event files (replaced: TensorBoard reads
every event file of a run, so an earlier one would put a second value at each tag and step).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opd_nb import settings
from opd_nb.health.rules import HealthAlert
from opd_nb.trackers.backends import SAMPLE_COLUMNS
from opd_nb.trackers.records import RunInfo

DIR_VAR = settings.TENSORBOARD_DIR.name
DEFAULT_DIR = str(settings.TENSORBOARD_DIR.default)
CONFIG_TAG = "opd/config"
STATUS_TAG = "opd/final_status"
ALERT_TAG = "opd/alerts"
SAMPLES_TAG = "rollouts/samples"
EVENT_FILES = "events.out.tfevents.*"


def log_root() -> Path:
    return settings.TENSORBOARD_DIR.get() or Path(DEFAULT_DIR)


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")[:500]


class Run:
    name = "tensorboard"

    def __init__(self) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event_pb2, self._summary_pb2 = event_pb2, summary_pb2
        self._writer_cls = EventFileWriter
        self._writer: Any = None
        self._dir = Path()
        self._suffix = f".opd-{uuid.uuid4().hex[:12]}"  # names this run's event file among earlier ones

    def start(self, run: RunInfo) -> None:
        self._dir = log_root() / run.name
        self._writer = self._writer_cls(str(self._dir), filename_suffix=self._suffix)
        self._text(CONFIG_TAG, "```json\n" + json.dumps(run.config, indent=2, default=str) + "\n```", 0)

    def _emit(self, step: int, values: list[Any]) -> None:
        summary = self._summary_pb2.Summary(value=values)
        self._writer.add_event(self._event_pb2.Event(wall_time=time.time(), step=step, summary=summary))

    def _text(self, tag: str, text: str, step: int) -> None:
        from tensorboard.plugins.text import metadata
        from tensorboard.util import tensor_util

        value = self._summary_pb2.Summary.Value(
            tag=tag,
            metadata=metadata.create_summary_metadata(display_name=tag, description=""),
            tensor=tensor_util.make_tensor_proto(text.encode("utf-8")),
        )
        self._emit(step, [value])

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        self._emit(step, [self._summary_pb2.Summary.Value(tag=k, simple_value=v) for k, v in values.items()])

    def log_samples(self, step: int, rows: Sequence[Sequence[Any]]) -> None:
        head = "| " + " | ".join(SAMPLE_COLUMNS) + " |\n|" + "---|" * len(SAMPLE_COLUMNS) + "\n"
        body = "".join("| " + " | ".join(_cell(c) for c in row) + " |\n" for row in rows)
        self._text(SAMPLES_TAG, head + body, step)

    def log_alert(self, step: int | None, alert: HealthAlert) -> None:
        self._text(ALERT_TAG, f"**{alert.severity}** `{alert.rule}`: {_cell(alert)}", step or 0)

    def finish(self, status: str, summary: dict[str, Any]) -> None:
        lines = [f"**{status}**", *(f"- {k}: {_cell(v)}" for k, v in summary.items())]
        self._text(STATUS_TAG, "\n".join(lines), int(summary.get("last_step") or 0))
        self._writer.close()
        for earlier in self._dir.glob(EVENT_FILES):  # this run is whole now: it replaces the earlier ones
            if not earlier.name.endswith(self._suffix):
                earlier.unlink(missing_ok=True)

    def where(self) -> str:
        return f"event files in {self._dir}: tensorboard --logdir {self._dir.parent}"
