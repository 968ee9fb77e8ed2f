"""scripts/setup.sh installs with uv and falls back to pip where uv fails (issue 51: behind a custom
certificate authority uv, which reads none of pip's configuration, fails where pip works).

The script runs on a copy, against a stand-in venv (OPD_VENV) whose `python -m pip` and `uv` only log
what they were asked: nothing is installed and nothing goes to the network."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UV_REFUSES = "error: invalid peer certificate: UnknownIssuer"


def _stand_in_venv(venv: Path, log: Path, uv_fails: bool) -> None:
    """bin/python (pip installs uv into bin/), bin/uv and bin/opd that append their arguments to `log`."""
    bin_dir = venv / "bin"
    bin_dir.mkdir(parents=True)
    uv_exit = f'echo "Resolving..." >&2; echo "{UV_REFUSES}" >&2; exit 2' if uv_fails else "exit 0"
    scripts = {
        "python": f'echo "pip $*" >> "{log}"\n'
        'case "$*" in *"pip config get"*) exit 1;; esac\n'
        f'case "$*" in *" uv") printf \'#!/bin/sh\\necho "uv $*" >> "{log}"\\n{uv_exit}\\n\' > "{bin_dir}/uv";'
        f' chmod +x "{bin_dir}/uv";; esac\nexit 0\n',
        "opd": "echo 0.0.0\n",
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)


def _run(tmp_path: Path, *, uv_fails: bool) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    _stand_in_venv(tmp_path / "venv", tmp_path / "calls.log", uv_fails)
    return _rerun(tmp_path)


@pytest.mark.skipif(shutil.which("bash") is None, reason="setup.sh is a bash script")
def test_uv_installs_when_it_works(tmp_path: Path) -> None:
    proc, calls = _run(tmp_path, uv_fails=False)
    assert proc.returncode == 0, proc.stderr
    installs = [c for c in calls if "torch==" in c or "[all]" in c]
    assert installs and all(c.startswith("uv pip install") for c in installs), calls
    assert "setup:" not in proc.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="setup.sh is a bash script")
def test_pip_takes_over_when_uv_fails_and_one_line_says_why(tmp_path: Path) -> None:
    proc, calls = _run(tmp_path, uv_fails=True)
    assert proc.returncode == 0, proc.stderr
    torch = [c for c in calls if "torch==" in c]
    project = [c for c in calls if "[all]" in c]
    # uv tried once, pip did that install and the next one (uv is not asked again).
    assert [c.split()[0] for c in torch] == ["uv", "pip"] and [c.split()[0] for c in project] == ["pip"], (
        calls
    )
    said = [line for line in proc.stderr.splitlines() if line.startswith("setup:")]
    assert len(said) == 1 and UV_REFUSES in said[0] and "pip installs instead" in said[0], proc.stderr
    assert "opd-nb is installed in" in proc.stdout


@pytest.mark.skipif(shutil.which("bash") is None, reason="setup.sh is a bash script")
def test_every_install_writes_its_bytecode_and_the_package_is_compiled(tmp_path: Path) -> None:
    """Where PYTHONDONTWRITEBYTECODE is set, nothing writes bytecode after the install: uv (which by
    default leaves it to the first import) must write it, and the editable package's own is compiled."""
    proc, calls = _run(tmp_path, uv_fails=False)
    assert proc.returncode == 0, proc.stderr
    installs = [c for c in calls if c.startswith("uv pip install")]
    assert len(installs) == 2 and all("--compile-bytecode" in c.split() for c in installs), calls
    compiled = [c for c in calls if "-m compileall" in c]
    assert len(compiled) == 1 and compiled[0].split()[-1] == "opd_nb", calls
    assert calls.index(compiled[0]) > calls.index(installs[-1]), calls


def _rerun(tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """setup.sh on the copy `_run` made, with a fresh log of the calls."""
    log = tmp_path / "calls.log"
    log.write_text("")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OPD_VENV": str(tmp_path / "venv")}
    proc = subprocess.run(
        ["bash", str(tmp_path / "scripts" / "setup.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    return proc, log.read_text().splitlines()


@pytest.mark.skipif(shutil.which("bash") is None, reason="setup.sh is a bash script")
def test_a_venv_it_installed_is_kept_until_the_project_changes(tmp_path: Path) -> None:
    """The edit-test loop runs setup.sh each time: a second run installs nothing, still compiles the
    package, and a changed pyproject.toml installs again."""
    proc, calls = _run(tmp_path, uv_fails=False)
    assert proc.returncode == 0 and any(c.startswith("uv pip install") for c in calls), proc.stderr
    again, calls = _rerun(tmp_path)
    assert again.returncode == 0 and "opd-nb is installed in" in again.stdout, again.stderr
    assert not [c for c in calls if "install" in c] and any("-m compileall" in c for c in calls), calls
    with (tmp_path / "pyproject.toml").open("a") as f:
        f.write("\n# a new dependency\n")
    changed, calls = _rerun(tmp_path)
    assert changed.returncode == 0 and any(c.startswith("uv pip install") for c in calls), calls
