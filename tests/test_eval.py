"""`opd eval`: a finished job's trained model against its base, through the chat API, scored with the
workspace's own reward in a function server; pure distillation by exact match; the cloud's guard.

The trained model is the session's shared reward job on `opd serve` (see conftest), deployed as on Bailian (a fine-tuned
output answers only once deployed); the base is the job's cloud model id, which answers directly.
The eval must agree with the job's own validation curve (step 0 is the base, the last step the
trained model); that the trained model ends above its base on the demo task is checked by
tests/test_demo.py and notebook 02.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SHARED_VAL_ROWS, tiny_workspace
from pydantic import SecretStr

from opd_nb.client import JobClient, Target
from opd_nb.constants import REWARD_MEAN

pytestmark = pytest.mark.slow

BASE = "qwen3.5-9b"  # the template's student: what the job trained from (the bundled tiny student)
VAL_ROWS = SHARED_VAL_ROWS + 1  # the shared reward job validates on the template rows and a markup row


def _opd(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "opd_nb", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.fixture(scope="module")
def client(local_server):
    return JobClient(Target(kind="local", base_url=local_server.api_base, api_key=SecretStr("test")))


@pytest.fixture(scope="module")
def trained(client, finished_job):
    """(workspace, finished job, the job's output deployed): the session's reward job on the demo task."""
    shared = finished_job("reward")
    name = client.deploy(shared.job.finetuned_output, suffix="eval").deployed_model
    client.wait_deployed(name, poll_s=0.2, timeout_s=300)
    yield shared.workspace, shared.job, name
    client.undeploy(name)


def test_eval_measures_what_training_measured(trained, client, local_server):
    """The base scores what the job's step-0 validation scored, the trained model what its last one did
    (same rows, greedy, the same reward in a function server), so the ranking is training's own."""
    ws, job, name = trained
    proc = _opd("eval", str(ws), "--model", name, "--model", BASE, "--local", local_server.base_url, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    models = {m["model"]: m for m in out["models"]}
    assert list(models) == [name, BASE] and all(m["n"] == VAL_ROWS for m in models.values())
    curve = [r[REWARD_MEAN] for r in client.metrics(job.job_id) if REWARD_MEAN in r]
    assert abs(models[BASE]["reward_mean"] - curve[0]) <= 1 / VAL_ROWS, (models, curve)  # at most a tie flips
    assert abs(models[name]["reward_mean"] - curve[-1]) <= 1 / VAL_ROWS, (models, curve)
    assert {"contains_answer", "length_match"} <= set(models[name]["metrics"])  # the reward's own metrics
    rows = out["rows"]
    assert len(rows) == VAL_ROWS and all(set(r["answers"]) == {name, BASE} for r in rows)
    differ = [len({r["scores"][name], r["scores"][BASE]}) > 1 for r in rows]
    assert differ == sorted(differ, reverse=True)  # the rows where the models differ come first
    assert out["scorer"].startswith("reward ")


def _in_a_terminal(args: list[str], columns: int = 80, timeout: float = 600) -> str:
    """Run the real CLI on a pseudo-terminal `columns` wide (stdout and stderr), as a user sees it."""
    import fcntl
    import pty
    import re
    import select
    import struct
    import termios
    import time

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm-256color"}
    proc = subprocess.Popen([sys.executable, "-m", "opd_nb", *args], stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([master], [], [], 0.5)[0]:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=60)
    os.close(master)
    assert proc.returncode == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    text = b"".join(chunks).decode("utf-8", errors="replace")
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", "")


def test_eval_in_an_80_column_terminal(trained, local_server):
    """The progress is rich's bar (the declared library, no tqdm), from the first call on, and nothing
    prints before it ("eval: 0call [00:00, ?call/s]" did); the models' names are whole in the table."""
    ws, _, name = trained
    screen = _in_a_terminal(
        ["eval", str(ws), "--model", name, "--model", BASE, "--rows", "4", "--local", local_server.base_url]
    )
    assert "call/s" not in screen and "0call" not in screen and "it/s" not in screen
    assert "/8 calls" in screen  # 4 rows x 2 models, counted by the bar
    first = next(line for line in screen.splitlines() if line.strip())
    assert first.startswith("eval"), screen[:500]
    assert name in screen, screen  # whole: an 80-column table cut it to "opd-local-ft-2026120422…"
    assert f"{BASE}" in screen and "rows (where the models differ first)" in screen


def test_eval_of_an_undeployed_output_says_how_to_deploy(trained, local_server):
    ws, job, _ = trained
    proc = _opd("eval", str(ws), "--model", job.finetuned_output, "--local", local_server.base_url)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "ModelNotDeployed" in proc.stderr and f"opd deploy {job.finetuned_output}" in proc.stderr


def test_checkpoints_in_bailians_shape(trained, api):
    _, job, _ = trained
    out = api.get(f"/fine-tunes/{job.job_id}/checkpoints").json()["output"]
    assert isinstance(out, list) and out
    assert [e["step"] for e in out] == sorted((e["step"] for e in out), reverse=True)  # newest first
    last = out[0]
    assert {
        "checkpoint_id",
        "checkpoint",
        "job_id",
        "step",
        "status",
        "create_time",
        "expire_time",
        "model_name",
    } <= set(last)
    assert last["model_name"] == job.finetuned_output and last["local"]["published"]
    assert Path(last["local"]["path"]).is_dir()


def test_pure_distillation_is_scored_by_exact_match(client, tmp_path):
    from opd_nb.data import jsonl as data
    from opd_nb.experiments.evaluation import evaluate

    ws = tiny_workspace("pure-distill", tmp_path / "pd", val_rows=3)
    rows = data.read_jsonl(ws / "data" / "validation.jsonl")
    rows[2].pop("rollout_extra")  # no solution: no score for this row
    data.write_jsonl(rows, ws / "data" / "validation.jsonl")
    teacher = "local/tiny-teacher"
    res = evaluate(ws, [BASE, teacher], client=client)
    assert res.scorer == "exact_match"
    for m in res.models:
        assert m.n == 2 and set(m.metrics) == {"exact_match"} and m.reward_mean == m.metrics["exact_match"]
    assert res.rows[2].scores == {BASE: None, teacher: None} and res.rows[2].answers[teacher]
    html = res._repr_html_()
    assert "exact_match" in html and teacher in html


def test_cloud_eval_says_what_it_costs_and_needs_yes(tmp_path):
    ws = tiny_workspace("reward", tmp_path / "ws", val_rows=5)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASHSCOPE_")}
    proc = _opd("eval", str(ws), "--model", "a", "--model", "b", "--cloud", env=env, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "makes 10 calls" in proc.stderr and "cost money" in proc.stderr and "--yes" in proc.stderr
    assert "opd deploy MODEL --cloud" in proc.stderr


def test_a_cloud_eval_from_python_sends_nothing_without_consent(local_server, tmp_path):
    """The consent rule sits in the paid call itself: `evaluate` from Python (no CLI, no magic) on
    Bailian's counting stand-in sends nothing without `yes`, and makes its calls with it."""
    from bailian_standin import CountingProxy

    from opd_nb.errors import OpdError
    from opd_nb.experiments.evaluation import evaluate

    ws = tiny_workspace("pure-distill", tmp_path / "ws", val_rows=2)
    proxy = CountingProxy(local_server.base_url)
    try:
        cloud = JobClient(Target(kind="cloud", base_url=proxy.api_base, api_key=SecretStr("sk-standin-0000")))
        with pytest.raises(OpdError) as refused:
            evaluate(ws, [BASE], client=cloud)
        assert refused.value.code == "needs-confirmation" and "makes 2 calls" in str(refused.value)
        assert proxy.requests == []
        result = evaluate(ws, [BASE], client=cloud, yes=True)
    finally:
        proxy.close()
    assert [m.model for m in result.models] == [BASE] and len(result.rows) == 2
    assert sum(1 for method, path in proxy.requests if method == "POST") == 2  # one chat call per row


def test_magic_eval_view_runs_in_the_background(client, local_server, tmp_path):
    pytest.importorskip("ipywidgets")
    from opd_nb.cli import invoke
    from opd_nb.notebook.eval_view import EvalView
    from opd_nb.notebook.views import open_view

    ws = tiny_workspace("reward", tmp_path / "ws", val_rows=4)
    url = local_server.base_url
    view = open_view(
        invoke(["eval", str(ws), "--model", BASE, "--model", "local/tiny-teacher", "--local", url])
    )
    assert isinstance(view, EvalView) and view.widget() is not None
    result = view.wait(300)
    assert view.done and [m.model for m in result.models] == [BASE, "local/tiny-teacher"]
    w = view._ensure_widgets()
    assert w["bar"].value == w["bar"].max == 8 and w["bar"].bar_style == "success"
    snapshot = view._repr_mimebundle_()["text/html"]
    assert "reward_mean" in snapshot and "local/tiny-teacher" in snapshot  # kept in a saved notebook
