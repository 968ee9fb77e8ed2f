"""Weights & Biases: offline unless the user is logged in, so nothing is sent by surprise.

Offline runs are W&B's own transaction log under ``./wandb`` (or ``$WANDB_DIR``); `wandb sync DIR`
uploads one later, and the line that says so is what `where()` returns. A `WANDB_MODE` the user set
wins. Whether the user is logged in is read from the environment and W&B's netrc entry, never asked
of the network; the console is not captured and no login prompt can appear.

A job is one run, its id made from the project and the job id (:func:`run_id`). Offline, a second
report or a restarted watch writes the whole run again under that id and, once it has finished,
removes the earlier offline directories of the id (replaced: W&B offline cannot read back or resume
its own run). Online, it resumes the run (``resume="allow"``) and logs only the steps past those the
run holds: W&B drops a step below its current one, and cannot replace a logged point.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opd_nb.constants import SUCCEEDED
from opd_nb.health.rules import HealthAlert
from opd_nb.trackers.backends import SAMPLE_COLUMNS
from opd_nb.trackers.records import RunInfo

SAMPLES_KEY = "rollouts/samples"
DEFAULT_HOST = "https://api.wandb.ai"


def run_id(project: str, job_id: str) -> str:
    """The job's W&B run id: the same on every report of it to `project` (W&B ids are per project; the
    project's hash keeps two projects' offline runs of one job apart in one ``wandb`` folder)."""
    return f"{job_id}-{hashlib.sha256(project.encode()).hexdigest()[:6]}"


def logged_in() -> bool:
    """True when W&B has credentials on this machine (an API key in the environment or in its netrc)."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    try:
        from wandb.sdk.lib.wbauth.wbnetrc import read_netrc_auth

        return bool(read_netrc_auth(host=os.environ.get("WANDB_BASE_URL") or DEFAULT_HOST))
    except Exception:  # W&B moved its netrc reader: treat as not logged in (offline, the safe side)
        return False


def mode() -> str:
    """The W&B mode to run in: the user's WANDB_MODE, else online when logged in, else offline."""
    return os.environ.get("WANDB_MODE") or ("online" if logged_in() else "offline")


class Run:
    name = "wandb"

    def __init__(self) -> None:
        # W&B's modules, not its package's namespace: the same objects (`wandb.init` is this `init`), and
        # the type checker reads three modules instead of all that `wandb/__init__.py` re-exports.
        from wandb.sdk.data_types.table import Table
        from wandb.sdk.wandb_init import init
        from wandb.sdk.wandb_settings import Settings

        self._init, self._settings, self._table = init, Settings, Table
        self._run: Any = None
        self._where = "no run"
        self._first_step = 0  # a resumed online run's next step: the steps before it are there already

    def start(self, run: RunInfo) -> None:
        settings = self._settings(
            silent=True, console="off", save_code=False, disable_git=True, x_disable_stats=True
        )
        run_mode = mode()
        self._run = self._init(
            project=run.project,
            id=run_id(run.project, run.job_id),
            resume="allow" if run_mode == "online" else None,
            name=run.name,
            group=run.group,
            job_type="opd",
            config=run.config,
            mode=run_mode,  # pyright: ignore[reportArgumentType] - WANDB_MODE as the user set it; wandb checks it
            reinit="create_new",
            settings=settings,
        )
        if self._run.resumed:
            self._first_step = int(self._run.starting_step)
        sync_dir = self._run.settings.sync_dir
        self._where = (
            f"offline run in {sync_dir}: upload it with `wandb sync {sync_dir}`"
            if self._run.offline
            else str(self._run.url)
        )

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        if step >= self._first_step:
            self._run.log(values, step=step)

    def log_samples(self, step: int, rows: Sequence[Sequence[Any]]) -> None:
        if step < self._first_step:
            return
        table = self._table(columns=list(SAMPLE_COLUMNS), data=[list(r) for r in rows])
        self._run.log({SAMPLES_KEY: table}, step=step)

    def log_alert(self, step: int | None, alert: HealthAlert) -> None:
        # wandb.alert() is an online notification; a run's record of alerts is its summary
        self._run.summary[f"opd/alerts/{alert.rule}"] = str(alert)

    def finish(self, status: str, summary: dict[str, Any]) -> None:
        self._run.summary.update({"final_status": status, **summary})
        offline, here, ident = self._run.offline, Path(self._run.settings.sync_dir), self._run.id
        self._run.finish(exit_code=0 if status == SUCCEEDED else 1)
        if offline:  # this run is whole now: it replaces the earlier offline runs of its id
            for earlier in here.parent.glob(f"offline-run-*-{ident}"):
                if earlier != here:
                    shutil.rmtree(earlier, ignore_errors=True)

    def where(self) -> str:
        return self._where
