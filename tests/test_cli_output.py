"""Terminal rendering: user text (job names, models, key paths, messages) is printed as written.

rich reads ``[a-z...]`` as markup, so an unescaped ``[exp-1]`` in a job name or ``functions[reward]``
in a key path would silently vanish from the terminal output.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.console import Console

from opd_nb.checks.report import CheckReport
from opd_nb.cli._output import console as cli_console
from opd_nb.cli._output import print_result
from opd_nb.client.jobs import Job, JobList
from opd_nb.errors import OpdError

BRACKETS = "[exp-1][bold]"


def rendered(obj) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(obj)
    return console.export_text()


def test_job_and_job_list_keep_bracketed_user_text():
    job = Job(
        job_id="ft-1",
        job_name=f"distill {BRACKETS}",
        status="FAILED",
        model=f"qwen{BRACKETS}",
        message=f"reward raised KeyError{BRACKETS}",
    )
    text = rendered(job)
    assert f"distill {BRACKETS}" in text and f"qwen{BRACKETS}" in text and f"KeyError{BRACKETS}" in text
    listing = rendered(JobList(jobs=[job], total=1))
    assert f"qwen{BRACKETS}" in listing and "FAILED" in listing


def test_job_list_keeps_ids_whole_in_a_narrow_terminal():
    """`opd jobs` in an 80-column terminal (or a pipe): long models and outputs wrap, ids stay copyable."""
    jobs = [
        Job(
            job_id=f"ft-20261201154{i}-8e401{i}",
            status="SUCCEEDED",
            model="qwen3.5-9b-with-a-rather-long-model-name",
            create_time="2026-12-01 15:40:30",
            finetuned_output=f"opd-local/ft-20261201154{i}-8e401{i}-with-a-long-suffix",
        )
        for i in range(2)
    ]
    console = Console(width=80, record=True, color_system=None)
    console.print(JobList(jobs=jobs, total=2))
    text = console.export_text()
    assert all(j.job_id in text for j in jobs), text
    assert text.count("SUCCEEDED") == 2


def test_check_report_keeps_key_paths_and_messages(capsys):
    report = CheckReport(workspace="ws", target="local")
    report.add(
        "config.function",
        "error",
        "config.yaml:7 functions[reward].name",
        "unknown name [abc]",
        fix="use [x]",
    )
    text = rendered(report)
    assert "functions[reward].name" in text and "unknown name [abc]" in text and "use [x]" in text
    print_result(report)  # the CLI path
    assert "functions[reward].name" in capsys.readouterr().out


# ---- names a user copies are never cut; fixes never nest (issue 36) --------------------------------
LONG_DEPLOYED = "qwen3.5-9b-ft-202612042210-e275cb-ckpt-2-longersuffix"


def _deployments():
    from opd_nb.client.deploy_results import Deployment, DeploymentList

    deps = [
        Deployment(
            deployed_model=LONG_DEPLOYED,
            status="RUNNING",
            model_name="qwen3.5-9b-ft-202612042210-e275cb-ckpt-2",
            capacity=1,
            gmt_create="2026-12-04 22:10:58",
        ),
        Deployment(deployed_model="opd-local-ft-202612042210-e275cb-v1", status="PENDING", capacity=1),
    ]
    return DeploymentList(deployments=deps, total=2)


def _eval_result():
    from opd_nb.experiments.evaluation import EvalResult, ModelScore, RowResult

    models = [LONG_DEPLOYED, "qwen3.5-9b"]
    scores = [ModelScore(model=m, n=1, reward_mean=0.5, metrics={"contains_answer": 0.75}) for m in models]
    row = RowResult(
        index=0,
        prompt="9141",
        solution="1149",
        answers={m: "1149" for m in models},
        scores={m: 1.0 for m in models},
    )
    return EvalResult(workspace="my-ws", target="local", scorer="exact_match", models=scores, rows=[row])


def test_names_print_whole_at_any_terminal_width():
    """`opd deployments`, `opd jobs` and `opd eval` in 160, 80 and 50 columns: every deployed model, job id,
    output and model name can be copied whole (rich cut them to "qwen3.5-9b-ft-2…" at 80)."""
    jobs = JobList(
        jobs=[
            Job(
                job_id="ft-202612042210-e275cb",
                status="SUCCEEDED",
                model="qwen3.5-9b",
                create_time="2026-12-04 22:10:27",
                finetuned_output="opd-local/ft-202612042210-e275cb",
            )
        ],
        total=1,
    )
    for width in (160, 80, 50):
        for result, names in (
            (_deployments(), [LONG_DEPLOYED, "opd-local-ft-202612042210-e275cb-v1"]),
            (jobs, ["ft-202612042210-e275cb", "opd-local/ft-202612042210-e275cb"]),
            (_eval_result(), [LONG_DEPLOYED, "qwen3.5-9b"]),
        ):
            out = cli_console(width=width, record=True, color_system=None, soft_wrap=True)  # as print_result
            out.print(result)
            text = out.export_text()
            assert all(name in text for name in names), (width, text)
            assert "…" not in text.split("rows (where")[0], (width, text)
            assert max(len(line) for line in text.splitlines()) <= max(width, *(len(n) + 2 for n in names)), (
                text
            )


def test_a_fix_never_nests_in_another():
    """An error listing findings (each with its own "fix:") puts its own fix on a line of its own."""
    one = OpdError("a bad value", where="config.yaml:4", fix="use 1")
    assert str(one) == "config.yaml:4: a bad value (fix: use 1)"
    listed = OpdError("2 error(s):\n  x\n        fix: a\n  y\n        fix: b", fix="correct them")
    assert str(listed).splitlines()[-1] == "fix: correct them" and "(fix:" not in str(listed)


@pytest.mark.slow
def test_the_gate_prints_each_fix_once_per_line(tmp_path):
    """`opd submit WS --cloud --yes` with a planted error, in an 80-column terminal: the refusal lists the
    finding with its fix, then the gate's own fix on its own line (was `fix: … (fix: …)`)."""
    import os
    import subprocess
    import sys

    from opd_nb.workspace.new import create

    ws = Path(create("reward", tmp_path / "ws").path)
    cfg = ws / "config.yaml"
    cfg.write_text(re.sub(r"learning_rate: \S+", "learning_rate: -1.0e-6", cfg.read_text()), encoding="utf-8")
    env = {**os.environ, "COLUMNS": "80", "DASHSCOPE_API_KEY": "sk-" + "test0not0sent"}
    env.pop("DASHSCOPE_HTTP_BASE_URL", None)
    proc = subprocess.run(
        [sys.executable, "-m", "opd_nb", "submit", str(ws), "--cloud", "--yes"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert all(line.count("fix:") <= 1 for line in lines), proc.stderr
    assert "config.bad-value" in proc.stderr and lines[-1].startswith("fix: correct them (`opd check")


@pytest.mark.slow
def test_help_groups_every_verb_by_the_flow() -> None:
    """`opd --help` listed 30 verbs beginning with `version` (issue 51): a section per stage of the flow, in
    the flow's order, and every visible command placed in one."""
    import os
    import subprocess
    import sys

    from opd_nb.cli import command
    from opd_nb.cli._app import FLOW

    out = subprocess.run(
        [sys.executable, "-m", "opd_nb", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "100"},
    ).stdout
    sections = re.findall(r"^(\S[^:\n]*):\n((?:  .*\n?)+)", out, flags=re.M)
    listed = {title: re.findall(r"^  (\S+)", body, flags=re.M) for title, body in sections}
    listed.pop("Options", None)
    assert list(listed) == [title for title, _ in FLOW], out
    assert listed == {title: list(names) for title, names in FLOW}, out
    visible = {name for name, cmd in command().commands.items() if not cmd.hidden}
    assert visible == {name for _, names in FLOW for name in names}


@pytest.mark.slow
def test_help_defaults_are_the_rules_the_code_follows(monkeypatch, tmp_path) -> None:
    """Help texts stated defaults that were not the real ones (issue 51): `--local` follows a loopback
    DASHSCOPE_HTTP_BASE_URL, `opd serve --data-dir` XDG_CACHE_HOME. Each help names the rule the code uses."""
    import os
    import subprocess
    import sys

    from opd_nb import settings
    from opd_nb.constants import DEFAULT_LOCAL_API
    from opd_nb.server.records import default_data_dir
    from opd_nb.workspace.connection import LOCAL_URL_RULE, resolve_connection
    from opd_nb.workspace.new import DEFAULT_REWARD_CLASS, DEFAULT_STUDENT, DEFAULT_TEACHER

    def help_of(*verb: str) -> str:
        env = {**os.environ, "COLUMNS": "400"}
        out = subprocess.run(
            [sys.executable, "-m", "opd_nb", *verb, "--help"], capture_output=True, text=True, env=env
        )
        return " ".join(out.stdout.split())

    expected = {
        ("jobs",): [LOCAL_URL_RULE],
        ("submit",): [LOCAL_URL_RULE],
        ("check",): [LOCAL_URL_RULE],
        ("serve",): [
            settings.DATA_DIR.flag_default(),
            settings.MAX_DEPLOYMENTS.flag_default(),
            settings.CHECKPOINT_TTL_DAYS.flag_default(),
        ],
        ("new",): [f"[default: {d}]" for d in (DEFAULT_STUDENT, DEFAULT_TEACHER, DEFAULT_REWARD_CLASS)],
        ("estimate",): [settings.PRICE_PER_UNIT_HOUR.flag_default()],
        ("watch",): [settings.PRICE_PER_UNIT_HOUR.flag_default()],
    }
    for verb, texts in expected.items():
        shown = help_of(*verb)
        for text in texts:
            assert text in shown, (verb, text, shown)
    # ... and the rules are what the code does.
    monkeypatch.delenv("OPD_SERVE_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DASHSCOPE_HTTP_BASE_URL", "http://127.0.0.1:9911/api/v1")
    assert resolve_connection("local").base_url == "http://127.0.0.1:9911/api/v1"
    monkeypatch.setenv("DASHSCOPE_HTTP_BASE_URL", "https://dashscope.aliyuncs.com/api/v1")
    assert resolve_connection("local").base_url == DEFAULT_LOCAL_API
    monkeypatch.delenv("OPD_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_data_dir() == tmp_path / "xdg" / "opd-nb" / "server"
    assert "$XDG_CACHE_HOME" in settings.DATA_DIR.flag_default()
