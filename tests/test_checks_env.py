"""Environment rules: SDK version, API key, base URL frozen at import; planted and clean."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from test_checks_config import make_workspace

from opd_nb.checks import check
from opd_nb.checks.environment import _version_tuple


def env_rules(report) -> set[str]:
    return {f.rule for f in report.findings if f.rule.startswith("env.")}


@pytest.fixture()
def clean_env(monkeypatch):
    monkeypatch.delenv("DASHSCOPE_HTTP_BASE_URL", raising=False)
    monkeypatch.delenv("FC_API_KEY", raising=False)
    monkeypatch.setenv("DASHSCOPE_API_KEY", "sk-test-key-for-checks")


def test_clean_environment(tmp_path, clean_env):
    assert env_rules(check(make_workspace(tmp_path))) == set()


def test_no_api_key_for_the_cloud(tmp_path, clean_env, monkeypatch):
    monkeypatch.delenv("DASHSCOPE_API_KEY")
    monkeypatch.chdir(tmp_path)
    ws = make_workspace(tmp_path)
    hit = check(ws).by_rule("env.no-api-key")[0]
    assert hit.severity == "error" and "DASHSCOPE_API_KEY" in hit.fix
    assert "env.no-api-key" not in check(ws, "local", base_url="http://127.0.0.1:9/api/v1").rules()
    (ws / ".env").write_text("DASHSCOPE_API_KEY=sk-from-dotenv\n")
    assert "env.no-api-key" not in check(ws).rules()


def test_version_comparison():
    assert _version_tuple("1.27.5") < (2, 0, 2) <= _version_tuple("2.0.2") < _version_tuple("2.1.0rc1")


def test_dashscope_too_old(tmp_path, clean_env, monkeypatch):
    from importlib import metadata

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "1.27.5" if name == "dashscope" else real(name))
    hit = check(make_workspace(tmp_path)).by_rule("env.dashscope-too-old")[0]
    assert "teacher_model" in hit.message and hit.severity == "error"


@pytest.mark.slow
def test_base_url_changed_after_import(tmp_path):
    """In a fresh interpreter (a kernel): import dashscope, then point the variable elsewhere."""
    ws = make_workspace(tmp_path)
    code = textwrap.dedent(f"""
        import os, json
        os.environ["DASHSCOPE_API_KEY"] = "sk-x"
        os.environ.pop("DASHSCOPE_HTTP_BASE_URL", None)
        import dashscope.finetune.reinforcement.common.constants  # noqa: F401
        from opd_nb.checks import check
        before = sorted(check({str(ws)!r}, "local", base_url="http://127.0.0.1:9/api/v1").rules())
        os.environ["DASHSCOPE_HTTP_BASE_URL"] = "http://127.0.0.1:8765/api/v1"
        after = [f.model_dump() for f in check({str(ws)!r}, "local", base_url="http://127.0.0.1:9/api/v1").findings]
        print(json.dumps({{"before": before, "after": after}}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    import json

    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert "env.base-url-changed" not in data["before"]
    hit = [f for f in data["after"] if f["rule"] == "env.base-url-changed"][0]
    assert "dashscope.aliyuncs.com" in hit["message"] and "restart the kernel" in hit["fix"]


def test_cloud_target_with_local_url(tmp_path, clean_env, monkeypatch):
    monkeypatch.setenv("DASHSCOPE_HTTP_BASE_URL", "http://127.0.0.1:8765/api/v1")
    assert check(make_workspace(tmp_path)).by_rule("env.cloud-target-local-url")


@pytest.mark.slow
def test_cli_exit_codes_and_json(tmp_path, clean_env):
    """`opd check` prints a table or a JSON list, and exits 1 only when there is an error."""
    import json

    from opd_nb.cli import invoke

    ws = make_workspace(tmp_path)
    env = {"PATH": "", "DASHSCOPE_API_KEY": "sk-test-key-for-checks", "HOME": str(tmp_path)}
    ok = subprocess.run(
        [sys.executable, "-c", "from opd_nb.cli import main; main()", "check", str(ws)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "0 error(s)" in ok.stdout
    (ws / "config.yaml").write_text((ws / "config.yaml").read_text().replace("n_epochs: 1", "n_epoch: 1"))
    bad = subprocess.run(
        [sys.executable, "-c", "from opd_nb.cli import main; main()", "check", str(ws), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert bad.returncode == 1
    findings = json.loads(bad.stdout)
    assert isinstance(findings, list) and {"rule", "severity", "where", "message", "fix"} <= set(findings[0])
    assert any(f["rule"] == "config.unknown-hyperparameter" for f in findings)
    report = invoke(["check", str(ws)])  # the magic's path: the typed report, nothing printed
    assert not report.ok and "<table>" in report._repr_html_()
