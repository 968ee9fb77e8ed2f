"""A training worker yields the CPU to the control plane and the notebook, across sessions too.

The worker starts a session of its own (so its process tree can be ended as a group). With the
kernel's autogroup scheduling each session is one scheduling group with an equal share, whatever the
nice of its members: ``os.nice`` alone left a training job as strong as `opd serve` itself, and
``bench/serve_load.py`` measured the server's p99 at 193 ms loaded with it, 94 ms with the group's
nice lowered too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

AUTOGROUP = Path("/proc/self/autogroup")

_PROBE = (
    "import os\n"
    "from opd_nb.server.worker import _lower_priority\n"
    "_lower_priority('7')\n"
    "print(os.nice(0), open('/proc/self/autogroup').read().split()[-1])\n"
)


@pytest.mark.skipif(not AUTOGROUP.exists(), reason="this kernel has no autogroup scheduling")
def test_a_worker_in_its_own_session_lowers_its_sessions_priority_not_only_its_own() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], start_new_session=True, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["7", "7"], out  # the process's nice and its session's (autogroup) nice


def test_a_bad_nice_setting_leaves_the_priority_as_it_was() -> None:
    probe = _PROBE.replace("_lower_priority('7')", "_lower_priority('lots')")
    if not AUTOGROUP.exists():
        probe = probe.replace(", open('/proc/self/autogroup').read().split()[-1]", ", '0'")
    out = subprocess.run(
        [sys.executable, "-c", probe], start_new_session=True, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["0", "0"], out
