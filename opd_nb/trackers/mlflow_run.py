"""MLflow: the user's ``$MLFLOW_TRACKING_URI``, else MLflow's own local default (``sqlite:///mlflow.db``).

Works with ``mlflow-skinny`` (plus SQLAlchemy for the SQLite store; the `mlflow` extra installs both).
The config goes in twice: flattened as params (``hyper_parameters.learning_rate``) and whole as
``opd/config.json``; each step's samples are a JSON artifact, the end is the run's status and a tag.
MLflow refuses ``@`` in a metric name, so ``validation/data/reward/mean@1`` is logged as
``validation/data/reward/mean_at_1`` (:func:`mlflow_key`, and ``opd/metric_names.json`` maps back).

A job is one run, found by its ``opd.job_id`` tag: a second report or a restarted watch resumes it
(MLflow cannot replace a point, and a point logged again is a second point at its step), so only the
points the run lacks are logged, and only the params it lacks (MLflow refuses to change one).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from opd_nb.constants import CANCELED, FAILED, SUCCEEDED
from opd_nb.health.rules import HealthAlert
from opd_nb.trackers.backends import SAMPLE_COLUMNS
from opd_nb.trackers.records import RunInfo

_REFUSED = re.compile(r"[^\w\-. :/]")
RUN_STATUS = {SUCCEEDED: "FINISHED", FAILED: "FAILED", CANCELED: "KILLED"}  # MLflow's words for ours
MAX_PARAM = 6000  # MLflow's longest param value


def mlflow_key(name: str) -> str:
    """A metric name as MLflow accepts it: ``@`` is ``_at_``, any other refused character ``_``."""
    return _REFUSED.sub("_", name.replace("@", "_at_"))


def _flat(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{name}."))
        elif value is not None:
            out[mlflow_key(name)] = str(value)[:MAX_PARAM]
    return out


class Run:
    name = "mlflow"

    def __init__(self) -> None:
        from mlflow.entities.metric import Metric
        from mlflow.entities.param import Param
        from mlflow.tracking.client import MlflowClient

        self._client = MlflowClient()
        self._metric, self._param = Metric, Param
        self._run_id = ""
        self._names: dict[str, str] = {}
        self._held: set[tuple[str, int]] = set()  # (key, step) points the resumed run already has

    def start(self, run: RunInfo) -> None:
        client = self._client
        experiment = client.get_experiment_by_name(run.project)
        experiment_id = experiment.experiment_id if experiment else client.create_experiment(run.project)
        tags = {"opd.job_id": run.job_id, "opd.group": run.group, "opd.target": run.target}
        if run.parent_job_id:
            tags["opd.parent_job_id"] = run.parent_job_id
        held = self._resume(experiment_id, run.job_id)
        if held is None:
            self._run_id = client.create_run(experiment_id, run_name=run.name, tags=tags).info.run_id
            held = {}
        params = [self._param(k, v) for k, v in _flat(run.config).items() if k not in held]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            client.log_batch(self._run_id, params=params[i : i + 100])
        client.log_dict(self._run_id, run.config, "opd/config.json")

    def _resume(self, experiment_id: str, job_id: str) -> dict[str, str] | None:
        """Reopen the job's run if the experiment has one (its params returned; the points it holds
        kept in `_held`); None when there is none."""
        client = self._client
        found = client.search_runs(
            [experiment_id], filter_string=f"tags.`opd.job_id` = '{job_id}'", order_by=["start_time ASC"]
        )
        if not found:
            return None
        run = found[0]  # the first: older opd versions made a run per report
        self._run_id = run.info.run_id
        client.update_run(self._run_id, status="RUNNING")
        for key in run.data.metrics:
            self._held.update((key, m.step) for m in client.get_metric_history(self._run_id, key))
        return dict(run.data.params)

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        stamp = int(time.time() * 1000)
        metrics = []
        for name, value in values.items():
            key = self._names.setdefault(name, mlflow_key(name))
            if (key, step) not in self._held:
                metrics.append(self._metric(key, value, stamp, step))
        if metrics:
            self._client.log_batch(self._run_id, metrics=metrics)

    def log_samples(self, step: int, rows: Sequence[Sequence[Any]]) -> None:
        records = [dict(zip(SAMPLE_COLUMNS, row, strict=True)) for row in rows]
        self._client.log_dict(
            self._run_id, {"step": step, "samples": records}, f"rollouts/step_{step:06d}.json"
        )

    def log_alert(self, step: int | None, alert: HealthAlert) -> None:
        self._client.set_tag(self._run_id, f"opd.alert.{alert.rule}", str(alert))

    def finish(self, status: str, summary: dict[str, Any]) -> None:
        client = self._client
        renamed = {key: name for name, key in self._names.items() if key != name}
        client.log_dict(self._run_id, renamed, "opd/metric_names.json")
        client.set_tag(self._run_id, "opd.final_status", status)
        for key, value in summary.items():
            client.set_tag(self._run_id, f"opd.{key}", str(value))
        client.set_terminated(self._run_id, status=RUN_STATUS.get(status, "FINISHED"))

    def where(self) -> str:
        uri = self._client.tracking_uri
        return f"run {self._run_id} at {uri}: mlflow ui --backend-store-uri {uri}"
