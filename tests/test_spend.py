"""Spend nothing by mistake: the preflight gate, the consent for paid starts, the estimate, smoke runs.

The paid plane is a Bailian stand-in on loopback: a proxy that counts every request and forwards it
to the session's `opd serve`, so a job it lets through is a real job (cancelled at once) and a job it
never saw was never sent. Only the real host is stood in for; our own code runs unchanged.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from bailian_standin import CountingProxy
from conftest import stop_jobs, tiny_workspace
from pydantic import SecretStr

from opd_nb.cli import invoke, main
from opd_nb.client import JobClient, Target, dry_run, resolve_target, submit
from opd_nb.errors import OpdError
from opd_nb.paid.estimate import SMOKE_STEPS, SMOKE_SUFFIX, SMOKE_VALIDATION_ROWS, billed_hours, estimate
from opd_nb.paid.gate import NEEDS_CONFIRMATION, PREFLIGHT_FAILED

KEY = "sk-standin-0000000000000000"


@pytest.fixture(scope="module")
def bailian(local_server) -> Iterator[CountingProxy]:
    proxy = CountingProxy(local_server.base_url)  # type: ignore[attr-defined]
    try:
        yield proxy
    finally:
        proxy.server.shutdown()


@pytest.fixture()
def cloud_env(monkeypatch) -> None:
    """What a cloud user has: a key in the environment, no local base URL."""
    monkeypatch.setenv("DASHSCOPE_API_KEY", KEY)
    monkeypatch.delenv("DASHSCOPE_HTTP_BASE_URL", raising=False)


def paid(proxy: CountingProxy) -> Target:
    return Target(kind="cloud", base_url=proxy.api_base, api_key=SecretStr(KEY))


def test_a_planted_error_is_refused_before_any_request(bailian, cloud_env, tmp_path):
    ws = tiny_workspace("pure-distill", tmp_path / "ws", train_rows=4)  # 4 rows <= batch_size 8
    before = len(bailian.requests)
    with pytest.raises(OpdError) as refused:
        submit(ws, paid(bailian), yes=True)
    assert refused.value.code == PREFLIGHT_FAILED and "data.too-few-rows" in refused.value.message
    assert len(bailian.requests) == before  # nothing reached the stand-in
    with pytest.raises(OpdError) as via_cli:  # `opd submit` / `%opd submit`: the same gate
        invoke(["submit", str(ws), "--cloud", "--yes"])
    assert via_cli.value.code == PREFLIGHT_FAILED


@pytest.mark.slow
def test_a_cloud_submit_needs_yes_and_says_what_would_start(bailian, cloud_env, tmp_path, capsys):
    ws = tiny_workspace("pure-distill", tmp_path / "ws", train_rows=24, n_epochs=2)
    before = len(bailian.requests)
    with pytest.raises(OpdError) as refused:
        submit(ws, paid(bailian))
    line = refused.value.message
    assert refused.value.code == NEEDS_CONFIRMATION and "--yes" in str(refused.value)
    assert "24 rows x 2 epoch(s) = 6 steps" in line and "16 rollouts/step" in line  # ceil(24/8) x 2; 8 x 2
    assert "student qwen3.5-9b" in line and "teacher qwen3.5-397b-a17b" in line and "MTU4 x 24" in line
    assert len(bailian.requests) == before
    with pytest.raises(SystemExit) as exited:  # the terminal: one line, exit 1, no traceback
        main(["submit", str(ws), "--cloud"])
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert (
        "needs your confirmation" in err and "add --yes" in err and "Traceback" not in err and KEY not in err
    )


@pytest.mark.slow
def test_yes_sends_a_smoke_job_of_40_rows_and_one_epoch(bailian, cloud_env, local_server, tmp_path):
    ws = tiny_workspace("pure-distill", tmp_path / "ws", train_rows=64, n_epochs=3)
    data_before = {p.name: p.read_bytes() for p in (ws / "data").iterdir()}
    result = submit(ws, paid(bailian), yes=True, smoke=40)
    local = JobClient(resolve_target("local", base_url=local_server.api_base))
    try:
        assert any(method == "POST" and "fine-tunes" in path for method, path in bailian.requests)
        job = local.get(result.job_id)
        assert job.hyper_parameters["n_epochs"] == 1
        name = yaml.safe_load((ws / "config.yaml").read_text())["name"]  # + the start's request id
        assert re.fullmatch(rf"{re.escape(name)}-r[0-9a-f]{{10}}{SMOKE_SUFFIX}-[0-9a-f]{{8}}", job.job_name)
        (train_id,) = job.raw["training_file_ids"]
        (val_id,) = job.raw["validation_file_ids"]
        files = httpx.get(f"{local_server.api_base}/files/{train_id}", headers={"Authorization": "Bearer t"})
        assert files.json()["output"]["lines"] == 40
        files = httpx.get(f"{local_server.api_base}/files/{val_id}", headers={"Authorization": "Bearer t"})
        assert files.json()["output"]["lines"] == SMOKE_VALIDATION_ROWS
    finally:
        stop_jobs(local, [result.job_id])
    assert {p.name: p.read_bytes() for p in (ws / "data").iterdir()} == data_before  # data/ untouched
    assert any("smoke run: 40 training row(s)" in note for note in result.notes)


@pytest.mark.slow  # two subprocesses (submit_job.py --dry-run imports the SDK)
def test_a_local_smoke_dry_run_samples_new_files_and_keeps_data(local_server, tmp_path):
    ws = tiny_workspace("reward", tmp_path / "ws", train_rows=48)
    original = (ws / "data" / "train.jsonl").read_text()
    plan = dry_run(ws, resolve_target("local", base_url=local_server.api_base), smoke=0).job
    (train,) = plan["training_datasets"]
    sampled = (ws / train["file_name"]).read_text().splitlines()
    assert train["file_name"].startswith(".opd/smoke/") and len(sampled) == SMOKE_STEPS * 8
    assert (
        set(sampled) <= set(original.splitlines()) and (ws / "data" / "train.jsonl").read_text() == original
    )
    assert plan["hyper_parameters"]["n_epochs"] == 1 and SMOKE_SUFFIX in plan["job_name"]
    assert plan["estimate"]["smoke"] and plan["estimate"]["steps"] == SMOKE_STEPS


@pytest.mark.parametrize(
    ("mode", "rows", "hp"),
    [
        ("pure-distill", 16, {"batch_size": 8, "n_epochs": 1}),
        ("reward", 21, {"batch_size": 8, "n_epochs": 3}),
        ("agentic", 33, {"batch_size": 16, "n_epochs": 2, "ppo_mini_batch_size": 16}),
    ],
)
def test_estimate_json_steps_are_rows_over_batch_times_epochs(mode, rows, hp, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPD_PRICE_PER_UNIT_HOUR", "2.5")
    ws = tiny_workspace(mode, tmp_path / "ws", train_rows=rows, **hp)
    with pytest.raises(SystemExit) as exited:
        main(["estimate", str(ws), "--json"])
    assert exited.value.code == 0
    got = json.loads(capsys.readouterr().out)
    steps = math.ceil(rows / hp["batch_size"]) * hp["n_epochs"]
    assert got["train_rows"] == rows and got["steps"] == steps
    n_rollouts = yaml.safe_load((ws / "config.yaml").read_text())["training"]["hyper_parameters"][
        "n_rollouts"
    ]
    assert got["rollouts"] == steps * hp["batch_size"] * n_rollouts
    every = got["eval_steps"]  # before training, every eval_steps steps, and after the last
    assert got["eval_passes"] == len({0, *range(every, steps + 1, every), steps})
    assert got["unit_hours_per_hour"] == got["mtu_capacity"] == 24
    assert got["money_per_hour"] == 24 * 2.5 and got["wall_clock_hours"] is None
    assert "not known" in got["note"]
    assert (got["reward_calls"] == 0) == (mode == "pure-distill")


def test_estimate_bad_price_is_one_line(tmp_path):
    ws = tiny_workspace("pure-distill", tmp_path / "ws")
    with pytest.raises(OpdError, match="not a positive number"):
        estimate(ws, price=-3)
    assert [billed_hours(s) for s in (0, 1, 3600, 3601)] == [0, 1, 1, 2]


@pytest.mark.slow  # submit_job.py runs twice (each imports the SDK)
def test_submit_job_py_needs_yes_for_the_cloud_and_refuses_a_planted_error(bailian, tmp_path):
    """The workspace's own script, without opd-nb's front ends: the same consent and gate."""
    ws = tiny_workspace("pure-distill", tmp_path / "ws", train_rows=24)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "NO_PROXY": "127.0.0.1,localhost"}
    env.update({"DASHSCOPE_HTTP_BASE_URL": bailian.api_base, "DASHSCOPE_API_KEY": KEY})
    before = len(bailian.requests)

    def script(*args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "submit_job.py", *args]
        return subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=120)

    asked = script()
    assert asked.returncode == 1 and "needs --yes" in asked.stderr and "3 steps" in asked.stderr
    cfg = yaml.safe_load((ws / "config.yaml").read_text())
    cfg["training"]["hyper_parameters"]["batch_size"] = 64  # more than the 24 rows: data.too-few-rows
    (ws / "config.yaml").write_text(yaml.safe_dump(cfg))
    refused = script("--yes")
    assert refused.returncode == 2 and "data.too-few-rows" in refused.stderr
    assert len(bailian.requests) == before and KEY not in asked.stderr + refused.stderr


def test_the_template_keeps_the_smoke_sizes_of_the_estimate():
    import importlib.util

    path = Path(__file__).parents[1] / "template" / "{{cookiecutter.workspace_slug}}" / "submit_job.py"
    spec = importlib.util.spec_from_file_location("template_submit_job", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    assert (module.SMOKE_STEPS, module.SMOKE_VALIDATION_ROWS, module.SMOKE_SUFFIX) == (
        SMOKE_STEPS,
        SMOKE_VALIDATION_ROWS,
        SMOKE_SUFFIX,
    )
    from opd_nb.spec.hyperparams import PARAMS_BY_NAME

    assert module.DEFAULTS == {name: PARAMS_BY_NAME[name].default for name in module.DEFAULTS}


# ---------------------------------------------------------------- checks that run where users meet them


SMALLER_TEACHER_RULES = ["config.teacher-smaller", "config.teacher-undocumented"]


def _smaller_teacher(tmp_path: Path) -> Path:
    """A clean workspace but for the warnings of one mistake: a teacher smaller than the student
    (config.teacher-smaller), which is also a teacher the OPD docs do not list (config.teacher-undocumented:
    the one documented teacher is the largest model)."""
    ws = tiny_workspace("pure-distill", tmp_path / "ws", train_rows=48)  # 6 steps: 3 evaluations
    cfg = yaml.safe_load((ws / "config.yaml").read_text())
    cfg["model"]["name"], cfg["teacher_model"] = "qwen3.5-27b", "qwen3.5-9b"
    (ws / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return ws


@pytest.mark.slow
def test_a_dry_run_runs_the_preflight_and_fails_on_an_error(cloud_env, tmp_path, capsys):
    ws = tiny_workspace("pure-distill", tmp_path / "ws", train_rows=24, learning_rate=-1.0e-6)
    for args in (["--dry-run", "--cloud"], ["--dry-run", "--local", "http://127.0.0.1:9"]):
        with pytest.raises(SystemExit) as exited:
            main(["submit", str(ws), *args])
        err = capsys.readouterr().err
        assert exited.value.code == 2 and "config.bad-value" in err and "learning_rate" in err, err
        assert "nothing was sent" in err and "Traceback" not in err
    with pytest.raises(OpdError) as refused:  # the notebook's %opd submit --dry-run: the same refusal
        invoke(["submit", str(ws), "--dry-run", "--cloud"])
    assert refused.value.code == PREFLIGHT_FAILED
    with pytest.raises(SystemExit) as exited:  # a --set that makes it right is what the dry run checks
        main(["submit", str(ws), "--dry-run", "--cloud", "--set", "learning_rate=-2", "--json"])
    assert exited.value.code == 2 and "below the minimum" in capsys.readouterr().err


@pytest.mark.slow  # submit_job.py --dry-run imports the SDK
def test_a_dry_run_shows_its_warnings_and_submit_job_py_does_the_same(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)  # a dry run needs no key, nor says it lacks one
    monkeypatch.delenv("DASHSCOPE_HTTP_BASE_URL", raising=False)
    ws = _smaller_teacher(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["submit", str(ws), "--dry-run", "--cloud"])
    out = capsys.readouterr().out
    assert exited.value.code == 0 and out.index("config.teacher-smaller") < out.index('"job_name"'), out
    assert "env.no-api-key" not in out and "nothing sent" in out
    with pytest.raises(SystemExit):
        main(["submit", str(ws), "--dry-run", "--cloud", "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert sorted(f["rule"] for f in payload["preflight"]) == SMALLER_TEACHER_RULES
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASHSCOPE_")}
    script = [sys.executable, "submit_job.py", "--dry-run"]
    shown = subprocess.run(script, cwd=ws, env=env, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "config.teacher-smaller" in shown.stderr, shown.stderr
    cfg = yaml.safe_load((ws / "config.yaml").read_text())
    cfg["training"]["hyper_parameters"]["learning_rate"] = -1.0e-6
    (ws / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    refused = subprocess.run(script, cwd=ws, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "config.bad-value" in refused.stderr and not refused.stdout


def test_the_consent_shows_every_warning_before_the_user_says_yes(bailian, cloud_env, tmp_path, capsys):
    ws = _smaller_teacher(tmp_path)
    before = len(bailian.requests)
    with pytest.raises(SystemExit) as exited:
        main(["submit", str(ws), "--cloud"])
    err = capsys.readouterr().err
    assert exited.value.code == 1 and "add --yes" in err and "config.teacher-smaller" in err, err
    assert len(bailian.requests) == before


def test_the_gate_checks_the_config_as_it_would_be_sent(bailian, cloud_env, tmp_path):
    """--set and the run() flags change what is sent, so the gate checks them (where: the flag)."""
    ws = tiny_workspace("pure-distill", tmp_path / "ws", train_rows=24)
    before = len(bailian.requests)
    with pytest.raises(OpdError) as too_big:
        submit(ws, paid(bailian), yes=True, sets={"batch_size": 24})
    assert too_big.value.code == PREFLIGHT_FAILED
    assert (
        "--set training.hyper_parameters.batch_size: the training file has 24 sample(s)"
        in too_big.value.message
    )
    with pytest.raises(OpdError) as vendor:
        submit(ws, paid(bailian), yes=True, teacher_model="gpt-4o")
    assert "config.teacher-not-bailian" in vendor.value.message and "--teacher-model:" in vendor.value.message
    with pytest.raises(OpdError, match="below the minimum"):
        submit(ws, paid(bailian), yes=True, sets={"learning_rate": -1e-6})
    assert len(bailian.requests) == before


@pytest.mark.slow  # a real submit through submit_job.py (the SDK)
def test_a_paid_submit_shows_its_warnings_before_it_sends_and_says_where_the_gate_ran(
    bailian, cloud_env, local_server, tmp_path
):
    ws = _smaller_teacher(tmp_path)
    before = len(bailian.requests)
    shown: list[tuple[str, int]] = []
    result = submit(
        ws, paid(bailian), yes=True, on_note=lambda line: shown.append((line, len(bailian.requests)))
    )
    local = JobClient(resolve_target("local", base_url=local_server.api_base))
    try:
        assert (
            sorted(re.findall(r"config\.teacher-[a-z]+", " ".join(ln for ln, _ in shown)))
            == SMALLER_TEACHER_RULES
        )
        assert all(sent_then == before for _, sent_then in shown)  # every warning shown before any request
        assert any(m == "POST" and "fine-tunes" in p for m, p in bailian.requests[before:])  # then sent
        assert any("config.teacher-smaller" in note for note in result.notes)
        script_said = "\n".join(result.log_tail)
        assert "--no-check" not in script_said and "no preflight" not in script_said, script_said
    finally:
        stop_jobs(local, [result.job_id])
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "NO_PROXY": "127.0.0.1,localhost"}
    env.update({"DASHSCOPE_HTTP_BASE_URL": bailian.api_base, "DASHSCOPE_API_KEY": KEY})
    skipped = subprocess.run(
        [sys.executable, "submit_job.py", "--no-check"],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert skipped.returncode == 1 and "note: preflight skipped (--no-check)" in skipped.stderr


@pytest.mark.slow  # a local job through the CLI
def test_the_terminal_prints_the_warnings_of_a_submit_before_its_job(
    local_server, tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("DASHSCOPE_HTTP_BASE_URL", raising=False)
    ws = _smaller_teacher(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["submit", str(ws), "--local", local_server.api_base, "--json"])
    captured = capsys.readouterr()
    job_id = json.loads(captured.out)["job_id"]
    stop_jobs(JobClient(resolve_target("local", base_url=local_server.api_base)), [job_id])
    assert exited.value.code == 0 and "preflight warning config.teacher-smaller" in captured.err, captured.err


@pytest.mark.slow
def test_the_estimates_evaluation_passes_are_the_ones_a_job_records(finished_job, local_server):
    """`opd estimate` counted ceil(steps / eval_steps) passes where the job also evaluates at step 0 (issue 51):
    the estimate of a finished job's workspace equals the validation rows the job recorded."""
    from opd_nb.client import JobClient, resolve_target

    shared = finished_job("reward")
    client = JobClient(resolve_target("local", base_url=local_server.api_base))
    rows = client.metrics(shared.job_id) or []
    recorded = {r["step"] for r in rows if any(k.startswith("validation/") for k in r)}
    assert recorded and 0 in recorded, rows
    assert estimate(shared.workspace).eval_passes == len(recorded)
    steps = estimate(shared.workspace).steps
    for every in (2, 3):  # other spacings, by the same rule: step 0, every eval_steps and the last
        sized = estimate(shared.workspace, sets={"training.hyper_parameters.eval_steps": every})
        assert sized.eval_passes == len({0, *range(every, steps + 1, every), steps}), (every, steps)
