"""`opd demo DIR --mode agentic`: the demo's flow with a tool-using workspace, run as a user runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DEMO_STAGES, assert_stages_in_order


def _demo(out: Path, home: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the demo in a subprocess with no key, no base URL and a private HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASHSCOPE_", "OPD_"))}
    env.update(HOME=str(home), NO_PROXY="127.0.0.1,localhost", COLUMNS="200")
    home.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "opd_nb", "demo", str(out), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_an_unknown_demo_mode_is_one_clear_error(tmp_path: Path) -> None:
    proc = _demo(tmp_path / "demo", tmp_path / "home", "--mode", "chatty", timeout=120)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "unknown demo mode 'chatty'" in text and "--mode agentic" in text
    assert not (tmp_path / "demo").exists() or not any((tmp_path / "demo").iterdir())


@pytest.mark.slow
def test_agentic_demo_runs_the_tool_loop_to_succeeded(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = _demo(out, tmp_path / "home", "--mode", "agentic")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    stages = [
        "Scaffold an agentic workspace",
        "streamlined rehearsal: 64 tool-using rows",
        *DEMO_STAGES,
    ]
    assert_stages_in_order(text, stages)
    assert re.search(r"job (\S+): SUCCEEDED in \d+s", text), text[-3000:]
    ws = out / "agentic-demo"
    assert (ws / "data" / "full-train.jsonl").is_file()
    assert len((ws / "data" / "train.jsonl").read_text().splitlines()) == 64
    assert (out / "agentic-demo-metrics.png").is_file()
    assert "tool_calls" in text  # the metrics summary shows the rollout's tool calls
