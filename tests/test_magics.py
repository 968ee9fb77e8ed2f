"""`%opd` / `%%opd` in a real IPython InteractiveShell: every subcommand, help, and bad input.

User mistakes must show one UsageError line and never a traceback; results come back as the
commands' typed objects (rendered by their reprs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

PY = sys.executable


@pytest.fixture(scope="module")
def ip() -> InteractiveShell:
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "opd_nb")
    return shell


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from opd_nb.workspace import create

    return create("reward", tmp_path_factory.mktemp("ws") / "sorter").path


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("DASHSCOPE_HTTP_BASE_URL", "DASHSCOPE_API_KEY", "OPD_NB_LOCAL_KEY"):
        monkeypatch.delenv(key, raising=False)


def run(ip: InteractiveShell, code: str, capsys: pytest.CaptureFixture) -> tuple[object, str]:
    """Run a cell; return (result object, everything printed)."""
    result = ip.run_cell(code, store_history=False)
    out = capsys.readouterr()
    return result, out.out + out.err


def assert_usage_error(result: object, printed: str, *needles: str) -> None:
    assert isinstance(result.error_in_exec, UsageError), (result.error_in_exec, printed)
    assert "Traceback" not in printed
    assert "UsageError" in printed
    for needle in needles:
        assert needle in printed, printed


def test_load_ext_is_light() -> None:
    code = (
        "import sys\nfrom IPython.core.interactiveshell import InteractiveShell\n"
        "ip = InteractiveShell.instance(); ip.run_line_magic('load_ext', 'opd_nb')\n"
        "print(sorted(m for m in ('dashscope','torch','transformers','ipywidgets','matplotlib') if m in sys.modules))\n"
        "print('opd' in ip.magics_manager.magics['line'], 'opd' in ip.magics_manager.magics['cell'])"
    )
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["[]", "True True"]


def test_help_lists_every_verb_and_notebook_extras(ip, capsys) -> None:
    result, printed = run(ip, "%opd --help", capsys)
    assert result.success
    assert "Usage: %opd" in printed
    for verb in ("new", "check", "test", "use"):
        assert f"  {verb} " in printed
    assert "%%opd config [PATH]" in printed and "%opd form" in printed


def test_every_subcommand_has_help(ip, capsys) -> None:
    from opd_nb.cli import command

    names = sorted(command().commands)
    assert {"test", "use"} <= set(names)
    for name in names:
        result, printed = run(ip, f"%opd {name} --help", capsys)
        assert result.success, (name, printed)
        assert f"Usage: %opd {name}" in printed, name


def test_unknown_subcommand_and_bad_quoting(ip, capsys) -> None:
    assert_usage_error(*run(ip, "%opd frobnicate", capsys), "No such command 'frobnicate'")
    assert_usage_error(*run(ip, "%opd test 'unclosed", capsys), "cannot parse")
    assert_usage_error(*run(ip, "%opd use nowhere", capsys), "unknown target 'nowhere'")


def test_test_runs_workspace_tests_and_returns_report(ip, capsys, workspace) -> None:
    result, printed = run(ip, f"%opd test {workspace}", capsys)
    report = result.result
    assert type(report).__name__ == "TestReport"
    assert report.ok and report.passed >= 5 and report.failed == 0
    html = report._repr_html_()
    assert "test_hit_scores_one" in html and "passed" in html


def test_test_shows_assertion_text_of_a_failure(ip, capsys, workspace, tmp_path) -> None:
    broken = tmp_path / "ws"
    broken.mkdir()
    (broken / "tests").mkdir()
    (broken / "tests" / "test_x.py").write_text(
        "def test_sum():\n    total = 1 + 1\n    assert total == 3, 'sum is off'\n"
    )
    result, _ = run(ip, f"%opd test {broken}", capsys)
    report = result.result
    assert not report.ok and report.failed == 1
    assert "sum is off" in report.failures[0].message
    assert "sum is off" in report._repr_html_()


def test_test_table_keeps_long_parametrised_names_on_a_narrow_terminal(tmp_path) -> None:
    from rich.console import Console

    from opd_nb.testing import run_workspace_tests

    ws = tmp_path / "ws"
    (ws / "tests").mkdir(parents=True)
    (ws / "tests" / "test_long.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('case', ['a-very-long-parametrised-case-name-that-goes-on-and-on'])\n"
        "def test_reward_cleanup_handles_every_kind_of_thinking_block(case):\n    assert case\n"
    )
    report = run_workspace_tests(ws)
    assert report.ok and report.passed == 1
    console = Console(width=60, record=True, color_system=None)
    console.print(report)
    # the test column may wrap over lines, but every character of the id is there
    cells = [
        line.split("│")[2].strip() for line in console.export_text().splitlines() if line.count("│") >= 4
    ]
    text = "".join(cells)
    assert (
        "test_reward_cleanup_handles_every_kind_of_thinking_block[a-very-long-parametrised-case-name-that-goes-on-and-on]"
        in text
    )


def test_missing_workspace_is_a_message(ip, capsys, tmp_path) -> None:
    assert_usage_error(*run(ip, f"%opd test {tmp_path / 'nope'}", capsys), "does not exist")


def test_use_local_and_cloud_never_echo_the_key(ip, capsys, monkeypatch) -> None:
    secret = "sk-very-secret-123456"
    monkeypatch.setenv("DASHSCOPE_API_KEY", secret)
    result, printed = run(ip, "%opd use local --base-url http://127.0.0.1:9999", capsys)
    info = result.result
    assert os.environ["DASHSCOPE_HTTP_BASE_URL"] == "http://127.0.0.1:9999/api/v1"
    assert info.kind == "local" and info.key_set
    rendered = printed + str(info) + info._repr_html_() + repr(info) + info.model_dump_json()
    assert secret not in rendered
    result, printed = run(ip, "%opd use cloud", capsys)
    assert result.result.kind == "cloud"
    assert os.environ["DASHSCOPE_HTTP_BASE_URL"].startswith("https://")
    assert os.environ["DASHSCOPE_API_KEY"] == secret  # untouched
    assert_usage_error(*run(ip, "%opd use cloud --base-url http://127.0.0.1:1", capsys), "loopback")


def test_use_local_placeholder_key_is_removed_by_use_cloud(ip, capsys) -> None:
    run(ip, "%opd use local", capsys)
    assert os.environ.get("DASHSCOPE_API_KEY") == "local"
    result, _ = run(ip, "%opd use cloud", capsys)
    assert "DASHSCOPE_API_KEY" not in os.environ
    assert not result.result.key_set


def test_cell_magic_writes_only_valid_yaml(ip, capsys, workspace) -> None:
    config = workspace / "config.yaml"
    original = config.read_text()
    changed = original.replace("eval_steps: 5", "eval_steps: 4")
    assert changed != original
    ip.user_ns["_body"] = changed
    result, printed = run(ip, f"%%opd config {workspace}\n" + changed, capsys)
    res = result.result
    assert res.written and config.read_text() == changed
    assert "-    eval_steps: 5" in res.diff and "+    eval_steps: 4" in res.diff
    # An error finding (a learning rate as a YAML 1.1 string) is shown and nothing is written.
    bad = changed.replace("learning_rate: 1.0e-6", "learning_rate: fast")
    result, printed = run(ip, f"%%opd config {workspace}\n" + bad, capsys)
    assert not result.result.written and config.read_text() == changed
    assert "learning_rate" in result.result._repr_html_()
    config.write_text(original)


def test_cell_magic_invalid_yaml_and_misuse(ip, capsys, workspace) -> None:
    config = workspace / "config.yaml"
    before = config.read_text()
    result, printed = run(ip, f"%%opd config {workspace}\nname: [unclosed\n  model: x\n", capsys)
    if result.error_in_exec is not None:
        assert_usage_error(result, printed, "config.yaml")
    else:
        assert not result.result.written
    assert config.read_text() == before
    assert_usage_error(*run(ip, "%%opd jobs\nwhatever\n", capsys), "only `%%opd config")
    assert_usage_error(*run(ip, f"%%opd config {workspace / 'missing'}\nname: x\n", capsys), "does not exist")
    assert_usage_error(*run(ip, f"%%opd config {workspace}\n\n", capsys), "empty")


def test_notebook_verbs_form_and_playground(ip, capsys, workspace) -> None:
    form = run(ip, f"%opd form {workspace}", capsys)[0].result
    assert type(form).__name__ == "ConfigForm" and form.values["learning_rate"] == 1e-6
    pg = run(ip, f"%opd playground {workspace}", capsys)[0].result
    assert type(pg).__name__ == "RewardPlayground" and pg.processor_class.endswith(":RewardProcessor")
    assert_usage_error(*run(ip, f"%opd form {workspace / 'nope'}", capsys), "not found")


def test_json_flag_and_exit_code_in_cli_parity(tmp_path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_y.py").write_text(
        "def test_ok():\n    pass\n\ndef test_bad():\n    assert 2 + 2 == 5\n"
    )
    out = subprocess.run(
        [PY, "-m", "opd_nb", "test", str(tmp_path), "--json"], capture_output=True, text=True
    )
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    assert not data["ok"] and data["failed"] == 1 and data["passed"] == 1
    bad = next(c for c in data["cases"] if c["outcome"] == "failed")
    assert bad["name"] == "test_bad" and "assert (2 + 2) == 5" in bad["message"]


# --------------------------------------------------------------------------- against a local control plane
@pytest.fixture()
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`opd serve start` records its server in $XDG_CACHE_HOME: keep ours apart from other tests."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


@pytest.mark.slow
def test_new_check_config_and_serve_lifecycle(ip, capsys, isolated_cache) -> None:
    dest = isolated_cache / "fresh"
    ws = run(ip, f"%opd new reward {dest} --no-input", capsys)[0].result
    assert (dest / "config.yaml").is_file() and (dest / "functions" / "reward" / "reward.py").is_file()
    assert "reward" in str(getattr(ws, "mode", ws))
    assert_usage_error(*run(ip, f"%opd new reward {dest} --no-input", capsys))  # DEST not empty
    report = run(ip, f"%opd check {dest} --target local", capsys)[0].result
    assert hasattr(report, "findings") and report.ok, str(report)
    effective = run(ip, f"%opd config {dest}", capsys)[0].result
    assert effective is not None and "learning_rate" in (
        effective._repr_html_() if hasattr(effective, "_repr_html_") else str(effective)
    )

    info = run(ip, f"%opd serve start --port 0 --data-dir {isolated_cache / 'srv'}", capsys)[0].result
    try:
        status, printed = run(ip, "%opd serve status", capsys)
        assert status.success and "127.0.0.1" in (str(status.result) + printed)
        used = run(ip, "%opd use local", capsys)[0].result  # finds the running server
        assert (
            used.base_url.startswith("http://127.0.0.1:") and used.base_url != "http://127.0.0.1:8765/api/v1"
        )
        jobs = run(ip, "%opd jobs", capsys)[0].result
        assert hasattr(jobs, "jobs") and jobs.jobs == []
        for line in ("watch ft-nope", "logs ft-nope", "cancel ft-nope"):
            assert_usage_error(*run(ip, f"%opd {line}", capsys), "ft-nope")
    finally:
        stopped = run(ip, "%opd serve stop", capsys)[0]
        assert stopped.success
    assert info is not None


@pytest.mark.slow
def test_submit_returns_a_live_monitor_then_logs_and_jobs(ip, capsys, isolated_cache) -> None:
    from conftest import tiny_workspace

    import opd_nb.server

    workspace = tiny_workspace("reward", isolated_cache / "job")

    with opd_nb.server.start(data_dir=isolated_cache / "srv") as server:
        run(ip, f"%opd use local --base-url {server.api_base}", capsys)
        result, printed = run(ip, f"%opd submit {workspace}", capsys)
        monitor = result.result
        assert type(monitor).__name__ == "JobMonitor", printed
        assert "Traceback" not in printed
        job_id = monitor.job_ids[0]
        monitor.wait(timeout_s=240)
        assert monitor.state["jobs"][job_id]["status"] == "SUCCEEDED"
        again = run(ip, f"%opd watch {job_id}", capsys)[0].result
        assert again.wait(timeout_s=30).state["jobs"][job_id]["status"] == "SUCCEEDED"
        logs = run(ip, f"%opd logs {job_id}", capsys)[0].result
        assert logs.lines
        listed = run(ip, "%opd jobs", capsys)[0].result
        assert job_id in {j.job_id for j in listed.jobs}
        cancel = run(ip, f"%opd cancel {job_id}", capsys)[
            0
        ]  # already finished: a message or the job, no traceback
        assert "Traceback" not in capsys.readouterr().err
        assert cancel.success or isinstance(cancel.error_in_exec, UsageError)
