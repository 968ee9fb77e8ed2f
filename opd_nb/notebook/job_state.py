"""What the job monitor knows about one job, and the plain snapshot it derives from that.

The polling thread writes a :class:`JobState`; everything the monitor shows (status table, alerts,
checkpoints, progress bar, the static HTML) is drawn from :func:`job_view`, a plain dict, so
rendering never reads half-updated objects and tests can assert on the same data users see.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opd_nb.client.rollout_results import CLOUD_NOTE, best_and_worst
from opd_nb.constants import STEP_SECONDS, SUCCEEDED, TERMINAL_STATUSES, UNKNOWN
from opd_nb.health.rules import job_alerts, pick_checkpoint
from opd_nb.plots.series import series_points

if TYPE_CHECKING:
    from opd_nb.client import Checkpoint, Job

NOT_FOUND = "NOT_FOUND"  # the monitor's own status for a job id the control plane does not know


@dataclass
class JobState:
    """One watched job, as the polling thread last saw it."""

    job_id: str
    status: str = UNKNOWN
    job: Job | None = None  # as the client last returned it (None until the first answer)
    metrics: list[dict] = field(default_factory=list)
    metrics_available: bool | None = None
    checkpoints: list[Checkpoint] = field(default_factory=list)
    logs: deque = field(default_factory=lambda: deque(maxlen=200))
    log_offset: int = 0
    events: deque = field(default_factory=lambda: deque(maxlen=50))
    error: str | None = None
    cancel_requested: bool = False
    first_seen: float = field(default_factory=time.monotonic)
    final: bool = False
    rollouts: list[dict] = field(default_factory=list)  # the latest recorded step's samples
    rollouts_step: int | None = None
    rollouts_available: bool | None = None  # False: the control plane has no rollouts endpoint
    rollouts_key: Any = None  # the metric step they were fetched at (refetch when it moves)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


def _eta_from_rows(st: JobState, total: int, step: int) -> float:
    """Seconds left at the measured time per step (or the time since first seen, per step)."""
    times = [t for r in st.metrics if isinstance(t := r.get(STEP_SECONDS), int | float)]
    per_step = (sum(times) / len(times)) if times else (time.monotonic() - st.first_seen) / max(step, 1)
    return max(0.0, (total - step) * per_step)


def _epochs_total(rows: list[dict], n_epochs: int | None) -> int | None:
    """Total steps where the control plane does not report them (Bailian): once the first epoch is over,
    its steps x the job's n_epochs (None before)."""
    if not (n_epochs and rows and rows[-1].get("epoch") is not None):
        return None
    first = rows[0].get("epoch")
    if all(r.get("epoch") == first for r in rows):
        return None
    return sum(1 for r in rows if r.get("epoch") == first) * n_epochs


def progress_of(st: JobState) -> dict[str, Any]:
    """Step, epoch, total steps and ETA, from the metric rows and the typed job: the progress the control
    plane reports (the local engine's total and ETA), and the job's own hyper-parameters (``n_epochs``)."""
    rows = st.metrics
    step = int(rows[-1].get("step", len(rows))) if rows else 0
    epoch = rows[-1].get("epoch") if rows else None
    job = st.job
    reported = job.progress if job is not None else None
    n_epochs = reported.n_epochs if reported and reported.n_epochs else (job.plan.n_epochs if job else None)
    total = reported.total_steps if reported and reported.total_steps else _epochs_total(rows, n_epochs)
    if st.status == SUCCEEDED and step:
        total = total or step
    eta = None
    if reported is not None and not st.terminal:
        eta = reported.eta_s
        epoch = reported.epoch if epoch is None else epoch
    if eta is None and total and step and not st.terminal:
        eta = _eta_from_rows(st, total, step)
    return {"step": step, "epoch": epoch, "total_steps": total, "n_epochs": n_epochs, "eta_s": eta}


