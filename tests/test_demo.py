"""`opd demo DIR`: the README's main-job command, run as a user runs it (a subprocess, no key)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import DEMO_STAGES, assert_stages_in_order

pytestmark = pytest.mark.slow

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _clean_env(home: Path) -> dict[str, str]:
    """No key, no base URL, a private HOME: the demo must need nothing from the machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASHSCOPE_", "OPD_"))}
    env.update(HOME=str(home), NO_PROXY="127.0.0.1,localhost", COLUMNS="120")
    env.pop("XDG_CACHE_HOME", None)
    return env


def test_demo_runs_to_succeeded_and_writes_the_curves(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "opd_nb", "demo", str(out)],
        env=_clean_env(home),
        capture_output=True,
        text=True,
        timeout=600,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]

    # It narrates every stage of the demo, in order.
    stages = [
        "Scaffold a reward workspace",
        *DEMO_STAGES,
    ]
    assert_stages_in_order(text, stages)

    # The job it submitted through the workspace's own submit_job.py succeeded.
    match = re.search(r"job (\S+): SUCCEEDED in \d+s", text)
    assert match, text[-3000:]
    job_id = match.group(1)
    ws = out / "reward-demo"
    assert (ws / "config.yaml").is_file() and (ws / "submit_job.py").is_file()

    # The summary table names the distillation metrics with numbers.
    assert "metrics over the job" in text
    for metric in ("actor/distillation/loss", "trace/distillation/valid_token_rate"):
        line = next((ln for ln in text.splitlines() if metric in ln), None)
        assert line is not None, f"{metric} missing from the summary"
        assert re.search(r"\d", line.split(metric, 1)[1]), line

    # The PNG lies next to the workspace, is a real image, and the output says where it is.
    png = out / "reward-demo-metrics.png"
    assert png.is_file() and png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 5000
    assert str(png) in text.replace("\n", "")
    assert f"metric curves: {png}" in text or "metric curves written to" in text

    # The control plane the demo started is stopped again (its port no longer answers).
    m = re.search(r"local control plane at (http://127\.0\.0\.1:\d+)/api/v1", text)
    assert m, "the demo did not say where its control plane ran"
    assert "local control plane stopped" in text
    with pytest.raises(httpx.HTTPError):
        httpx.get(m.group(1) + "/health", timeout=3)

    # The trained model beats its base on the demo task, as `opd eval` measures it on a control plane
    # started again on the demo's data dir: the finished job's output, deployed, against the base id.
    _assert_trained_beats_base(out, ws, job_id, _clean_env(home))


def _assert_trained_beats_base(out: Path, ws: Path, job_id: str, env: dict[str, str]) -> None:
    import json

    from pydantic import SecretStr

    from opd_nb.client import JobClient, Target
    from opd_nb.server import start

    with start(port=0, data_dir=out / ".opd-server") as server:
        client = JobClient(Target(kind="local", base_url=server.api_base, api_key=SecretStr("demo")))
        job = client.get(job_id)
        assert job.status == "SUCCEEDED"
        name = client.deploy(job.finetuned_output, suffix="demo").deployed_model
        client.wait_deployed(name, poll_s=0.2, timeout_s=300)
        proc = subprocess.run(
            [sys.executable, "-m", "opd_nb", "eval", str(ws), "--model", name, "--model", job.model]
            + ["--local", server.base_url, "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        models = {m["model"]: m for m in json.loads(proc.stdout)["models"]}
        assert models[name]["reward_mean"] > models[job.model]["reward_mean"], models
        client.undeploy(name)


def test_demo_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    out = tmp_path / "busy"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    proc = subprocess.run(
        [sys.executable, "-m", "opd_nb", "demo", str(out)],
        env=_clean_env(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "is not empty" in proc.stderr and "Traceback" not in proc.stderr
    assert (out / "keep.txt").read_text() == "mine" and sorted(p.name for p in out.iterdir()) == ["keep.txt"]
