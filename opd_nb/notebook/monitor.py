"""Job monitor: live status, progress, metric plots, health alerts, checkpoints, logs, cancel.

Design (see notebook-anchors.md §6 for the complaints this avoids):

* A background thread polls the control plane and **only sets widget state** (traits). It never
  prints and never enters an ``Output`` context, so nothing lands in the wrong cell and the kernel
  stays free.
* ``_repr_mimebundle_`` returns the widget view *and* a static ``text/html`` snapshot (the plot
  embedded as a base64 PNG) and ``text/plain``. When the jobs end, the snapshot is refreshed through
  the output's ``display_id``, so a saved/reopened notebook (or a frontend without widgets) shows
  the final state.
* Where the API has no metrics (Bailian: ``client.metrics()`` is None) it shows status, events
  and logs, and says so.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opd_nb import render
from opd_nb.errors import OpdError

LOSS = "actor/distillation/loss"
VALID_TOKEN_RATE = "trace/distillation/valid_token_rate"
REWARD_MEAN = "validation/data/reward/mean@1"
REWARD_FAILURE_RATE = "trace/reward/failure_rate"
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELED"})
STATUS_CLASS = {"SUCCEEDED": "ok", "FAILED": "bad", "CANCELED": "warn"}
DEFAULT_EVAL_STEPS = 10
CLOUD_NOTE = (
    "This API has no metrics endpoint (Bailian): showing status, events and logs only. "
    "Open the job in the Bailian console for the curves."
)


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _find_key(obj: Any, names: Iterable[str], depth: int = 0) -> Any:
    """The first value under any of `names` in a nested dict (job.raw is the service's JSON)."""
    if depth > 4 or not isinstance(obj, Mapping):
        return None
    for name in names:
        if obj.get(name) is not None:
            return obj[name]
    for value in obj.values():
        found = _find_key(value, names, depth + 1)
        if found is not None:
            return found
    return None


def _series(rows: Sequence[Mapping[str, Any]], name: str) -> list[tuple[float, float]]:
    out = []
    for i, row in enumerate(rows):
        v = row.get(name)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            continue
        out.append((float(row.get("step", i + 1)), float(v)))
    return out


def health_alerts(
    rows: Sequence[Mapping[str, Any]], *, eval_steps: int | None = None
) -> list[dict[str, str]]:
    """The docs' health rules, applied to a job's metric rows.

    * valid_token_rate below 1: the teacher's scores are incomplete, so check the teacher before
      tuning anything (every other metric means less until that is fixed);
    * no loss decrease after eval_steps × 3 steps: judge a trend only after three eval intervals;
    * reward failures: a reward function that raises scores 0 and drags the signal down.
    """
    alerts: list[dict[str, str]] = []
    vtr = _series(rows, VALID_TOKEN_RATE)
    low = [(s, v) for s, v in vtr if v < 0.999]
    if low:
        step, value = min(low, key=lambda sv: sv[1])
        alerts.append(
            {
                "rule": "valid_token_rate",
                "severity": "error",
                "message": (
                    f"valid_token_rate is below 1 ({value:.3f} at step {step:g}, {len(low)} step(s)): "
                    "the teacher did not score every student token"
                ),
                "fix": "check the teacher first (teacher_model name, max_length vs. prompt+response) before tuning anything",
            }
        )
    every = max(1, int(eval_steps or DEFAULT_EVAL_STEPS))
    loss = _series(rows, LOSS)
    if loss and loss[-1][0] >= 3 * every and len(loss) >= 2:
        window = max(1, min(every, len(loss) // 3))
        first = sum(v for _, v in loss[:window]) / window
        last = sum(v for _, v in loss[-window:]) / window
        if last >= first - 1e-9 * max(1.0, abs(first)):
            alerts.append(
                {
                    "rule": "loss_not_decreasing",
                    "severity": "warning",
                    "message": (
                        f"actor/distillation/loss has not decreased after {loss[-1][0]:g} steps "
                        f"(eval_steps × 3 = {3 * every}): mean {first:.4g} at the start, {last:.4g} now"
                    ),
                    "fix": "check valid_token_rate and the data; then change one thing at a time (learning_rate first)",
                }
            )
    failures = [(s, v) for s, v in _series(rows, REWARD_FAILURE_RATE) if v > 0]
    if failures:
        step, value = max(failures, key=lambda sv: sv[1])
        alerts.append(
            {
                "rule": "reward_failures",
                "severity": "warning",
                "message": f"the reward function failed on up to {value:.0%} of samples (step {step:g})",
                "fix": "run `%opd test` and the reward playground on failing samples; see the log tail",
            }
        )
    return alerts


def best_checkpoint(checkpoints: Sequence[Any], rows: Sequence[Mapping[str, Any]]) -> tuple[Any, str] | None:
    """The docs' rule: with a reward, the highest validation/data/reward/mean@1; without, the
    first checkpoint where actor/distillation/loss has levelled off. Not necessarily the last."""
    ckpts = [c for c in checkpoints if _get(c, "step") is not None]
    if not ckpts:
        return None
    ckpts.sort(key=lambda c: _get(c, "step"))
    reward = _series(rows, REWARD_MEAN)
    scored = []
    for c in ckpts:
        value = (_get(c, "metrics") or {}).get(REWARD_MEAN)
        if value is None:
            before = [v for s, v in reward if s <= _get(c, "step")]
            value = before[-1] if before else None
        if value is not None:
            scored.append((float(value), c))
    if scored:
        top = max(v for v, _ in scored)
        chosen = next(c for v, c in scored if v == top)
        return chosen, f"highest {REWARD_MEAN} = {top:.4g}"
    loss = _series(rows, LOSS)
    if len(loss) < 3:
        return ckpts[-1], "latest (too few loss points to find a plateau)"
    w = max(3, len(loss) // 10)
    smooth = []
    for i in range(len(loss)):
        chunk = loss[max(0, i - w + 1) : i + 1]
        smooth.append((loss[i][0], sum(v for _, v in chunk) / len(chunk)))
    lo, hi = min(v for _, v in smooth), max(v for _, v in smooth)
    tol = 0.05 * (hi - lo) if hi > lo else 0.0
    plateau = next(s for s, v in smooth if v <= lo + tol)
    after = [c for c in ckpts if _get(c, "step") >= plateau]
    chosen = after[0] if after else ckpts[-1]
    return chosen, f"loss plateau reached at step {plateau:g} (smoothed loss within 5% of its minimum)"


@dataclass
class _JobState:
    job_id: str
    status: str = "UNKNOWN"
    job: Any = None
    metrics: list[dict] = field(default_factory=list)
    metrics_available: bool | None = None
    checkpoints: list[Any] = field(default_factory=list)
    logs: deque = field(default_factory=lambda: deque(maxlen=200))
    log_offset: int = 0
    events: deque = field(default_factory=lambda: deque(maxlen=50))
    error: str | None = None
    cancel_requested: bool = False
    first_seen: float = field(default_factory=time.monotonic)
    final: bool = False

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


class JobMonitor:
    """Watch one or more jobs; several jobs are overlaid on the same plots for comparison."""

    def __init__(
        self, job_ids: Sequence[str] | str, client: Any = None, *, poll_s: float = 2.0, log_tail: int = 15
    ):
        ids = [job_ids] if isinstance(job_ids, str) else list(job_ids)
        ids = list(dict.fromkeys(i for i in ids if i))
        if not ids:
            raise OpdError("no job id given", fix="pass a job id, e.g. %opd watch ft-...")
        self.job_ids = ids
        self.poll_s = float(poll_s)
        self.log_tail = log_tail
        self._client = client
        self._jobs = {i: _JobState(i) for i in ids}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_threads: list[threading.Thread] = []
        self._widgets: dict[str, Any] | None = None
        self._display_id: str | None = None
        self._plot_png: bytes | None = None
        self._plot_key: Any = None
        self.polls = 0
        self.plot_updates = 0
        self.notes: list[str] = []

    # ------------------------------------------------------------------ data
    @property
    def client(self) -> Any:
        if self._client is None:
            from opd_nb.client import JobClient

            self._client = JobClient()
        return self._client

    def _call(self, st: _JobState, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
        except OpdError as exc:
            st.error = str(exc)
            return _FAILED
        except Exception as exc:  # the thread must survive a flaky network
            st.error = f"{type(exc).__name__}: {exc}"
            return _FAILED
        return result

    def poll_once(self) -> dict[str, Any]:
        """Fetch status, metrics, checkpoints and new log lines of every unfinished job."""
        client = self.client
        for st in self._jobs.values():
            if st.final:
                continue
            job = self._call(st, client.get, st.job_id)
            if job is _FAILED:
                if st.job is None and _not_found(st.error):
                    st.status, st.final = "NOT_FOUND", True  # polling again will not make it exist
                continue
            st.error = None
            st.job = job
            st.status = str(_get(job, "status", "UNKNOWN"))
            metrics = self._call(st, client.metrics, st.job_id)
            if metrics is not _FAILED:
                st.metrics_available = metrics is not None
                st.metrics = list(metrics or [])
            ckpts = self._call(st, client.checkpoints, st.job_id)
            if ckpts is not _FAILED:
                st.checkpoints = list(ckpts or [])
            page = self._call(st, client.logs, st.job_id, offset=st.log_offset, lines=200)
            if page is not _FAILED and page is not None:
                lines = list(_get(page, "lines", []) or [])
                with self._lock:  # `state` iterates the deque from the main thread
                    st.logs.extend(str(line) for line in lines)
                nxt = _get(page, "next_offset")
                st.log_offset = int(nxt) if nxt is not None else st.log_offset + len(lines)
            if st.terminal:
                st.final = True
        with self._lock:
            self.polls += 1
        self._render()
        return self.state

    def _events_loop(self, st: _JobState) -> None:
        try:
            for event in self.client.events(st.job_id):
                if self._stop.is_set():
                    return
                kind, data = _get(event, "kind"), _get(event, "data") or _get(event, "message")
                with self._lock:
                    st.events.append(f"{kind}: {data}" if kind and data is not None else str(event))
                if st.final:
                    return
        except Exception as exc:  # events are a nice-to-have; never crash the monitor
            with self._lock:
                st.events.append(f"(event stream ended: {type(exc).__name__})")

    @property
    def done(self) -> bool:
        return all(st.final for st in self._jobs.values())

    # ------------------------------------------------------------ lifecycle
    def start(self) -> JobMonitor:
        """Poll once (so an unknown job id is an error right here), then keep polling in the background."""
        if self._thread is None and self.polls == 0:
            self.poll_once()
            missing = [st for st in self._jobs.values() if st.status == "NOT_FOUND"]
            if len(missing) == len(self._jobs):
                raise OpdError(
                    missing[0].error or f"job {missing[0].job_id} not found",
                    fix="list jobs with `%opd jobs`; check the target with `%opd use`",
                )
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._done.clear()
            self._thread = threading.Thread(target=self._run, name="opd-job-monitor", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        events_started = False
        try:
            while not self._stop.is_set():
                self.poll_once()
                if not events_started and any(st.metrics_available is False for st in self._jobs.values()):
                    events_started = True  # cloud: the event stream is the richest view there is
                    for st in self._jobs.values():
                        t = threading.Thread(
                            target=self._events_loop, args=(st,), daemon=True, name=f"opd-events-{st.job_id}"
                        )
                        t.start()
                        self._event_threads.append(t)
                if self.done:
                    break
                self._stop.wait(self.poll_s)
        finally:
            self._done.set()
            self._render()
            self._refresh_static()

    def stop(self) -> None:
        """Stop polling (the jobs keep running)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, self.poll_s * 2))

    def wait(self, timeout_s: float | None = None) -> JobMonitor:
        """Block until every job is terminal (or `timeout_s`); starts polling if needed."""
        if self._thread is None:
            self.start()
        finished = self._done.wait(timeout_s)
        if not finished:
            raise OpdError(f"jobs still running after {timeout_s}s", fix="call wait() again or cancel()")
        return self

    def cancel(self, job_id: str | None = None) -> list[str]:
        """Cancel one job (or every unfinished one); returns the ids a cancel was sent for."""
        ids = [job_id] if job_id else [i for i, st in self._jobs.items() if not st.terminal]
        sent = []
        for jid in ids:
            st = self._jobs.get(jid)
            if st is None:
                raise OpdError(
                    f"job {jid!r} is not watched by this monitor", fix=f"watched: {', '.join(self.job_ids)}"
                )
            if st.terminal:
                continue
            job = self.client.cancel(jid)
            st.cancel_requested = True
            st.status = str(_get(job, "status", st.status))
            sent.append(jid)
        self._render()
        return sent

    # ------------------------------------------------------------ derived
    def _progress(self, st: _JobState) -> dict[str, Any]:
        rows = st.metrics
        step = int(rows[-1].get("step", len(rows))) if rows else 0
        epoch = rows[-1].get("epoch") if rows else None
        raw = _get(st.job, "raw") or {}
        hp = _get(st.job, "hyper_parameters") or {}
        total = None
        for src in (rows[-1] if rows else {}, raw):
            total = _find_key(src, ("total_steps", "max_steps"))
            if total:
                break
        n_epochs = _find_key(hp, ("n_epochs",)) or _find_key(raw, ("n_epochs",))
        if not total and n_epochs and rows and epoch is not None:
            first_epoch = rows[0].get("epoch")
            if any(r.get("epoch") != first_epoch for r in rows):
                per_epoch = sum(1 for r in rows if r.get("epoch") == first_epoch)
                total = per_epoch * int(n_epochs)
        if st.status == "SUCCEEDED" and step:
            total = total or step
        eta = None
        reported = _find_key(raw, ("progress",))  # the local engine reports its own progress and ETA
        if isinstance(reported, Mapping) and st.status not in TERMINAL:
            eta = reported.get("eta_s") if isinstance(reported.get("eta_s"), int | float) else None
            epoch = reported.get("epoch", epoch) if epoch is None else epoch
            n_epochs = n_epochs or reported.get("n_epochs")
        if eta is None and total and step and st.status not in TERMINAL:
            times = [r.get("timing_s/step") for r in rows if isinstance(r.get("timing_s/step"), int | float)]
            per_step = (
                (sum(times) / len(times)) if times else (time.monotonic() - st.first_seen) / max(step, 1)
            )
            eta = max(0.0, (int(total) - step) * per_step)
        return {
            "step": step,
            "epoch": epoch,
            "total_steps": int(total) if total else None,
            "n_epochs": int(n_epochs) if n_epochs else None,
            "eta_s": eta,
        }

    def _eval_steps(self, st: _JobState) -> int | None:
        hp = _get(st.job, "hyper_parameters") or {}
        value = hp.get("eval_steps") if isinstance(hp, Mapping) else None
        try:
            return int(value) if value is not None else None
        except (TypeError, ValueError):
            return None

    def _job_view(self, st: _JobState) -> dict[str, Any]:
        best = best_checkpoint(st.checkpoints, st.metrics) if st.checkpoints else None
        alerts = health_alerts(st.metrics, eval_steps=self._eval_steps(st))
        if st.status == "FAILED":
            alerts.insert(
                0,
                {
                    "rule": "failed",
                    "severity": "error",
                    "message": "the job FAILED",
                    "fix": "read the end of the log below (opd logs JOB)",
                },
            )
        return {
            "status": st.status,
            "terminal": st.terminal,
            **self._progress(st),
            "metrics_available": st.metrics_available,
            "n_metric_rows": len(st.metrics),
            "last_metrics": dict(st.metrics[-1]) if st.metrics else {},
            "alerts": alerts,
            "checkpoints": [
                {
                    "name": _get(c, "name"),
                    "step": _get(c, "step"),
                    "path": _get(c, "path"),
                    "published": _get(c, "published"),
                    "metrics": _get(c, "metrics") or {},
                }
                for c in st.checkpoints
            ],
            "best_checkpoint": (
                {
                    "name": _get(best[0], "name"),
                    "step": _get(best[0], "step"),
                    "path": _get(best[0], "path"),
                    "reason": best[1],
                }
                if best
                else None
            ),
            "finetuned_output": _get(st.job, "finetuned_output"),
            "log_tail": list(st.logs)[-self.log_tail :],
            "events": list(st.events)[-10:],
            "error": st.error,
            "cancel_requested": st.cancel_requested,
        }

    @property
    def state(self) -> dict[str, Any]:
        """A plain snapshot: per-job status, progress, alerts, checkpoints, logs; plus poll counters."""
        with self._lock:
            return {
                "jobs": {jid: self._job_view(st) for jid, st in self._jobs.items()},
                "done": self.done,
                "polls": self.polls,
                "plot_updates": self.plot_updates,
            }

    # ------------------------------------------------------------ rendering
    def _plot(self) -> bytes | None:
        rows_by_job = {jid: st.metrics for jid, st in self._jobs.items() if st.metrics}
        key = tuple(
            (jid, len(rows), (rows[-1] if rows else None) and rows[-1].get("step"))
            for jid, rows in rows_by_job.items()
        )
        if key != self._plot_key:
            from opd_nb.plots import render_png

            png = render_png(rows_by_job) if rows_by_job else None
            with self._lock:
                self._plot_key = key
                self._plot_png = png
                if png:
                    self.plot_updates += 1
        return self._plot_png

    def _status_html(self, state: dict[str, Any]) -> str:
        rows = []
        for jid, v in state["jobs"].items():
            status = (
                f'<span class="{STATUS_CLASS.get(v["status"], "")}"><b>{render.esc(v["status"])}</b></span>'
            )
            if v["cancel_requested"] and not v["terminal"]:
                status += " (cancel sent)"
            total = v["total_steps"]
            step = f"{v['step']}/{total}" if total else str(v["step"])
            epoch = (
                f"{v['epoch']}/{v['n_epochs']}"
                if v["n_epochs"] and v["epoch"] is not None
                else render.fmt(v["epoch"])
            )
            eta = f"{v['eta_s']:.0f}s" if v["eta_s"] is not None else ""
            last = v["last_metrics"]
            rows.append(
                (
                    render.esc(jid),
                    status,
                    step,
                    epoch,
                    eta,
                    render.fmt(last.get(LOSS)),
                    render.fmt(last.get(VALID_TOKEN_RATE)),
                    render.fmt(last.get(REWARD_MEAN)),
                )
            )
        return render.table(
            ["job", "status", "step", "epoch", "ETA", "loss", "valid_token_rate", "reward mean@1"],
            rows,
            raw_cols=(0, 1),
        )

    def _alerts_html(self, state: dict[str, Any]) -> str:
        parts = []
        for jid, v in state["jobs"].items():
            for a in v["alerts"]:
                cls = render.SEVERITY_CLASS.get(a["severity"], "")
                parts.append(
                    f'<div class="{cls}">⚠ {render.esc(jid)}: {render.esc(a["message"])}'
                    f" — <i>{render.esc(a['fix'])}</i></div>"
                )
            if v["error"]:
                parts.append(f'<div class="warn">{render.esc(jid)}: {render.esc(v["error"])}</div>')
            if v["metrics_available"] is False:
                parts.append(f"<div><i>{render.esc(CLOUD_NOTE)}</i></div>")
        return "".join(parts)

    def _checkpoints_html(self, state: dict[str, Any]) -> str:
        parts = []
        for jid, v in state["jobs"].items():
            if not v["checkpoints"]:
                continue
            best = v["best_checkpoint"] or {}
            rows = []
            for c in v["checkpoints"]:
                mark = (
                    f'<b class="ok">best</b> ({render.esc(best.get("reason"))})'
                    if c["name"] == best.get("name")
                    else ""
                )
                rows.append(
                    (
                        render.esc(c["name"]),
                        c["step"],
                        render.fmt(c["metrics"].get(REWARD_MEAN)),
                        render.fmt(c["metrics"].get(LOSS)),
                        "yes" if c["published"] else "",
                        mark,
                    )
                )
            parts.append(
                f"<b>checkpoints of {render.esc(jid)}</b>"
                + render.table(
                    ["checkpoint", "step", "reward mean@1", "loss", "published", ""], rows, raw_cols=(0, 5)
                )
            )
        return "".join(parts)

    def _logs_html(self, state: dict[str, Any]) -> str:
        parts = []
        for jid, v in state["jobs"].items():
            lines = v["log_tail"]
            if v["events"] and v["metrics_available"] is False:
                parts.append(
                    f"<b>events of {render.esc(jid)}</b><pre>{render.esc(chr(10).join(v['events']))}</pre>"
                )
            if lines:
                parts.append(
                    f"<b>log tail of {render.esc(jid)}</b><pre>{render.esc(chr(10).join(lines))}</pre>"
                )
        return "".join(parts)

    def to_html(self) -> str:
        """The static snapshot: self-contained HTML, plot embedded as a base64 PNG."""
        state = self.state
        png = self._plot()
        title = f"opd job monitor: {', '.join(self.job_ids)}" + ("" if state["done"] else " (live)")
        return render.box(
            self._status_html(state)
            + self._alerts_html(state)
            + render.png_img(png)
            + self._checkpoints_html(state)
            + self._logs_html(state),
            title=title,
        )

    def __str__(self) -> str:
        state = self.state
        lines = []
        for jid, v in state["jobs"].items():
            total = f"/{v['total_steps']}" if v["total_steps"] else ""
            last = v["last_metrics"]
            lines.append(
                f"{jid}: {v['status']} step {v['step']}{total} epoch {render.fmt(v['epoch'])}"
                + (f" loss {render.fmt(last.get(LOSS))}" if LOSS in last else "")
            )
            for a in v["alerts"]:
                lines.append(f"  ! {a['message']} (fix: {a['fix']})")
            if v["best_checkpoint"]:
                b = v["best_checkpoint"]
                lines.append(f"  best checkpoint: {b['name']} ({b['reason']})")
            if v["metrics_available"] is False:
                lines.append(f"  {CLOUD_NOTE}")
            if v["error"]:
                lines.append(f"  error: {v['error']}")
            lines += [f"  | {line}" for line in v["log_tail"][-5:]]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"JobMonitor({self.job_ids!r}, done={self.done})"

    def __rich__(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        state = self.state
        table = Table(title="opd job monitor")
        for col in ("job", "status", "step", "epoch", "loss", "valid_token_rate", "reward mean@1", "alerts"):
            table.add_column(col)
        for jid, v in state["jobs"].items():
            last = v["last_metrics"]
            table.add_row(
                Text(jid),
                Text(v["status"]),
                str(v["step"]),
                render.fmt(v["epoch"]),
                render.fmt(last.get(LOSS)),
                render.fmt(last.get(VALID_TOKEN_RATE)),
                render.fmt(last.get(REWARD_MEAN)),
                Text("; ".join(a["message"] for a in v["alerts"])),
            )
        return table

    # ------------------------------------------------------------ widgets
    def _ensure_widgets(self) -> dict[str, Any] | None:
        if self._widgets is not None:
            return self._widgets
        try:
            import ipywidgets as W
        except ImportError:
            return None
        status = W.HTML()
        bars = {
            jid: W.FloatProgress(
                min=0.0,
                max=1.0,
                value=0.0,
                description=jid,
                style={"description_width": "initial"},
                layout=W.Layout(width="70%"),
            )
            for jid in self.job_ids
        }
        plot = W.Image(format="png", layout=W.Layout(max_width="100%"))
        alerts = W.HTML()
        checkpoints = W.HTML()
        logs = W.HTML()
        cancel = {}
        for jid in self.job_ids:
            button = W.Button(
                description=f"Cancel {jid}", button_style="danger", icon="stop", layout=W.Layout(width="auto")
            )
            button.on_click(lambda _b, jid=jid: self._on_cancel(jid))
            cancel[jid] = button
        message = W.HTML()
        box = W.VBox(
            [status, *bars.values(), alerts, plot, checkpoints, W.HBox(list(cancel.values())), message, logs]
        )
        box.add_class("opd-job-monitor")
        self._widgets = {
            "box": box,
            "status": status,
            "bars": bars,
            "plot": plot,
            "alerts": alerts,
            "checkpoints": checkpoints,
            "logs": logs,
            "cancel": cancel,
            "message": message,
        }
        self._render()
        return self._widgets

    def _on_cancel(self, job_id: str) -> None:
        w = self._widgets or {}
        try:
            sent = self.cancel(job_id)
            text = f"cancel sent for {job_id}" if sent else f"{job_id} already finished"
            cls = "warn"
        except OpdError as exc:
            text, cls = str(exc), "bad"
        if "message" in w:
            w["message"].value = render.box(f'<span class="{cls}">{render.esc(text)}</span>')

    def _render(self) -> None:
        """Push the current state into the widgets (trait assignments only: thread-safe to call)."""
        w = self._widgets
        if w is None:
            return
        state = self.state
        png = self._plot()
        w["status"].value = render.box(self._status_html(state))
        for jid, bar in w["bars"].items():
            v = state["jobs"][jid]
            total, step = v["total_steps"], v["step"]
            bar.value = 1.0 if v["status"] == "SUCCEEDED" else (min(1.0, step / total) if total else 0.0)
            bar.bar_style = {"SUCCEEDED": "success", "FAILED": "danger", "CANCELED": "warning"}.get(
                v["status"], "info"
            )
        if png and w["plot"].value != png:
            w["plot"].value = png
        w["alerts"].value = render.box(self._alerts_html(state)) if self._alerts_html(state) else ""
        w["checkpoints"].value = (
            render.box(self._checkpoints_html(state)) if self._checkpoints_html(state) else ""
        )
        w["logs"].value = render.box(self._logs_html(state)) if self._logs_html(state) else ""
        for jid, button in w["cancel"].items():
            button.disabled = state["jobs"][jid]["terminal"]

    def widget(self) -> Any:
        """The ipywidgets VBox (None without ipywidgets)."""
        w = self._ensure_widgets()
        return None if w is None else w["box"]

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = {"text/plain": str(self), "text/html": self.to_html()}
        if _in_kernel():
            w = self._ensure_widgets()
            if w is not None:
                view = w["box"]._repr_mimebundle_()
                if isinstance(view, tuple):
                    view = view[0]
                for key, value in (view or {}).items():
                    if key != "text/plain":
                        bundle[key] = value
        return bundle

    def _ipython_display_(self) -> None:
        from IPython.display import display

        self._display_id = self._display_id or f"opd-monitor-{uuid.uuid4().hex[:12]}"
        display(self._repr_mimebundle_(), raw=True, display_id=self._display_id)

    def _refresh_static(self) -> None:
        """Swap the displayed snapshot for the final one (targets our own display id, never a new cell)."""
        if self._display_id is None or not _in_kernel():
            return
        try:
            from IPython.display import update_display

            update_display(self._repr_mimebundle_(), raw=True, display_id=self._display_id)
        except Exception:  # a closed frontend must not kill the thread
            pass


_FAILED = object()


def _not_found(error: str | None) -> bool:
    text = (error or "").lower()
    return "404" in text or "not found" in text or "notfound" in text


def _in_kernel() -> bool:
    """True in a Jupyter kernel (widgets can render), False in terminal IPython / plain Python."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None
