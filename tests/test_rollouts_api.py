"""`GET /fine-tunes/{id}/rollouts`, `JobClient.rollouts` and `opd rollouts`, against a real `opd serve`.

The session's finished reward job (see conftest: two steps, an evaluation after each) whose
validation file ends with a prompt written in rich markup, so that the terminal view must print it
as text.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MARKUP_PROMPT, SHARED_VAL_ROWS
from pydantic import SecretStr

from opd_nb.client import JobClient, RolloutPage, Target
from opd_nb.errors import OpdError

VAL_N = SHARED_VAL_ROWS + 1  # every validation answer is recorded: the template's rows and the markup row
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def done_job(finished_job) -> tuple[str, Path]:
    """The session's finished reward job: two steps, an evaluation before and after each."""
    shared = finished_job("reward")
    return shared.job_id, shared.workspace


def test_endpoint_serves_the_latest_step_and_any_other(api, done_job) -> None:
    job_id, _ = done_job
    r = api.get(f"/fine-tunes/{job_id}/rollouts")
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"request_id", "output"}
    out = body["output"]
    assert out["job_id"] == job_id and out["steps"] == [0, 1, 2] and out["step"] == 2
    assert out["steps_by_kind"] == {"train": [1, 2], "validation": [0, 1, 2]}
    kinds = [rec["kind"] for rec in out["rollouts"]]
    assert kinds == sorted(kinds, key=["train", "validation"].index) and set(kinds) == {"train", "validation"}
    rec = out["rollouts"][0]
    assert "".join(t["text"] for t in rec["tokens"]) == rec["completion"]
    assert {"student_logprob", "teacher_logprob"} <= set(rec["tokens"][0])
    assert "reward_score" in rec and rec["reward_status"] == "success"

    first = api.get(f"/fine-tunes/{job_id}/rollouts", params={"step": 0, "kind": "validation"}).json()[
        "output"
    ]
    assert first["step"] == 0 and first["steps"] == [0, 1, 2] and len(first["rollouts"]) == VAL_N
    assert {r["kind"] for r in first["rollouts"]} == {"validation"}
    train = api.get(f"/fine-tunes/{job_id}/rollouts", params={"kind": "train", "limit": 3}).json()["output"]
    assert train["step"] == 2 and train["steps"] == [1, 2] and len(train["rollouts"]) == 3
    never = api.get(f"/fine-tunes/{job_id}/rollouts", params={"step": 99}).json()["output"]
    assert never["step"] == 99 and never["rollouts"] == []


@pytest.mark.parametrize(
    "params", [{"kind": "eval"}, {"step": -1}, {"step": "latest"}, {"limit": -2}, {"step": 10**12}]
)
def test_bad_parameters_are_a_bailian_400(api, done_job, params) -> None:
    job_id, _ = done_job
    for jid in (job_id, "ft-202001010000-0000"):  # a bad parameter is a 400 even for an unknown job
        r = api.get(f"/fine-tunes/{jid}/rollouts", params=params)
        assert r.status_code == 400, r.text
        assert r.json()["code"] == "InvalidParameter" and set(r.json()) == {"request_id", "code", "message"}


def test_unknown_job_is_a_404(api) -> None:
    r = api.get("/fine-tunes/ft-202001010000-0000/rollouts")
    assert r.status_code == 404 and r.json()["code"] == "JobNotFound"


def test_client_reads_a_typed_page_and_none_on_the_cloud(local_server, done_job) -> None:
    job_id, _ = done_job
    local = Target(kind="local", base_url=local_server.api_base, api_key=SecretStr("test"))
    page = JobClient(local).rollouts(job_id, step=1, kind="validation")
    assert isinstance(page, RolloutPage) and page.step == 1 and page.kind == "validation"
    assert page.steps_by_kind["train"] == [1, 2] and len(page.rollouts) == VAL_N
    assert page.summaries()[-1]["prompt"] == MARKUP_PROMPT
    assert json.loads(page.to_json()).keys() == {"job_id", "step", "kind", "steps", "rollouts"}
    with pytest.raises(OpdError) as bad:
        JobClient(local).rollouts(job_id, kind="eval")
    assert bad.value.status == 400
    cloud = Target(kind="cloud", base_url=local_server.api_base, api_key=SecretStr("sk-test"))
    assert JobClient(cloud).rollouts(job_id) is None  # Bailian has no such endpoint: not even asked


def _opd(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASHSCOPE_")}
    env.update(NO_PROXY="127.0.0.1,localhost", COLUMNS="120")
    return subprocess.run(
        [sys.executable, "-m", "opd_nb", *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env
    )


def test_cli_json_and_terminal(local_server, done_job) -> None:
    job_id, ws = done_job
    url = local_server.api_base
    proc = _opd("rollouts", job_id, "--local", url, "--step", "0", "--kind", "validation", "--json", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["job_id"] == job_id and out["step"] == 0 and len(out["rollouts"]) == VAL_N
    assert all(r["kind"] == "validation" for r in out["rollouts"])

    proc = _opd("rollouts", job_id, "--local", url, "--step", "0", "--kind", "validation", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    assert f"{job_id} step 0 (validation): {VAL_N} sample(s)" in proc.stdout
    assert MARKUP_PROMPT in proc.stdout  # printed as text, never read as markup
    for rec in out["rollouts"]:
        assert rec["completion"] in proc.stdout
    assert "teacher disagrees" in proc.stdout and "mean log-ratio" in proc.stdout

    bad = _opd("rollouts", job_id, "--local", url, "--kind", "eval", cwd=ws)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr and "--kind" in bad.stderr
    gone = _opd("rollouts", "ft-202001010000-0000", "--local", url, cwd=ws)
    assert gone.returncode != 0 and "Traceback" not in gone.stderr
    assert len(gone.stderr.strip().splitlines()) == 1 and "404" in gone.stderr


def test_terminal_shading_follows_the_log_ratio() -> None:
    """Tokens the teacher disagrees with are shaded red, and more so the more it disagrees."""
    from rich.console import Console

    from opd_nb.client.rollout_results import tokens_html, tokens_rich

    tokens = [
        {"text": "[b]", "student_logprob": -0.1, "teacher_logprob": -0.1},
        {"text": "7", "student_logprob": -0.1, "teacher_logprob": -4.0},
        {"text": "<i>", "student_logprob": -0.5, "teacher_logprob": None},
        {"text": "", "student_logprob": -0.2, "teacher_logprob": -0.3},
    ]
    text = tokens_rich(tokens)
    assert text.plain == "[b]7<i>∎"
    styles = [span.style for span in text.spans]
    assert styles[1].bgcolor.triplet.green < styles[0].bgcolor.triplet.green  # redder where it disagrees
    console = Console(record=True, width=40, color_system="truecolor")
    console.print(text)
    assert "[b]7<i>" in console.export_text()
    html = tokens_html(tokens)
    assert "&lt;i&gt;" in html and "<i>" not in html and "teacher−student -3.900" in html
    spans = html.split('<span class="opd-tok"')[1:]
    assert spans[0].startswith(" title=")  # agreed (ratio 0): no shade, so no style to save
    assert spans[1].startswith(' style="background-color:rgba(') and "dotted" in spans[2]