def latest_values(rows: list[dict], metrics: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Each metric's latest finite value and the step it was logged at. A metric logged only at some
    steps (the validation reward, every eval_steps) keeps its last value between them."""
    out: dict[str, dict[str, Any]] = {}
    for metric in metrics:
        for i in range(len(rows) - 1, -1, -1):  # from the end: an eval metric is a few rows back
            steps, values = series_points(rows[i : i + 1], metric, first_index=i)
            if values:
                step = int(steps[0]) if float(steps[0]).is_integer() else steps[0]
                out[metric] = {"value": values[0], "step": step}
                break
    return out


def _checkpoint_view(c: Checkpoint) -> dict[str, Any]:
    """One checkpoint row: with its expiry (Bailian deletes it then) and the name it was exported as."""
    expires = c.expires_in_days()
    return {
        "name": c.name,
        "step": c.step,
        "path": c.path,
        "published": c.published,
        "metrics": c.metrics,
        "expire_time": c.expire_time,
        "expires_in_days": None if expires is None else round(expires, 2),
        "model_name": c.model_name,
        "display_name": c.display_name if c.display_name != c.model_name else None,
    }


def _best_view(st: JobState) -> dict[str, Any]:
    """The docs' pick (``health.pick_checkpoint``, the one rule `opd checkpoints` and `opd watch` use):
    ``best_checkpoint`` (None when none is scored), why none is, and the checkpoints left unscored."""
    pick = pick_checkpoint(st.checkpoints, st.metrics) if st.checkpoints and st.metrics else None
    if pick is None:
        return {"best_checkpoint": None, "best_note": None, "unscored_checkpoints": []}
    chosen = pick.best
    c = chosen.checkpoint if chosen else None
    best = (
        None
        if chosen is None or c is None
        else {"name": c.name, "step": c.step, "path": c.path, "reason": chosen.reason}
    )
    return {"best_checkpoint": best, "best_note": pick.note or None, "unscored_checkpoints": pick.unscored()}


def samples_view(st: JobState) -> dict[str, Any] | None:
    """The latest step's best and worst sample (indices into ``records``), or the cloud's note."""
    if st.rollouts_available is False:
        return {"note": CLOUD_NOTE, "records": [], "step": None}
    pair = best_and_worst(st.rollouts)
    if pair is None:
        return None
    return {"note": None, "step": st.rollouts_step, "records": st.rollouts, "best": pair[0], "worst": pair[1]}


def job_view(st: JobState, *, log_tail: int, latest: Iterable[str] = ()) -> dict[str, Any]:
    """The plain snapshot of one job: status, progress, alerts, checkpoints, samples, logs, events;
    `latest`: the metrics whose last logged value (and its step) the view carries."""
    job = st.job
    alerts = job_alerts(
        st.metrics,
        status=st.status,
        job_id=st.job_id,
        eval_steps=job.plan.eval_steps if job is not None else None,
        records=st.rollouts,
    )
    functions = job.functions if job is not None else []  # local control plane
    return {
        "status": st.status,
        "terminal": st.terminal,
        **progress_of(st),
        "metrics_available": st.metrics_available,
        "n_metric_rows": len(st.metrics),
        "last_metrics": dict(st.metrics[-1]) if st.metrics else {},
        "latest": latest_values(st.metrics, latest),
        "alerts": [a.to_payload() for a in alerts],
        "checkpoints": [_checkpoint_view(c) for c in st.checkpoints],
        **_best_view(st),
        "finetuned_output": job.finetuned_output if job is not None else None,
        "samples": samples_view(st),
        "functions": functions,
        "log_tail": list(st.logs)[-log_tail:],
        "events": list(st.events)[-10:],
        "error": st.error,
        "cancel_requested": st.cancel_requested,
        "meter": meter_line(st),
    }


def meter_line(st: JobState) -> str | None:
    """Elapsed time and billed hours of a job on a plane without metrics (Bailian, which bills it)."""
    if st.metrics_available is not False or st.job is None:
        return None
    from opd_nb.errors import OpdError
    from opd_nb.paid.estimate import price_from_env
    from opd_nb.watching.meter import Meter

    try:
        price = price_from_env(None)
    except OpdError:
        price = None
    return Meter(paid=True, price=price).line(st.job)
