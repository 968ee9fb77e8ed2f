"""`opd new` and opd_nb.workspace.new.create: the happy path, and every user mistake leaving nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_template import expected_files, files_of

from opd_nb.cli import invoke
from opd_nb.errors import OpdError
from opd_nb.workspace.new import Workspace, create, template_dir

PY = sys.executable


def test_create_returns_a_workspace_describing_what_was_written(tmp_path: Path) -> None:
    ws = create(
        "reward", tmp_path / "my-ws", student="qwen3-8b", teacher="qwen3-max", reward_class="ExactMatch"
    )
    assert isinstance(ws, Workspace)
    assert ws.path == (tmp_path / "my-ws").resolve() and ws.mode == "reward" and ws.with_reward
    assert ws.name == "my-ws" and ws.slug == "my-ws"
    assert set(ws.files) == expected_files("reward", True) == files_of(ws.path)
    config = (ws.path / "config.yaml").read_text()
    assert 'name: "qwen3-8b"' in config and 'teacher_model: "qwen3-max"' in config
    assert "functions/reward/reward.py:ExactMatch" in config
    assert "class ExactMatch(AbstractRewardProcessor)" in (ws.path / "functions/reward/reward.py").read_text()
    assert "ExactMatch" in (ws.path / "tests/test_reward.py").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my-ws"]  # no staging directory left


@pytest.mark.slow
def test_agentic_defaults_to_a_reward_and_can_drop_it(tmp_path: Path) -> None:
    assert create("agentic", tmp_path / "a").with_reward
    ws = create("agentic", tmp_path / "b", with_reward=False)
    assert not ws.with_reward and set(ws.files) == expected_files("agentic", False)


def test_an_existing_empty_directory_is_used(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert (create("pure-distill", tmp_path / "empty").path / "config.yaml").is_file()


@pytest.mark.parametrize(
    ("mode", "kwargs", "message"),
    [
        ("finetune", {}, "unknown mode 'finetune'"),
        ("reward", {"name": ""}, "name is empty"),
        ("reward", {"name": "!!!"}, "no letters or digits"),
        ("reward", {"name": "two\nlines"}, "control characters"),
        ("reward", {"name": "x" * 101}, "at most 100"),
        ("reward", {"student": "qwen 3"}, "--student 'qwen 3' is not a model id"),
        ("reward", {"teacher": ""}, "--teacher '' is not a model id"),
        ("reward", {"reward_class": "2Fast"}, "not a valid Python class name"),
        ("reward", {"reward_class": "class"}, "not a valid Python class name"),
        ("reward", {"reward_class": "RewardOutput"}, "clashes"),
        ("reward", {"reward_class": "RolloutProcessor"}, "rollout class"),
        ("pure-distill", {"with_reward": True}, "no reward function"),
        ("reward", {"with_reward": False}, "always has a reward"),
    ],
)
def test_user_mistakes_are_one_line_errors_and_leave_nothing(
    tmp_path: Path, mode: str, kwargs: dict, message: str
) -> None:
    with pytest.raises(OpdError) as info:
        create(mode, tmp_path / "ws", **kwargs)
    assert info.value.exit_code == 2
    assert message in str(info.value) and "\n" not in str(info.value).replace("two\nlines", "")
    assert list(tmp_path.iterdir()) == []


def test_non_empty_destination_is_refused_untouched(tmp_path: Path) -> None:
    dest = tmp_path / "taken"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    with pytest.raises(OpdError, match="not empty") as info:
        create("reward", dest)
    assert info.value.exit_code == 2 and info.value.where == str(dest.resolve())
    assert [p.name for p in dest.iterdir()] == ["notes.txt"] and sorted(
        p.name for p in tmp_path.iterdir()
    ) == ["taken"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(OpdError, match="not a directory"):
        create("reward", tmp_path / "file")
    with pytest.raises(OpdError, match="parent directory does not exist"):
        create("reward", tmp_path / "missing" / "ws")


def test_a_failing_template_leaves_nothing_half_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    import opd_nb.workspace.new as workspace

    broken = tmp_path / "template"
    shutil.copytree(template_dir(), broken)
    (broken / "{{cookiecutter.workspace_slug}}" / "README.md").write_text(
        "{{ cookiecutter.no_such_answer }}\n"
    )
    monkeypatch.setattr(workspace, "template_dir", lambda: broken)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(OpdError, match="template failed") as info:
        create("reward", out / "ws")
    assert info.value.exit_code == 1
    assert list(out.iterdir()) == []


def test_reprs_escape_user_text(tmp_path: Path) -> None:
    ws = create("pure-distill", tmp_path / "ws", name="<script>alert(1)</script>")
    assert "<script>" not in ws._repr_html_() and "&lt;script&gt;" in ws._repr_html_()
    assert "pure-distill" in str(ws) and "python submit_job.py --dry-run" in str(ws)
    assert ws.slug == "script-alert-1-script"
    assert ws.to_payload()["files"] == ws.files


def test_magic_path_returns_the_workspace(tmp_path: Path) -> None:
    ws = invoke(["new", "agentic", str(tmp_path / "ag"), "--no-reward", "--name", "Agent 007", "--no-input"])
    assert (
        isinstance(ws, Workspace) and ws.mode == "agentic" and not ws.with_reward and ws.slug == "agent-007"
    )
    with pytest.raises(OpdError, match="unknown mode"):
        invoke(["new", "nope", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()


def _opd(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [PY, "-m", "opd_nb", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_cli_new_then_errors_with_exit_code_2(tmp_path: Path) -> None:
    ok = _opd("new", "reward", "my-ws", "--no-input", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "created reward workspace" in ok.stdout and (tmp_path / "my-ws" / "functions" / "reward").is_dir()
    for args, text in (
        (("new", "reward", "my-ws"), "not empty"),
        (("new", "bogus", "other"), "unknown mode 'bogus'"),
        (("new", "reward", "bad", "--name", "???"), "no letters or digits"),
    ):
        proc = _opd(*args, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert text in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my-ws"]
    as_json = _opd("new", "pure-distill", "pd", "--json", cwd=tmp_path)
    assert as_json.returncode == 0 and '"mode": "pure-distill"' in as_json.stdout


@pytest.mark.slow
def test_new_user_flow_opd_new_then_pytest(tmp_path: Path) -> None:
    """`opd new reward my-ws && cd my-ws && pytest` passes out of the box."""
    assert _opd("new", "reward", "my-ws", cwd=tmp_path).returncode == 0
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTHONPATH")}
    pytest_bin = Path(PY).with_name("pytest")
    proc = subprocess.run(
        [str(pytest_bin), "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path / "my-ws",
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "passed" in proc.stdout
