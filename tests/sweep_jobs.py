"""One finished `%opd sweep` per test session, shared by test_sweep.py and test_compare.py.

Training jobs are the expensive part of the suite, so the sweep's two tiny reward jobs are run once
(by whichever file asks first, through the notebook's own `%opd sweep`) and both files assert on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conftest import tiny_workspace

VALUES = ("5e-7", "2e-6")  # learning_rate, as written on the command line
_CACHE: dict[int, SweptJobs] = {}


def uploads(server: Any) -> int:
    """Function zips the server has received (one file per PUT of the SDK's upload step)."""
    return len(list((Path(server.data_dir) / "uploads").glob("*.zip")))


@dataclass
class SweptJobs:
    monitor: Any  # the SweepMonitor `%opd sweep` returned
    workspace: Path
    uploads: int  # function zips received during the sweep
    config_before: bytes


def finished_sweep(server: Any, root: Path) -> SweptJobs:
    """`%opd sweep WS --param learning_rate=5e-7,2e-6` on a tiny reward workspace, waited to the end."""
    if id(server) not in _CACHE:
        from opd_nb.notebook.magics import run_line

        ws = tiny_workspace("reward", root / "ws", train_rows=9)  # Bailian needs rows > batch_size (8)
        before, config = uploads(server), (ws / "config.yaml").read_bytes()
        monitor = run_line(f"sweep {ws} --param learning_rate={','.join(VALUES)} --local {server.base_url}")
        try:
            monitor.wait(timeout_s=400)
        finally:
            monitor.stop()
        _CACHE[id(server)] = SweptJobs(monitor, ws, uploads(server) - before, config)
    return _CACHE[id(server)]
